package metadata

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

// testAssign is a pure stand-in for the router's hash assignment.
func testAssign(ns Namespace, shards int) int {
	return int((uint64(ns.Stream()) + uint64(ns.Topic()) + uint64(ns.Partition())) % uint64(shards))
}

func newTestStore(t testing.TB) *Store {
	t.Helper()
	s, err := NewStore(Config{Shards: 3, Assign: testAssign})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustApply(t testing.TB, s *Store, cmd Command) Result {
	t.Helper()
	res, err := s.Apply(cmd)
	if err != nil {
		t.Fatalf("Apply(%#v): %v", cmd, err)
	}
	return res
}

func ns(t testing.TB, s, tp, p uint32) Namespace {
	t.Helper()
	n, err := NewNamespace(s, tp, p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// woken reports whether a value is pending on ch, consuming it.
func woken(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// state is everything observable about a store.
type state struct {
	Snapshot Snapshot
	Streams  []StreamInfo
	Topics   map[uint32][]TopicInfo
}

func stateOf(s *Store) state {
	st := state{Snapshot: s.Snapshot(), Streams: s.Streams(), Topics: map[uint32][]TopicInfo{}}
	for _, info := range st.Streams {
		st.Topics[info.ID] = s.Topics(info.ID)
	}
	return st
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{Shards: 1, Assign: testAssign}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	err := Config{Shards: 0}.Validate()
	if err == nil {
		t.Fatal("zero config validated")
	}
	msg := err.Error()
	if !strings.Contains(msg, "Shards") || !strings.Contains(msg, "Assign") {
		t.Errorf("Validate() = %q, want both problems reported", msg)
	}
	for _, line := range strings.Split(msg, "\n") {
		if !strings.HasPrefix(line, "parkway: ") {
			t.Errorf("error line %q lacks the parkway: prefix", line)
		}
	}
	if err := (Config{Shards: -1, Assign: testAssign}).Validate(); err == nil {
		t.Error("negative Shards validated")
	}
	if s, err := NewStore(Config{Shards: 1}); err == nil || s != nil {
		t.Errorf("NewStore without Assign = %v, %v; want an error", s, err)
	}
}

func TestFirstIDsAreZero(t *testing.T) {
	s := newTestStore(t)
	if s.Revision() != 0 {
		t.Fatalf("new store at revision %d, want 0", s.Revision())
	}
	res := mustApply(t, s, CreateStream{Name: "s"})
	if res.Stream != 0 {
		t.Fatalf("first stream id = %d, want 0", res.Stream)
	}
	// The design pins namespaces (0, t, 0) for t in 0..8.
	for i := range 9 {
		res := mustApply(t, s, CreateTopic{Stream: 0, Name: fmt.Sprint("t", i), Partitions: 1})
		if res.Topic != uint32(i) {
			t.Fatalf("topic %d got id %d", i, res.Topic)
		}
		if want := Namespace(uint64(i) << 20); res.Created[0].NS != want {
			t.Errorf("topic %d partition 0 = %#x, want %#x", i, uint64(res.Created[0].NS), uint64(want))
		}
	}
}

func TestStreamSlabReuse(t *testing.T) {
	s := newTestStore(t)
	for i := range 5 {
		if res := mustApply(t, s, CreateStream{Name: fmt.Sprint("s", i)}); res.Stream != uint32(i) {
			t.Fatalf("stream %d got id %d", i, res.Stream)
		}
	}
	mustApply(t, s, DeleteStream{Stream: 3})
	mustApply(t, s, DeleteStream{Stream: 1})
	mustApply(t, s, DeleteStream{Stream: 4})
	var got []uint32
	for _, name := range []string{"a", "b", "c", "d"} {
		got = append(got, mustApply(t, s, CreateStream{Name: name}).Stream)
	}
	if !equalIDs(got, 1, 3, 4, 5) {
		t.Errorf("ids after deleting 3, 1, 4 = %v, want [1 3 4 5]", got)
	}
	if info, ok := s.Stream(1); !ok || info.Name != "a" {
		t.Errorf("Stream(1) = %+v, %v; want a", info, ok)
	}
	// Deleting everything restarts at 0.
	for _, info := range s.Streams() {
		mustApply(t, s, DeleteStream{Stream: info.ID})
	}
	if res := mustApply(t, s, CreateStream{Name: "again"}); res.Stream != 0 {
		t.Errorf("after deleting all streams, new id = %d, want 0", res.Stream)
	}
}

func TestTopicSlabReuse(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s0"})
	mustApply(t, s, CreateStream{Name: "s1"})
	for i := range 4 {
		if res := mustApply(t, s, CreateTopic{Stream: 1, Name: fmt.Sprint("t", i), Partitions: 1}); res.Topic != uint32(i) {
			t.Fatalf("topic %d got id %d", i, res.Topic)
		}
	}
	// Topic ids are per stream.
	if res := mustApply(t, s, CreateTopic{Stream: 0, Name: "t0", Partitions: 1}); res.Topic != 0 {
		t.Errorf("first topic of stream 0 got id %d, want 0", res.Topic)
	}
	mustApply(t, s, DeleteTopic{Stream: 1, Topic: 2})
	mustApply(t, s, DeleteTopic{Stream: 1, Topic: 0})
	var got []uint32
	for _, name := range []string{"a", "b", "c"} {
		got = append(got, mustApply(t, s, CreateTopic{Stream: 1, Name: name, Partitions: 1}).Topic)
	}
	if !equalIDs(got, 0, 2, 4) {
		t.Errorf("ids after deleting 2, 0 = %v, want [0 2 4]", got)
	}
}

func TestRecreateSameNamespaceNewIncarnation(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s"})
	first := mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 2})
	mustApply(t, s, DeleteTopic{Stream: 0, Topic: 0})
	if _, ok := s.Partition(first.Created[0].NS); ok {
		t.Fatal("partition survives its topic")
	}
	second := mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 2})
	for i := range first.Created {
		a, b := first.Created[i], second.Created[i]
		if a.NS != b.NS {
			t.Errorf("partition %d: namespace %v, then %v", i, a.NS, b.NS)
		}
		if a.CreatedRevision == b.CreatedRevision {
			t.Errorf("partition %d: recreated with the same revision %d", i, a.CreatedRevision)
		}
		if rev, _ := s.CreatedRevision(b.NS); rev != b.CreatedRevision {
			t.Errorf("CreatedRevision(%v) = %d, want %d", b.NS, rev, b.CreatedRevision)
		}
	}

	// The same holds for a whole stream, and for tail partitions.
	mustApply(t, s, DeleteStream{Stream: 0})
	mustApply(t, s, CreateStream{Name: "s"})
	third := mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 2})
	if third.Created[1].NS != second.Created[1].NS || third.Created[1].CreatedRevision == second.Created[1].CreatedRevision {
		t.Errorf("stream recreate: %+v vs %+v", third.Created[1], second.Created[1])
	}
	mustApply(t, s, DeletePartitions{Stream: 0, Topic: 0, Count: 1})
	grown := mustApply(t, s, CreatePartitions{Stream: 0, Topic: 0, Count: 1})
	if grown.Created[0].NS != third.Created[1].NS || grown.Created[0].CreatedRevision == third.Created[1].CreatedRevision {
		t.Errorf("partition recreate: %+v vs %+v", grown.Created[0], third.Created[1])
	}
}

