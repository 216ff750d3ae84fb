package replica_test

import (
	"fmt"
	"testing"

	"github.com/parkway-io/parkway/internal/replica"
)

func allLive(uint64) bool { return true }

// elected is a 3-member cluster led by member 1 with n entries applied
// everywhere.
func elected(t *testing.T, n int) *cluster {
	t.Helper()
	c := newCluster(t, 3)
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	for i := range n {
		if _, err := c.members[1].Propose(fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.settle()
	return c
}

// A leader whose followers hold its whole log, committed and applied, may
// quiesce; its quiesce heartbeats are taken by followers in that state and
// refused by one whose state differs.
func TestQuiesceWhenCaughtUp(t *testing.T) {
	c := elected(t, 3)
	lead := c.members[1]
	if !lead.CanQuiesce(allLive) {
		t.Fatal("a caught-up leader cannot quiesce")
	}
	if c.members[2].CanQuiesce(allLive) {
		t.Fatal("a follower can quiesce on its own")
	}
	old := lead.QuiesceMessages()
	if len(old) != 2 {
		t.Fatalf("%d quiesce heartbeats, want one per follower", len(old))
	}
	for _, m := range old {
		if !replica.IsQuiesce(m) {
			t.Fatalf("%v is not a quiesce heartbeat", m)
		}
		if !c.members[m.GetTo()].AcceptQuiesce(m) {
			t.Fatalf("caught-up member %d refused the quiesce heartbeat", m.GetTo())
		}
	}
	if c.members[1].AcceptQuiesce(old[0]) {
		t.Fatal("the leader took a quiesce heartbeat addressed elsewhere")
	}

	// A proposal in flight: no quiescing until it is everywhere.
	if _, err := lead.Propose([]byte("m3")); err != nil {
		t.Fatal(err)
	}
	if lead.CanQuiesce(allLive) {
		t.Fatal("a leader with an unsent proposal can quiesce")
	}
	c.settle()
	if !lead.CanQuiesce(allLive) {
		t.Fatal("the leader cannot quiesce once the proposal is applied everywhere")
	}
	// The earlier heartbeats carry an older commit: refused now.
	for _, m := range old {
		if c.members[m.GetTo()].AcceptQuiesce(m) {
			t.Fatalf("member %d took a quiesce heartbeat behind its log", m.GetTo())
		}
		// Refused, it is the ordinary heartbeat it stands for.
		replica.StripQuiesce(m)
		if replica.IsQuiesce(m) {
			t.Fatal("StripQuiesce left the mark")
		}
		if err := c.members[m.GetTo()].Step(m); err != nil {
			t.Fatalf("member %d refused the stripped heartbeat: %v", m.GetTo(), err)
		}
	}
	c.settle()
}

// A follower that lags keeps the leader awake while it is live; one that
// node liveness reports dead is not waited for, and gets no quiesce
// heartbeat (whose commit it could not take).
func TestQuiesceWaitsForLiveFollowers(t *testing.T) {
	c := elected(t, 1)
	c.cut[3] = true
	if _, err := c.members[1].Propose([]byte("while 3 is away")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	lead := c.members[1]
	if lead.CanQuiesce(allLive) {
		t.Fatal("the leader can quiesce while a live follower lags")
	}
	if !lead.CanQuiesce(func(id uint64) bool { return id != 3 }) {
		t.Fatal("the leader waits for a dead follower")
	}
	msgs := lead.QuiesceMessages()
	if len(msgs) != 1 || msgs[0].GetTo() != 2 {
		t.Fatalf("quiesce heartbeats %v, want one to member 2 only", msgs)
	}
}

// Node liveness reports the leader dead: followers that forget it grant a
// campaigner's pre-vote at once, with no election timeout; followers that
// still believe in it (in their lease) do not.
func TestForgetLeaderElectsWithoutTimeout(t *testing.T) {
	for _, forget := range []bool{true, false} {
		t.Run(fmt.Sprintf("forget=%v", forget), func(t *testing.T) {
			c := elected(t, 2)
			c.cut[1] = true
			if forget {
				for _, id := range []uint64{2, 3} {
					if err := c.members[id].ForgetLeader(); err != nil {
						t.Fatal(err)
					}
				}
				c.settle()
				if c.leaders[2] != 0 || c.leaders[3] != 0 {
					t.Fatalf("leaders after forgetting: %d, %d", c.leaders[2], c.leaders[3])
				}
			}
			if err := c.members[2].Campaign(); err != nil {
				t.Fatal(err)
			}
			c.settle() // no tick: no election timeout passes
			if got := c.members[2].IsLeader(); got != forget {
				t.Fatalf("member 2 leads: %v, want %v", got, forget)
			}
		})
	}
}

// Match is the leader's view of how far a member's log reaches: it rises
// with what the member acknowledges, stops while the member is cut off,
// and is 0 on a follower.
func TestMatchFollowsAcknowledgements(t *testing.T) {
	c := elected(t, 3)
	lead := c.members[1]
	m2, m3 := lead.Match(2), lead.Match(3)
	if m2 == 0 || m2 != m3 || m2 != lead.Applied() {
		t.Fatalf("match %d and %d, leader applied %d", m2, m3, lead.Applied())
	}
	if got := c.members[2].Match(3); got != 0 {
		t.Fatalf("a follower reports match %d", got)
	}
	c.cut[3] = true
	if _, err := lead.Propose([]byte("more")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if lead.Match(2) <= m2 || lead.Match(3) != m3 {
		t.Fatalf("after a proposal with 3 cut off: match %d (was %d) and %d (was %d)", lead.Match(2), m2, lead.Match(3), m3)
	}
}
