package shard

import (
	"context"
	"slices"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/metadata"
)

// Moving replicas. The metadata decides where a partition's replicas
// should be (metadata.PartitionInfo.Replicas; see the metadata package's
// moves.go); the group's leader makes the group's voters match, one raft
// configuration change at a time, in the order internal/groups'
// NextChange gives (behaviour 31):
//
//  1. every new replica is added first, as a learner. Its node
//     materialised the partition as a joining member (empty, not a
//     voter); the leader compacts its log once the change applies, so the
//     snapshot it sends the newcomer names it, and the newcomer then
//     fetches the partition log through the catch-up. A learner votes in
//     nothing, so a group of three moving a replica tolerates one more
//     failure throughout.
//  2. a learner is promoted to voter once it is whole: its raft log
//     caught up with the leader's snapshot and commit index
//     (groups.CaughtUp), and it reported its partition log whole and
//     synced (the catch-up's ask and answer).
//  3. once every new replica is a whole voter, each old replica is
//     removed. A leader that is itself leaving first hands leadership to
//     a staying replica, which carries on. A member re-seeded on its
//     node (a new raft id for the same node, its copy set aside) is the
//     exception: it holds nothing, and is removed before step 1
//     (replacedMember).
//  4. once the voters are exactly the replicas, the leader settles the
//     move (Replication.Settle proposes metadata.SettleReplicas), and the
//     leaving nodes remove their copies.
//
// Adding before removing keeps the group at its replication factor or
// above throughout (a re-seeded member, gone already, is not counted).
// The driver is a pure function of the group's state and the committed
// metadata, re-run on ticks: a lost proposal, a leader change or a
// restart is picked up where the state says it stands.

const (
	// movesPerShard bounds the groups one shard changes at once, so a
	// rebalance of thousands of partitions does not send thousands of
	// snapshots and catch-ups together.
	movesPerShard = 4
	// moveStallTicks is how long a move in the driver's window may go
	// without progress before it yields its place to the next one queued
	// (see moveStep). A step is given groups.ChangeRetryTicks to show (a
	// configuration change to apply, a settle to commit) before it is
	// proposed again (groups.ChangePace), and a healthy one shows by
	// then; a
	// newcomer whose node died or is cut off never does, and without
	// the rotation movesPerShard such moves would hold the window, and
	// every move queued behind them, until the leader changed.
	moveStallTicks = 5 * groups.ChangeRetryTicks
)

// moveMark is what a move's progress is judged by, besides an applied
// configuration change (confChanged): the replicas still leaving, which
// a committed settle shortens, and the leader's match indexes of the new
// replicas not caught up yet, summed, which rise as a newcomer takes the
// snapshot and the entries after it (and drop when one is caught). The
// judgement only schedules: a move misjudged as stalled goes to the back
// of the queue and comes round again, and a change of either counts as
// progress.
type moveMark struct {
	leaving int
	match   uint64
}

// refreshPeers recomputes o.peers from the group's voters, in the
// metadata's order (the preferred leader first): the peers catch-up
// fetches from, campaigns are chosen among and balance hands back to.
func (rg *raftGroups) refreshPeers(o *owned) {
	if o.rep.grp == nil || !o.rep.placed {
		return
	}
	info, ok := rg.meta.Partition(o.p.Namespace())
	if !ok || info.CreatedRevision != o.p.Epoch() {
		return
	}
	voters := o.rep.grp.Voters()
	if len(voters) == 0 {
		o.rep.peers = info.Members() // a joiner before its snapshot
		return
	}
	peers := make([]uint64, 0, len(voters))
	for _, n := range info.Members() {
		if slices.Contains(voters, n) {
			peers = append(peers, n)
		}
	}
	for _, n := range slices.Sorted(slices.Values(voters)) {
		if !slices.Contains(peers, n) {
			peers = append(peers, n)
		}
	}
	o.rep.peers = peers
}

// needsMove reports whether o's group, which this node leads, has
// membership work: voters that differ from the replicas, or leaving
// replicas to settle.
func (rg *raftGroups) needsMove(o *owned) bool {
	info, ok := rg.meta.Partition(o.p.Namespace())
	if !ok || info.CreatedRevision != o.p.Epoch() || len(info.Replicas) == 0 {
		return false
	}
	if len(info.Leaving) > 0 {
		return true
	}
	voters := o.rep.grp.Voters()
	if len(voters) != len(info.Replicas) || len(o.rep.grp.Learners()) > 0 {
		return true
	}
	for _, n := range info.Replicas {
		if !slices.Contains(voters, n) {
			return true
		}
	}
	return false
}

// considerMove queues o, if this node leads it and it has membership
// work, for the move driver.
func (rg *raftGroups) considerMove(o *owned) {
	if o.rep.grp == nil || !o.rep.placed || o.rep.moving || !o.rep.grp.IsLeader() || !rg.needsMove(o) {
		return
	}
	mv := o.rep.move()
	o.rep.moving, mv.idle, mv.mark = true, 0, moveMark{}
	mv.pace.Reset()
	rg.q.moves = append(rg.q.moves, o)
	rg.wake(o) // the steps need ticks
}