func TestRevisionBumpsAndWakes(t *testing.T) {
	s := newTestStore(t)
	wake, cancel := s.Subscribe()
	defer cancel()
	steps := []struct {
		cmd  Command
		bump bool
		wake bool
	}{
		{CreateStream{Name: "s"}, true, false},
		{CreateStream{Name: "empty"}, true, false},
		{CreateTopic{Stream: 0, Name: "t", Partitions: 3}, true, true},
		{CreatePartitions{Stream: 0, Topic: 0, Count: 2}, true, true},
		{SetTopicConfig{Stream: 0, Topic: 0, Config: TopicConfig{RetentionBytes: 1 << 20}}, true, true},
		{SetTopicConfig{Stream: 0, Topic: 0, Config: TopicConfig{RetentionBytes: 1 << 20}}, true, true}, // unchanged
		{PurgeTopic{Stream: 0, Topic: 0}, true, true},
		{DeletePartitions{Stream: 0, Topic: 0, Count: 2}, true, true},
		{DeletePartitions{Stream: 0, Topic: 0, Count: 2}, true, true}, // all but one
		{CreatePartitions{Stream: 0, Topic: 0, Count: 1}, true, true},
		{DeleteTopic{Stream: 0, Topic: 0}, true, true},
		{CreateTopic{Stream: 0, Name: "u", Partitions: 1}, true, true},
		{DeleteStream{Stream: 0}, true, true},  // had partitions
		{DeleteStream{Stream: 1}, true, false}, // had none
	}
	for i, step := range steps {
		before := s.Revision()
		res := mustApply(t, s, step.cmd)
		want := before
		if step.bump {
			want++
		}
		if res.Revision != want || s.Revision() != want {
			t.Errorf("step %d %#v: revision %d (store %d), want %d", i, step.cmd, res.Revision, s.Revision(), want)
		}
		if got := woken(wake); got != step.wake {
			t.Errorf("step %d %#v: woken = %v, want %v", i, step.cmd, got, step.wake)
		}
	}
}

