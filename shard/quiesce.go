package shard

import (
	"cmp"
	"context"
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/metadata"
)

// Quiescence (Replication.Quiesce), after CockroachDB's quiesced ranges:
// a partition group with nothing to do is not ticked, so an idle shard
// sends no heartbeats and runs no election timers, whatever the number of
// partitions it holds.
//
//   - The leader quiesces a group on a tick once every live follower has
//     acknowledged its whole log, everything is committed and applied,
//     no proposal, leader read or catch-up is pending here, and no
//     proposal was made for groups.QuiesceAfterTicks ticks (a proposal
//     restarts the count, groups.Awake.Busy): it sends each follower a
//     quiesce heartbeat instead of ticking.
//   - A follower quiesces when a quiesce heartbeat matches its state
//     exactly (same leader and term, same log, all of it committed and
//     applied); otherwise it keeps ticking, and its election timer
//     eventually wakes the leader with an ordinary raft message.
//   - Any raft message for a quiesced group wakes it, and so does local
//     work: a proposal, a leader read, a catch-up (markReady wakes).
//   - A follower that stays quiesced groups.HibernateAfterTicks
//     hibernates: it drops its raft node, most of what an idle replica
//     costs, and rebuilds it on whatever wakes it (hibernate,
//     internal/groups' hibernate.go). The raft tick runs while a
//     follower waits for it, then stops.
//   - Failure detection comes from node liveness (SetPeerLive), one
//     heartbeat per node pair, not per group: when a peer is declared
//     dead, the groups it led forget it, and one live member of each,
//     chosen by the namespace so the work spreads, campaigns; the others
//     wait unticked for it to contact them. The elections run a bounded
//     number at a time (converge.go), so a dead node's thousands of
//     groups do not start their elections in the same instant, and a
//     group nobody contacts stands for election itself after a while.
//     When a peer returns, the groups this node leads wake so the leader
//     brings it up to date. A group whose leader's replica the metadata
//     re-seeded (its node restarted with the raft log damaged, alive to
//     liveness) wakes once the re-seed commits, and so does one whose
//     leader a move makes leave (whose re-seed, if its log is damaged
//     too, changes nothing): its election timer elects another leader
//     if the old one is silent (leaderReplaced).

// quiescence is the shard's bookkeeping for quiescence (pump-owned).
type quiescence struct {
	// awake holds the groups that are ticked (every group when
	// quiescence is off), in the order they woke, with their quiescence
	// clocks; a tick takes its turn of them (converge.go).
	awake groups.Awake[metadata.Namespace, *owned]
	// down holds the peers node liveness reported dead.
	down groups.Down
	// balance holds the groups this node leads whose preferred leader is
	// another node, waiting to hand leadership back (balance.go);
	// transfer is the one being handed back, for transferTicks ticks.
	balance       []*owned
	transfer      *owned
	transferTicks int
	// moves holds the groups this node leads whose membership the move
	// driver changes (move.go).
	moves []*owned
}

// wake makes o's group ticked again, unless it is held
// (groups.Candidacy): a group waiting for its campaign's turn, or for a
// peer to give it a leader, needs no tick until one of those happens,
// and in the awake set it would take a place in the ticks' turns (past
// ticksPerRound awake groups a tick takes a turn of them): a creation of
// thousands of partitions builds thousands of held followers, and the
// leaders waiting to quiesce had their turns diluted by them (issue 33).
// A message that gave a held group its leader unholds it here, so it is
// ticked from then on; its campaign starting (groups.Elections) unholds
// it before it wakes.
func (rg *raftGroups) wake(o *owned) {
	if o.rep.grp == nil {
		return
	}
	if o.rep.elect.Held() {
		if o.rep.elect.Unhold(o.rep.grp); o.rep.elect.Held() {
			rg.armTick() // the elections' clock (Elections.Tick) keeps running
			return
		}
	}
	if rg.q.awake.Add(o.p.Namespace(), o) { // an earlier incarnation's entry goes
		rg.m.RaftWakes.Inc()
	}
	rg.armTick()
}

// quiesced reports whether o's group is quiesced (not ticked).
func (rg *raftGroups) quiesced(o *owned) bool {
	return rg.cfg != nil && rg.cfg.Quiesce && o.rep.grp != nil && !rg.q.awake.Has(o.p.Namespace(), o)
}

