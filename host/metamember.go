package host

import (
	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
)

// The metadata member is driven by internal/groups as the partition
// groups are: its peers' messages are stepped by groups.Step (the member
// is a groups.Member), its quiescence is a groups.Awake of its one group
// (added when it wakes, counted and quiesced by Awake.Quiesce on a tick,
// put to sleep when it takes a quiesce heartbeat, and hibernated by
// Awake.Hibernate if it sleeps on), its elections scheduled by
// groups.Elections (a groups.ElectionHost of its one group), node
// liveness's reports read by groups.PeerLive, and who campaigns after a
// death chosen by groups.CampaignerOf. What is the member's own:
//
//   - what keeps its leader from quiescing: a read barrier of its own in
//     flight, a learner node liveness holds alive awaiting its promotion
//     (tick, membership.go); a follower takes any quiesce heartbeat
//     matching its state (AcceptsQuiesce says why);
//   - that it stands for election at once when the leader's node died
//     and it is the campaigner (one group: no bound to queue behind); the
//     woken members' election timers remain the fallback;
//   - the driver of a started engine: while the member is quiesced only
//     node liveness needs it, so its timer fires once per liveness
//     interval instead of every tick (sleepTicks, metadata.go); a wake
//     brings it back to every tick.

// metaKey names the metadata member's one group in its groups.Awake.
const metaKey = uint64(metadata.MetadataNamespace)

// wake makes the member ticked again (a group that wakes starts its
// quiescence clock again).
func (m *metaGroup) wake() { m.awake.Add(metaKey, m) }

// quiesced reports whether the member is quiesced (not ticked).
func (m *metaGroup) quiesced() bool { return !m.awake.Has(metaKey, m) }

// step feeds a peer's metadata raft message to the member
// (groups.Step; the member's side is below): a quiesce heartbeat that
// matches the member's state quiesces it, anything else wakes it and is
// stepped (a refused quiesce heartbeat as the ordinary heartbeat it
// stands for). A member that is down drops it: raft re-sends.
func (m *metaGroup) step(msg *raftpb.Message) {
	if m.unavailable() != nil {
		return
	}
	if msg.GetFrom() == m.followed.lead {
		m.followed.left = 0 // heard: the reopened member's answer arrived
	}
	groups.Step(m.g, msg, m)
}

// AcceptsQuiesce implements groups.Member: a follower takes any quiesce
// heartbeat that matches its state. Unlike a partition's member it does
// not wait for its own requests first: a proposal it forwarded, or a
// read index it asked, may have been lost, and stays pending until its
// caller asks again (which wakes the member) or the leader changes, so
// waiting for them would keep an idle metadata group awake for good.
func (m *metaGroup) AcceptsQuiesce() bool { return true }

// Quiesced implements groups.Member: the member is no longer ticked; it
// sleeps, and hibernates if it stays asleep (groups.Awake.Sleep).
func (m *metaGroup) Quiesced() {
	if !m.quiesced() {
		m.awake.Sleep(metaKey, m)
	}
}

// hibernate hibernates the member's follower, which stayed quiesced
// groups.HibernateAfterTicks (groups.Awake.Hibernate), while it runs;
// replica.Group.Hibernate refuses a leader and a member with work. Its
// forwarded proposals and read barriers need no raft node to wait: the
// answers that end them wake it (AcceptsQuiesce says why they may be
// lost).
func (m *metaGroup) hibernate(uint64, *metaGroup) {
	if m.unavailable() == nil {
		m.g.Hibernate()
	}
}

// Stepped implements groups.Member: a peer's message wakes the member.
func (m *metaGroup) Stepped() { m.wake() }

// Refused implements groups.Member: a message no correct member sends is
// counted (and one out of reach logged: a peer's term ran away); raft's
// own refusals (a stale message) are its business.
func (m *metaGroup) Refused(reason string, err error) {
	if reason == "" {
		return
	}
	m.c.e.drops.Drop(metaRaftVariant, reason)
	if reason == metrics.ReasonOutOfReach {
		m.c.e.cfg.Logger.Warn("metadata raft message with a term out of reach dropped", "error", err)
	} else {
		m.c.e.cfg.Logger.Debug("invalid metadata raft message dropped", "error", err)
	}
}

// Failed implements groups.Member: the member goes down (see down).
func (m *metaGroup) Failed(err error) { _ = m.down(err) }

// metaRaftVariant labels the metadata group's refused raft messages in
// parkway_frame_drops_total (shard "-1", the node's own).
const metaRaftVariant = "metadata_raft"

// peerLive is node liveness reporting peer dead (live false) or alive
// again. A follower whose leader died forgets it and wakes, and the
// chosen survivor campaigns; a leader wakes when a peer returns, to bring
// it up to date. A failure of the group is reported by the next process.
func (m *metaGroup) peerLive(peer uint64, live bool) {
	if m.unavailable() != nil {
		return
	}
	v, err := groups.PeerLive(m.g, peer, live)
	if v == groups.PeerUnmoved {
		return
	}
	m.wake()
	if v == groups.LeaderLost && err == nil && m.campaigner() == uint64(m.c.cfg.ID) {
		m.elect.Stand(m)
	}
}

// Candidate is the member's candidacy and group, and whether it runs
// (groups.ElectionHost).
func (m *metaGroup) Candidate(*metaGroup) (*groups.Candidacy, *replica.Group, bool) {
	return &m.cand, m.g, m.unavailable() == nil
}

// Awake reports whether the member is ticked (groups.ElectionHost).
func (m *metaGroup) Awake(*metaGroup) bool { return !m.quiesced() }

// Campaigned takes the outcome of an election the member stood in
// (groups.ElectionHost): it is awake, and its campaign goes out with the
// next process, which also reports a group that failed to start it.
func (m *metaGroup) Campaigned(*metaGroup, error) { m.wake() }

// ElectionPending keeps the member ticked while an election waits
// (groups.ElectionHost).
func (m *metaGroup) ElectionPending() { m.wake() }

// campaigner is the member that stands for election when the leader's
// node died (groups.CampaignerOf): the first voter in ascending order
// that liveness holds alive, so every survivor with the same view agrees
// and only one campaigns (a learner, not yet promoted, votes in nothing).
func (m *metaGroup) campaigner() uint64 {
	return groups.CampaignerOf(m.g, m.c.peers, m.c.live.alive, 0)
}
