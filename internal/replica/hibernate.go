package replica

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Hibernation (TiKV's hibernated regions): a quiesced follower keeps no
// raft node. etcd raft's RawNode — its progress tracker, read-only
// queue, inflight windows and log cursor — is most of what an idle
// replica costs (issue 33: about 1.6 KB of the 4.5 KB), and a follower
// that is not ticked and hears nothing uses none of it. Hibernate drops
// it, keeping what a restarted member starts from: the log and hard
// state (storage), the configuration as of the applied index (cs), and
// the leader it followed (lead). Anything that needs raft rebuilds it
// first (awaken): a peer's message, a tick, a campaign, a read, a
// proposal, forgetting the leader (node liveness reporting it dead). A
// configuration change and a snapshot arrive as messages. What only
// answers from that state — the leader, the term, the commit index, the
// configuration, a quiesce heartbeat that matches it — does not wake it.
//
// A rebuilt raft node starts as a follower that knows no leader: it
// would grant votes at once, where the node it replaces refused them
// inside its leader's lease (CheckQuorum). So a heartbeat of the leader
// in the stored term is stepped into it, its answer dropped (the leader
// is quiesced and needs none). That heartbeat restarts raft's election
// clock, but the dropped node's clock had counted the ticks since its
// leader last spoke (quiet), and the lease ends an election timeout after
// that: the rebuilt node is ticked as many times, capped below the
// election timeout so it neither campaigns nor leaves the lease on
// waking. Without that a woken follower would keep a dead leader's lease
// up to an election timeout longer than one that only quiesced, and
// ignore the pre-vote of a restarted leader all that while. A member its
// owner reopened from its raft log after a failure is told its leader the
// same way (Follow), but its answer is sent: the leader may have quiesced
// while it was down, and needs waking to send what it missed.
//
// Which followers hibernate, and when (after some ticks quiesced: a
// leader's ordinary heartbeats can still arrive after its quiesce
// heartbeat, and each would rebuild the node), is the host's, through
// internal/groups.

// errWakeReady reports a rebuilt raft node with work the wake-up
// heartbeat should not have made: the state it was rebuilt from was not
// the settled state Hibernate requires.
var errWakeReady = errors.New("parkway: a rebuilt raft node has work to persist or apply")

// Hibernate drops the raft node of a follower that has nothing to do —
// a leader known in its term, nothing to persist, send or apply,
// everything it holds committed and applied, no read state waiting —
// and reports whether the member hibernates (it did already, or does
// now). A leader, a candidate, a member with work or without a snapshot
// yet (a joiner) keeps its node. The owner calls it only on a group it
// does not tick.
func (g *Group) Hibernate() bool {
	if g.failed != nil {
		return false
	}
	if g.rn == nil {
		return true
	}
	if g.rn.HasReady() || (g.readStates != nil && len(*g.readStates) > 0) || g.snap == 0 {
		return false
	}
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateFollower || st.Lead == 0 || st.Lead != g.lead {
		return false
	}
	last := g.storage.lastIndex()
	if st.HardState.GetCommit() != last || g.applied != last || !sameHardState(st.HardState, g.storage.hs) {
		return false
	}
	g.rn, g.readStates = nil, nil
	return true
}

// Hibernating reports whether the member holds no raft node now.
func (g *Group) Hibernating() bool { return g.failed == nil && g.rn == nil }

// sameHardState reports whether raft's hard state is the one stored: a
// hibernating member answers its term and commit index from storage.
func sameHardState(a *raftpb.HardState, b hardState) bool {
	return a.GetTerm() == b.term && a.GetVote() == b.vote && a.GetCommit() == b.commit
}

// awaken rebuilds the raft node of a hibernating member (see above); a
// member that has one is left as it is. It runs under the caller's
// guard; a node that cannot be rebuilt fails the group.
func (g *Group) awaken() error {
	if g.rn != nil {
		return nil
	}
	// raft restarts from the configuration as of the applied index, which
	// is the Group's (New does the same after a restart).
	if err := g.start(confStorage{g.storage, g.cs}); err != nil {
		return g.fail(fmt.Errorf("rebuilding the hibernated raft node: %w", err))
	}
	if err := g.stepLeaderHeartbeat(g.lead); err != nil {
		return g.fail(fmt.Errorf("rebuilding the hibernated raft node: %w", err))
	}
	// The heartbeat's answer is dropped; nothing else may be ready.
	if g.rn.HasReady() {
		rd := g.rn.Ready()
		if len(rd.Entries) > 0 || len(rd.CommittedEntries) > 0 || !raft.IsEmptySnap(rd.Snapshot) || len(rd.ReadStates) > 0 || rd.MustSync {
			return g.fail(errWakeReady)
		}
		g.rn.Advance(rd)
	}
	for range min(g.quiet, g.cfg.ElectionTicks-1) {
		g.rn.Tick()
	}
	return nil
}

// stepLeaderHeartbeat steps into the raft node, a follower that knows no
// leader, a heartbeat of lead in the stored term carrying the stored
// commit index: the node follows lead as the member did before its node
// was dropped or reopened. Only what the member persisted is claimed:
// lead led that term (the caller knew it in that term), and the commit
// index was committed. Raft answers it (the heartbeat's answer, in the
// next Ready): awaken drops that answer, Follow sends it.
func (g *Group) stepLeaderHeartbeat(lead uint64) error {
	hs := g.storage.hs
	return g.rn.Step(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(lead), To: new(g.cfg.Node),
		Term: new(hs.term), Commit: new(hs.commit)})
}

