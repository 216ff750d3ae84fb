package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/shard"
)

// fixture is a node with known content, to check that refused calls
// change nothing: stream "s" (id 0) holds topic "t" (id 0) with two
// partitions; partition 0 holds "a", "b" and consumer "c1" at offset 1,
// partition 1 holds "c".
type fixture struct {
	n *parkway.Node
}

const (
	fixMaxMessage = 16
	fixMaxBatch   = 4
)

func newFixture(t *testing.T) fixture {
	t.Helper()
	n := open(t, parkway.Config{Shards: 2, MaxMessageSize: fixMaxMessage, MaxBatchMessages: fixMaxBatch})
	if s := mustStream(t, n, "s"); s.ID != 0 {
		t.Fatalf("stream id %d, want 0", s.ID)
	}
	if tp := mustTopic(t, n, idStream(n, 0), "t", 2); tp.ID != 0 {
		t.Fatalf("topic id %d, want 0", tp.ID)
	}
	mustProduce(t, n, idTopic(n, 0, 0), parkway.PartitionID(0), "a", "b")
	mustProduce(t, n, idTopic(n, 0, 0), parkway.PartitionID(1), "c")
	if err := n.Admin().StoreOffset(ctxFor(t), idTopic(n, 0, 0), 0, "c1", 1); err != nil {
		t.Fatal(err)
	}
	return fixture{n: n}
}

// state captures the committed metadata of the fixture's node.
func (f fixture) state() parkway.MetadataState { return parkway.CommittedState(f.n) }

// unchanged checks the node still holds exactly the fixture's content and
// the committed state before.
func (f fixture) unchanged(t *testing.T, before parkway.MetadataState) {
	t.Helper()
	if after := f.state(); !reflect.DeepEqual(before, after) {
		t.Fatalf("committed state changed:\nbefore %+v\nafter  %+v", before, after)
	}
	expectLog(t, f.n, idTopic(f.n, 0, 0), 0, "a", "b")
	expectLog(t, f.n, idTopic(f.n, 0, 0), 1, "c")
	off, ok, err := f.n.Admin().ConsumerOffset(ctxFor(t), idTopic(f.n, 0, 0), 0, "c1")
	if err != nil || !ok || off != 1 {
		t.Fatalf("consumer c1 at %d (stored %v, err %v), want 1", off, ok, err)
	}
	if _, ok, err := f.n.Admin().ConsumerOffset(ctxFor(t), idTopic(f.n, 0, 0), 0, "c2"); err != nil || ok {
		t.Fatalf("consumer c2 stored %v (err %v), want none", ok, err)
	}
}

func msgs(payloads ...string) []parkway.Message {
	out := make([]parkway.Message, len(payloads))
	for i, p := range payloads {
		out[i].Payload = []byte(p)
	}
	return out
}

