package shard

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/parkway-io/parkway/internal/groups"
)

// A leader taking one write per raft tick, each acknowledged before the
// tick, is not quiesced between two of them: every tick finds its group
// idle for a moment (the last entry applied on every replica, the next
// write not yet proposed), but a proposal restarts its quiescence clock
// (groups.Awake.Busy). Before, the group kept counting ticks from its
// first one and quiesced on every other tick, and each quiesce put the
// quiesce heartbeats, a writeback of the raft log on every replica's
// pump (syncQuiesced) and three wakes in front of the next write (issue
// 33: R1's tail). Once the writes stop, the group quiesces as before.
func TestSteadyWritesDoNotQuiesceTheirGroup(t *testing.T) {
	r := newQuietRig(t)
	n := r.n
	quiesces := func() (sum float64) {
		for id := uint64(1); id <= 3; id++ {
			sum += testutil.ToFloat64(n.shard(id).m.RaftQuiesces)
		}
		return sum
	}
	wakes := testutil.ToFloat64(r.s.m.RaftWakes)
	before := quiesces()
	const writes = 20
	for i := range writes {
		c := produce(r.ns, "w")
		r.s.handle(c.f)
		n.settle()
		if a := c.answered(t); a.Err != nil {
			t.Fatalf("write %d: %v", i, a.Err)
		}
		n.tick(1)
	}
	if got := quiesces() - before; got != 0 {
		t.Fatalf("%v quiesces over %d writes one tick apart, want none", got, writes)
	}
	if got := testutil.ToFloat64(r.s.m.RaftWakes) - wakes; got != 1 {
		t.Fatalf("the leader's group woke %v times over the writes, want once (the first)", got)
	}
	// Idle, it quiesces everywhere after QuiesceAfterTicks.
	n.tick(groups.QuiesceAfterTicks)
	if a := n.awake(1) + n.awake(2) + n.awake(3); a != 0 {
		t.Fatalf("%d groups awake %d ticks after the last write, want none", a, groups.QuiesceAfterTicks)
	}
	if got := quiesces() - before; got != 3 {
		t.Fatalf("%v quiesces once the writes stopped, want 3 (the leader and its two followers)", got)
	}
}