// Followed is the leader this member followed and the term it followed it
// in (0, 0: none known), as raft last held them, even once the group
// failed: what an owner that reopens the member from its raft log passes
// to Follow.
func (g *Group) Followed() (lead, term uint64) {
	if g.rn == nil {
		return g.lead, g.storage.hs.term // hibernating: persisted
	}
	st := g.rn.BasicStatus()
	if st.Lead == 0 || st.Lead == g.cfg.Node {
		return 0, 0
	}
	return st.Lead, st.HardState.GetTerm()
}

// Follow tells a member just reopened from its raft log the leader it
// followed before (Followed of the incarnation it replaces), as awaken
// tells a rebuilt node: raft restarts every member as a follower that
// knows no leader, and a member that waits for one may wait for ever.
// Its leader, quiesced, sends nothing until a message wakes it, and
// nothing else may come: a voter's election timer would wake it in the
// end, but a learner never campaigns (one whose promotion committed while
// it was down, the commit index not yet learned, is a voter to the leader
// and a learner to itself). So if the member knows no leader yet (or
// lead), is in
// term (its stored term: raft may have moved on in memory before a failed
// write) and lead is another member of its configuration, lead's
// heartbeat in that term is stepped into it, and raft's answer goes out
// with the next Handle: it wakes the leader, whose heartbeats then bring
// the member its commit index and anything it lacks. It also keeps the
// member from granting votes at once inside its leader's lease, as
// before it went down. Called again while the member follows lead in
// that term, it answers lead again: the owner repeats it until lead is
// heard, since the one answer may be lost and a quiesced leader sends
// nothing else. Otherwise it does nothing. It fails only with
// ErrGroupFailed.
func (g *Group) Follow(lead, term uint64) (err error) {
	if g.failed != nil {
		return g.failed
	}
	if lead == 0 || lead == g.cfg.Node || g.rn == nil || term != g.storage.hs.term || !names(g.cs, lead) {
		return nil
	}
	defer g.guard(&err)
	if st := g.rn.BasicStatus(); st.RaftState != raft.StateFollower || st.Lead != 0 && st.Lead != lead || st.HardState.GetTerm() != term {
		return nil
	}
	if err := g.stepLeaderHeartbeat(lead); err != nil {
		return g.fail(fmt.Errorf("following the leader after a reopen: %w", err))
	}
	return nil
}