// TestBadInputChangesNothing: every refused call returns its documented
// sentinel (checked with errors.Is) and leaves the node exactly as it was —
// committed metadata, partition logs and consumer offsets.
func TestBadInputChangesNothing(t *testing.T) {
	// Each case runs on a fresh fixture in its own bubble; the closures
	// below call whichever node n is at the time.
	var n *parkway.Node
	long := strings.Repeat("x", 256)
	type call struct {
		name string
		do   func(ctx context.Context) error
		want error
	}
	produce := func(stream, topic uint32, to parkway.Partitioning, m ...parkway.Message) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := n.Produce(ctx, idTopic(n, stream, topic), to, m...)
			return err
		}
	}
	poll := func(stream, topic, part uint32, from parkway.Start, max int) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := n.Poll(ctx, idTopic(n, stream, topic), part, from, max)
			return err
		}
	}
	store := func(consumer string, stream, topic, part uint32, off uint64) func(context.Context) error {
		return func(ctx context.Context) error {
			return n.Admin().StoreOffset(ctx, idTopic(n, stream, topic), part, consumer, off)
		}
	}
	get := func(consumer string, stream, topic, part uint32) func(context.Context) error {
		return func(ctx context.Context) error {
			_, _, err := n.Admin().ConsumerOffset(ctx, idTopic(n, stream, topic), part, consumer)
			return err
		}
	}
	createStream := func(name string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := n.Admin().CreateStream(ctx, name); return err }
	}
	createTopic := func(stream uint32, name string, parts int) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := n.Admin().CreateTopic(ctx, idStream(n, stream), name, parts)
			return err
		}
	}
	withHeader := parkway.Message{Payload: []byte("0123456789"), Headers: []parkway.Header{{Key: "key", Value: []byte("value")}}}

	calls := []call{
		// Names.
		{"stream name empty", createStream(""), parkway.ErrInvalidName},
		{"stream name 256 bytes", createStream(long), parkway.ErrInvalidName},
		{"stream name with control character", createStream("a\x00b"), parkway.ErrInvalidName},
		{"stream name not UTF-8", createStream("a\xffb"), parkway.ErrInvalidName},
		{"duplicate stream", createStream("s"), parkway.ErrStreamExists},
		{"topic name empty", createTopic(0, "", 1), parkway.ErrInvalidName},
		{"topic name 256 bytes", createTopic(0, long, 1), parkway.ErrInvalidName},
		{"duplicate topic in stream", createTopic(0, "t", 1), parkway.ErrTopicExists},
		{"topic in unknown stream", createTopic(7, "u", 1), parkway.ErrStreamNotFound},

		// Partition counts.
		{"zero partitions", createTopic(0, "u", 0), parkway.ErrInvalidPartitionCount},
		{"negative partitions", createTopic(0, "u", -1), parkway.ErrInvalidPartitionCount},
		{"too many partitions", createTopic(0, "u", 1001), parkway.ErrInvalidPartitionCount},
		{"create zero partitions", func(ctx context.Context) error { return n.Admin().CreatePartitions(ctx, idTopic(n, 0, 0), 0) }, parkway.ErrInvalidPartitionCount},
		{"delete zero partitions", func(ctx context.Context) error { return n.Admin().DeletePartitions(ctx, idTopic(n, 0, 0), 0) }, parkway.ErrInvalidPartitionCount},
		{"delete more partitions than exist", func(ctx context.Context) error { return n.Admin().DeletePartitions(ctx, idTopic(n, 0, 0), 3) }, parkway.ErrInvalidPartitionCount},
		{"create partitions of unknown topic", func(ctx context.Context) error { return n.Admin().CreatePartitions(ctx, idTopic(n, 0, 7), 1) }, parkway.ErrTopicNotFound},

		// Unknown stream / topic / partition.
		{"delete unknown stream", func(ctx context.Context) error { return n.Admin().DeleteStream(ctx, idStream(n, 7)) }, parkway.ErrStreamNotFound},
		{"delete topic of unknown stream", func(ctx context.Context) error { return n.Admin().DeleteTopic(ctx, idTopic(n, 7, 0)) }, parkway.ErrStreamNotFound},
		{"delete unknown topic", func(ctx context.Context) error { return n.Admin().DeleteTopic(ctx, idTopic(n, 0, 7)) }, parkway.ErrTopicNotFound},
		{"produce to unknown stream", produce(7, 0, parkway.PartitionID(0), msgs("x")...), parkway.ErrStreamNotFound},
		{"produce balanced to unknown stream", produce(7, 0, parkway.Balanced(), msgs("x")...), parkway.ErrStreamNotFound},
		{"produce to unknown topic", produce(0, 7, parkway.PartitionID(0), msgs("x")...), parkway.ErrTopicNotFound},
		{"produce by key to unknown topic", produce(0, 7, parkway.Key([]byte("k")), msgs("x")...), parkway.ErrTopicNotFound},
		{"produce to unknown partition", produce(0, 0, parkway.PartitionID(2), msgs("x")...), parkway.ErrPartitionNotFound},
		{"poll unknown stream", poll(7, 0, 0, parkway.AtOffset(0), 10), parkway.ErrStreamNotFound},
		{"poll unknown topic", poll(0, 7, 0, parkway.AtOffset(0), 10), parkway.ErrTopicNotFound},
		{"poll unknown partition", poll(0, 0, 2, parkway.AtOffset(0), 10), parkway.ErrPartitionNotFound},
		{"store offset in unknown stream", store("c2", 7, 0, 0, 0), parkway.ErrStreamNotFound},
		{"store offset in unknown topic", store("c2", 0, 7, 0, 0), parkway.ErrTopicNotFound},
		{"store offset in unknown partition", store("c2", 0, 0, 2, 0), parkway.ErrPartitionNotFound},
		{"consumer offset in unknown stream", get("c1", 7, 0, 0), parkway.ErrStreamNotFound},
		{"consumer offset in unknown topic", get("c1", 0, 7, 0), parkway.ErrTopicNotFound},
		{"consumer offset in unknown partition", get("c1", 0, 0, 2), parkway.ErrPartitionNotFound},

		// Sizes.
		{"payload over MaxMessageSize", produce(0, 0, parkway.PartitionID(0), msgs(strings.Repeat("x", fixMaxMessage+1))...), parkway.ErrMessageTooLarge},
		{"payload plus headers over MaxMessageSize", produce(0, 0, parkway.PartitionID(0), withHeader), parkway.ErrMessageTooLarge},
		{"one oversized message among good ones", produce(0, 0, parkway.PartitionID(0),
			msgs("good", "good", strings.Repeat("x", fixMaxMessage+1), "good")...), parkway.ErrMessageTooLarge},
		{"oversized message to unknown partition", produce(0, 0, parkway.PartitionID(2), msgs(strings.Repeat("x", fixMaxMessage+1))...), parkway.ErrMessageTooLarge},
		{"empty batch", produce(0, 0, parkway.PartitionID(0)), parkway.ErrEmptyBatch},
		{"batch over MaxBatchMessages", produce(0, 0, parkway.PartitionID(0), msgs("1", "2", "3", "4", "5")...), parkway.ErrBatchTooLarge},

		// Polls and offsets.
		{"poll max 0", poll(0, 0, 0, parkway.AtOffset(0), 0), parkway.ErrInvalidArgument},
		{"poll max negative", poll(0, 0, 0, parkway.AtOffset(0), -1), parkway.ErrInvalidArgument},
		{"store offset past the end", store("c1", 0, 0, 0, 3), parkway.ErrOffsetOutOfRange},
		{"store new consumer past the end", store("c2", 0, 0, 1, 2), parkway.ErrOffsetOutOfRange},
	}
	// Consumer names follow the one naming rule (ErrInvalidName's): a
	// name like "../x" or "a/b" is valid and stays inside the offsets
	// directory (TestConsumerNamesAreNotPaths).
	for _, name := range []string{"x\x00", "a\nb", "a\xffb", strings.Repeat("c", 256)} {
		calls = append(calls,
			call{"store offset, consumer " + quote(name), store(name, 0, 0, 0, 0), parkway.ErrInvalidConsumer},
			call{"consumer offset, consumer " + quote(name), get(name, 0, 0, 0), parkway.ErrInvalidConsumer},
			call{"poll at consumer " + quote(name), poll(0, 0, 0, parkway.AtConsumer(name), 10), parkway.ErrInvalidConsumer},
		)
	}
	calls = append(calls,
		call{"store offset, empty consumer", store("", 0, 0, 0, 0), parkway.ErrInvalidConsumer},
		call{"consumer offset, empty consumer", get("", 0, 0, 0), parkway.ErrInvalidConsumer},
	)

	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t)
				n = f.n
				before := f.state()
				err := c.do(ctxFor(t))
				if !errors.Is(err, c.want) {
					t.Fatalf("got %v, want an error wrapping %q", err, c.want)
				}
				f.unchanged(t, before)
			})
		})
	}
}

