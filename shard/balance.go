package shard

// Leader balance. The placement spreads preferred leaders (a partition's
// first replica) evenly over the nodes, and a group's preferred leader
// campaigns first, so leadership starts balanced. A failure moves it: the
// groups a dead node led elect leaders among the survivors (spread by the
// namespace, see campaigner). When the preferred leader is live again,
// the node leading in its place hands leadership back with raft's
// leadership transfer — one group at a time per shard, so a returning
// node is not flooded with catch-ups and elections at once, and a shard
// never has more than one group refusing proposals mid-transfer.
//
// The triggers are events, not a periodic scan, so an idle shard with
// thousands of quiesced groups does no work for balance: this node
// becoming a group's leader, and node liveness reporting a peer alive
// again.

// transferTimeoutTicks bounds how long a shard waits for one transfer
// before it moves on to the next group (raft itself abandons a transfer
// after an election timeout).
const transferTimeoutTicks = 30

// preferred is the member of o's group that should lead it.
func (rg *raftGroups) preferred(o *owned) uint64 {
	return preferredLeader(o.p.Namespace(), o.rep.peers, o.rep.placed)
}

// considerBalance queues o, which this node leads, for a transfer back to
// its preferred leader when that is another node.
func (rg *raftGroups) considerBalance(o *owned) {
	if o.rep.grp == nil || o.rep.balancing || rg.preferred(o) == o.rep.id {
		return
	}
	o.rep.balancing = true
	rg.q.balance = append(rg.q.balance, o)
	rg.wake(o) // the transfer needs ticks
}

// balanceStep runs on every raft tick: it watches the transfer under way
// and, once it is done or timed out, starts the next one whose preferred
// leader is live.
func (rg *raftGroups) balanceStep() {
	if o := rg.q.transfer; o != nil {
		rg.q.transferTicks++
		if o.rep.grp != nil && o.rep.grp.IsLeader() && rg.q.transferTicks < transferTimeoutTicks {
			return
		}
		rg.q.transfer, o.rep.balancing = nil, false
		if o.rep.grp != nil && o.rep.grp.IsLeader() && rg.q.down.Live(rg.preferred(o)) {
			// Timed out, and liveness has not (yet) declared the
			// preferred leader dead — it may be cut off for less than the
			// liveness timeout: try again after the others. Once it is
			// declared dead the group leaves the queue, and its return
			// queues it again.
			rg.considerBalance(o)
		}
	}
	for len(rg.q.balance) > 0 {
		o := rg.q.balance[0]
		rg.q.balance[0] = nil
		rg.q.balance = rg.q.balance[1:]
		o.rep.balancing = false
		to := rg.preferred(o)
		if o.rep.grp == nil || rg.replicated[o.p.Namespace()] != o || !o.rep.grp.IsLeader() || !rg.q.down.Live(to) {
			continue // gone, no longer led here, or its preferred leader is away
		}
		rg.wake(o)
		if err := o.rep.grp.TransferLeader(to); err != nil {
			rg.failGroup(o, err)
			continue
		}
		rg.markReady(o)
		o.rep.balancing = true
		rg.q.transfer, rg.q.transferTicks = o, 0
		rg.m.LeaderTransfers.Inc()
		break
	}
	if len(rg.q.balance) == 0 {
		rg.q.balance = nil
	}
}