// idle reports whether the shard has nothing pending on the group that
// needs it to keep ticking.
func (r *replicated) idle() bool {
	return r.catchup == nil && len(r.proposeBuf) == 0 && len(r.pending) == 0 &&
		r.reads.Asked() == 0 && r.reads.Waiting() == 0 && !r.balancing && !r.moving
}

// maybeQuiesce quiesces o's group if it leads a group with nothing to do,
// sending its followers the quiesce heartbeat (groups.Awake.Quiesce); it
// reports whether it did.
func (rg *raftGroups) maybeQuiesce(o *owned) bool {
	r := rg.cfg
	if !rg.q.awake.Quiesce(o.p.Namespace(), o.rep.grp, r.Quiesce && o.rep.idle(), rg.q.down.Live, func(m *raftpb.Message) {
		r.Send(raftid.Node(m.GetTo()), o.p.Namespace(), o.p.Epoch(), m)
	}) {
		return false
	}
	rg.m.RaftQuiesces.Inc()
	rg.shedIdle(o)
	rg.syncQuiesced(o)
	return true
}

// hibernate hibernates o's follower, which stayed quiesced
// groups.HibernateAfterTicks (groups.Awake.Hibernate), unless o is no
// longer the shard's group of its namespace, has work pending here, or
// waits on an election; replica.Group.Hibernate refuses a leader and a
// group with work of its own.
func (rg *raftGroups) hibernate(_ metadata.Namespace, o *owned) {
	if !rg.live(o) || o.failed != nil || !o.rep.idle() || o.rep.elect.Held() || o.rep.elect.Queued() {
		return
	}
	if !o.rep.grp.Hibernating() && o.rep.grp.Hibernate() {
		rg.m.RaftHibernates.Inc()
	}
}

// shedIdle lets go of what o's replica keeps only for proposals in
// flight, as its group quiesces with none (replicated.idle): the
// leader's map of pending proposals and the frame buffer its last entry
// left for the next produces. Both are made again by the next proposal;
// an idle replica does not pay for them (issue 33: a leader's emptied
// map kept its table, about 300 bytes).
func (rg *raftGroups) shedIdle(o *owned) {
	o.rep.pending, o.rep.proposeBuf = nil, nil
}

// SetPeerLive tells the shard what node liveness learned of peer: dead
// (live false) or alive again. When a peer dies, the groups it led
// forget it and wake, and this node campaigns in those it is chosen for;
// when it returns, the groups this node leads wake to bring it up to
// date. Without Replication.Quiesce it only records the peer's state.
func (s *Shard) SetPeerLive(ctx context.Context, peer uint64, live bool) error {
	return s.do(ctx, newControl(func(s *Shard) error {
		s.rg.setPeerLive(peer, live)
		return nil
	}, nil))
}

func (rg *raftGroups) setPeerLive(peer uint64, live bool) {
	r := rg.cfg
	if r == nil || peer == r.Node || !rg.q.down.Set(peer, live) {
		return
	}
	if live {
		for _, o := range rg.verdictGroups(r.Node, r.Node) {
			if v, _ := groups.PeerLive(o.rep.grp, peer, true); v == groups.PeerBack {
				rg.wake(o)
				rg.considerBalance(o)
			}
		}
		return
	}
	for _, o := range rg.verdictGroups(peer, 0) {
		if o.rep.grp == nil {
			continue // failed by an earlier step of this loop
		}
		switch v, err := groups.PeerLive(o.rep.grp, peer, false); {
		case v == groups.LeaderLost:
			rg.wake(o)
			if err != nil {
				rg.failGroup(o, err)
				continue
			}
			rg.markReady(o)
		case o.rep.grp.Leader() == 0 && o.rep.elect.Held() && raftid.Node(rg.preferred(o)) == peer:
			// A new group held for the dead node's first campaign.
		default:
			continue
		}
		rg.electAfterDeath(o)
	}
}

// verdictGroups is the groups a liveness verdict may concern: those led
// by node a or node b as the pump last saw it (byLeader; 0: none
// known), and those with work not yet processed, whose leader may have
// changed since (the ready list, empty between pump steps), in
// namespace order, so the groups wake (and campaign) in an order a
// simulator's seed decides. A dead peer concerns the groups it led and
// the new groups, leaderless, held for its first campaign; a returning
// one the groups this node leads. Visiting only those makes a verdict
// cost what it changes, not the shard's every group.
func (rg *raftGroups) verdictGroups(a, b uint64) []*owned {
	var out []*owned
	add := func(o *owned) {
		if o.rep.grp != nil && rg.replicated[o.p.Namespace()] == o {
			out = append(out, o)
		}
	}
	for o := range rg.byLeader[a] {
		add(o)
	}
	if b != a {
		for o := range rg.byLeader[b] {
			add(o)
		}
	}
	for _, o := range rg.readyList {
		add(o)
	}
	slices.SortFunc(out, func(x, y *owned) int { return cmp.Compare(x.p.Namespace(), y.p.Namespace()) })
	return slices.CompactFunc(out, func(x, y *owned) bool { return x == y })
}