func quote(s string) string { return fmt.Sprintf("%.12q", s) }

// TestBadInputPollAtEmptyConsumer: AtConsumer("") names a consumer, and
// "" is not a valid consumer name (StoreOffset and ConsumerOffset refuse
// it), so a poll at it must be refused too, not quietly read from offset 0
// as if it were AtOffset(0).
func TestBadInputPollAtEmptyConsumer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		b, err := f.n.Poll(ctxFor(t), idTopic(f.n, 0, 0), 0, parkway.AtConsumer(""), 10)
		if !errors.Is(err, parkway.ErrInvalidConsumer) {
			t.Fatalf("Poll(AtConsumer(\"\")) = %v, %v; want ErrInvalidConsumer", payloads(b.Messages), err)
		}
	})
}

// TestBadInputPollAtCommitted: AtCommitted is a group member's start (a
// group's committed offset), which a Node.Poll has no group to resolve: it
// is refused with ErrInvalidArgument, not read as offset 0 (it once was,
// silently: its zero kind is AtOffset's).
func TestBadInputPollAtCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		for _, from := range []parkway.Start{parkway.AtCommitted(), parkway.AtCommitted().OrReset(parkway.ResetLatest), parkway.AtCommitted().Local()} {
			b, err := f.n.Poll(ctxFor(t), idTopic(f.n, 0, 0), 0, from, 10)
			if !errors.Is(err, parkway.ErrInvalidArgument) {
				t.Fatalf("Node.Poll(AtCommitted()) = %v, %v; want ErrInvalidArgument", payloads(b.Messages), err)
			}
		}
	})
}