func TestResults(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s0"})
	res := mustApply(t, s, CreateStream{Name: "s1"})
	if res.Stream != 1 || res.Topic != 0 || res.Created != nil || res.Removed != nil {
		t.Errorf("CreateStream result %+v", res)
	}
	res = mustApply(t, s, CreateTopic{Stream: 1, Name: "a", Partitions: 3})
	if res.Stream != 1 || res.Topic != 0 || len(res.Created) != 3 || res.Removed != nil {
		t.Fatalf("CreateTopic result %+v", res)
	}
	for i, p := range res.Created {
		want := PartitionInfo{
			NS: ns(t, 1, 0, uint32(i)), Stream: 1, Topic: 0, Partition: uint32(i),
			CreatedRevision: res.Revision, Owner: testAssign(ns(t, 1, 0, uint32(i)), 3),
		}
		if !reflect.DeepEqual(p, want) {
			t.Errorf("Created[%d] = %+v, want %+v", i, p, want)
		}
	}
	// The result does not alias the store.
	res.Created[0].Owner = 99
	if p, _ := s.Partition(ns(t, 1, 0, 0)); p.Owner == 99 {
		t.Error("Result.Created aliases the store")
	}

	res = mustApply(t, s, CreatePartitions{Stream: 1, Topic: 0, Count: 2})
	if len(res.Created) != 2 || res.Created[0].Partition != 3 || res.Created[1].Partition != 4 || res.Topic != 0 {
		t.Errorf("CreatePartitions result %+v", res)
	}
	res = mustApply(t, s, DeletePartitions{Stream: 1, Topic: 0, Count: 2})
	if len(res.Removed) != 2 || res.Removed[0].Partition != 3 || res.Removed[1].Partition != 4 {
		t.Errorf("DeletePartitions result %+v", res)
	}
	mustApply(t, s, CreateTopic{Stream: 1, Name: "b", Partitions: 2})
	res = mustApply(t, s, PurgeTopic{Stream: 1, Topic: 1})
	if info, _ := s.Topic(1, 1); info.PurgedRevision != res.Revision || res.Topic != 1 || res.Stream != 1 {
		t.Errorf("PurgeTopic: result %+v, topic %+v", res, info)
	}
	if info, _ := s.Topic(1, 0); info.PurgedRevision != 0 {
		t.Errorf("unpurged topic has PurgedRevision %d", info.PurgedRevision)
	}

	before := s.Snapshot()
	res = mustApply(t, s, DeleteStream{Stream: 1})
	if res.Stream != 1 || !reflect.DeepEqual(res.Removed, before.Partitions) {
		t.Errorf("DeleteStream removed %+v, want %+v", res.Removed, before.Partitions)
	}
	if got := s.Snapshot().Partitions; len(got) != 0 {
		t.Errorf("partitions left after DeleteStream: %+v", got)
	}
	if _, ok := s.Topic(1, 0); ok {
		t.Error("topic survives its stream")
	}
	if _, ok := s.StreamByName("s1"); ok {
		t.Error("stream name survives its stream")
	}

	created := mustApply(t, s, CreateTopic{Stream: 0, Name: "victim", Partitions: 1})
	res = mustApply(t, s, DeleteTopic{Stream: 0, Topic: 0})
	if res.Stream != 0 || res.Topic != 0 || !reflect.DeepEqual(res.Removed, created.Created) {
		t.Errorf("DeleteTopic result %+v, want removed %+v", res, created.Created)
	}
}

type foreignCommand struct{ Command }

