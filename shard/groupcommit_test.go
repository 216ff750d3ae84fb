package shard

import (
	"errors"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// groupCommitNet is a replicated partition with a leader, every replica
// materialised, and a count of the raft appends carrying entries that the
// leader sent.
func groupCommitNet(t *testing.T) (n *replNet, ns metadata.Namespace, lead uint64, parts map[uint64]partition.Partition, appends *int) {
	t.Helper()
	n = newReplNet(t)
	ns, epoch := n.create("t", 1, 2, 3)
	parts = map[uint64]partition.Partition{}
	for id := uint64(1); id <= 3; id++ {
		parts[id] = n.materialise(id, ns, epoch)
	}
	n.settle()
	if lead = n.tickUntilLeader(ns); lead == 0 {
		t.Fatal("no leader")
	}
	n.tick(2)
	appends = new(int)
	n.onSend = func(from uint64, _ metadata.Namespace, m *raftpb.Message) {
		if from == lead && m.GetType() == raftpb.MessageType_MsgApp && len(m.GetEntries()) > 0 {
			*appends++
		}
	}
	return n, ns, lead, parts, appends
}

// Group commit for raft: produces that reach the leader while an entry it
// proposed is in flight are not proposed one by one; they gather and are
// proposed as one entry, sent in one append per follower, once the entry
// in flight is applied. Eight synchronous produces, each handled as the
// pump handles a frame, cost two entries (the first alone, the other
// seven together) instead of eight, and each is answered with its own
// offset, in arrival order.
func TestGroupCommitProducesInFlightShareOneEntry(t *testing.T) {
	n, ns, lead, parts, appends := groupCommitNet(t)
	s := n.shard(lead)
	o := s.owned[ns]
	applied := o.rep.grp.Applied()
	var calls []call
	var want []string
	for i := range 8 {
		c := produce(ns, string(rune('a'+i)))
		s.handleFrame(c.f) // handle + settle: the pump's unit of work
		calls = append(calls, c)
		want = append(want, string(rune('a'+i)))
	}
	if len(o.rep.pending) != 1 || len(o.rep.proposeBuf) != 7 {
		t.Fatalf("after 8 produces with one in flight: %d entries in flight, %d gathered; want 1 and 7", len(o.rep.pending), len(o.rep.proposeBuf))
	}
	n.settle()
	for i, c := range calls {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %d: %+v", i, r)
		}
	}
	if got := o.rep.grp.Applied() - applied; got != 2 {
		t.Errorf("8 produces took %d raft entries, want 2", got)
	}
	if *appends != 4 { // two entries, each one append to each of two followers
		t.Errorf("the leader sent %d appends carrying entries, want 4", *appends)
	}
	n.tick(2)
	for id, p := range parts {
		if got := payloads(t, p); !slices.Equal(got, want) {
			t.Fatalf("node %d log %q, want %q", id, got, want)
		}
	}
}

// A lone producer waits for nothing: with no entry in flight its produce
// is proposed, and its append sent, in the pump step that handles it.
func TestGroupCommitLoneProduceProposedAtOnce(t *testing.T) {
	n, ns, lead, _, appends := groupCommitNet(t)
	s := n.shard(lead)
	o := s.owned[ns]
	for i := range 3 {
		c := produce(ns, "x")
		s.handleFrame(c.f)
		if len(o.rep.pending) != 1 || len(o.rep.proposeBuf) != 0 || *appends != 2*(i+1) {
			t.Fatalf("produce %d: %d in flight, %d gathered, %d appends sent; want it proposed and sent at once",
				i, len(o.rep.pending), len(o.rep.proposeBuf), *appends)
		}
		n.settle()
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %d: %+v", i, r)
		}
	}
}

// Deduplication holds across a gathered entry: a retry under the same
// (producer, sequence) gathered behind its first copy is applied once and
// answered with the first copy's offset, in the entry and in a later one.
func TestGroupCommitGatheredRetryDedupes(t *testing.T) {
	n, ns, lead, parts, _ := groupCommitNet(t)
	s := n.shard(lead)
	keyed := func(payload string, seq uint64) call {
		c := produce(ns, payload)
		c.f.Req.Producer, c.f.Req.Seq = 7, seq
		return c
	}
	first := keyed("a", 1)
	s.handleFrame(first.f) // in flight
	retry := keyed("a", 1)
	other := keyed("b", 2)
	retry2 := keyed("b", 2)
	for _, c := range []call{retry, other, retry2} {
		s.handleFrame(c.f) // gathered into one entry
	}
	n.settle()
	for name, c := range map[string]call{"first": first, "retry": retry} {
		if r := c.answered(t); r.Err != nil || r.Offset != 0 {
			t.Fatalf("%s copy of (7, 1): %+v, want offset 0", name, r)
		}
	}
	for name, c := range map[string]call{"first": other, "retry": retry2} {
		if r := c.answered(t); r.Err != nil || r.Offset != 1 {
			t.Fatalf("%s copy of (7, 2): %+v, want offset 1", name, r)
		}
	}
	late := keyed("a", 1)
	s.handleFrame(late.f)
	n.settle()
	if r := late.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("a later retry of (7, 1): %+v, want offset 0", r)
	}
	n.tick(2)
	for id, p := range parts {
		if got := payloads(t, p); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("node %d log %q, want [a b]", id, got)
		}
	}
}

// Produces gathered behind an entry in flight were never proposed: when
// the leader loses leadership before the entry commits, the entry's
// produce has an unknown outcome, but the gathered ones are answered
// "go elsewhere" or "retry", never "outcome unknown", and none is lost
// waiting.
func TestGroupCommitGatheredAnsweredRetriableOnLeaderLoss(t *testing.T) {
	n, ns, lead, _, _ := groupCommitNet(t)
	s := n.shard(lead)
	inFlight := produce(ns, "a")
	s.handleFrame(inFlight.f)
	gathered := []call{produce(ns, "b"), produce(ns, "c")}
	for _, c := range gathered {
		s.handleFrame(c.f)
	}
	for id := uint64(1); id <= 3; id++ {
		n.cut[id] = id == lead
	}
	n.queue = nil // the entry's appends are lost with the cut
	for range 500 {
		n.tick(1)
		if n.leaderAmong(ns, lead) != 0 && !s.owned[ns].rep.grp.IsLeader() {
			break
		}
	}
	if s.owned[ns].rep.grp.IsLeader() {
		t.Fatal("the cut-off leader never stepped down")
	}
	if r := inFlight.answered(t); !errors.Is(r.Err, ErrOutcomeUnknown) {
		t.Fatalf("the produce in flight: %v, want outcome unknown", r.Err)
	}
	for i, c := range gathered {
		r := c.answered(t)
		if errors.Is(r.Err, ErrOutcomeUnknown) || !(errors.Is(r.Err, ErrRetry) || errors.Is(r.Err, ErrNotLeader)) {
			t.Fatalf("gathered produce %d: %v, want retry or not leader", i, r.Err)
		}
	}
}