// TestInputBoundsAccepted: the limits are inclusive — a 255-byte name, a
// message of exactly MaxMessageSize (payload plus headers), a batch of
// exactly MaxBatchMessages and a consumer offset at the log's end are all
// accepted.
func TestInputBoundsAccepted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		n := f.n
		ctx := ctxFor(t)
		name := strings.Repeat("n", 255)
		s, err := n.Admin().CreateStream(ctx, name)
		if err != nil {
			t.Fatalf("255-byte stream name: %v", err)
		}
		if _, err := n.Admin().CreateTopic(ctx, s, name, 1); err != nil {
			t.Fatalf("255-byte topic name: %v", err)
		}
		// 2 payload bytes + a header of 1 + 5 bytes and its 8 bytes of
		// framing: 16, exactly MaxMessageSize.
		exact := parkway.Message{Payload: []byte("01"), Headers: []parkway.Header{{Key: "k", Value: []byte("01234")}}}
		if _, err := n.Produce(ctx, idTopic(n, 0, 0), parkway.PartitionID(1), exact); err != nil {
			t.Fatalf("message of exactly MaxMessageSize: %v", err)
		}
		ack, err := n.Produce(ctx, idTopic(n, 0, 0), parkway.PartitionID(1), msgs("1", "2", "3", "4")...)
		if err != nil || ack.FirstOffset != 2 || ack.Count != fixMaxBatch {
			t.Fatalf("batch of exactly MaxBatchMessages: %+v, %v", ack, err)
		}
		if err := n.Admin().StoreOffset(ctx, idTopic(n, 0, 0), 1, "end", 6); err != nil {
			t.Fatalf("storing the end offset: %v", err)
		}
		expectLog(t, n, idTopic(n, 0, 0), 1, "c", "01", "1", "2", "3", "4")
		got := readAll(t, n, idTopic(n, 0, 0), 1)
		if h := got[1].Headers; len(h) != 1 || h[0].Key != "k" || string(h[0].Value) != "01234" {
			t.Fatalf("headers %+v, want k=01234", h)
		}
	})
}

// TestCancelledContextChangesNothing: a call whose context is already
// cancelled returns context.Canceled and does nothing.
func TestCancelledContextChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		n := f.n
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		before := f.state()
		checks := map[string]error{}
		_, checks["CreateStream"] = n.Admin().CreateStream(ctx, "new")
		_, checks["CreateTopic"] = n.Admin().CreateTopic(ctx, idStream(n, 0), "new", 1)
		checks["CreatePartitions"] = n.Admin().CreatePartitions(ctx, idTopic(n, 0, 0), 1)
		checks["DeletePartitions"] = n.Admin().DeletePartitions(ctx, idTopic(n, 0, 0), 1)
		checks["DeleteTopic"] = n.Admin().DeleteTopic(ctx, idTopic(n, 0, 0))
		checks["DeleteStream"] = n.Admin().DeleteStream(ctx, idStream(n, 0))
		_, checks["Produce"] = n.Produce(ctx, idTopic(n, 0, 0), parkway.PartitionID(0), msgs("x")...)
		_, checks["Poll"] = n.Poll(ctx, idTopic(n, 0, 0), 0, parkway.AtOffset(0), 10)
		checks["StoreOffset"] = n.Admin().StoreOffset(ctx, idTopic(n, 0, 0), 0, "c1", 2)
		_, _, checks["ConsumerOffset"] = n.Admin().ConsumerOffset(ctx, idTopic(n, 0, 0), 0, "c1")
		for call, err := range checks {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context: %v, want context.Canceled", call, err)
			}
		}
		f.unchanged(t, before)
		if _, err := n.Stream(ctxFor(t), "new"); err == nil {
			t.Fatal("stream created with a cancelled context")
		}
	})
}

