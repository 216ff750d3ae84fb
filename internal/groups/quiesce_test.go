package groups_test

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/groups"
)

// A woken leader is ticked QuiesceAfterTicks before it may quiesce, and
// only while its owner is idle; a wake restarts the count.
func TestQuietTick(t *testing.T) {
	g := leader(t)
	live := func(uint64) bool { return true }
	send := func(*raftpb.Message) {}
	var q groups.Quiet
	for i := 1; i < groups.QuiesceAfterTicks; i++ {
		if q.Tick(g, true, live, send) {
			t.Fatalf("quiesced on tick %d after waking", i)
		}
	}
	if q.Tick(g, false, live, send) {
		t.Fatal("quiesced with work pending")
	}
	if !q.Tick(g, true, live, send) {
		t.Fatal("an idle lone leader did not quiesce")
	}
	q.Woke()
	if q.AwakeTicks() != 0 || q.Tick(g, true, live, send) {
		t.Fatal("a wake did not restart the count")
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
