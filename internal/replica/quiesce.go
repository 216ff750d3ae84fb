package replica

import (
	"bytes"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Quiescence (CockroachDB's quiesced ranges): a group with nothing to do
// stops being ticked, so it sends no heartbeats and runs no election
// timer. The leader decides: once every live follower has acknowledged
// its whole log, everything is committed and applied and nothing is in
// flight, it sends each follower a quiesce heartbeat instead of ticking.
// A follower whose state matches the heartbeat exactly stops ticking too;
// one whose state differs ignores it and keeps ticking, which wakes the
// leader soon enough through an ordinary raft message.
//
// The quiesce heartbeat is never stepped into raft: stepping it would
// produce a heartbeat response that wakes the leader again. It is a
// MsgHeartbeat whose Context is quiesceContext (request contexts of
// ReadIndex heartbeats are the owner's, and never this value).

// quiesceContext marks a quiesce heartbeat. Its length (15 bytes) differs
// from the 8-byte read contexts the owners of groups use.
var quiesceContext = []byte("parkway-quiesce")

// IsQuiesce reports whether m is a quiesce heartbeat.
func IsQuiesce(m *raftpb.Message) bool {
	return m.GetType() == raftpb.MsgHeartbeat && bytes.Equal(m.GetContext(), quiesceContext)
}

// CanQuiesce reports whether this member leads a group that may stop
// ticking: no leadership transfer, nothing left to persist, send or
// apply, everything appended committed and applied, and every follower
// that live reports as alive has acknowledged the whole log. A follower
// that is not live is not waited for: when it returns, the owner wakes
// the group so the leader brings it up to date.
func (g *Group) CanQuiesce(live func(node uint64) bool) bool {
	if g.failed != nil || g.rn == nil {
		return false // a hibernating member leads nothing
	}
	// The leader's state first: an owner asks every awake group on each
	// of its ticks, and most are followers, for which raft's HasReady
	// (comparing its whole hard and soft state) is work for nothing.
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 || g.rn.HasReady() {
		return false
	}
	last, err := g.storage.LastIndex()
	if err != nil || st.HardState.GetCommit() != last || g.applied != last {
		return false
	}
	ok := true
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id != g.cfg.Node && pr.Match != last && live(id) {
			ok = false
		}
	})
	return ok
}

// QuiesceMessages returns the quiesce heartbeats the leader sends its
// followers when it stops ticking: its term and its commit index, which
// CanQuiesce found equal to its last index. Only followers that
// acknowledged the whole log get one (one that is not live is left
// alone), so the commit index it carries is the one raft's own heartbeat
// would carry (the least of the follower's match and the commit), and a
// follower may step it as an ordinary heartbeat (StripQuiesce).
//
// The leader stops here, every append committed and observed: it drops its
// commit marks and its proposal buffer (markAppends and Propose allocate
// them again when it next appends), which an idle group would otherwise
// hold for nothing.
func (g *Group) QuiesceMessages() []*raftpb.Message {
	g.marks, g.envelope = nil, nil
	st := g.rn.BasicStatus()
	term, commit := st.HardState.GetTerm(), st.HardState.GetCommit()
	var out []*raftpb.Message
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == g.cfg.Node || pr.Match != commit {
			return
		}
		out = append(out, &raftpb.Message{
			Type: raftpb.MsgHeartbeat.Enum(), To: new(id), From: new(g.cfg.Node),
			Term: new(term), Commit: new(commit), Context: quiesceContext,
		})
	})
	return out
}

// StripQuiesce turns a quiesce heartbeat this member refused into the
// ordinary heartbeat it stands for, to be stepped: the member learns the
// leader and its commit index, and its answer tells the leader it is not
// quiesced.
func StripQuiesce(m *raftpb.Message) {
	if IsQuiesce(m) {
		m.Context = nil
	}
}

// AcceptQuiesce reports whether this follower may stop ticking on the
// quiesce heartbeat m: m passes the checks every peer message gets, it
// comes from the leader this member follows, in its term, and this
// member holds exactly the leader's log, committed and applied. It
// changes nothing either way; a refused quiesce heartbeat is dropped.
func (g *Group) AcceptQuiesce(m *raftpb.Message) bool {
	if g.failed != nil || !IsQuiesce(m) || g.checkMessage(m, g.Term()) != nil || g.HasReady() {
		return false
	}
	// A hibernating member is a follower whose raft state is its storage
	// (Hibernate): it takes the heartbeat without waking.
	lead, term, commit := g.lead, g.storage.hs.term, g.storage.hs.commit
	if g.rn != nil {
		st := g.rn.BasicStatus()
		if st.RaftState != raft.StateFollower {
			return false
		}
		lead, term, commit = st.Lead, st.HardState.GetTerm(), st.HardState.GetCommit()
	}
	if lead != m.GetFrom() || term != m.GetTerm() {
		return false
	}
	last, err := g.storage.LastIndex()
	return err == nil && commit == m.GetCommit() && last == m.GetCommit() && g.applied == last
}

// ForgetLeader makes a follower forget its leader without campaigning:
// the owner learned from elsewhere (node liveness) that the leader's node
// is gone. A follower without a leader grants pre-votes at once instead
// of waiting out its election timeout, so a new leader is elected as
// soon as one member campaigns. It is a no-op on a leader. It fails only
// with ErrGroupFailed.
func (g *Group) ForgetLeader() (err error) {
	if g.failed != nil {
		return g.failed
	}
	defer g.guard(&err)
	if err := g.awaken(); err != nil {
		return err
	}
	return g.rn.ForgetLeader()
}

// Term is the member's current term (0 once the group failed).
func (g *Group) Term() uint64 {
	if g.failed != nil {
		return 0
	}
	if g.rn == nil {
		return g.storage.hs.term // hibernating: all of it persisted
	}
	return g.rn.BasicStatus().HardState.GetTerm()
}

// LogAhead reports whether this member's stored log is more up to date
// than a log ending at (term, index), raft's test for granting a vote:
// a candidate whose log ends there cannot have this member's vote. A
// member waiting for a dead leader's chosen campaigner uses it to learn
// that the campaigner cannot win (its log is behind, a member rebuilt
// empty, say) and that it must stand itself.
func (g *Group) LogAhead(term, index uint64) bool {
	if g.failed != nil {
		return false
	}
	last, err := g.storage.LastIndex()
	if err != nil {
		return false
	}
	lastTerm, err := g.storage.Term(last)
	if err != nil {
		return false
	}
	return lastTerm > term || (lastTerm == term && last > index)
}