// TestClosedNode: after Close every call returns ErrClosed and changes
// nothing; Close itself is idempotent.
func TestClosedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		n := f.n
		before := f.state()
		// Let the reconcile passes of the fixture's commits finish first:
		// closing mid-pass trips the shard.(*Shard).do data race that
		// TestBehaviour17's "close mid-churn" case reproduces on purpose.
		synctest.Wait()
		if err := n.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := n.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		ctx := ctxFor(t)
		checks := map[string]error{}
		_, checks["CreateStream"] = n.Admin().CreateStream(ctx, "new")
		_, checks["CreateTopic"] = n.Admin().CreateTopic(ctx, idStream(n, 0), "new", 1)
		checks["CreatePartitions"] = n.Admin().CreatePartitions(ctx, idTopic(n, 0, 0), 1)
		checks["DeletePartitions"] = n.Admin().DeletePartitions(ctx, idTopic(n, 0, 0), 1)
		checks["DeleteTopic"] = n.Admin().DeleteTopic(ctx, idTopic(n, 0, 0))
		checks["DeleteStream"] = n.Admin().DeleteStream(ctx, idStream(n, 0))
		_, checks["Produce"] = n.Produce(ctx, idTopic(n, 0, 0), parkway.PartitionID(0), msgs("x")...)
		_, checks["Produce balanced"] = n.Produce(ctx, idTopic(n, 0, 0), parkway.Balanced(), msgs("x")...)
		_, checks["Poll"] = n.Poll(ctx, idTopic(n, 0, 0), 0, parkway.AtOffset(0), 10)
		checks["StoreOffset"] = n.Admin().StoreOffset(ctx, idTopic(n, 0, 0), 0, "c1", 2)
		_, _, checks["ConsumerOffset"] = n.Admin().ConsumerOffset(ctx, idTopic(n, 0, 0), 0, "c1")
		for call, err := range checks {
			if !errors.Is(err, parkway.ErrClosed) {
				t.Errorf("%s on a closed node: %v, want ErrClosed", call, err)
			}
		}
		if after := f.state(); !reflect.DeepEqual(before, after) {
			t.Fatalf("committed state changed after Close:\nbefore %+v\nafter  %+v", before, after)
		}
	})
}

// TestConfigValidateReportsEveryProblem: Validate (and Open) report all
// problems at once, wrapped in ErrInvalidConfig, naming each field.
func TestConfigValidateReportsEveryProblem(t *testing.T) {
	if err := (parkway.Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	cfg := parkway.Config{
		Shards:            -1,
		InboxSize:         -2,
		MaxMessageSize:    -3,
		MaxBatchMessages:  -4,
		RequestTimeout:    -time.Second,
		SegmentSize:       5,
		MaxOpenFiles:      2,
		ReconcileInterval: time.Minute,
		RetryBackoffMin:   2 * time.Second,
		RetryBackoffMax:   time.Second,
		BuildBackoffMin:   2 * time.Second,
		BuildBackoffMax:   time.Second,
		Park:              shard.ParkLimits{Alignment: 3, MaxPasses: -1, FramesPerNamespace: -1},
	}
	err := cfg.Validate()
	if !errors.Is(err, parkway.ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	fields := []string{"Shards", "InboxSize", "MaxMessageSize", "MaxBatchMessages", "RequestTimeout",
		"SegmentSize", "MaxOpenFiles", "ReconcileInterval", "RetryBackoffMin", "BuildBackoffMin",
		"Alignment", "MaxPasses", "FramesPerNamespace"}
	if missing := missingWords(err, fields...); len(missing) > 0 {
		t.Errorf("Validate's error does not name %v:\n%v", missing, err)
	}
	n, oerr := parkway.Open(cfg)
	if n != nil || !errors.Is(oerr, parkway.ErrInvalidConfig) {
		t.Fatalf("Open(invalid) = %v, %v; want nil, ErrInvalidConfig", n, oerr)
	}
	if oerr.Error() != err.Error() {
		t.Errorf("Open reports %q, Validate %q", oerr, err)
	}
	for _, one := range []parkway.Config{
		{Shards: -1}, {SegmentSize: parkway.MaxSegmentSize + 1}, {ReconcileInterval: -time.Second},
		{Park: shard.ParkLimits{Alignment: 6}}, {MaxOpenFiles: -1},
	} {
		if err := one.Validate(); !errors.Is(err, parkway.ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig", one, err)
		}
	}
}

// idStream returns the handle of stream id on n, or, when it has none, a
// handle no incarnation matches: how these tests name unknown ids. The
// unknown one is made from one of n's handles, so it names n as its
// origin and is refused for its ids, not as a handle from elsewhere.
func idStream(n *parkway.Node, id uint32) parkway.Stream {
	ss, _ := n.Admin().Streams(context.Background())
	for _, s := range ss {
		if s.ID == id {
			return s
		}
	}
	if len(ss) == 0 {
		return parkway.Stream{ID: id, Revision: 1, Name: "unknown"}
	}
	u := ss[0]
	u.ID, u.Revision, u.Name = id, 1, "unknown"
	return u
}

// idTopic returns the handle of topic stream/topic on n, or, when it has
// none, a handle no incarnation matches.
func idTopic(n *parkway.Node, stream, topic uint32) parkway.Topic {
	s := idStream(n, stream)
	ts, _ := n.Admin().Topics(context.Background(), s)
	for _, t := range ts {
		if t.ID == topic {
			return t
		}
	}
	return parkway.Topic{Stream: s, ID: topic, Revision: s.Revision, Name: "unknown"}
}
