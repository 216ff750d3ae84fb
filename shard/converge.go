package shard

import "go.etcd.io/raft/v3/raftpb"

// Elections in bounded batches. Thousands of groups may need a leader at
// once: a CreateTopic of many partitions, a restart, or a dead node's
// quiesced groups. Left to themselves, every member of every such group
// ticks, runs its election timer and campaigns, and a shard that ticks
// thousands of groups every tick (each leader heartbeating its followers
// while it waits for them to materialise) has no time left to build the
// partitions the elections wait for: creation collapses into repeated
// elections and CheckQuorum step-downs. With Replication.Quiesce set, the
// shard instead:
//
//   - starts an election only while fewer than campaignsInFlight of its
//     elections are under way (until the group it won quiesces); the
//     others wait in order (q.campaign), not ticked. An election that
//     found no leader within campaignPatienceTimeouts (its followers may
//     not exist yet) goes back to the end of the queue, unticked, so the
//     groups that are ticked stay few however many wait;
//   - holds a group it does not stand for election in (q.held): not
//     ticked until a peer's message gives it a leader, since the member
//     that should campaign (the preferred leader of a new group, the
//     chosen campaigner of a dead leader's group) will contact it. Node
//     liveness covers a campaigner that died (SetPeerLive queues the
//     group here when this node is the next campaigner); a group still
//     leaderless after holdTimeouts stands for election itself, through
//     the same bounded queue, so no group waits for ever on a member
//     that never campaigns.
//
// Two more guards keep an overloaded shard from feeding its own overload:
// past ticksPerRound awake groups the groups take turns at being ticked,
// and a leader's CheckQuorum counts followers on live nodes as heard from
// (keepActive), so answers that are merely late start no election.
//
// A held or queued group still answers every message it is sent (its
// Ready is handled after each step): it votes, and it wins an election
// it started without being ticked.

// campaignsInFlight bounds the elections a shard has under way at once.
// An election is under way until the group it won quiesces: a new
// leader heartbeats its followers every tick until they all hold its
// log, and those heartbeats, not the votes, are what a shard with
// thousands of new groups cannot keep up with.
const campaignsInFlight = 32

// campaignPatienceTimeouts is how long an election without a winner
// counts as under way before it yields its place, and settleTimeouts how
// long one that won does while its followers catch up (in election
// timeouts).
const (
	campaignPatienceTimeouts = 3
	settleTimeouts           = 10
)

// holdTimeouts is how long a held group waits to be contacted before it
// stands for election itself (in election timeouts: 10 s at the default
// tick). It covers a campaigner that is alive but never campaigns (its
// build of the partition keeps failing): short enough that the group is
// not left without a leader for long, long enough that a follower does
// not stand against a campaigner that is merely working through a queue
// of thousands of elections, which would split the votes.
const holdTimeouts = 100

// heldGroup is a held group and the shard tick it was held at.
type heldGroup struct {
	o     *owned
	since int64
}

// electionTicks is the groups' election timeout in ticks.
func (rg *raftGroups) electionTicks() int64 {
	if t := rg.cfg.ElectionTicks; t > 0 {
		return int64(t)
	}
	return 10 // replica's default
}

// live reports whether o is still this shard's group of its namespace.
func (rg *raftGroups) live(o *owned) bool {
	return o.rep.grp != nil && rg.replicated[o.p.Namespace()] == o
}

// electionRoom reports whether a new group this node should lead may
// campaign at once (nothing queued, room in flight).
func (rg *raftGroups) electionRoom() bool {
	return !rg.cfg.Quiesce || (len(rg.q.campaign) == 0 && len(rg.q.inflight) < campaignsInFlight)
}

// admitNew settles how a new group gets its first leader: campaigned is
// whether it stood for election already; elect whether this node should.
func (rg *raftGroups) admitNew(o *owned, elect, campaigned bool) {
	if !rg.cfg.Quiesce {
		return
	}
	o.rep.held, o.rep.queued = false, false // a rebuilt group's earlier state
	switch {
	case campaigned:
		rg.inflight(o)
	case elect:
		rg.queueCampaign(o)
	case !rg.q.down.Live(rg.preferred(o)):
		// The member that should campaign is already dead.
		if rg.campaigner(o) == rg.cfg.Node {
			rg.queueCampaign(o)
		} else {
			rg.hold(o)
		}
	case o.rep.catchup == nil && o.rep.grp.Term() <= 1:
		// A group that never saw an election (a new one starts at term
		// 1, its log only the initial snapshot): its preferred leader
		// will contact it. One restored with a longer history keeps
		// ticking as before: its log may be ahead of the preferred
		// leader's, which then cannot win, and only its own election
		// timer would elect one that can.
		rg.hold(o)
	}
}

// queueCampaign queues an election in o's group; it waits unticked.
func (rg *raftGroups) queueCampaign(o *owned) {
	o.rep.held = true
	if o.rep.queued {
		return
	}
	o.rep.queued = true
	rg.q.campaign = append(rg.q.campaign, o)
	rg.armTick()
}

// hold stops ticking o's group until a peer's message gives it a leader
// (or holdTimeouts pass).
func (rg *raftGroups) hold(o *owned) {
	if o.rep.held {
		return // held already, or queued for an election
	}
	o.rep.held = true
	rg.q.held = append(rg.q.held, heldGroup{o: o, since: rg.q.ticks})
	rg.armTick()
}

