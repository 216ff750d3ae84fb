package replica_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/parkway-io/parkway/internal/replica"
)

// electedCluster is a three-member cluster led by member 1, and the
// leader's term.
func electedCluster(t testing.TB) (*cluster, uint64) {
	c := newCluster(t, 3)
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if !c.members[1].IsLeader() {
		t.Fatal("member 1 did not win its election")
	}
	// Read the term off the leader's next append.
	if _, err := c.members[1].Propose([]byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := c.members[1].Handle(member{c, 1}); err != nil {
		t.Fatal(err)
	}
	var term uint64
	for _, m := range c.queue {
		if m.GetType() == raftpb.MsgApp {
			term = m.GetTerm()
		}
	}
	if term == 0 {
		t.Fatal("the leader sent no append")
	}
	c.settle()
	return c, term
}

func msg(typ raftpb.MessageType, from, to, term uint64) *raftpb.Message {
	return &raftpb.Message{Type: typ.Enum(), From: new(from), To: new(to), Term: new(term)}
}

func snapMsg(from, to, term, index, snapTerm uint64, cs *raftpb.ConfState) *raftpb.Message {
	m := msg(raftpb.MsgSnap, from, to, term)
	m.Snapshot = &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(index), Term: new(snapTerm), ConfState: cs}}
	return m
}

func entry(index, term uint64, typ raftpb.EntryType, data string) *raftpb.Entry {
	return &raftpb.Entry{Index: new(index), Term: new(term), Type: typ.Enum(), Data: []byte(data)}
}

