package groups_test

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/groups"
)

// A woken leader is ticked QuiesceAfterTicks before it may quiesce, and
// only while its owner is idle; quiescing takes it out of the awake set
// and sends the quiesce heartbeats; a wake restarts the count; a group
// that is not awake is not counted.
func TestAwakeQuiesce(t *testing.T) {
	g := leader(t)
	live := func(uint64) bool { return true }
	sent := 0
	send := func(*raftpb.Message) { sent++ }
	var a groups.Awake[int, string]
	if a.Quiesce(1, g, true, live, send) || a.Ticks(1) != 0 {
		t.Fatal("a group that is not awake was counted")
	}
	a.Add(1, "g")
	for i := 1; i < groups.QuiesceAfterTicks; i++ {
		if a.Quiesce(1, g, true, live, send) {
			t.Fatalf("quiesced on tick %d after waking", i)
		}
	}
	if a.Quiesce(1, g, false, live, send) {
		t.Fatal("quiesced with work pending")
	}
	if a.Ticks(1) != groups.QuiesceAfterTicks {
		t.Fatalf("%d ticks counted, want %d", a.Ticks(1), groups.QuiesceAfterTicks)
	}
	if !a.Quiesce(1, g, true, live, send) {
		t.Fatal("an idle lone leader did not quiesce")
	}
	if a.Has(1, "g") || a.Len() != 0 {
		t.Fatal("a quiesced group is still awake")
	}
	a.Add(1, "g")
	if a.Ticks(1) != 0 || a.Quiesce(1, g, true, live, send) {
		t.Fatal("a wake did not restart the count")
	}
}

// Busy restarts an awake group's count, so it quiesces only
// QuiesceAfterTicks after its last proposal; it leaves a group that is not
// awake asleep.
func TestAwakeBusyRestartsTheCount(t *testing.T) {
	g := leader(t)
	live := func(uint64) bool { return true }
	send := func(*raftpb.Message) {}
	var a groups.Awake[int, string]
	a.Busy(1)
	if a.Has(1, "g") || a.Len() != 0 {
		t.Fatal("Busy woke a group")
	}
	a.Add(1, "g")
	for i := range 3 * groups.QuiesceAfterTicks {
		a.Busy(1)
		if a.Quiesce(1, g, true, live, send) {
			t.Fatalf("quiesced on tick %d with a proposal before each", i)
		}
	}
	// The last tick above was the first since the last proposal.
	for i := 2; i < groups.QuiesceAfterTicks; i++ {
		if a.Quiesce(1, g, true, live, send) {
			t.Fatalf("quiesced %d ticks after the last proposal", i)
		}
	}
	if !a.Quiesce(1, g, true, live, send) {
		t.Fatalf("did not quiesce %d ticks after the last proposal", groups.QuiesceAfterTicks)
	}
}

// Only a quiesce heartbeat is taken by StepQuiesce; anything else is left
// for the caller to step, untouched.
func TestStepQuiesceLeavesOtherMessages(t *testing.T) {
	g := leader(t)
	m := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1))}
	if groups.StepQuiesce(g, m, true) {
		t.Fatal("an ordinary heartbeat quiesced the group")
	}
	if m.GetType() != raftpb.MsgHeartbeat || m.GetFrom() != 2 {
		t.Fatalf("message changed: %v", m)
	}
}