// unhold ticks o's group again once it has a leader (a peer's message
// told it, or it won an election it started), so its election timer
// watches the leader, or it heartbeats and quiesces as a leader does.
// tickRaft calls it on every held group it finds awake.
func (r *replicated) unhold() {
	if r.held && r.grp != nil && r.grp.Leader() != 0 {
		r.held = false
	}
}

// electAfterDeath is SetPeerLive's part for a group whose leader (or,
// for a group that never had one, whose preferred leader) died: this
// node queues an election if it is the group's campaigner, and holds the
// group otherwise. Without Replication.Quiesce the group stays awake, and
// its election timer is the fallback.
func (rg *raftGroups) electAfterDeath(o *owned) {
	mine := rg.campaigner(o) == rg.cfg.Node
	switch {
	case !rg.cfg.Quiesce:
		if mine {
			rg.q.campaign = append(rg.q.campaign, o)
		}
	case mine:
		rg.queueCampaign(o)
	default:
		rg.hold(o)
	}
}

// inflight records an election started in o's group.
func (rg *raftGroups) inflight(o *owned) {
	o.rep.held = false
	o.rep.campaignAt = rg.q.ticks
	rg.q.inflight = append(rg.q.inflight, o)
}

// electionsPending reports whether the shard must keep ticking for the
// elections it queued or holds, even with no group awake.
func (rg *raftGroups) electionsPending() bool {
	return len(rg.q.campaign) > 0 || len(rg.q.held) > 0 || len(rg.q.inflight) > 0
}

// campaignDue runs on every raft tick: it retires the elections that
// found a leader (or ran out of patience), releases the held groups
// that waited too long, and starts queued elections while there is room.
func (rg *raftGroups) campaignDue() {
	rg.q.ticks++
	if !rg.cfg.Quiesce {
		rg.campaignDueTicked()
		return
	}
	patience := campaignPatienceTimeouts * rg.electionTicks()
	kept := rg.q.inflight[:0]
	for _, o := range rg.q.inflight {
		if !rg.live(o) {
			continue // gone
		}
		age := rg.q.ticks - o.rep.campaignAt
		switch lead := o.rep.grp.Leader(); {
		case lead != 0 && lead != rg.cfg.Node:
			// Another member won: its leader brings the group up.
		case lead == 0 && age >= patience:
			rg.queueCampaign(o) // its followers may not be there yet
		case lead != 0 && (!rg.q.awake.Has(o.p.Namespace(), o) || age >= settleTimeouts*rg.electionTicks()):
			// Won and quiesced; or won long ago, and a follower is
			// still missing: it leaves its place to the next one.
		default:
			kept = append(kept, o)
		}
	}
	clear(rg.q.inflight[len(kept):])
	rg.q.inflight = kept

	hold := holdTimeouts * rg.electionTicks()
	for len(rg.q.held) > 0 {
		h := rg.q.held[0]
		h.o.rep.unhold()
		if h.o.rep.held && rg.live(h.o) && rg.q.ticks-h.since < hold {
			break // the oldest hold has not expired yet
		}
		rg.q.held[0] = heldGroup{}
		rg.q.held = rg.q.held[1:]
		if h.o.rep.held && rg.live(h.o) && !h.o.rep.queued {
			h.o.rep.held = false
			rg.queueCampaign(h.o) // nobody contacted it: stand itself
		}
	}
	if len(rg.q.held) == 0 {
		rg.q.held = nil
	}

	for len(rg.q.campaign) > 0 && len(rg.q.inflight) < campaignsInFlight {
		o := rg.q.campaign[0]
		rg.q.campaign[0] = nil
		rg.q.campaign = rg.q.campaign[1:]
		o.rep.queued = false
		if !rg.live(o) || o.rep.grp.Leader() != 0 {
			o.rep.unhold()
			continue // gone, or another member won meanwhile
		}
		if err := o.rep.grp.Campaign(); err != nil {
			rg.failGroup(o, err)
			continue
		}
		rg.inflight(o)
		rg.markReady(o)
	}
	if len(rg.q.campaign) == 0 {
		rg.q.campaign = nil
	}
}

// campaignDueTicked starts the next few queued elections of a shard
// whose groups are all ticked (no Replication.Quiesce): the groups wait
// awake, and campaignsPerTick bounds the elections started per tick. A
// group that found a leader meanwhile (another member won), or is gone,
// is skipped.
func (rg *raftGroups) campaignDueTicked() {
	n := 0
	for len(rg.q.campaign) > 0 && n < campaignsPerTick {
		o := rg.q.campaign[0]
		rg.q.campaign[0] = nil
		rg.q.campaign = rg.q.campaign[1:]
		if !rg.live(o) || o.rep.grp.Leader() != 0 {
			continue
		}
		n++
		if err := o.rep.grp.Campaign(); err != nil {
			rg.failGroup(o, err)
			continue
		}
		rg.markReady(o)
	}
	if len(rg.q.campaign) == 0 {
		rg.q.campaign = nil
	}
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
	if every := max(rg.electionTicks()/2, 1); int64(o.rep.quiet.AwakeTicks())%every != 0 {
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
// a log. Left held, this member would wait out holdTimeouts (10 s at the
// default tick) while the group has no leader.
func (rg *raftGroups) standAgainstBehind(o *owned, m *raftpb.Message) {
	if !rg.cfg.Quiesce || !o.rep.held || o.rep.queued {
		return
	}
	if t := m.GetType(); t != raftpb.MsgPreVote && t != raftpb.MsgVote {
		return
	}
	if o.rep.grp.Leader() == 0 && o.rep.grp.LogAhead(m.GetLogTerm(), m.GetIndex()) {
		rg.queueCampaign(o)
	}
}