// moveStep runs on every raft tick: it advances the first movesPerShard
// queued groups (the window) by one step each and drops those done. A
// move in the window that made no progress for moveStallTicks goes to
// the back of the queue when others wait, so a newcomer that never
// catches up delays the moves behind it instead of blocking them. Only
// the window is driven, so at most movesPerShard groups are sent new
// replicas at once; a rotated move keeps its state (a newcomer added
// stays a learner, and its old replica stays until the newcomer is a
// whole voter: advanceMove checks that whenever the move comes round
// again).
func (rg *raftGroups) moveStep() {
	if len(rg.q.moves) == 0 {
		return
	}
	waiting := len(rg.q.moves) > movesPerShard
	kept := rg.q.moves[:0]
	var stalled []*owned
	for i, o := range rg.q.moves {
		if i >= movesPerShard {
			kept = append(kept, o)
			continue
		}
		if rg.advanceMove(o) {
			o.rep.moving = false
			continue
		}
		mv := o.rep.move()
		if mv.idle++; waiting && mv.idle >= moveStallTicks {
			mv.idle = 0
			stalled = append(stalled, o)
			continue
		}
		kept = append(kept, o)
	}
	// kept and stalled together are the queue less the moves done, so
	// they fit in its array: kept was written behind the reading.
	kept = append(kept, stalled...)
	clear(rg.q.moves[len(kept):])
	rg.q.moves = kept
	if len(kept) == 0 {
		rg.q.moves = nil
	}
}

// advanceMove takes o's next membership step; it reports true when o has
// nothing more to do here (done, or no longer led by this node: the new
// leader's driver carries on).
func (rg *raftGroups) advanceMove(o *owned) bool {
	ns := o.p.Namespace()
	if o.rep.grp == nil || rg.replicated[ns] != o || !o.rep.grp.IsLeader() {
		return true
	}
	info, ok := rg.meta.Partition(ns)
	if !ok || info.CreatedRevision != o.p.Epoch() {
		return true
	}
	r := rg.cfg
	voters := o.rep.grp.Voters()
	mv := o.rep.move()
	if m := rg.markMove(o, info, voters); m != mv.mark {
		mv.mark, mv.idle = m, 0
	}
	if mv.pace.Wait() {
		return false
	}
	rg.wake(o)
	// A learner is whole once its raft log caught up and it reported its
	// partition log whole and synced (asked until it does).
	whole := func(n uint64) bool {
		if !groups.CaughtUp(o.rep.grp, n) {
			return false
		}
		if !o.rep.isWhole(n) {
			rg.askWhole(o, n)
			return false
		}
		return true
	}
	// A member re-seeded on its node goes first, before anything is
	// added: see replacedMember.
	if n, ok := replacedMember(o, info); ok {
		rg.proposeChange(o, groups.Change{Kind: groups.ChangeRemove, Node: n})
		return false
	}
	switch ch := groups.NextChange(o.rep.grp, info.Replicas, whole); ch.Kind {
	case groups.ChangeAddLearner:
		// 1. Add a new replica, as a learner.
		n := ch.Node
		if !rg.q.down.Live(n) {
			// Node liveness reports n dead: it would take nothing, and
			// the leader would keep sending it a snapshot — in every
			// group moving to n, since stalled moves yield the window.
			// The move waits until n is live.
			return false
		}
		rg.proposeChange(o, ch)
		return false
	case groups.ChangeWait:
		return false // check again next tick
	case groups.ChangePromote:
		// 2. Promote a whole learner.
		rg.proposeChange(o, ch)
		return false
	case groups.ChangeRemove:
		// 3. Remove an old replica, once the new ones are whole voters.
		n := ch.Node
		for _, m := range info.Replicas {
			if m != o.rep.id && !o.rep.grp.Caught(m) {
				return false // check again next tick
			}
		}
		// A new replica's raft log may be caught up while its partition
		// log is still being fetched, or not yet synced: until it says
		// its log is whole and durable (catch-up), the old replica, which
		// may be the only other copy, stays. This node, if it joined,
		// must be whole too.
		if info.Joins(o.rep.id) && o.rep.catchup != nil {
			return false
		}
		for _, m := range info.Replicas {
			if m != o.rep.id && info.Joins(m) && !o.rep.isWhole(m) {
				rg.askWhole(o, m)
				return false
			}
		}
		if info.Joins(o.rep.id) {
			if err := o.p.Sync(); err != nil {
				rg.owner.fence(o, err)
				return true
			}
		}
		if n == o.rep.id {
			// This node is leaving: hand the group to a staying replica
			// (the first live one, the preferred leader if it is).
			to := rg.replicaHint(info.Replicas)
			if err := o.rep.grp.TransferLeader(to); err != nil {
				rg.failGroup(o, err)
				return true
			}
			rg.markReady(o)
			rg.m.LeaderTransfers.Inc()
			mv.pace.Proposed()
			return false
		}
		rg.proposeChange(o, ch)
		return false
	}
	// 4. Settle: the voters are the replicas.
	if len(info.Leaving) == 0 {
		rg.considerBalance(o) // the preferred leader may be a newcomer
		return true
	}
	if r.Settle != nil {
		for _, n := range info.Leaving {
			r.Settle(ns, o.p.Epoch(), n)
		}
	}
	mv.pace.Proposed()
	return false
}

