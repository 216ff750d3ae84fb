package replica

import (
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/internal/testhooks"
)

// Input validation. etcd raft trusts its input: a message or a recovered
// log that breaks one of its invariants makes it panic (a snapshot whose
// voters do not survive its own round trip, a commit index beyond the log,
// a proposal without entries). Everything that reaches a Group from a peer
// or from disk is therefore checked here first, against what a correct
// member of this package's groups can send or write — static voters, no
// learners, no joint configurations, no membership changes, entries
// enveloped by Propose — and refused with ErrInvalidMessage or
// ErrCorruptLog. Whatever slips through is contained (see Group.guard).

// ErrInvalidMessage reports a raft message that no correct member of the
// group sends: it is refused before raft sees it, and the group is
// unaffected. The caller counts it.
var ErrInvalidMessage = errors.New("parkway: invalid raft message")

// ErrOutOfReach reports a raft message whose term is more than
// MaxTermStep ahead of this member's, or whose snapshot index is more
// than MaxIndexStep beyond this member's log (it wraps
// ErrInvalidMessage): no correct member sends it, and stepping it would
// spend the group's term or index space (see MaxTermStep). The caller
// counts it apart from other invalid messages.
var ErrOutOfReach = fmt.Errorf("%w: term or index out of reach", ErrInvalidMessage)

// MaxTermStep is how far ahead of this member's current term a peer's
// message may be: a message with a higher term is refused
// (ErrOutOfReach) before raft sees it.
//
// Why a bound relative to the receiver: raft adopts any higher term it is
// shown and persists it, and terms only grow. With only the absolute cap
// (maxTerm), one message at the cap from any member — a buggy one, or
// whoever holds its key — left every member it reached at the cap for
// good: no member could campaign again, restarts included. Relative to
// the receiver, one message moves a member's term by at most MaxTermStep,
// so spending the term space takes 2^30 accepted messages, each one a
// deliberate attack that a member can make more cheaply otherwise (see
// the README's security model).
//
// Why 2^32 is out of reach of a correct run: a member's term falls behind
// the group's only by the elections held without it, and each election
// takes at least an election timeout and, with PreVote and CheckQuorum
// (both set, see start), the pre-votes of a majority — a member cut off
// from the others does not raise its own term. 2^32 elections at one
// every 100 ms is over 13 years of nothing but elections. A member that
// restarts empty (term 0) learns the leader's term from its first append
// or heartbeat, which this bound lets through while the group has held
// fewer than 2^32 elections in its whole life. The trade-off: a member
// more than 2^32 terms behind would refuse the leader for good and have
// to be replaced; no correct run comes near it.
const MaxTermStep = 1 << 32

// MaxIndexStep is how far beyond this member's last log index a peer's
// snapshot may end: raft takes a snapshot at any index, and a member that
// restored one at the cap (maxIndex) could never append again — nor,
// once it led, could anyone take its appends. Only a snapshot moves a
// log's end without entries to fill the gap (an append must attach to
// the log it extends), so it is the one message bounded here. 2^48
// entries is nine years of a million entries a second; a member (a new
// one included, whose log is empty) is never that far behind its group,
// and spending the index space takes 2^14 forged snapshots — each one a
// member corrupting the group, which a member can (see the README's
// security model).
const MaxIndexStep = 1 << 48

// Bounds that guard raft's arithmetic: terms and indexes beyond them are
// unreachable (a group would need 2^62 elections or entries), and raft
// adds one to them.
const (
	maxTerm  = 1 << 62
	maxIndex = 1 << 62
)

// maxEntryBytes bounds the entries of one message: a member persists
// them as one raft log record, which cannot exceed maxRecord.
const maxEntryBytes = maxRecord - 1<<20

// envelopeSize is the proposal id Propose puts before every payload: a
// non-empty normal entry shorter than it fails Handle.
const envelopeSize = 8

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidMessage, fmt.Sprintf(format, args...))
}