func TestErrorsChangeNothing(t *testing.T) {
	long := strings.Repeat("x", MaxNameLength+1)
	cases := []struct {
		name string
		cmd  Command
		want error
	}{
		{"nil", nil, ErrUnknownCommand},
		{"nil pointer", (*CreateStream)(nil), ErrUnknownCommand},
		{"foreign", foreignCommand{}, ErrUnknownCommand},
		{"empty stream name", CreateStream{Name: ""}, ErrInvalidName},
		{"long stream name", CreateStream{Name: long}, ErrInvalidName},
		{"invalid utf-8", CreateStream{Name: "a\xffb"}, ErrInvalidName},
		{"control char", CreateStream{Name: "a\nb"}, ErrInvalidName},
		{"DEL", CreateStream{Name: "a\x7fb"}, ErrInvalidName},
		{"C1 control", CreateStream{Name: "a\u0085b"}, ErrInvalidName},
		{"stream exists", CreateStream{Name: "s"}, ErrStreamExists},
		{"delete missing stream", DeleteStream{Stream: 9}, ErrStreamNotFound},
		{"topic in missing stream", CreateTopic{Stream: 9, Name: "t", Partitions: 1}, ErrStreamNotFound},
		{"empty topic name", CreateTopic{Stream: 0, Name: "", Partitions: 1}, ErrInvalidName},
		{"long topic name", CreateTopic{Stream: 0, Name: long, Partitions: 1}, ErrInvalidName},
		{"topic exists", CreateTopic{Stream: 0, Name: "t", Partitions: 1}, ErrTopicExists},
		{"zero partitions", CreateTopic{Stream: 0, Name: "u", Partitions: 0}, ErrInvalidPartitionCount},
		{"negative partitions", CreateTopic{Stream: 0, Name: "u", Partitions: -1}, ErrInvalidPartitionCount},
		{"too many partitions", CreateTopic{Stream: 0, Name: "u", Partitions: MaxPartitionsPerTopic + 1}, ErrInvalidPartitionCount},
		{"delete missing topic", DeleteTopic{Stream: 0, Topic: 9}, ErrTopicNotFound},
		{"delete topic missing stream", DeleteTopic{Stream: 9, Topic: 0}, ErrStreamNotFound},
		{"grow missing topic", CreatePartitions{Stream: 0, Topic: 9, Count: 1}, ErrTopicNotFound},
		{"grow missing stream", CreatePartitions{Stream: 9, Topic: 0, Count: 1}, ErrStreamNotFound},
		{"grow by zero", CreatePartitions{Stream: 0, Topic: 0, Count: 0}, ErrInvalidPartitionCount},
		{"grow by negative", CreatePartitions{Stream: 0, Topic: 0, Count: -3}, ErrInvalidPartitionCount},
		{"grow past id range", CreatePartitions{Stream: 0, Topic: 0, Count: MaxPartitionID}, ErrInvalidPartitionCount},
		{"grow by huge", CreatePartitions{Stream: 0, Topic: 0, Count: int(^uint(0) >> 1)}, ErrInvalidPartitionCount},
		{"shrink missing topic", DeletePartitions{Stream: 0, Topic: 9, Count: 1}, ErrTopicNotFound},
		{"shrink missing stream", DeletePartitions{Stream: 9, Topic: 0, Count: 1}, ErrStreamNotFound},
		{"shrink by zero", DeletePartitions{Stream: 0, Topic: 0, Count: 0}, ErrInvalidPartitionCount},
		{"shrink too far", DeletePartitions{Stream: 0, Topic: 0, Count: 3}, ErrInvalidPartitionCount},
		{"shrink to none", DeletePartitions{Stream: 0, Topic: 0, Count: 2}, ErrInvalidPartitionCount},
		{"purge missing topic", PurgeTopic{Stream: 0, Topic: 9}, ErrTopicNotFound},
		{"purge missing stream", PurgeTopic{Stream: 9, Topic: 0}, ErrStreamNotFound},
		{"nil SetTopicConfig pointer", (*SetTopicConfig)(nil), ErrUnknownCommand},
		{"topic config: bad policy", CreateTopic{Stream: 0, Name: "u", Partitions: 1, Config: TopicConfig{Fsync: FsyncNever + 1}}, ErrInvalidTopicConfig},
		{"topic config: negative interval", CreateTopic{Stream: 0, Name: "u", Partitions: 1, Config: TopicConfig{Fsync: FsyncInterval, FsyncInterval: -1}}, ErrInvalidTopicConfig},
		{"topic config: negative age", CreateTopic{Stream: 0, Name: "u", Partitions: 1, Config: TopicConfig{RetentionAge: -1}}, ErrInvalidTopicConfig},
		{"topic config: negative bytes", CreateTopic{Stream: 0, Name: "u", Partitions: 1, Config: TopicConfig{RetentionBytes: -1}}, ErrInvalidTopicConfig},
		{"set config: missing topic", SetTopicConfig{Stream: 0, Topic: 9}, ErrTopicNotFound},
		{"set config: missing stream", SetTopicConfig{Stream: 9, Topic: 0}, ErrStreamNotFound},
		{"set config: bad policy", SetTopicConfig{Stream: 0, Topic: 0, Config: TopicConfig{Fsync: 200}}, ErrInvalidTopicConfig},
		{"set config: negative age", SetTopicConfig{Stream: 0, Topic: 0, Config: TopicConfig{RetentionAge: -5}}, ErrInvalidTopicConfig},
		{"set config: negative bytes", SetTopicConfig{Stream: 0, Topic: 0, Config: TopicConfig{RetentionBytes: -5}}, ErrInvalidTopicConfig},
	}
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s"})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 2})
	wake, cancel := s.Subscribe()
	defer cancel()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, rev := stateOf(s), s.Revision()
			res, err := s.Apply(c.cmd)
			if !errors.Is(err, c.want) {
				t.Fatalf("Apply(%#v) = %v, want %v", c.cmd, err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "parkway: ") {
				t.Errorf("error %q lacks the parkway: prefix", err)
			}
			if !reflect.DeepEqual(res, Result{}) {
				t.Errorf("failed Apply returned %+v", res)
			}
			if after := stateOf(s); !reflect.DeepEqual(before, after) || s.Revision() != rev {
				t.Errorf("failed Apply changed the store:\nbefore %+v\nafter  %+v", before, after)
			}
			if woken(wake) {
				t.Error("failed Apply woke a subscriber")
			}
		})
	}
}

func TestSentinelsArePrefixed(t *testing.T) {
	for _, err := range []error{
		ErrInvalidName, ErrStreamExists, ErrTopicExists, ErrStreamNotFound, ErrTopicNotFound,
		ErrInvalidPartitionCount, ErrTooManyStreams, ErrTooManyTopics, ErrUnknownCommand,
		ErrInvalidTopicConfig, ErrInvalidEncoding, ErrInvalidSnapshot, ErrLogBroken, ErrCorruptLog,
		ErrDurableClosed, &DecodeError{What: "command", Reason: "x"},
	} {
		if !strings.HasPrefix(err.Error(), "parkway: ") {
			t.Errorf("%q lacks the parkway: prefix", err)
		}
	}
}