// leaderReplaced reacts to info, o's committed partition, taking the
// replica that o's group follows as its leader off the replica set: a
// re-seed replaced it by a later generation on the same node
// (metadata.ReseedReplica), or a move made it leave (a drain, a
// rebalance). o's group wakes, so its raft election timer runs again and
// elects another leader if the old one is silent. Without
// Replication.Quiesce every group is ticked already.
//
// Why. Node liveness judges nodes, not replicas. A leader whose node
// restarted with its raft log damaged is set aside at the build (a new
// replica takes its place once the re-seed commits), yet its node is
// alive: no death is reported, and a quiesced group's followers, not
// ticked, wait for ever for a leader that is gone. The group cannot
// change its membership without a leader either, so the new replica and
// any move in flight wait with it (simulator cluster seed 199 with slow
// links: the group's two intact voters never elected). The re-seed
// committing is the one event every member sees.
//
// Why a leaving leader too. A re-seed of a replica that is leaving
// changes nothing (metadata.ReseedReplica: the replica goes anyway), so
// a leader whose node was drained and then restarted with its raft log
// damaged is never named in a later generation, and its quiesced
// followers waited for ever, the drain with them (simulator cluster
// seed 6825). The placement that made it leave is the event every member
// sees then, whichever came first. Waking on it costs nothing a live
// leader does not cost already: with a move to drive it does not
// quiesce its group (replicated.idle), and its heartbeats wake the
// followers anyway.
//
// Why wake rather than forget the leader, as a death does. The replaced
// leader may still run (its node read the damaged log whole later, and
// runs it until told of the re-seed, replaced): it then hands the group
// over (stepDown), and a follower accepts that hand-over only from the
// leader it knows (replica's checkMessage), so forgetting it would refuse
// the hand-over while the old leader's heartbeats kept the group from
// electing. Woken, the followers elect by raft's own rules: not before
// an election timeout without a word from the leader.
func (rg *raftGroups) leaderReplaced(o *owned, info metadata.PartitionInfo) {
	g := o.rep.grp
	if !rg.cfg.Quiesce || g == nil || o.failed != nil || info.CreatedRevision != o.p.Epoch() {
		return
	}
	if lead := g.Leader(); lead == 0 || lead == o.rep.id || slices.Contains(info.Replicas, lead) {
		return
	}
	rg.wake(o)
}

// replacedIn reports whether info names a later generation of raft id
// id's node than id: the replica of id was re-seeded, its copy set aside.
func replacedIn(info metadata.PartitionInfo, id uint64) bool {
	now, ok := info.ReplicaOf(raftid.Node(id))
	return ok && raftid.Gen(now) > raftid.Gen(id)
}

// campaigner is the live member that stands for election in ns's group
// when its leader died (groups.CampaignerOf): chosen among the live
// voters by the namespace, as the preferred leader is among all of them,
// so every node agrees given the same liveness and the elections spread
// over the survivors.
func (rg *raftGroups) campaigner(o *owned) uint64 {
	return groups.CampaignerOf(o.rep.grp, o.rep.peers, rg.q.down.Live, uint64(o.p.Namespace()))
}

// QuiescedGroups reports how many of the shard's raft groups are quiesced
// (not ticked), and how many of those this node leads.
func (s *Shard) QuiescedGroups(ctx context.Context) (int, int, error) {
	var quiesced, leading int // written by the pump, read only once it answered (see LeaderTerm)
	err := s.do(ctx, newControl(func(s *Shard) error {
		for _, o := range s.rg.replicated {
			if s.rg.q.awake.Has(o.p.Namespace(), o) {
				continue
			}
			quiesced++
			if o.rep.grp.IsLeader() {
				leading++
			}
		}
		return nil
	}, nil))
	if err != nil {
		return 0, 0, err
	}
	return quiesced, leading, nil
}