// checkConfState accepts the configurations this package runs: voters
// and learners, each a member (when members is not nil), none twice and
// none both, no joint state, and no field raft does not know (raft
// compares conf states with proto.Equal, unknown fields included, and
// panics when they differ).
func checkConfState(cs *raftpb.ConfState, members []uint64) error {
	if cs == nil {
		return errors.New("no conf state")
	}
	if len(cs.ProtoReflect().GetUnknown()) != 0 {
		return errors.New("conf state has unknown fields")
	}
	voters := cs.GetVoters()
	if len(voters) == 0 {
		return errors.New("conf state has no voters")
	}
	if len(cs.GetVotersOutgoing()) != 0 || len(cs.GetLearnersNext()) != 0 || cs.GetAutoLeave() {
		return errors.New("conf state has a joint configuration")
	}
	learners := cs.GetLearners()
	if members != nil && len(voters)+len(learners) > len(members) {
		return fmt.Errorf("conf state has %d voters and %d learners, the group %d members", len(voters), len(learners), len(members))
	}
	sorted := slices.Sorted(slices.Values(voters))
	for i, v := range sorted {
		if v == 0 {
			return errors.New("conf state has voter 0")
		}
		if i > 0 && sorted[i-1] == v {
			return fmt.Errorf("conf state lists voter %d twice", v)
		}
		if members != nil && !slices.Contains(members, v) {
			return fmt.Errorf("conf state voter %d is not a member", v)
		}
	}
	sorted = slices.Sorted(slices.Values(learners))
	for i, v := range sorted {
		if v == 0 {
			return errors.New("conf state has learner 0")
		}
		if i > 0 && sorted[i-1] == v {
			return fmt.Errorf("conf state lists learner %d twice", v)
		}
		if slices.Contains(voters, v) {
			return fmt.Errorf("conf state lists %d as a voter and a learner", v)
		}
		if members != nil && !slices.Contains(members, v) {
			return fmt.Errorf("conf state learner %d is not a member", v)
		}
	}
	return nil
}

// checkSnapshotMeta checks what raft needs of a snapshot's metadata.
func checkSnapshotMeta(s *raftpb.Snapshot, members []uint64) error {
	md := s.GetMetadata()
	if md == nil {
		return errors.New("snapshot has no metadata")
	}
	if md.GetIndex() == 0 || md.GetIndex() > maxIndex {
		return fmt.Errorf("snapshot index %d out of range", md.GetIndex())
	}
	if md.GetTerm() == 0 || md.GetTerm() > maxTerm {
		return fmt.Errorf("snapshot term %d out of range", md.GetTerm())
	}
	return checkConfState(md.GetConfState(), members)
}

// checkEntries checks a run of entries that must follow (prevIndex,
// prevTerm) without a gap, with terms that never go back.
func checkEntries(ents []*raftpb.Entry, prevIndex, prevTerm uint64) error {
	for _, e := range ents {
		if e.GetIndex() != prevIndex+1 {
			return fmt.Errorf("entry %d follows entry %d", e.GetIndex(), prevIndex)
		}
		if e.GetTerm() == 0 || e.GetTerm() < prevTerm || e.GetTerm() > maxTerm {
			return fmt.Errorf("entry %d has term %d after term %d", e.GetIndex(), e.GetTerm(), prevTerm)
		}
		prevIndex, prevTerm = e.GetIndex(), e.GetTerm()
	}
	if prevIndex > maxIndex {
		return fmt.Errorf("entry index %d out of range", prevIndex)
	}
	return nil
}