func TestNamesAreCaseSensitiveAndScoped(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "orders"})
	mustApply(t, s, CreateStream{Name: "Orders"})
	mustApply(t, s, CreateStream{Name: strings.Repeat("é", MaxNameLength/2)}) // 254 bytes
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 1})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "T", Partitions: 1})
	mustApply(t, s, CreateTopic{Stream: 1, Name: "t", Partitions: 1}) // per stream
	if info, ok := s.StreamByName("Orders"); !ok || info.ID != 1 {
		t.Errorf("StreamByName(Orders) = %+v, %v", info, ok)
	}
	if info, ok := s.TopicByName(0, "T"); !ok || info.ID != 1 {
		t.Errorf("TopicByName(0, T) = %+v, %v", info, ok)
	}
	if _, ok := s.TopicByName(2, "t"); ok {
		t.Error("TopicByName found a topic in a stream without topics")
	}
	if _, ok := s.TopicByName(9, "t"); ok {
		t.Error("TopicByName found a topic in a missing stream")
	}
	// Deleting frees the name.
	mustApply(t, s, DeleteTopic{Stream: 0, Topic: 0})
	if res := mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 1}); res.Topic != 0 {
		t.Errorf("recreated topic got id %d, want 0", res.Topic)
	}
}

func TestTooManyStreams(t *testing.T) {
	s := newTestStore(t)
	// Shrink the id space: exhausting 2^20 real ids is too slow for a unit
	// test, and the slab itself is tested against MaxStreamID.
	s.streamIDs.max = 2
	for i := range 3 {
		mustApply(t, s, CreateStream{Name: fmt.Sprint("s", i)})
	}
	before, rev := stateOf(s), s.Revision()
	if _, err := s.Apply(CreateStream{Name: "one more"}); !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("err = %v, want ErrTooManyStreams", err)
	}
	if !reflect.DeepEqual(before, stateOf(s)) || rev != s.Revision() {
		t.Error("failed CreateStream changed the store")
	}
	mustApply(t, s, DeleteStream{Stream: 1})
	if res := mustApply(t, s, CreateStream{Name: "one more"}); res.Stream != 1 {
		t.Errorf("freed id reused as %d, want 1", res.Stream)
	}
}

func TestTooManyTopics(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s"})
	for i := range MaxTopicID + 1 {
		mustApply(t, s, CreateTopic{Stream: 0, Name: fmt.Sprint(i), Partitions: 1})
	}
	before, rev := stateOf(s), s.Revision()
	if _, err := s.Apply(CreateTopic{Stream: 0, Name: "one more", Partitions: 1}); !errors.Is(err, ErrTooManyTopics) {
		t.Fatalf("err = %v, want ErrTooManyTopics", err)
	}
	if !reflect.DeepEqual(before, stateOf(s)) || rev != s.Revision() {
		t.Error("failed CreateTopic changed the store")
	}
	mustApply(t, s, DeleteTopic{Stream: 0, Topic: 17})
	if res := mustApply(t, s, CreateTopic{Stream: 0, Name: "one more", Partitions: 1}); res.Topic != 17 {
		t.Errorf("freed id reused as %d, want 17", res.Topic)
	}
}

func TestGrowToIDRange(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s"})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: MaxPartitionsPerTopic})
	// Exactly up to MaxPartitionID is allowed; one more is not.
	room := MaxPartitionID + 1 - MaxPartitionsPerTopic
	if _, err := s.Apply(CreatePartitions{Stream: 0, Topic: 0, Count: room + 1}); !errors.Is(err, ErrInvalidPartitionCount) {
		t.Fatalf("err = %v, want ErrInvalidPartitionCount", err)
	}
	if testing.Short() {
		return
	}
	res := mustApply(t, s, CreatePartitions{Stream: 0, Topic: 0, Count: room})
	if last := res.Created[len(res.Created)-1]; last.Partition != MaxPartitionID {
		t.Errorf("last partition %d, want %d", last.Partition, MaxPartitionID)
	}
	if _, err := s.Apply(CreatePartitions{Stream: 0, Topic: 0, Count: 1}); !errors.Is(err, ErrInvalidPartitionCount) {
		t.Errorf("err = %v, want ErrInvalidPartitionCount", err)
	}
}

func TestAssignOutOfRangeChangesNothing(t *testing.T) {
	s, err := NewStore(Config{Shards: 2, Assign: func(ns Namespace, shards int) int {
		if ns.Partition() == 1 {
			return shards // out of range
		}
		return 0
	}})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, CreateStream{Name: "s"})
	before, rev := stateOf(s), s.Revision()
	if _, err := s.Apply(CreateTopic{Stream: 0, Name: "t", Partitions: 2}); err == nil {
		t.Fatal("CreateTopic with a bad owner succeeded")
	}
	if !reflect.DeepEqual(before, stateOf(s)) || rev != s.Revision() {
		t.Error("failed CreateTopic changed the store")
	}
	// The topic id was not consumed.
	if res := mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 1}); res.Topic != 0 {
		t.Errorf("topic id %d, want 0", res.Topic)
	}
	if _, err := s.Apply(CreatePartitions{Stream: 0, Topic: 0, Count: 1}); err == nil {
		t.Fatal("CreatePartitions with a bad owner succeeded")
	}
	if info, _ := s.Topic(0, 0); info.Partitions != 1 {
		t.Errorf("topic has %d partitions after a failed grow, want 1", info.Partitions)
	}
}