// TestStepRefusesInvalidMessages steps messages no correct member sends —
// among them the forged snapshot whose voters make etcd raft panic in
// restore ("ConfStates not equivalent after sorting") — into a working
// group: each is refused with ErrInvalidMessage, the group is not failed,
// and it goes on replicating.
func TestStepRefusesInvalidMessages(t *testing.T) {
	c, term := electedCluster(t)
	withUnknown := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	withUnknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 77, protowire.VarintType), 5))
	voters := func(v ...uint64) *raftpb.ConfState { return &raftpb.ConfState{Voters: v} }
	app := func(index, logTerm uint64, ents ...*raftpb.Entry) *raftpb.Message {
		m := msg(raftpb.MsgApp, 1, 2, term)
		m.Index, m.LogTerm, m.Entries = new(index), new(logTerm), ents
		return m
	}
	cases := []struct {
		name string
		to   uint64 // member stepped
		m    *raftpb.Message
	}{
		{"snapshot with a voter listed twice", 2, snapMsg(1, 2, term+1, 100, term, voters(1, 1, 2))},
		{"snapshot with no voters", 2, snapMsg(1, 2, term, 100, term, voters())},
		{"snapshot without a conf state", 2, snapMsg(1, 2, term, 100, term, nil)},
		{"snapshot conf state with an unknown field", 2, snapMsg(1, 2, term, 100, term, withUnknown)},
		{"snapshot with a voter that is not a member", 2, snapMsg(1, 2, term, 100, term, voters(1, 2, 9))},
		{"snapshot with a learner that is a voter", 2, snapMsg(1, 2, term, 100, term, &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{3}})},
		{"snapshot with a learner listed twice", 2, snapMsg(1, 2, term, 100, term, &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3, 3}})},
		{"snapshot newer than its message", 2, snapMsg(1, 2, term, 100, term+1, voters(1, 2, 3))},
		{"snapshot at index 0", 2, snapMsg(1, 2, term, 0, term, voters(1, 2, 3))},
		{"snapshot message without a snapshot", 2, msg(raftpb.MsgSnap, 1, 2, term)},
		{"snapshot data the owner refuses", 2, func() *raftpb.Message {
			m := snapMsg(1, 2, term, 100, term, voters(1, 2, 3))
			m.Snapshot.Data = []byte{0xff}
			return m
		}()},
		{"heartbeat committing beyond the log", 2, func() *raftpb.Message {
			m := msg(raftpb.MsgHeartbeat, 1, 2, term)
			m.Commit = new(uint64(1000))
			return m
		}()},
		{"append with a gap", 2, app(3, term, entry(5, term, raftpb.EntryNormal, "envelope"))},
		{"append with a term going back", 2, app(3, term, entry(4, term-1, raftpb.EntryNormal, "envelope"))},
		{"append with an entry newer than its term", 2, app(3, term, entry(4, term+1, raftpb.EntryNormal, "envelope"))},
		{"append with a membership change", 2, app(3, term, entry(4, term, raftpb.EntryConfChange, "x"))},
		{"append with an entry shorter than its envelope", 2, app(3, term, entry(4, term, raftpb.EntryNormal, "abc"))},
		{"append with a log term beyond its term", 2, app(3, term+1)},
		{"append without a term", 2, func() *raftpb.Message { m := app(3, term); m.Term = nil; return m }()},
		{"append with a snapshot attached", 2, func() *raftpb.Message {
			m := app(3, term)
			m.Snapshot = &raftpb.Snapshot{}
			return m
		}()},
		{"term out of range", 2, msg(raftpb.MsgHeartbeat, 1, 2, 1<<63)},
		{"from a stranger", 2, msg(raftpb.MsgHeartbeat, 9, 2, term)},
		{"from itself", 2, msg(raftpb.MsgHeartbeat, 2, 2, term)},
		{"for another member", 2, msg(raftpb.MsgHeartbeat, 1, 3, term)},
		{"local message", 2, msg(raftpb.MsgHup, 1, 2, 0)},
		{"leadership transfer", 1, msg(raftpb.MsgTransferLeader, 2, 1, term)},
		{"forced election by a follower", 2, msg(raftpb.MsgTimeoutNow, 3, 2, term)},
		{"forced election at a later term", 2, msg(raftpb.MsgTimeoutNow, 1, 2, term+1)},
		{"proposal to a group that does not forward", 1, func() *raftpb.Message {
			m := msg(raftpb.MsgProp, 2, 1, 0)
			m.Entries = []*raftpb.Entry{entry(0, 0, raftpb.EntryNormal, "envelope+payload")}
			return m
		}()},
		{"read index without its context", 1, msg(raftpb.MsgReadIndex, 2, 1, 0)},
		{"read index with a term", 1, func() *raftpb.Message {
			m := msg(raftpb.MsgReadIndex, 2, 1, term)
			m.Entries = []*raftpb.Entry{{Data: []byte("ctx")}}
			return m
		}()},
		{"vote response with entries", 1, func() *raftpb.Message {
			m := msg(raftpb.MsgVoteResp, 2, 1, term)
			m.Entries = []*raftpb.Entry{entry(9, term, raftpb.EntryNormal, "")}
			return m
		}()},
		{"nil message", 2, nil},
	}
	for _, tc := range cases {
		g := c.members[tc.to]
		err := g.Step(tc.m)
		if !errors.Is(err, replica.ErrInvalidMessage) || errors.Is(err, replica.ErrGroupFailed) || g.Err() != nil {
			t.Errorf("%s: Step = %v (group: %v), want ErrInvalidMessage", tc.name, err, g.Err())
		}
	}
	c.settle()
	var want []string
	for i := range 3 {
		v := fmt.Sprintf("after%d", i)
		want = append(want, v)
		if _, err := c.members[1].Propose([]byte(v)); err != nil {
			t.Fatal(err)
		}
		c.settle()
	}
	for id := uint64(1); id <= 3; id++ {
		if got := c.applied[id]; !slices.Equal(got[len(got)-3:], want) {
			t.Fatalf("member %d applied %q after the invalid messages", id, got)
		}
	}
}