// checkEntryKinds refuses entries this package never writes: normal
// entries too short for the proposal envelope, and membership changes
// other than adding a voter or a learner or removing a member — any
// membership change unless conf (a Dynamic group, or a log read back,
// whose group checks it again).
func checkEntryKinds(ents []*raftpb.Entry, conf bool) error {
	var size uint64
	for _, e := range ents {
		if t := e.GetType(); t == raftpb.EntryConfChange && conf {
			if err := checkConfChange(e.GetData()); err != nil {
				return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
			}
			if size += uint64(len(e.GetData())); size > maxEntryBytes {
				return fmt.Errorf("entries exceed %d bytes", maxEntryBytes)
			}
			continue
		} else if t != raftpb.EntryNormal {
			return fmt.Errorf("entry %d is a %v", e.GetIndex(), t)
		}
		if n := len(e.GetData()); n > 0 && n < envelopeSize {
			return fmt.Errorf("entry %d of %d bytes is shorter than its envelope", e.GetIndex(), n)
		}
		if size += uint64(len(e.GetData())); size > maxEntryBytes {
			return fmt.Errorf("entries exceed %d bytes", maxEntryBytes)
		}
	}
	return nil
}

// checkConfChange refuses a membership change this package never
// proposes: anything but adding a voter or a learner, or removing a
// member, one non-zero node at a time.
func checkConfChange(data []byte) error {
	var cc raftpb.ConfChange
	if err := proto.Unmarshal(data, &cc); err != nil {
		return fmt.Errorf("membership change: %w", err)
	}
	if len(cc.ProtoReflect().GetUnknown()) != 0 {
		return errors.New("membership change has unknown fields")
	}
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode, raftpb.ConfChangeRemoveNode:
	default:
		return fmt.Errorf("membership change of type %v", cc.GetType())
	}
	if cc.GetNodeId() == 0 {
		return errors.New("membership change of node 0")
	}
	return nil
}

// member reports whether from may send this member raft messages: one of
// Peers, or — in a Dynamic group — any node. A member of a Dynamic group
// that lags behind a membership change cannot know the voters added since
// (its configuration is the old one), and one of them may lead: refusing
// its messages would leave the lagging member behind for good. Which
// nodes may speak at all is the transport's to decide (it authenticates
// the sender); raft's term rules then judge what they say.
func (g *Group) member(from uint64) bool {
	return g.cfg.Dynamic || slices.Contains(g.cfg.Peers, from)
}

