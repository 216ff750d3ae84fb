package replica_test

import (
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/vfs"
)

// quiesceAll quiesces c's leader 1 and has every follower take its
// quiesce heartbeat.
func quiesceAll(t *testing.T, c *cluster) {
	t.Helper()
	if !c.members[1].CanQuiesce(allLive) {
		t.Fatal("the leader cannot quiesce")
	}
	for _, m := range c.members[1].QuiesceMessages() {
		if !c.members[m.GetTo()].AcceptQuiesce(m) {
			t.Fatalf("member %d refused the quiesce heartbeat", m.GetTo())
		}
	}
}

// hibernate hibernates member id of c, which must take it.
func hibernate(t *testing.T, c *cluster, id uint64) {
	t.Helper()
	if !c.members[id].Hibernate() || !c.members[id].Hibernating() {
		t.Fatalf("member %d did not hibernate", id)
	}
}

// A quiesced follower drops its raft node and answers from what it kept
// (leader, term, commit, voters, a matching quiesce heartbeat) without
// rebuilding it; the leader keeps its node. An append rebuilds it, and
// the member applies and acknowledges as before.
func TestHibernatedFollowerWakesOnAppend(t *testing.T) {
	c := elected(t, 2)
	quiesceAll(t, c)
	if c.members[1].Hibernate() {
		t.Fatal("the leader hibernated")
	}
	f := c.members[2]
	term, commit := f.Term(), f.Committed()
	hibernate(t, c, 2)
	if f.Leader() != 1 || f.Term() != term || f.Committed() != commit || f.HasReady() || f.IsLeader() {
		t.Fatalf("hibernating: leader %d term %d commit %d ready %v, want 1, %d, %d, false", f.Leader(), f.Term(), f.Committed(), f.HasReady(), term, commit)
	}
	if v := f.AppliedVoters(); len(v) != 3 {
		t.Fatalf("hibernating: applied voters %v", v)
	}
	for _, m := range c.members[1].QuiesceMessages() {
		if m.GetTo() == 2 && !f.AcceptQuiesce(m) {
			t.Fatal("the hibernating follower refused a matching quiesce heartbeat")
		}
	}
	if !f.Hibernating() {
		t.Fatal("answering from its kept state woke the follower")
	}

	if _, err := c.members[1].Propose([]byte("after")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if f.Hibernating() {
		t.Fatal("an append left the follower hibernating")
	}
	if got := c.applied[2]; len(got) != 3 || got[2] != "after" {
		t.Fatalf("member 2 applied %v", got)
	}
	if !c.members[1].CanQuiesce(allLive) {
		t.Fatal("the woken follower did not acknowledge the append")
	}
}

// The lease a woken follower keeps is its leader's: a hibernated
// follower, woken by a member's campaign after the leader died, refuses
// it as a follower that only quiesced does, inside the lease. (A rebuilt
// raft node knows no leader until it is told one.)
func TestWokenFollowerKeepsTheLeadersLease(t *testing.T) {
	c := elected(t, 2)
	quiesceAll(t, c)
	hibernate(t, c, 2)
	c.cut[1] = true
	if err := c.members[3].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle() // no tick: no lease runs out
	if c.members[2].Hibernating() {
		t.Fatal("a pre-vote left the follower hibernating")
	}
	if c.members[3].IsLeader() || c.members[2].Leader() != 1 {
		t.Fatalf("member 3 leads: %v; member 2 follows %d, want 1 (inside its lease)", c.members[3].IsLeader(), c.members[2].Leader())
	}
}

// A woken follower's lease of its dead leader ends when the dropped
// node's would have: its election clock counts the ticks since the
// leader last spoke. Followers 2 and 3 quiesce 4 ticks after the leader's
// last heartbeat (ticked before it too) (a quiesce heartbeat is not stepped: it restarts no
// clock); 2 hibernates, 3 only quiesces. The restarted leader asks each
// for a pre-vote every tick: both grant it first at the same tick, the
// one the lease ends at (the election timeout, 10, less the 4).
func TestWokenFollowerLeaseEndsAsTheDroppedNodes(t *testing.T) {
	const quiet, timeout = 4, replica.DefaultElectionTicks
	c := elected(t, 2)
	c.tick(3) // the followers count ticks, and the leader's heartbeats restart their clocks
	for range quiet {
		for _, id := range []uint64{2, 3} {
			if err := c.members[id].Tick(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c.members[2].HasReady() || c.members[3].HasReady() {
		t.Fatal("a follower's ticks made work")
	}
	quiesceAll(t, c)
	hibernate(t, c, 2)

	// The leader restarted: it knows no leader and stands through
	// pre-vote, with the log every member holds.
	lead := c.members[1]
	last := lead.Committed()
	preVote := func(to uint64) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MsgPreVote.Enum(), From: new(uint64(1)), To: new(to),
			Term: new(lead.Term() + 1), Index: new(last), LogTerm: new(lead.Term())}
	}
	granted := map[uint64]int{}
	for tick := 0; tick <= timeout && len(granted) < 2; tick++ {
		for _, id := range []uint64{2, 3} {
			g := c.members[id]
			if tick > 0 {
				if err := g.Tick(); err != nil {
					t.Fatal(err)
				}
			}
			if err := g.Step(preVote(id)); err != nil {
				t.Fatal(err)
			}
			if err := g.Handle(member{c, id}); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range c.queue {
			if m.GetType() == raftpb.MsgPreVoteResp && !m.GetReject() && m.GetTo() == 1 {
				if _, ok := granted[m.GetFrom()]; !ok {
					granted[m.GetFrom()] = tick
				}
			}
		}
		c.queue = nil
	}
	if granted[3] != timeout-quiet {
		t.Fatalf("the quiesced follower granted the pre-vote at tick %d, want %d (%v)", granted[3], timeout-quiet, granted)
	}
	if g, ok := granted[2]; !ok || g != granted[3] {
		t.Fatalf("the woken follower granted the pre-vote at tick %d (ok %v), the quiesced one at %d", g, ok, granted[3])
	}
}

// A member reopened from its raft log follows the leader it followed
// before (Followed, then Follow): raft restarts it knowing no leader, and
// its leader, quiesced, would send it nothing. The leader's heartbeat in
// the stored term is stepped into it, and its answer goes out to the
// leader, which it wakes. A leader of another term than the stored one,
// or the member itself, is not followed.
func TestReopenedMemberFollowsItsLeader(t *testing.T) {
	c := newClusterOn(t, 3, vfs.NewMem())
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if _, err := c.members[1].Propose([]byte("m0")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	quiesceAll(t, c)
	lead, term := c.members[2].Followed()
	if lead != 1 || term == 0 {
		t.Fatalf("member 2 followed %d in term %d, want 1", lead, term)
	}
	if err := c.members[2].Close(); err != nil {
		t.Fatal(err)
	}
	c.start(2, 3)
	c.settle() // it applies what it committed; nothing else moves
	f := c.members[2]
	if f.Leader() != 0 {
		t.Fatalf("reopened member knows leader %d", f.Leader())
	}
	for _, bad := range [][2]uint64{{1, term + 1}, {1, term - 1}, {2, term}, {0, term}, {9, term}} {
		if err := f.Follow(bad[0], bad[1]); err != nil {
			t.Fatal(err)
		}
		if f.Leader() != 0 || f.HasReady() {
			t.Fatalf("Follow(%d, %d): leader %d, ready %v; want nothing done", bad[0], bad[1], f.Leader(), f.HasReady())
		}
	}
	var answers []*raftpb.Message
	c.onSend = func(from uint64, m *raftpb.Message) {
		if from == 2 {
			answers = append(answers, m)
		}
	}
	if err := f.Follow(lead, term); err != nil {
		t.Fatal(err)
	}
	if f.Leader() != 1 {
		t.Fatalf("after Follow the member knows leader %d, want 1", f.Leader())
	}
	c.settle()
	if len(answers) != 1 || answers[0].GetType() != raftpb.MsgHeartbeatResp || answers[0].GetTo() != 1 || answers[0].GetTerm() != term {
		t.Fatalf("the reopened member sent %v, want its heartbeat answer to 1 in term %d", answers, term)
	}
	if got := c.applied[2]; !slices.Equal(got, []string{"m0"}) {
		t.Fatalf("reopened member applied %q, want [m0]", got)
	}
	// Called again while it follows 1 in that term, it answers again (its
	// owner repeats it in case the answer was lost); for another leader
	// it does nothing.
	answers = nil
	if err := f.Follow(3, term); err != nil {
		t.Fatal(err)
	}
	if f.HasReady() {
		t.Fatal("Follow of another leader than the one followed made the member ready")
	}
	if err := f.Follow(lead, term); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if len(answers) != 1 || answers[0].GetType() != raftpb.MsgHeartbeatResp || answers[0].GetTo() != 1 || answers[0].GetTerm() != term {
		t.Fatalf("Follow repeated sent %v, want the heartbeat answer to 1 in term %d again", answers, term)
	}
}
