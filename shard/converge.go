package shard

import (
	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
)

// Elections in bounded batches. Thousands of groups may need a leader at
// once: a CreateTopic of many partitions, a restart, or a dead node's
// quiesced groups. Left to themselves, every member of every such group
// ticks, runs its election timer and campaigns, and a shard that ticks
// thousands of groups every tick has no time left to build the
// partitions the elections wait for: creation collapses into repeated
// elections and CheckQuorum step-downs. The shard's elections
// (raftGroups.elect) are scheduled by groups.Elections instead: with
// Replication.Quiesce set, a bounded number under way at once, the
// others queued unticked, and the groups this node does not stand for
// election in held, unticked, until a peer's message gives them a leader
// (or groups.HoldTimeouts pass). The shard decides who stands: the
// preferred leader of a new group (admitNew), the chosen campaigner of a
// dead leader's group (electAfterDeath, from SetPeerLive), a held member
// asked for its vote by a candidate that is behind (standAgainstBehind).
//
// Two more guards keep an overloaded shard from feeding its own overload:
// past ticksPerRound awake groups the groups take turns at being ticked,
// and a leader's CheckQuorum counts followers on live nodes as heard from
// (keepActive), so answers that are merely late start no election.

// electionTicks is the groups' election timeout in ticks.
func (rg *raftGroups) electionTicks() int64 {
	if t := rg.cfg.ElectionTicks; t > 0 {
		return int64(t)
	}
	return replica.DefaultElectionTicks
}

// live reports whether o is still this shard's group of its namespace.
func (rg *raftGroups) live(o *owned) bool {
	return o.rep.grp != nil && rg.replicated[o.p.Namespace()] == o
}

// admitNew settles how a new group gets its first leader: campaigned is
// whether it stood for election already; elect whether this node should;
// first whether the group never saw an election before (a new one, not
// one restored with a history).
func (rg *raftGroups) admitNew(o *owned, elect, campaigned, first bool) {
	if !rg.cfg.Quiesce {
		return
	}
	o.rep.elect.Reset() // a rebuilt group's earlier state
	if first {
		// The group's first election: a client that created the
		// partition may be waiting for its leader, so should this node
		// stand in it and find no winner (its followers not built yet)
		// or have to wait for a place, it goes ahead of the
		// re-elections queued. So does the election this node stands in
		// for a preferred leader that is dead, or dies before the group
		// had a leader (setPeerLive, electAfterDeath): a liveness
		// verdict queues the re-elections of every group the dead node
		// led, and a new group's went behind them all (issue 33).
		rg.elect.First(o)
	}
	switch {
	case campaigned:
		rg.elect.Started(o)
	case elect:
		rg.elect.Queue(o)
	case !rg.q.down.Live(rg.preferred(o)):
		// The member that should campaign is already dead.
		if rg.campaigner(o) == o.rep.id {
			rg.elect.Queue(o)
		} else {
			rg.elect.Hold(o)
		}
	case o.rep.catchup == nil && o.rep.grp.Term() <= 1:
		// A group that never saw an election (a new one starts at term
		// 1, its log only the initial snapshot): its preferred leader
		// will contact it. One restored with a longer history keeps
		// ticking as before: its log may be ahead of the preferred
		// leader's, which then cannot win, and only its own election
		// timer would elect one that can.
		rg.elect.Hold(o)
	}
}

// electAfterDeath is SetPeerLive's part for a group whose leader (or,
// for a group that never had one, whose preferred leader) died: this
// node queues an election if it is the group's campaigner, and holds the
// group otherwise. Without Replication.Quiesce the group stays awake, and
// its election timer is the fallback.
func (rg *raftGroups) electAfterDeath(o *owned) {
	rg.elect.AfterDeath(o, rg.campaigner(o) == o.rep.id)
}

// ticksPerRound bounds the groups a shard ticks per raft tick. Below it
// every awake group is ticked every tick. Above it the awake groups take
// turns, ticksPerRound a tick in the order they woke, so each group's
// raft clock runs slower by the ratio: its heartbeats go out less often
// and its election and CheckQuorum timeouts stretch by as much. That is
// the point: a shard with more awake groups than it can tick is
// overloaded, its peers likely too, and at full speed the heartbeats of
// thousands of groups would delay the very answers their CheckQuorum
// waits for, so leaders whose followers are merely slow step down, and
// each step-down adds an election and more awake groups. The per-tick
// work stays bounded however many groups are awake.
const ticksPerRound = 256

// tickList is the groups tickRaft ticks this tick: every awake group, or
// with Replication.Quiesce and more than ticksPerRound awake, the next
// ticksPerRound of them in turn. It is a copy, for tickRaft to go through
// while ticking changes the set.
func (rg *raftGroups) tickList() []*owned {
	budget := 0
	if rg.cfg.Quiesce {
		budget = ticksPerRound
	}
	return rg.q.awake.Turn(budget)
}

// keepActive runs before each tick of an awake group: with
// Replication.Quiesce, whose failure detection is node liveness, a
// leader's followers on nodes liveness holds alive count as heard from
// for raft's CheckQuorum (replica.Group.KeepActive), every half election
// timeout of the group's ticks, so at least once in each of CheckQuorum's
// windows. A leader whose followers' answers are merely late keeps
// leading; one cut off from a majority steps down once liveness declares
// the majority dead.
func (rg *raftGroups) keepActive(o *owned) error {
	if !rg.cfg.Quiesce {
		return nil
	}
	if every := max(rg.electionTicks()/2, 1); int64(rg.q.awake.Ticks(o.p.Namespace()))%every != 0 {
		return nil
	}
	return o.rep.grp.KeepActive(rg.q.down.Live)
}

// standAgainstBehind runs before a peer's message is stepped: a held
// group without a leader that is asked for its vote by a candidate whose
// log is behind its own queues an election of its own. The candidate is
// the member the survivors chose to replace a dead leader, but it cannot
// win this vote, and with the dead leader's vote missing it may need it:
// a member that rebuilt its partition empty after the others agreed on
// a log. Left held, this member would wait out groups.HoldTimeouts (10 s
// at the default tick) while the group has no leader.
func (rg *raftGroups) standAgainstBehind(o *owned, m *raftpb.Message) {
	if !rg.cfg.Quiesce || !o.rep.elect.Held() || o.rep.elect.Queued() {
		return
	}
	if t := m.GetType(); t != raftpb.MsgPreVote && t != raftpb.MsgVote {
		return
	}
	if o.rep.grp.Leader() == 0 && o.rep.grp.LogAhead(m.GetLogTerm(), m.GetIndex()) {
		rg.elect.Queue(o)
	}
}

// Candidate is o's candidacy in the shard's elections, its raft group,
// and whether it is still the shard's group of its namespace
// (groups.ElectionHost).
func (rg *raftGroups) Candidate(o *owned) (*groups.Candidacy, *replica.Group, bool) {
	return &o.rep.elect, o.rep.grp, rg.live(o)
}

// Awake reports whether o's group is ticked (groups.ElectionHost).
func (rg *raftGroups) Awake(o *owned) bool { return rg.q.awake.Has(o.p.Namespace(), o) }

// Campaigned takes the outcome of an election the scheduler started in
// o's group (groups.ElectionHost): its Ready is processed, or the group
// failed.
func (rg *raftGroups) Campaigned(o *owned, err error) {
	if err != nil {
		rg.failGroup(o, err)
		return
	}
	rg.markReady(o)
}

// ElectionPending keeps the raft tick running for an election queued or
// a group held (groups.ElectionHost).
func (rg *raftGroups) ElectionPending() { rg.armTick() }