// checkMessage refuses a message no correct member of the group sends to
// this one in its current state, cur its current term (g.Term(): the
// caller reads it once for this and for what it does after).
func (g *Group) checkMessage(m *raftpb.Message, cur uint64) error {
	if m == nil {
		return invalidf("nil message")
	}
	typ := m.GetType()
	switch typ {
	case raftpb.MsgApp, raftpb.MsgAppResp, raftpb.MsgVote, raftpb.MsgVoteResp,
		raftpb.MsgPreVote, raftpb.MsgPreVoteResp, raftpb.MsgSnap,
		raftpb.MsgHeartbeat, raftpb.MsgHeartbeatResp,
		raftpb.MsgReadIndex, raftpb.MsgReadIndexResp:
	case raftpb.MsgProp:
		if !g.cfg.ForwardProposals {
			return invalidf("%v: the group does not forward proposals", typ)
		}
	case raftpb.MsgTimeoutNow:
		// The last step of a leadership transfer (TransferLeader): it
		// makes this member campaign past the leader's lease, so only the
		// leader this member knows, in its term, may send it.
		if lead := g.Leader(); lead == 0 || m.GetFrom() != lead || m.GetTerm() != cur {
			return invalidf("%v from %d at term %d, the leader is %d at term %d", typ, m.GetFrom(), m.GetTerm(), lead, cur)
		}
	default:
		// Local messages (raft's own): a peer never sends them.
		return invalidf("%v is never sent between members", typ)
	}
	if to := m.GetTo(); to != g.cfg.Node {
		return invalidf("%v addressed to %d, this member is %d", typ, to, g.cfg.Node)
	}
	if from := m.GetFrom(); from == g.cfg.Node || !g.member(from) {
		return invalidf("%v from %d, not another member", typ, from)
	}
	term := m.GetTerm()
	switch {
	case typ == raftpb.MsgProp || typ == raftpb.MsgReadIndex:
		// Forwarded requests carry no term (raft's rule); with one, raft
		// would judge them as a peer's term claim.
		if term != 0 {
			return invalidf("forwarded %v with term %d", typ, term)
		}
	case term == 0:
		// A term of 0 marks a local message: raft would skip its term
		// checks and take, say, a MsgApp as its current leader's.
		return invalidf("%v without a term", typ)
	case term > maxTerm:
		return invalidf("%v term %d out of range", typ, term)
	case term > cur+MaxTermStep && !testhooks.NoTermStep.Load():
		return fmt.Errorf("%w: %v from %d at term %d, this member at term %d", ErrOutOfReach, typ, m.GetFrom(), term, cur)
	}
	if m.GetLogTerm() > term {
		// A candidate's last entry, a leader's previous entry, a
		// follower's rejection hint: none is newer than its sender's term.
		return invalidf("%v log term %d beyond term %d", typ, m.GetLogTerm(), term)
	}
	if m.GetIndex() > maxIndex || m.GetCommit() > maxIndex || m.GetRejectHint() > maxIndex {
		return invalidf("%v index out of range", typ)
	}
	ents := m.GetEntries()
	switch typ {
	case raftpb.MsgApp:
		if err := checkEntries(ents, m.GetIndex(), m.GetLogTerm()); err != nil {
			return invalidf("%v: %v", typ, err)
		}
		if n := len(ents); n > 0 && ents[n-1].GetTerm() > term {
			return invalidf("%v at term %d carries an entry of term %d", typ, term, ents[n-1].GetTerm())
		}
		if err := checkEntryKinds(ents, g.cfg.Dynamic); err != nil {
			return invalidf("%v: %v", typ, err)
		}
	case raftpb.MsgProp:
		if len(ents) == 0 {
			return invalidf("%v without entries", typ)
		}
		if err := checkEntryKinds(ents, g.cfg.Dynamic); err != nil {
			return invalidf("%v: %v", typ, err)
		}
		for _, e := range ents {
			if len(e.GetData()) == 0 {
				return invalidf("%v with an empty entry", typ)
			}
		}
	case raftpb.MsgReadIndex, raftpb.MsgReadIndexResp:
		// The request context travels as the one entry's data.
		if len(ents) != 1 || len(ents[0].GetData()) > maxEntryBytes {
			return invalidf("%v with %d entries", typ, len(ents))
		}
	default:
		if len(ents) != 0 {
			return invalidf("%v with entries", typ)
		}
	}
	if typ != raftpb.MsgSnap {
		if m.GetSnapshot() != nil {
			return invalidf("%v with a snapshot", typ)
		}
	} else {
		s := m.GetSnapshot()
		if s == nil {
			return invalidf("%v without a snapshot", typ)
		}
		if err := checkSnapshotMeta(s, g.staticPeers()); err != nil {
			return invalidf("%v: %v", typ, err)
		}
		if st := s.GetMetadata().GetTerm(); st > term {
			return invalidf("%v at term %d carries a snapshot of term %d", typ, term, st)
		}
		last, err := g.storage.LastIndex()
		if idx := s.GetMetadata().GetIndex(); err != nil || idx > last+MaxIndexStep {
			return fmt.Errorf("%w: %v from %d with a snapshot at index %d, this member's log ends at %d", ErrOutOfReach, typ, m.GetFrom(), idx, last)
		}
		if g.cfg.CheckSnapshot != nil {
			if err := g.cfg.CheckSnapshot(s.GetData()); err != nil {
				return invalidf("%v: snapshot data: %v", typ, err)
			}
		}
	}
	if typ == raftpb.MsgHeartbeat {
		// A leader's heartbeat commits at most what this member
		// acknowledged, hence persisted: raft panics on a commit beyond
		// its log.
		last, err := g.storage.LastIndex()
		if err != nil || m.GetCommit() > last {
			return invalidf("%v commits %d beyond the log's last index %d", typ, m.GetCommit(), last)
		}
	}
	return nil
}
