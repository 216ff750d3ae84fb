package groups

import (
	"slices"

	"github.com/parkway-io/parkway/internal/replica"
)

// Membership changes. The owner decides which members a group should
// have (a partition's replicas, from the metadata; the metadata group's
// nodes, from its store); its leader takes the group there one raft
// configuration change at a time, as a pure function of the group's
// configuration (NextChange), re-run on ticks: a lost proposal, a leader
// change or a restart is picked up where the configuration says it
// stands.
//
//  1. A newcomer joins as a learner (behaviour 31): it receives the log,
//     and a snapshot naming it, but votes in no election and counts in
//     no quorum, so a group of three that is moving a replica tolerates
//     one failure throughout, however long the newcomer takes.
//  2. It is promoted to voter only once it is whole: caught up with the
//     leader (CaughtUp: its log reaches the leader's snapshot and commit
//     index, and it is replicated to normally) and, by the owner's
//     judgement, holding its application state whole and synced (a
//     partition log fetched beside the raft log; nothing more for the
//     metadata group, whose state is all in its raft log and snapshot).
//     Learners are promoted in the order they become whole: one that
//     never catches up (its node is cut off) holds no other back.
//  3. Then each member that should go is removed. The owner hands
//     leadership to a staying voter first when it is itself leaving.
//
// Every step is a single-member change, so any quorum of the
// configuration before a step intersects any quorum of the one after it.

// ChangeKind is what NextChange asks of the leader.
type ChangeKind uint8

const (
	// ChangeDone: the voters are the target, and no learner is left.
	ChangeDone ChangeKind = iota
	// ChangeAddLearner: propose Node as a learner.
	ChangeAddLearner
	// ChangeWait: the learner Node is not whole yet; nothing to propose.
	ChangeWait
	// ChangePromote: propose the learner Node as a voter.
	ChangePromote
	// ChangeRemove: propose removing Node, a voter not in the target or
	// a learner no longer wanted. The owner checks what it must before
	// (that every newcomer is whole), and hands leadership away first
	// when Node is itself.
	ChangeRemove
)

// String names the kind, for logs.
func (k ChangeKind) String() string {
	switch k {
	case ChangeDone:
		return "done"
	case ChangeAddLearner:
		return "add learner"
	case ChangeWait:
		return "wait"
	case ChangePromote:
		return "promote"
	case ChangeRemove:
		return "remove"
	}
	return "unknown"
}

// Change is the next configuration change of a group.
type Change struct {
	Kind ChangeKind
	Node uint64
}

// NextChange is the next change that takes g, which this node leads, to
// the voters target: learners are added first, each promoted once whole
// reports it whole (CaughtUp and the owner's own judgement; the first
// whole one in target's order, ChangeWait naming the first learner when
// none is), and only then are members outside target removed.
func NextChange(g *replica.Group, target []uint64, whole func(node uint64) bool) Change {
	voters, learners := g.Voters(), g.Learners()
	for _, n := range target {
		if !slices.Contains(voters, n) && !slices.Contains(learners, n) {
			return Change{ChangeAddLearner, n}
		}
	}
	var wait uint64
	for _, n := range target {
		if slices.Contains(learners, n) {
			if whole(n) {
				return Change{ChangePromote, n}
			}
			if wait == 0 {
				wait = n
			}
		}
	}
	if wait != 0 {
		return Change{ChangeWait, wait}
	}
	for _, n := range learners {
		if !slices.Contains(target, n) {
			return Change{ChangeRemove, n}
		}
	}
	for _, n := range voters {
		if !slices.Contains(target, n) {
			return Change{ChangeRemove, n}
		}
	}
	return Change{Kind: ChangeDone}
}

// CaughtUp reports, on g's leader, whether node's raft log is caught up:
// it holds the leader's latest snapshot and every entry up to the
// leader's commit index, and the leader replicates to it normally. A
// learner that is caught up may be promoted without a quorum that waits
// on it.
func CaughtUp(g *replica.Group, node uint64) bool {
	return g.Caught(node) && g.Match(node) >= g.Committed()
}

// ChangeRetryTicks is how long a leader gives a configuration change it
// proposed (or the step its owner took for one: a leadership transfer, a
// settle) to show before it proposes it again: raft drops a change
// proposed while another is in flight, and a proposal can be lost with a
// message or a leader.
const ChangeRetryTicks = 20

// ChangePace is one group's pace of configuration changes: after the
// leader proposed a step it waits ChangeRetryTicks of its ticks for the
// step to show before it takes the next (or the same again). The zero
// value waits for nothing.
type ChangePace struct{ wait int }

// Proposed starts the wait after a step was proposed.
func (p *ChangePace) Proposed() { p.wait = ChangeRetryTicks }

// Reset ends the wait: a change applied (the next step may start at
// once), or this member no longer leads.
func (p *ChangePace) Reset() { p.wait = 0 }

// Wait counts a tick and reports whether the leader is still waiting for
// its last step to show (no step to take on this tick).
func (p *ChangePace) Wait() bool {
	if p.wait > 0 {
		p.wait--
		return true
	}
	return false
}

// Propose proposes c, a change NextChange gave, to g: a learner added,
// a learner promoted, a member removed, carrying data (the command the
// owner records the change with, or nil). ChangeDone and ChangeWait
// propose nothing. An error is raft's refusal (no leader, a change in
// flight): the owner proposes again after its pace's wait.
func Propose(g *replica.Group, c Change, data []byte) error {
	switch c.Kind {
	case ChangeAddLearner:
		return g.ProposeLearner(c.Node, data)
	case ChangePromote:
		return g.ProposeConfChange(true, c.Node, data)
	case ChangeRemove:
		return g.ProposeConfChange(false, c.Node, data)
	}
	return nil
}
