package groups_test

import (
	"testing"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
)

// dynamicLeader is a lone voter, node 1, that leads a group whose members
// may change.
func dynamicLeader(t *testing.T) *replica.Group {
	t.Helper()
	g, err := replica.New(replica.Config{Group: 1, Node: 1, Peers: []uint64{1}, Dynamic: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	if err := g.Campaign(); err != nil {
		t.Fatal(err)
	}
	handle(t, g)
	if !g.IsLeader() {
		t.Fatal("a lone voter that campaigned does not lead")
	}
	return g
}

// NextChange adds a newcomer as a learner, waits until it is whole,
// promotes it, and only then removes what the target no longer holds.
func TestNextChangeLearnerFirst(t *testing.T) {
	g := dynamicLeader(t)
	no := func(uint64) bool { return false }
	yes := func(uint64) bool { return true }
	want := func(got, want groups.Change) {
		t.Helper()
		if got != want {
			t.Fatalf("NextChange = %+v, want %+v (voters %v, learners %v)", got, want, g.Voters(), g.Learners())
		}
	}
	want(groups.NextChange(g, []uint64{1}, yes), groups.Change{Kind: groups.ChangeDone})
	// Move the group from node 1 to node 2.
	target := []uint64{2}
	want(groups.NextChange(g, target, yes), groups.Change{Kind: groups.ChangeAddLearner, Node: 2})
	if err := g.ProposeLearner(2, nil); err != nil {
		t.Fatal(err)
	}
	handle(t, g)
	want(groups.NextChange(g, target, no), groups.Change{Kind: groups.ChangeWait, Node: 2})
	want(groups.NextChange(g, target, yes), groups.Change{Kind: groups.ChangePromote, Node: 2})
	// A learner no longer wanted is removed, once the wanted are voters.
	want(groups.NextChange(g, []uint64{1}, yes), groups.Change{Kind: groups.ChangeRemove, Node: 2})
	if err := g.ProposeConfChange(true, 2, nil); err != nil {
		t.Fatal(err)
	}
	handle(t, g)
	if len(g.Learners()) != 0 || len(g.Voters()) != 2 {
		t.Fatalf("after the promotion: voters %v, learners %v", g.Voters(), g.Learners())
	}
	want(groups.NextChange(g, target, no), groups.Change{Kind: groups.ChangeRemove, Node: 1})
}

// A learner the leader has heard nothing from is not caught up.
func TestCaughtUpNeedsTheLearnersAnswer(t *testing.T) {
	g := dynamicLeader(t)
	if err := g.ProposeLearner(2, nil); err != nil {
		t.Fatal(err)
	}
	handle(t, g)
	if groups.CaughtUp(g, 2) {
		t.Fatal("a silent learner is caught up")
	}
	if !groups.CaughtUp(g, 1) {
		t.Fatal("the leader itself is not caught up")
	}
}

// A learner that never becomes whole (its node is cut off) holds no other
// back: the first whole learner is promoted, and the wait names the first
// learner only when none is whole.
func TestNextChangePromotesAnyWholeLearner(t *testing.T) {
	g := dynamicLeader(t)
	for _, n := range []uint64{2, 3} {
		if err := g.ProposeLearner(n, nil); err != nil {
			t.Fatal(err)
		}
		handle(t, g)
	}
	target := []uint64{1, 2, 3}
	if got, want := groups.NextChange(g, target, func(n uint64) bool { return n == 3 }), (groups.Change{Kind: groups.ChangePromote, Node: 3}); got != want {
		t.Fatalf("learner 2 stuck, learner 3 whole: NextChange = %+v, want %+v", got, want)
	}
	if got, want := groups.NextChange(g, target, func(uint64) bool { return false }), (groups.Change{Kind: groups.ChangeWait, Node: 2}); got != want {
		t.Fatalf("no learner whole: NextChange = %+v, want %+v", got, want)
	}
}

// Propose carries out each change NextChange names: the learner added,
// promoted, then removed, each with the data given; ChangeWait and
// ChangeDone propose nothing.
func TestProposeChange(t *testing.T) {
	g := dynamicLeader(t)
	step := func(c groups.Change, voters, learners int) {
		t.Helper()
		if err := groups.Propose(g, c, nil); err != nil {
			t.Fatalf("Propose(%v %d): %v", c.Kind, c.Node, err)
		}
		handle(t, g)
		if len(g.Voters()) != voters || len(g.Learners()) != learners {
			t.Fatalf("after %v %d: voters %v, learners %v; want %d and %d", c.Kind, c.Node, g.Voters(), g.Learners(), voters, learners)
		}
	}
	// Node 1 is the lone voter, whose log commits alone, until the
	// promotion.
	step(groups.Change{Kind: groups.ChangeAddLearner, Node: 2}, 1, 1)
	step(groups.Change{Kind: groups.ChangeAddLearner, Node: 3}, 1, 2)
	step(groups.Change{Kind: groups.ChangeWait, Node: 2}, 1, 2)
	step(groups.Change{Kind: groups.ChangeRemove, Node: 3}, 1, 1)
	step(groups.Change{Kind: groups.ChangePromote, Node: 2}, 2, 0)
	step(groups.Change{Kind: groups.ChangeDone}, 2, 0)
}

// A proposed step is given ChangeRetryTicks ticks to show; Reset ends the
// wait at once.
func TestChangePace(t *testing.T) {
	var p groups.ChangePace
	if p.Wait() {
		t.Fatal("the zero pace waits")
	}
	p.Proposed()
	for i := range groups.ChangeRetryTicks {
		if !p.Wait() {
			t.Fatalf("tick %d after a proposal: no longer waiting, want %d ticks", i+1, groups.ChangeRetryTicks)
		}
	}
	if p.Wait() {
		t.Fatal("still waiting past ChangeRetryTicks")
	}
	p.Proposed()
	p.Reset()
	if p.Wait() {
		t.Fatal("waiting after Reset")
	}
}
