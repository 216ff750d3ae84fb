package kafka

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// TestKIP848SteadyHeartbeatReadsNoTopics: a consumer group's heartbeats
// that change nothing are answered from the group's view of its
// subscribed topics (cgView), with no metadata read; a topic this
// listener grows, deletes or recreates reaches the group's target at
// the next heartbeat all the same (as a new topic ID when recreated).
func TestKIP848SteadyHeartbeatReadsNoTopics(t *testing.T) {
	// An interval no test outlasts: only a change the listener saw
	// refreshes the view.
	f := serve(t, Config{GroupHeartbeatInterval: 10 * time.Minute, GroupSessionTimeout: 30 * time.Minute})
	ctx := ctxFor(t)
	s, err := f.node.Admin().CreateStream(ctx, "kafka")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"va", "vb"} {
		if _, err := f.node.Admin().CreateTopic(ctx, s, name, 2); err != nil {
			t.Fatal(err)
		}
	}
	r := dialRaw(t, f.addr)
	w := newWave(t, r, "g", []string{"va", "vb"})
	w.join(3)
	w.settle()
	reads := func() float64 { return testutil.ToFloat64(f.srv.metrics.groupTopics) }
	if n := reads(); n < 2 {
		t.Fatalf("%v topic reads for the group's joins, want at least 2", n)
	}
	before := reads()
	for range 5 {
		for _, m := range w.members {
			epoch := m.epoch
			if resp := w.keepalive(m); resp.MemberEpoch != epoch {
				t.Fatalf("a keepalive moved %s from epoch %d to %d", m.id, epoch, resp.MemberEpoch)
			}
			if w.apply(m, w.full(m)) {
				t.Fatalf("a full heartbeat of a settled member %s changed its assignment", m.id)
			}
		}
	}
	if n := reads() - before; n != 0 {
		t.Fatalf("30 heartbeats that changed nothing read %v subscribed topics from the metadata, want 0", n)
	}

	held := func() (int, map[[16]byte]bool) {
		n, ids := 0, map[[16]byte]bool{}
		for _, m := range w.members {
			for _, tp := range m.owned {
				n += len(tp.Partitions)
				ids[tp.TopicID] = true
			}
		}
		return n, ids
	}
	epoch := w.members[0].epoch
	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.Version, cp.TimeoutMillis = 3, 30_000
	cp.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: "va", Count: 4}}
	if resp := r.request(cp).(*kmsg.CreatePartitionsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreatePartitions: code %d", resp.Topics[0].ErrorCode)
	}
	w.settle()
	if n, _ := held(); n != 6 || w.members[0].epoch == epoch {
		t.Fatalf("after va grew to 4 partitions: %d partitions held at epoch %d (was %d), want 6 at a new epoch", n, w.members[0].epoch, epoch)
	}

	old, err := f.node.Topic(ctx, s, "vb")
	if err != nil {
		t.Fatal(err)
	}
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Version, dt.TimeoutMillis, dt.TopicNames = 5, 30_000, []string{"vb"}
	if resp := r.request(dt).(*kmsg.DeleteTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("DeleteTopics: code %d", resp.Topics[0].ErrorCode)
	}
	r.createTopic("vb", 3, 1)
	recreated, err := f.node.Topic(ctx, s, "vb")
	if err != nil {
		t.Fatal(err)
	}
	w.settle()
	n, ids := held()
	if n != 7 || ids[topicID(old)] || !ids[topicID(recreated)] {
		t.Fatalf("after vb was recreated with 3 partitions: %d partitions held (want 7), the old ID held %v, the new ID held %v",
			n, ids[topicID(old)], ids[topicID(recreated)])
	}
}

// TestKIP848TopicViewAgesOut: a change this listener did not see (a
// topic deleted and recreated through the parkway API) reaches the
// group's view once it is a heartbeat interval old, as a new topic ID;
// one the listener learned of (its topic cache found the incarnation
// gone) at once.
func TestKIP848TopicViewAgesOut(t *testing.T) {
	const interval = time.Minute
	f := serve(t, Config{GroupHeartbeatInterval: interval, GroupSessionTimeout: 10 * time.Minute})
	ctx := ctxFor(t)
	s, err := f.node.Admin().CreateStream(ctx, "kafka")
	if err != nil {
		t.Fatal(err)
	}
	recreate := func(prev *parkway.Topic, parts int) parkway.Topic {
		t.Helper()
		if prev != nil {
			if err := f.node.Admin().DeleteTopic(ctx, *prev); err != nil {
				t.Fatal(err)
			}
		}
		x, err := f.node.Admin().CreateTopic(ctx, s, "x", parts)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	view := func(now time.Time) cgTopic {
		t.Helper()
		defer f.srv.cgLock("g")()
		meta, err := f.srv.subscribedTopics(ctx, "g", []string{"x"}, now)
		if err != nil {
			t.Fatal(err)
		}
		return meta["x"]
	}
	x1 := recreate(nil, 2)
	at := time.Unix(1000, 0)
	// The first read fills the topic cache (a change of its generation:
	// the second reads again, and its view stands).
	for range 2 {
		if got := view(at); got != (cgTopic{id: topicID(x1), parts: 2}) {
			t.Fatalf("x read as %v", got)
		}
	}
	x2 := recreate(&x1, 3)
	if got := view(at.Add(interval / 2)); got != (cgTopic{id: topicID(x1), parts: 2}) {
		t.Fatalf("within the interval x is answered as %v, want the view (read no metadata)", got)
	}
	if got := view(at.Add(interval)); got != (cgTopic{id: topicID(x2), parts: 3}) {
		t.Fatalf("an interval later x is %v, want its new incarnation %v", got, cgTopic{id: topicID(x2), parts: 3})
	}
	x3 := recreate(&x2, 4)
	f.srv.topics.forget(x2, parkway.ErrTopicNotFound) // as a produce to x would find it
	if got := view(at.Add(interval + time.Millisecond)); got != (cgTopic{id: topicID(x3), parts: 4}) {
		t.Fatalf("once the listener found x's incarnation gone, x is %v, want %v", got, cgTopic{id: topicID(x3), parts: 4})
	}
}
