package replica

import (
	"errors"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestGuardContainsRaftPanic steps the forged snapshot of issue 13 — a
// 65-byte message whose voters do not survive raft's own round trip —
// straight into raft, past the validation, under the guard every Group
// call runs with: raft does panic on it, and the guard turns the panic
// into the group's failure instead of a crashed process.
func TestGuardContainsRaftPanic(t *testing.T) {
	g, err := New(Config{Group: 5, Node: 2, Peers: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m := &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(5)),
		Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(100)), Term: new(uint64(5)),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 1, 2}}}}}
	if err := g.checkMessage(m, g.Term()); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("checkMessage = %v, want ErrInvalidMessage", err)
	}
	step := func() (err error) {
		defer g.guard(&err)
		return g.rn.Step(m)
	}
	err = step()
	var pe *PanicError
	if !errors.Is(err, ErrGroupFailed) || !errors.As(err, &pe) || !strings.Contains(err.Error(), "ConfStates not equivalent") {
		t.Fatalf("stepping the forged snapshot into raft = %v, want ErrGroupFailed wrapping raft's panic", err)
	}
	if err := g.Step(&raftpb.Message{}); !errors.Is(err, ErrGroupFailed) {
		t.Fatalf("Step after the failure = %v, want ErrGroupFailed", err)
	}
}
