package replica_test

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// sentTypes returns the types of the messages sent since the sent list's
// index from.
func (c *cluster) sentTypes(from int) []raftpb.MessageType {
	var types []raftpb.MessageType
	for _, m := range c.sent[from:] {
		types = append(types, m.GetType())
	}
	return types
}

// A new group's first campaign (term 1: no election ever held) asks for
// votes at once, without the pre-vote round: its leader is elected in one
// round trip, with no tick.
func TestFirstCampaignSkipsPreVote(t *testing.T) {
	c := newCluster(t, 3)
	c.settle()
	from := len(c.sent)
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	// Deliver round by round: the votes, then their answers.
	rounds := 0
	for ; rounds < 10 && !c.members[1].IsLeader(); rounds++ {
		if g := c.members[1]; g.HasReady() {
			if err := g.Handle(member{c, 1}); err != nil {
				t.Fatal(err)
			}
		}
		q := c.queue
		c.queue = nil
		for _, m := range q {
			if err := c.members[m.GetTo()].Step(m); err != nil {
				t.Fatal(err)
			}
		}
		for id := uint64(2); id <= 3; id++ {
			if g := c.members[id]; g.HasReady() {
				if err := g.Handle(member{c, id}); err != nil {
					t.Fatal(err)
				}
			}
		}
		q = c.queue
		c.queue = nil
		for _, m := range q {
			if err := c.members[m.GetTo()].Step(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !c.members[1].IsLeader() || rounds != 1 {
		t.Fatalf("leader after %d round trips (leader: %v), want 1", rounds, c.members[1].IsLeader())
	}
	for _, typ := range c.sentTypes(from) {
		if typ == raftpb.MessageType_MsgPreVote {
			t.Fatalf("the first campaign sent a pre-vote: %v", c.sentTypes(from))
		}
	}
	if term := c.members[1].Term(); term != 2 {
		t.Fatalf("first leader at term %d, want 2", term)
	}
}

// A member that has seen an election campaigns through pre-vote as
// before: after a leader change, a campaign's first messages are
// pre-votes.
func TestLaterCampaignUsesPreVote(t *testing.T) {
	c := newCluster(t, 3)
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	from := len(c.sent)
	if err := c.members[2].Campaign(); err != nil {
		t.Fatal(err)
	}
	types := c.sentTypes(from)
	if len(types) == 0 {
		c.settle()
		types = c.sentTypes(from)
	}
	if len(types) == 0 || types[0] != raftpb.MessageType_MsgPreVote {
		t.Fatalf("a member at term %d campaigned with %v, want pre-votes first", c.members[2].Term(), types)
	}
}

// The first campaign of a member that missed the group's first election
// (its replica was built late, after the others elected a leader) deposes
// no one: its vote is at term 2, the leader's term at least, so the
// leader keeps leading in its term and the late member follows it.
func TestLateFirstCampaignDisruptsNoLeader(t *testing.T) {
	c := newCluster(t, 3)
	c.cut[1] = true // member 1 misses the first election
	c.settle()
	if err := c.members[2].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if !c.members[2].IsLeader() {
		t.Fatal("member 2 did not win")
	}
	if _, err := c.members[2].Propose([]byte("a")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	term := c.members[2].Term()
	c.cut[1] = false
	if c.members[1].Term() != 1 {
		t.Fatalf("the late member is at term %d, want 1", c.members[1].Term())
	}
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	c.tick(3) // heartbeats reach the late member
	if !c.members[2].IsLeader() || c.members[2].Term() != term {
		t.Fatalf("leader 2 at term %d deposed: leads %v at term %d", term, c.members[2].IsLeader(), c.members[2].Term())
	}
	if c.leaders[1] != 2 {
		t.Fatalf("the late member follows %d, want 2", c.leaders[1])
	}
	if got := c.applied[1]; len(got) != 1 || got[0] != "a" {
		t.Fatalf("the late member applied %q", got)
	}
}