func TestPointerCommands(t *testing.T) {
	a, b := newTestStore(t), newTestStore(t)
	cmds := []Command{
		CreateStream{Name: "s"},
		CreateTopic{Stream: 0, Name: "t", Partitions: 2},
		CreatePartitions{Stream: 0, Topic: 0, Count: 1},
		DeletePartitions{Stream: 0, Topic: 0, Count: 1},
		PurgeTopic{Stream: 0, Topic: 0},
		SetTopicConfig{Stream: 0, Topic: 0, Config: TopicConfig{Fsync: FsyncAlways}},
		DeleteTopic{Stream: 0, Topic: 0},
		DeleteStream{Stream: 0},
	}
	ptrs := []Command{
		&CreateStream{Name: "s"},
		&CreateTopic{Stream: 0, Name: "t", Partitions: 2},
		&CreatePartitions{Stream: 0, Topic: 0, Count: 1},
		&DeletePartitions{Stream: 0, Topic: 0, Count: 1},
		&PurgeTopic{Stream: 0, Topic: 0},
		&SetTopicConfig{Stream: 0, Topic: 0, Config: TopicConfig{Fsync: FsyncAlways}},
		&DeleteTopic{Stream: 0, Topic: 0},
		&DeleteStream{Stream: 0},
	}
	for i := range cmds {
		ra, rb := mustApply(t, a, cmds[i]), mustApply(t, b, ptrs[i])
		if !reflect.DeepEqual(ra, rb) || !reflect.DeepEqual(stateOf(a), stateOf(b)) {
			t.Fatalf("step %d: value and pointer commands diverge: %+v vs %+v", i, ra, rb)
		}
	}
}

func TestLookups(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "a"})
	mustApply(t, s, CreateStream{Name: "b"})
	mustApply(t, s, CreateTopic{Stream: 1, Name: "x", Partitions: 2})
	res := mustApply(t, s, CreateTopic{Stream: 1, Name: "y", Partitions: 1})
	mustApply(t, s, CreatePartitions{Stream: 1, Topic: 0, Count: 1})

	p, ok := s.Partition(ns(t, 1, 1, 0))
	if !ok || !reflect.DeepEqual(p, res.Created[0]) {
		t.Errorf("Partition(1/1/0) = %+v, %v; want %+v", p, ok, res.Created[0])
	}
	if rev, ok := s.CreatedRevision(ns(t, 1, 1, 0)); !ok || rev != res.Revision {
		t.Errorf("CreatedRevision(1/1/0) = %d, %v; want %d", rev, ok, res.Revision)
	}
	if rev, ok := s.CreatedRevision(ns(t, 1, 0, 2)); !ok || rev != s.Revision() {
		t.Errorf("CreatedRevision(1/0/2) = %d, %v; want %d", rev, ok, s.Revision())
	}
	for _, missing := range []Namespace{ns(t, 0, 0, 0), ns(t, 1, 1, 1), ns(t, 1, 2, 0), MetadataNamespace} {
		if _, ok := s.Partition(missing); ok {
			t.Errorf("Partition(%v) found", missing)
		}
		if rev, ok := s.CreatedRevision(missing); ok || rev != 0 {
			t.Errorf("CreatedRevision(%v) = %d, %v", missing, rev, ok)
		}
	}

	wantStreams := []StreamInfo{
		{ID: 0, Name: "a", CreatedRevision: 1, Topics: 0},
		{ID: 1, Name: "b", CreatedRevision: 2, Topics: 2},
	}
	if got := s.Streams(); !reflect.DeepEqual(got, wantStreams) {
		t.Errorf("Streams() = %+v, want %+v", got, wantStreams)
	}
	if got, ok := s.Stream(1); !ok || got != wantStreams[1] {
		t.Errorf("Stream(1) = %+v, %v", got, ok)
	}
	if got, ok := s.StreamByName("a"); !ok || got != wantStreams[0] {
		t.Errorf("StreamByName(a) = %+v, %v", got, ok)
	}
	if _, ok := s.Stream(2); ok {
		t.Error("Stream(2) found")
	}
	if _, ok := s.StreamByName("c"); ok {
		t.Error("StreamByName(c) found")
	}
	wantTopics := []TopicInfo{
		{Stream: 1, ID: 0, Name: "x", Partitions: 3, CreatedRevision: 3},
		{Stream: 1, ID: 1, Name: "y", Partitions: 1, CreatedRevision: 4},
	}
	if got := s.Topics(1); !reflect.DeepEqual(got, wantTopics) {
		t.Errorf("Topics(1) = %+v, want %+v", got, wantTopics)
	}
	if got := s.Topics(0); len(got) != 0 {
		t.Errorf("Topics(0) = %+v, want none", got)
	}
	if got := s.Topics(7); got != nil {
		t.Errorf("Topics(7) = %+v, want nil", got)
	}
	if got, ok := s.Topic(1, 1); !ok || got != wantTopics[1] {
		t.Errorf("Topic(1, 1) = %+v, %v", got, ok)
	}
	if got, ok := s.TopicByName(1, "x"); !ok || got != wantTopics[0] {
		t.Errorf("TopicByName(1, x) = %+v, %v", got, ok)
	}
	if _, ok := s.Topic(0, 0); ok {
		t.Error("Topic(0, 0) found")
	}
	if _, ok := s.Topic(5, 0); ok {
		t.Error("Topic(5, 0) found")
	}
}

