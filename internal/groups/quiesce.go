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
//     and its owner has nothing pending on the group (Awake.Quiesce): it
//     sends each follower a quiesce heartbeat instead of ticking.
//   - A follower quiesces when a quiesce heartbeat matches its state
//     exactly (StepQuiesce); otherwise the heartbeat is stepped as the
//     ordinary heartbeat it stands for, whose answer wakes the leader,
//     which ticks a heartbeat round before it tries again.
//
// Which groups are awake is kept in one place, the host's Awake, whoever
// the host: a woken group is added (Add restarts its clock), a tick goes
// through Quiesce, a quiesce heartbeat taken removes it. What wakes a
// group is the owner's business (a message, local work, a peer's death
// reported by node liveness), and so is what keeps it from quiescing
// (idle).

// QuiesceAfterTicks is how long a woken group is ticked before its leader
// may quiesce it again: one heartbeat round, whose answers tell the
// leader how its followers stand (a follower that woke it because it
// lags, or missed the commit index, is then brought up to date first).
// A proposal restarts the count (Awake.Busy), so a group that keeps
// taking writes is not quiesced between two of them.
const QuiesceAfterTicks = 2

// Quiesce counts a tick of the awake group under k, whose raft group is
// g, and reports whether it quiesces instead of ticking (it is then no
// longer awake): it has been awake QuiesceAfterTicks, its owner is idle
// (nothing pending that needs ticks), and g leads a group every live
// follower of which holds its whole log (replica.Group.CanQuiesce with
// live, node liveness). The quiesce heartbeats then go to send. A group
// that is not awake is not ticked, and is left as it is.
func (a *Awake[K, G]) Quiesce(k K, g *replica.Group, idle bool, live func(peer uint64) bool, send func(*raftpb.Message)) bool {
	i, ok := a.at[k]
	if !ok {
		return false
	}
	if a.ticks[i]++; a.ticks[i] < QuiesceAfterTicks {
		return false
	}
	if !idle || !g.CanQuiesce(live) {
		return false
	}
	for _, m := range g.QuiesceMessages() {
		send(m)
	}
	a.Remove(k)
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
