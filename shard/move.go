package shard

import (
	"context"
	"slices"

	"github.com/parkway-io/parkway/metadata"
)

// Moving replicas. The metadata decides where a partition's replicas
// should be (metadata.PartitionInfo.Replicas; see the metadata package's
// moves.go); the group's leader makes the group's voters match, one raft
// configuration change at a time:
//
//  1. every new replica is added first. Its node materialised the
//     partition as a joining member (empty, not a voter); the leader
//     compacts its log once the change applies, so the snapshot it sends
//     the newcomer names it, and the newcomer then fetches the partition
//     log through the catch-up.
//  2. once every new replica has caught up with the leader's snapshot,
//     each old replica is removed. A leader that is itself leaving first
//     hands leadership to a staying replica, which carries on.
//  3. once the voters are exactly the replicas, the leader settles the
//     move (Replication.Settle proposes metadata.SettleReplicas), and the
//     leaving nodes remove their copies.
//
// Adding before removing keeps the group at its replication factor or
// above throughout, and every step is a single-member change, so any
// quorum of the configuration before a step intersects any quorum of the
// one after it. The driver is a pure function of the group's state and
// the committed metadata, re-run on ticks: a lost proposal, a leader
// change or a restart is picked up where the state says it stands.

const (
	// movesPerShard bounds the groups one shard changes at once, so a
	// rebalance of thousands of partitions does not send thousands of
	// snapshots and catch-ups together.
	movesPerShard = 4
	// moveRetryTicks is how long a step is given to show (a
	// configuration change to apply, a settle to commit) before it is
	// proposed again.
	moveRetryTicks = 20
)

// members is the group membership the metadata gives info: its replicas
// (preferred leader first), then the replicas leaving it.
func members(info metadata.PartitionInfo) []uint64 {
	if len(info.Leaving) == 0 {
		return info.Replicas
	}
	return slices.Concat(info.Replicas, info.Leaving)
}

// refreshPeers recomputes o.peers from the group's voters, in the
// metadata's order (the preferred leader first): the peers catch-up
// fetches from, campaigns are chosen among and balance hands back to.
func (s *Shard) refreshPeers(o *owned) {
	if o.grp == nil || !o.placed {
		return
	}
	info, ok := s.meta.Partition(o.p.Namespace())
	if !ok || info.CreatedRevision != o.p.Epoch() {
		return
	}
	voters := o.grp.Voters()
	if len(voters) == 0 {
		o.peers = members(info) // a joiner before its snapshot
		return
	}
	peers := make([]uint64, 0, len(voters))
	for _, n := range members(info) {
		if slices.Contains(voters, n) {
			peers = append(peers, n)
		}
	}
	for _, n := range slices.Sorted(slices.Values(voters)) {
		if !slices.Contains(peers, n) {
			peers = append(peers, n)
		}
	}
	o.peers = peers
}

// needsMove reports whether o's group, which this node leads, has
// membership work: voters that differ from the replicas, or leaving
// replicas to settle.
func (s *Shard) needsMove(o *owned) bool {
	info, ok := s.meta.Partition(o.p.Namespace())
	if !ok || info.CreatedRevision != o.p.Epoch() || len(info.Replicas) == 0 {
		return false
	}
	if len(info.Leaving) > 0 {
		return true
	}
	voters := o.grp.Voters()
	if len(voters) != len(info.Replicas) {
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
func (s *Shard) considerMove(o *owned) {
	if o.grp == nil || !o.placed || o.moving || !o.grp.IsLeader() || !s.needsMove(o) {
		return
	}
	o.moving, o.moveTicks = true, 0
	s.q.moves = append(s.q.moves, o)
	s.wake(o) // the steps need ticks
}

// moveStep runs on every raft tick: it advances the first movesPerShard
// queued groups by one step each and drops those done.
func (s *Shard) moveStep() {
	if len(s.q.moves) == 0 {
		return
	}
	kept := s.q.moves[:0]
	for i, o := range s.q.moves {
		if i < movesPerShard && s.advanceMove(o) {
			o.moving = false
			continue
		}
		kept = append(kept, o)
	}
	clear(s.q.moves[len(kept):])
	s.q.moves = kept
	if len(kept) == 0 {
		s.q.moves = nil
	}
}

// advanceMove takes o's next membership step; it reports true when o has
// nothing more to do here (done, or no longer led by this node: the new
// leader's driver carries on).
func (s *Shard) advanceMove(o *owned) bool {
	ns := o.p.Namespace()
	if o.grp == nil || s.replicated[ns] != o || !o.grp.IsLeader() {
		return true
	}
	info, ok := s.meta.Partition(ns)
	if !ok || info.CreatedRevision != o.p.Epoch() {
		return true
	}
	if o.moveTicks > 0 {
		o.moveTicks--
		return false
	}
	s.wake(o)
	r := s.cfg.Replication
	voters := o.grp.Voters()
	// 1. Add the new replicas.
	for _, n := range info.Replicas {
		if !slices.Contains(voters, n) {
			if err := o.grp.ProposeConfChange(true, n, nil); err != nil {
				s.log.Debug("proposing a replica", "ns", ns, "node", n, "error", err)
			}
			s.markReady(o)
			o.moveTicks = moveRetryTicks
			return false
		}
	}
	// 2. Remove the old ones, once the new ones caught up.
	for _, n := range voters {
		if slices.Contains(info.Replicas, n) {
			continue
		}
		for _, m := range info.Replicas {
			if m != r.Node && !o.grp.Caught(m) {
				return false // check again next tick
			}
		}
		if n == r.Node {
			// This node is leaving: hand the group to a staying replica
			// (the first live one, the preferred leader if it is).
			to := s.replicaHint(info.Replicas)
			if err := o.grp.TransferLeader(to); err != nil {
				s.failGroup(o, err)
				return true
			}
			s.markReady(o)
			s.m.LeaderTransfers.Inc()
			o.moveTicks = moveRetryTicks
			return false
		}
		if err := o.grp.ProposeConfChange(false, n, nil); err != nil {
			s.log.Debug("proposing a replica's removal", "ns", ns, "node", n, "error", err)
		}
		s.markReady(o)
		o.moveTicks = moveRetryTicks
		return false
	}
	// 3. Settle: the voters are the replicas.
	if len(info.Leaving) == 0 {
		return true
	}
	if r.Settle != nil {
		for _, n := range info.Leaving {
			r.Settle(ns, o.p.Epoch(), n)
		}
	}
	o.moveTicks = moveRetryTicks
	return false
}

// confChanged follows an applied change of o's voters: the peers are
// recomputed; on an addition the log is compacted at once, because a
// joining member takes only a snapshot whose voters include it; and the
// leader's driver goes on at once with the next step.
func (s *Shard) confChanged(o *owned, add bool) {
	s.refreshPeers(o)
	if add {
		o.compactNow = true
	}
	o.moveTicks = 0
	s.considerMove(o)
}

// UpdatePlacement tells the shard that the committed replica set of ns
// changed (the reconciler calls it when a move commits): the group's
// peers are recomputed and, on its leader, the group's membership is
// driven to the new replica set. A namespace not replicated here is
// ignored.
func (s *Shard) UpdatePlacement(ctx context.Context, ns metadata.Namespace) error {
	return s.do(ctx, newControl(func(s *Shard) error {
		if o := s.replicated[ns]; o != nil {
			s.refreshPeers(o)
			s.considerMove(o)
		}
		return nil
	}, nil))
}