// replacedMember is a member of o's group, other than o, that the
// metadata re-seeded (replacedIn: its node's replica is a later
// generation; a member in the replica set is its node's replica). Such a member holds no copy any more —
// its node set the copy aside and fenced it (damage.go's replaced), and
// holds one replica of a partition, the new one — so as a voter it only
// raises the quorum without ever voting. It is removed before the new
// replica is added, unlike a replica moving to another node, which stays
// until its successor is a whole voter: kept, it made the new replica's
// promotion a second voter on the same node, and when that one's raft
// log was found damaged too and re-seeded again before the first left,
// the group had two voters on the node and neither alive — four voters,
// two live, no quorum for any change, and the newest replica was never
// added (simulator cluster seed 7060). Removing it first leaves the
// group as it runs anyway, on its other members.
func replacedMember(o *owned, info metadata.PartitionInfo) (uint64, bool) {
	for _, ids := range [][]uint64{o.rep.grp.Voters(), o.rep.grp.Learners()} {
		for _, n := range ids {
			if n != o.rep.id && replacedIn(info, n) {
				return n, true
			}
		}
	}
	return 0, false
}

// proposeChange proposes ch, the next configuration change of o's group
// (groups.Propose), and gives it groups.ChangeRetryTicks to apply.
func (rg *raftGroups) proposeChange(o *owned, ch groups.Change) {
	if err := groups.Propose(o.rep.grp, ch, nil); err != nil {
		rg.log.Debug("proposing a configuration change", "ns", o.p.Namespace(), "change", ch.Kind, "node", ch.Node, "error", err)
	}
	rg.markReady(o)
	o.rep.move().pace.Proposed()
}

// markMove is o's moveMark now: info is o's committed partition, voters
// its group's.
func (rg *raftGroups) markMove(o *owned, info metadata.PartitionInfo, voters []uint64) moveMark {
	m := moveMark{leaving: len(info.Leaving)}
	for _, n := range info.Replicas {
		if n != o.rep.id && (slices.Contains(voters, n) || o.rep.grp.IsLearner(n)) && !o.rep.grp.Caught(n) {
			m.match += o.rep.grp.Match(n)
		}
	}
	return m
}

// confChanged follows an applied change of o's members: the peers are
// recomputed, and the leader's driver goes on at once with the next
// step. When a learner joined, the log is compacted as soon as it can be
// (groups.Compaction: the latest snapshot leaves the learner out, and a
// joining member takes only a snapshot whose configuration names it).
func (rg *raftGroups) confChanged(o *owned) {
	rg.refreshPeers(o)
	o.rep.reads.VotersChanged()
	if mv := o.rep.mv; mv != nil {
		mv.pace.Reset() // progress: the next step may start
		mv.idle = 0
	}
	rg.considerMove(o)
}

// UpdatePlacement tells the shard that the committed replica set of ns
// changed (the reconciler calls it when a move commits): the group's
// peers are recomputed and, on its leader, the group's membership is
// driven to the new replica set. A namespace not replicated here is
// ignored.
func (s *Shard) UpdatePlacement(ctx context.Context, ns metadata.Namespace) error {
	return s.do(ctx, newControl(func(s *Shard) error {
		s.rg.updatePlacement(ns)
		return nil
	}, nil))
}

// campaignIfPreferred queues an election in o's group when it has no
// leader, waits unticked for its preferred leader to campaign (held),
// and this node has just become that preferred leader: a move (or a
// Rebalance) changed the replica set, and the node that was preferred
// when the group was held may no longer be one, or may judge by a
// placement this node no longer has. Without it each waits for the other
// until the hold expires (groups.HoldTimeouts, 10 s at the default tick).
func (rg *raftGroups) campaignIfPreferred(o *owned) {
	r := rg.cfg
	if o.rep.grp == nil || !r.Quiesce || !o.rep.elect.Held() || o.rep.elect.Queued() || o.rep.grp.Leader() != 0 ||
		rg.preferred(o) != o.rep.id || !slices.Contains(o.rep.grp.Voters(), o.rep.id) {
		return
	}
	rg.elect.Queue(o)
}

func (rg *raftGroups) updatePlacement(ns metadata.Namespace) {
	if o := rg.replicated[ns]; o != nil {
		info, ok := rg.meta.Partition(ns)
		if ok && rg.replaced(o, info) {
			return // the new replica takes part instead (damage.go)
		}
		rg.refreshPeers(o)
		if ok {
			rg.leaderReplaced(o, info)
		}
		rg.campaignIfPreferred(o)
		rg.considerMove(o)
		// A new preferred leader (Rebalance reorders replica sets) is
		// handed the group.
		if o.rep.grp != nil && o.rep.grp.IsLeader() {
			rg.considerBalance(o)
		}
	}
}