func TestSnapshotSortedAndCopied(t *testing.T) {
	s := newTestStore(t)
	// Build out of id order: later streams and topics get partitions
	// first, and a freed low id is refilled last.
	for _, name := range []string{"a", "b", "c"} {
		mustApply(t, s, CreateStream{Name: name})
	}
	mustApply(t, s, CreateTopic{Stream: 2, Name: "t", Partitions: 3})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 2})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "u", Partitions: 1})
	mustApply(t, s, CreateTopic{Stream: 1, Name: "t", Partitions: 1})
	mustApply(t, s, DeleteTopic{Stream: 0, Topic: 0})
	mustApply(t, s, CreatePartitions{Stream: 2, Topic: 0, Count: 2})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "v", Partitions: 2})

	snap := s.Snapshot()
	if snap.Revision != s.Revision() {
		t.Errorf("snapshot revision %d, store %d", snap.Revision, s.Revision())
	}
	if len(snap.Partitions) != 2+1+1+5 {
		t.Fatalf("snapshot has %d partitions", len(snap.Partitions))
	}
	if !slices.IsSortedFunc(snap.Partitions, func(a, b PartitionInfo) int { return cmpNS(a.NS, b.NS) }) {
		t.Errorf("snapshot not sorted: %+v", snap.Partitions)
	}
	for _, p := range snap.Partitions {
		if got, ok := s.Partition(p.NS); !ok || !reflect.DeepEqual(got, p) {
			t.Errorf("snapshot has %+v, Partition says %+v, %v", p, got, ok)
		}
	}
	snap.Partitions[0].CreatedRevision = 12345
	if again := s.Snapshot(); again.Partitions[0].CreatedRevision == 12345 {
		t.Error("Snapshot aliases the store")
	}
	empty := newTestStore(t).Snapshot()
	if empty.Revision != 0 || len(empty.Partitions) != 0 {
		t.Errorf("empty snapshot %+v", empty)
	}
}

func cmpNS(a, b Namespace) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestSubscribe(t *testing.T) {
	s := newTestStore(t)
	a, cancelA := s.Subscribe()
	b, cancelB := s.Subscribe()
	defer cancelB()
	if cap(a) != 1 {
		t.Errorf("wake channel capacity %d, want 1", cap(a))
	}

	mustApply(t, s, CreateStream{Name: "s"})
	if woken(a) || woken(b) {
		t.Error("CreateStream woke a subscriber")
	}
	// Two shaping commits coalesce into one value.
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 1})
	mustApply(t, s, CreatePartitions{Stream: 0, Topic: 0, Count: 1})
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("pending wakes %d and %d, want 1 each", len(a), len(b))
	}
	if !woken(a) || woken(a) {
		t.Error("two commits did not coalesce into exactly one wake")
	}
	if !woken(b) {
		t.Error("second subscriber not woken")
	}

	cancelA()
	cancelA() // idempotent
	mustApply(t, s, PurgeTopic{Stream: 0, Topic: 0})
	if woken(a) {
		t.Error("cancelled subscriber woken")
	}
	if !woken(b) {
		t.Error("remaining subscriber not woken after the other cancelled")
	}

	// A subscriber that arrives late sees later commits only.
	c, cancelC := s.Subscribe()
	if woken(c) {
		t.Error("new subscriber starts with a pending wake")
	}
	mustApply(t, s, DeleteTopic{Stream: 0, Topic: 0})
	if !woken(c) || !woken(b) {
		t.Error("DeleteTopic did not wake everyone")
	}
	cancelC()
	cancelB()
	cancelB()
	if n := len(s.subs); n != 0 {
		t.Errorf("%d subscriptions left after cancelling all", n)
	}
}

// randomCommand draws a command that is often, but not always, valid for s.
func randomCommand(rng *rand.Rand, s *Store) Command {
	streams := s.Streams()
	pickStream := func() uint32 {
		if len(streams) == 0 || rng.IntN(10) == 0 {
			return uint32(rng.IntN(8))
		}
		return streams[rng.IntN(len(streams))].ID
	}
	pickTopic := func(stream uint32) uint32 {
		topics := s.Topics(stream)
		if len(topics) == 0 || rng.IntN(10) == 0 {
			return uint32(rng.IntN(8))
		}
		return topics[rng.IntN(len(topics))].ID
	}
	name := func() string { return fmt.Sprintf("n%d", rng.IntN(12)) }
	switch rng.IntN(10) {
	case 0, 1:
		return CreateStream{Name: name()}
	case 2:
		return DeleteStream{Stream: pickStream()}
	case 3, 4:
		return CreateTopic{Stream: pickStream(), Name: name(), Partitions: rng.IntN(6)}
	case 5:
		st := pickStream()
		return DeleteTopic{Stream: st, Topic: pickTopic(st)}
	case 6, 7:
		st := pickStream()
		return CreatePartitions{Stream: st, Topic: pickTopic(st), Count: rng.IntN(4)}
	case 8:
		st := pickStream()
		return DeletePartitions{Stream: st, Topic: pickTopic(st), Count: rng.IntN(4)}
	default:
		st := pickStream()
		return PurgeTopic{Stream: st, Topic: pickTopic(st)}
	}
}