// TestForwardingGroupRefusesEmptyProposal: a group that forwards
// proposals takes MsgProp from a member, but not one without entries (raft
// panics on it as leader) or with an empty entry.
func TestForwardingGroupRefusesEmptyProposal(t *testing.T) {
	g, err := replica.New(replica.Config{Group: 1, Node: 1, Peers: []uint64{1, 2, 3}, ForwardProposals: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	empty := msg(raftpb.MsgProp, 2, 1, 0)
	blank := msg(raftpb.MsgProp, 2, 1, 0)
	blank.Entries = []*raftpb.Entry{{}}
	for _, m := range []*raftpb.Message{empty, blank} {
		if err := g.Step(m); !errors.Is(err, replica.ErrInvalidMessage) {
			t.Fatalf("Step(%v with %d entries) = %v, want ErrInvalidMessage", m.GetType(), len(m.GetEntries()), err)
		}
	}
	ok := msg(raftpb.MsgProp, 2, 1, 0)
	ok.Entries = []*raftpb.Entry{{Data: []byte("envelope+payload")}}
	if err := g.Step(ok); errors.Is(err, replica.ErrInvalidMessage) {
		t.Fatalf("a forwarded proposal was refused: %v", err)
	}
}

// TestPanicFailsOnlyItsGroup: a panic inside one member's Ready handling
// fails that member's group — a typed error wrapping the panic, returned
// by every later call — while the process and the other members go on.
func TestPanicFailsOnlyItsGroup(t *testing.T) {
	c, _ := electedCluster(t)
	c.boom[3] = "boom"
	for _, v := range []string{"a", "boom", "b"} {
		if _, err := c.members[1].Propose([]byte(v)); err != nil {
			t.Fatal(err)
		}
		c.settle()
	}
	err := c.failed[3]
	var pe *replica.PanicError
	if !errors.Is(err, replica.ErrGroupFailed) || !errors.As(err, &pe) || pe.Value != "the state machine cannot apply boom" || len(pe.Stack) == 0 {
		t.Fatalf("member 3 failed with %v, want ErrGroupFailed wrapping the panic", err)
	}
	g := c.members[3]
	if !errors.Is(g.Err(), replica.ErrGroupFailed) {
		t.Fatalf("Err = %v", g.Err())
	}
	_, perr := g.Propose([]byte("x"))
	for name, err := range map[string]error{
		"Step":      g.Step(msg(raftpb.MsgHeartbeat, 1, 3, 100)),
		"Tick":      g.Tick(),
		"Campaign":  g.Campaign(),
		"ReadIndex": g.ReadIndex([]byte("r")),
		"Propose":   perr,
		"Handle":    g.Handle(member{c, 3}),
		"Compact":   g.Compact(g.Applied(), nil),
	} {
		if !errors.Is(err, replica.ErrGroupFailed) {
			t.Errorf("%s on a failed group = %v, want ErrGroupFailed", name, err)
		}
	}
	if g.HasReady() || g.Leader() != 0 {
		t.Error("a failed group still reports work or a leader")
	}
	// Members 1 and 2 are a quorum and go on.
	if _, err := c.members[1].Propose([]byte("c")); err != nil {
		t.Fatal(err)
	}
	c.tick(3)
	for id := uint64(1); id <= 2; id++ {
		if got := c.applied[id]; !slices.Equal(got, []string{"first", "a", "boom", "b", "c"}) {
			t.Fatalf("member %d applied %q", id, got)
		}
	}
}

// TestTransferLeader: the leader hands leadership to a member it names;
// the member's election is forced by the leader's MsgTimeoutNow, which
// Step accepts from the leader in its term only.
func TestTransferLeader(t *testing.T) {
	c, _ := electedCluster(t)
	if err := c.members[1].TransferLeader(3); err != nil {
		t.Fatal(err)
	}
	c.settle()
	for id := uint64(1); id <= 3; id++ {
		if lead := c.members[id].Leader(); lead != 3 {
			t.Fatalf("member %d sees leader %d after the transfer, want 3", id, lead)
		}
	}
	if _, err := c.members[3].Propose([]byte("after")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	for id := uint64(1); id <= 3; id++ {
		if got := c.applied[id]; len(got) == 0 || got[len(got)-1] != "after" {
			t.Fatalf("member %d applied %q", id, got)
		}
	}
}

// A member of a Dynamic group that lags behind a membership change
// follows a leader its configuration does not name yet (a node added
// since): refusing it would leave the member behind for good. A static
// group still refuses strangers.
func TestDynamicMemberFollowsLeaderAddedSince(t *testing.T) {
	for _, dynamic := range []bool{true, false} {
		g, err := replica.New(replica.Config{Group: 1, Node: 1, Peers: []uint64{1, 2, 3}, Dynamic: dynamic})
		if err != nil {
			t.Fatal(err)
		}
		hb := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(4)), To: new(uint64(1)), Term: new(uint64(5))}
		err = g.Step(hb)
		switch {
		case dynamic && (err != nil || g.Leader() != 4):
			t.Fatalf("Dynamic member: Step of the new leader's heartbeat = %v, leader %d; want nil, 4", err, g.Leader())
		case !dynamic && !errors.Is(err, replica.ErrInvalidMessage):
			t.Fatalf("static member: Step of a stranger's heartbeat = %v, want ErrInvalidMessage", err)
		}
	}
}

// TestTermBoundedRelativeToTheReceiver pins issue 26's poison message: a
// heartbeat at term 2^62 (raft's cap) or 2^62−1 from a member used to be
// adopted and persisted, leaving the group unable to elect again. A term
// more than MaxTermStep ahead of the receiver's, or a snapshot more than
// MaxIndexStep beyond its log, is now refused with ErrOutOfReach,
// changing nothing; a term at the step is taken (a member far behind
// catches up), and the group goes on electing and applying.
func TestTermBoundedRelativeToTheReceiver(t *testing.T) {
	c, term := electedCluster(t)
	for _, bad := range []uint64{1 << 62, 1<<62 - 1, term + replica.MaxTermStep + 1} {
		for _, typ := range []raftpb.MessageType{raftpb.MsgHeartbeat, raftpb.MsgVote, raftpb.MsgPreVote} {
			err := c.members[2].Step(msg(typ, 1, 2, bad))
			if !errors.Is(err, replica.ErrOutOfReach) || !errors.Is(err, replica.ErrInvalidMessage) {
				t.Fatalf("%v at term %d: Step = %v, want ErrOutOfReach", typ, bad, err)
			}
		}
		snap := snapMsg(1, 2, bad, 100, term, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
		if err := c.members[2].Step(snap); !errors.Is(err, replica.ErrOutOfReach) {
			t.Fatalf("MsgSnap at term %d: Step = %v, want ErrOutOfReach", bad, err)
		}
	}
	for _, index := range []uint64{1<<62 - 1, 1 << 49} {
		snap := snapMsg(1, 2, term, index, term, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
		if err := c.members[2].Step(snap); !errors.Is(err, replica.ErrOutOfReach) {
			t.Fatalf("MsgSnap at index %d: Step = %v, want ErrOutOfReach", index, err)
		}
	}
	if got := c.members[2].Term(); got != term {
		t.Fatalf("member 2 at term %d after refused messages, want %d", got, term)
	}
	// The furthest jump a correct run could make is taken: member 2 moves
	// to it, the leader steps down on its answer, and the group elects
	// again above it.
	far := term + replica.MaxTermStep
	if err := c.members[2].Step(msg(raftpb.MsgHeartbeat, 3, 2, far)); err != nil {
		t.Fatalf("heartbeat at term+MaxTermStep: %v", err)
	}
	c.settle()
	if got := c.members[2].Term(); got != far {
		t.Fatalf("member 2 at term %d, want %d", got, far)
	}
	lead := uint64(0)
	for range 100 {
		c.tick(1)
		if lead = c.leaderAmong(1, 2, 3); lead != 0 && c.members[lead].Term() > far {
			break
		}
	}
	if lead == 0 || c.members[lead].Term() <= far {
		t.Fatalf("no leader elected above term %d (leader %d)", far, lead)
	}
	if _, err := c.members[lead].Propose([]byte("after")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	for id := uint64(1); id <= 3; id++ {
		if got := c.applied[id]; len(got) == 0 || got[len(got)-1] != "after" {
			t.Fatalf("member %d applied %q", id, got)
		}
	}

	// A member that starts empty (term 0) learns a term up to the step
	// from its first heartbeat.
	g, err := replica.New(replica.Config{Group: 1, Node: 2, Peers: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Step(snapMsg(1, 2, 5, replica.MaxIndexStep, 5, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})); errors.Is(err, replica.ErrInvalidMessage) {
		t.Fatalf("a fresh member refused a snapshot within the index step: %v", err)
	}
	if err := g.Step(msg(raftpb.MsgHeartbeat, 1, 2, g.Term()+replica.MaxTermStep)); err != nil {
		t.Fatalf("a fresh member refused a heartbeat within the step: %v", err)
	}
}
