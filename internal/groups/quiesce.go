package groups

import (
	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/replica"
)

// Quiescence, after CockroachDB's quiesced ranges: a group with nothing
// to do is not ticked, so an idle node sends no heartbeats and runs no
// election timers, whatever the number of groups it holds.
//
//   - The leader quiesces on a tick once every live follower has
//     acknowledged its whole log, everything is committed and applied,
//     and its owner has nothing pending on the group (Quiet.Tick): it
//     sends each follower a quiesce heartbeat instead of ticking.
//   - A follower quiesces when a quiesce heartbeat matches its state
//     exactly (StepQuiesce); otherwise the heartbeat is stepped as the
//     ordinary heartbeat it stands for, whose answer wakes the leader,
//     which ticks a heartbeat round before it tries again.
//
// Which groups are awake, and what wakes them, is the owner's business
// (a message, local work, a peer's death reported by node liveness).

// QuiesceAfterTicks is how long a woken group is ticked before its leader
// may quiesce it again: one heartbeat round, whose answers tell the
// leader how its followers stand (a follower that woke it because it
// lags, or missed the commit index, is then brought up to date first).
const QuiesceAfterTicks = 2

// Quiet is one group's quiescence clock: the ticks since it last woke.
// The zero value is a group that just woke.
type Quiet struct{ awakeTicks int }

// Woke restarts the clock: the group is ticked again.
func (q *Quiet) Woke() { q.awakeTicks = 0 }

// AwakeTicks is how many ticks the group has been ticked since it woke.
func (q *Quiet) AwakeTicks() int { return q.awakeTicks }

// Tick counts a tick of the awake group g and reports whether it
// quiesces instead of ticking: it has been awake QuiesceAfterTicks, its
// owner is idle (nothing pending that needs ticks), and g leads a group
// every live follower of which holds its whole log (replica.Group.CanQuiesce
// with live, node liveness). The quiesce heartbeats then go to send.
func (q *Quiet) Tick(g *replica.Group, idle bool, live func(peer uint64) bool, send func(*raftpb.Message)) bool {
	if q.awakeTicks++; q.awakeTicks < QuiesceAfterTicks {
		return false
	}
	if !idle || !g.CanQuiesce(live) {
		return false
	}
	for _, m := range g.QuiesceMessages() {
		send(m)
	}
	return true
}

// StepQuiesce handles m, a peer's message for g, if it is a quiesce
// heartbeat an idle follower whose state matches takes: the group stops
// ticking, and it reports true. A quiesce heartbeat the follower refuses
// is turned into the ordinary heartbeat it stands for, which the caller
// steps (reported false), as it steps every other message: the follower
// learns the leader and its commit, and its answer wakes the leader.
func StepQuiesce(g *replica.Group, m *raftpb.Message, idle bool) bool {
	if !replica.IsQuiesce(m) {
		return false
	}
	if idle && g.AcceptQuiesce(m) {
		return true
	}
	replica.StripQuiesce(m)
	return false
}