func TestReplayIsDeterministic(t *testing.T) {
	gen := rand.New(rand.NewPCG(42, 7))
	driver := newTestStore(t)
	var cmds []Command
	for range 3000 {
		cmd := randomCommand(gen, driver)
		cmds = append(cmds, cmd)
		driver.Apply(cmd) //nolint:errcheck // failures are part of the sequence
	}

	replay := func() (*Store, []string) {
		s := newTestStore(t)
		var log []string
		for _, cmd := range cmds {
			res, err := s.Apply(cmd)
			log = append(log, fmt.Sprintf("%+v %v", res, err))
		}
		return s, log
	}
	a, logA := replay()
	b, logB := replay()
	if !slices.Equal(logA, logB) {
		for i := range logA {
			if logA[i] != logB[i] {
				t.Fatalf("command %d (%#v): %s vs %s", i, cmds[i], logA[i], logB[i])
			}
		}
	}
	sa, sb := stateOf(a), stateOf(b)
	if !reflect.DeepEqual(sa, sb) {
		t.Fatal("replicas diverge")
	}
	if !reflect.DeepEqual(sa, stateOf(driver)) {
		t.Fatal("replay diverges from the original run")
	}
	if len(sa.Snapshot.Partitions) == 0 || len(sa.Streams) == 0 || sa.Snapshot.Revision < 100 {
		t.Fatalf("sequence too degenerate to prove anything: %d partitions, %d streams, revision %d",
			len(sa.Snapshot.Partitions), len(sa.Streams), sa.Snapshot.Revision)
	}
	checkInvariants(t, a)
}

// checkInvariants cross-checks the store's indexes against each other.
func checkInvariants(t *testing.T, s *Store) {
	t.Helper()
	snap := s.Snapshot()
	if len(snap.Partitions) != s.partitions {
		t.Errorf("snapshot has %d partitions, the store counts %d", len(snap.Partitions), s.partitions)
	}
	for _, p := range snap.Partitions {
		if q, ok := s.partition(p.NS); !ok || q.CreatedRevision != p.CreatedRevision {
			t.Errorf("%v: found %+v %v, snapshot has %+v", p.NS, q, ok, p)
		}
	}
	if !slices.IsSortedFunc(snap.Partitions, func(a, b PartitionInfo) int { return cmpNS(a.NS, b.NS) }) {
		t.Error("snapshot not sorted")
	}
	streams := s.Streams()
	if s.streamIDs.len() != len(streams) || len(s.streamNames) != len(streams) || len(s.streamByID) != len(streams) {
		t.Errorf("stream slab %d, names %d, ids %d, streams %d", s.streamIDs.len(), len(s.streamNames), len(s.streamByID), len(streams))
	}
	// The id maps hold exactly what the btrees hold.
	s.streams.Ascend(func(st *stream) bool {
		if s.streamByID[st.id] != st {
			t.Errorf("stream %d: id map has %p, btree %p", st.id, s.streamByID[st.id], st)
		}
		if st.topics.Len() != len(st.topicByID) {
			t.Errorf("stream %d: %d topics, %d in its id map", st.id, st.topics.Len(), len(st.topicByID))
		}
		st.topics.Ascend(func(tp *topic) bool {
			if st.topicByID[tp.id] != tp {
				t.Errorf("topic %d/%d: id map has %p, btree %p", st.id, tp.id, st.topicByID[tp.id], tp)
			}
			return true
		})
		return true
	})
	total := 0
	for _, st := range streams {
		topics := s.Topics(st.ID)
		if st.Topics != len(topics) {
			t.Errorf("stream %d says %d topics, has %d", st.ID, st.Topics, len(topics))
		}
		for _, tp := range topics {
			total += tp.Partitions
			if tp.CreatedRevision > snap.Revision || tp.PurgedRevision > snap.Revision {
				t.Errorf("topic %+v from the future (revision %d)", tp, snap.Revision)
			}
			for p := range tp.Partitions {
				info, ok := s.Partition(ns(t, st.ID, tp.ID, uint32(p)))
				if !ok || info.CreatedRevision < tp.CreatedRevision || info.Owner != testAssign(info.NS, 3) {
					t.Errorf("partition %d/%d/%d: %+v, %v", st.ID, tp.ID, p, info, ok)
				}
			}
		}
	}
	if total != len(snap.Partitions) {
		t.Errorf("topics count %d partitions, snapshot %d", total, len(snap.Partitions))
	}
}

func TestConcurrentReaders(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s"})
	wake, cancel := s.Subscribe()
	defer cancel()
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				snap := s.Snapshot()
				for _, p := range snap.Partitions {
					s.CreatedRevision(p.NS)
				}
				s.Streams()
				s.Topics(0)
				s.Revision()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-wake:
			}
		}
	}()
	for i := range 200 {
		mustApply(t, s, CreateTopic{Stream: 0, Name: fmt.Sprint(i), Partitions: 2})
		mustApply(t, s, DeleteTopic{Stream: 0, Topic: 0})
		_, c := s.Subscribe()
		c()
	}
	close(done)
	wg.Wait()
	checkInvariants(t, s)
}
