// Package replica is one raft group as a single-threaded state machine: a
// thin layer over go.etcd.io/raft/v3's RawNode that the owner drives by
// hand — Tick, Step, Propose, then Handle to persist, send and apply what
// raft has ready. It starts no goroutine and reads no clock, so a shard's
// pump can host many groups (multi-raft) and a simulator can drive them
// deterministically.
//
// Proposals are enveloped with a proposal id so the proposer can match a
// committed entry to the request waiting for it; entries proposed by other
// nodes, or by an earlier life of this one, carry ids this Group never
// issued (each start draws a random base) and simply apply.
//
// With a Disk the member's hard state, entries and latest snapshot are
// persisted before the messages that depend on them are sent, so a
// restarted member comes back with its votes and acknowledged entries;
// Compact cuts the log behind a snapshot the owner provides, and
// ReadIndex confirms leadership for linearizable reads.
//
// A follower with nothing to do may hibernate (Hibernate): it drops its
// raft node, most of what an idle member costs, and every call that
// needs raft rebuilds it, knowing its leader and with its lease as it
// was (hibernate.go).
//
// Messages from peers and the recovered log are hostile input: Step
// refuses a message no correct member sends (ErrInvalidMessage), and New
// refuses a log whose records contradict each other (ErrCorruptLog), both
// before etcd raft, which panics on such input, sees them. A panic that
// still happens inside a group — raft's or the Handler's — is contained:
// the group is failed (ErrGroupFailed), every later call returns that
// error, and the process and its other groups go on.
package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metrics"
)

// Config configures a Group.
type Config struct {
	// Group identifies the group (a partition's namespace, or the metadata
	// group); it only labels logs here.
	Group uint64
	// Node is this node's raft id (non-zero); Peers lists every voter of
	// a new group, this node included (ProposeConfChange changes them).
	Node  uint64
	Peers []uint64
	// Dynamic lets the membership change (ProposeConfChange): a message
	// is taken from any voter of the current configuration as well as
	// from Peers, membership changes travel in appends, and a snapshot's
	// voters need not be among Peers.
	Dynamic bool
	// Join starts a member that joins a running group: with no snapshot
	// on its Disk (nothing at all, or only the term and vote it saved
	// before its first snapshot arrived) it starts empty — no initial
	// snapshot, not a voter — and waits for the leader, once a
	// configuration change added it, to send it the group's state as a
	// snapshot.
	Join bool
	// ForwardProposals lets a follower propose: raft forwards the entry
	// to the leader. The proposer learns the outcome only by seeing its
	// proposal id applied, so its caller needs a deadline. Partition
	// groups leave it off and answer "not leader" instead.
	ForwardProposals bool
	// InitialData is the state machine's state in a new group's initial
	// snapshot (the one every founding member starts from): what a member
	// that joins later is sent when the log was never compacted.
	InitialData []byte
	// ElectionTicks and HeartbeatTicks are in Tick calls (defaults 10
	// and 1, raft's conventional ratio).
	ElectionTicks, HeartbeatTicks int
	// Logger receives raft's own logging (default: silent).
	Logger hclog.Logger
	// Disk persists the member's raft state; nil keeps it in memory only,
	// and such a member must never restart under the same id (it would
	// forget its votes and the entries it acknowledged). A Disk that
	// holds state restores the member from it: the owner reads the
	// snapshot with Snapshot and restores its state machine, and the
	// entries after it are applied again through Handle.
	Disk *Disk
	// CatchUpEntries is how many entries before a snapshot stay in memory
	// after compaction, so a follower that lags by less catches up from
	// the log instead of needing the snapshot (default 512).
	CatchUpEntries uint64
	// CheckSnapshot, if set, vets the data of a snapshot a peer sends
	// before Step hands it to raft: data the owner's ApplySnapshot would
	// refuse is then an invalid message, not a failed group.
	CheckSnapshot func(data []byte) error
	// Applied is how far the owner's state machine has already applied
	// this member's log, when the member is reopened from its Disk while
	// the owner's state survives (a Handle failed and the owner reopens
	// just this group): committed entries up to it are not handed to
	// Apply again. It must not exceed the commit index the Disk holds —
	// everything applied was committed, and committed durably before it
	// was applied — or New refuses the log with ErrCorruptLog. Zero, or an
	// index at or below the snapshot's, applies from the snapshot on.
	Applied uint64
	// Metrics, when its fields are set, observes the group: a leader's
	// commit latency (timed with Clock; nil: not timed) and the elections
	// this member learns of. Fsync, when set, observes the Disk's fsyncs.
	Metrics metrics.RaftGroup
	Clock   clock.Clock
	Fsync   prometheus.Observer
}

// DefaultElectionTicks is a group's election timeout, in ticks, when
// Config.ElectionTicks is 0.
const DefaultElectionTicks = 10

// commitMarks is how many of a leader's recent appends a group remembers
// the time of, to observe their commit latency: more appends in flight
// than this go unobserved (the oldest are overwritten), which bounds the
// memory per group to a few hundred bytes.
const commitMarks = 32

// commitMark is when a leader appended the entry at index.
type commitMark struct {
	index uint64
	at    int64 // Unix nanoseconds on Config.Clock
}

// Group is one raft group member. Not safe for concurrent use.
type Group struct {
	cfg Config
	// rn is the raft node; nil while the member hibernates (hibernate.go),
	// rebuilt from storage, cs and lead when anything needs it.
	rn      *raft.RawNode
	storage *logStorage
	cs      *raftpb.ConfState // the voters as of the last applied entry
	applied uint64
	snap    uint64 // index of the latest snapshot
	// readStates are the read states Handle collected since the last
	// TakeReadStates, behind a pointer that only a member that reads
	// allocates (the room it leaves holds quiet: TestGroupSize).
	readStates *[]raft.ReadState
	nextID     uint64
	lead       uint64
	// quiet is how many ticks raft counted since the leader last spoke
	// (hibernate.go): the election clock a rebuilt node starts from.
	quiet int
	// envelope is where a leader's Propose builds the entry (see there),
	// behind a pointer that only a proposing leader allocates: with it
	// and the fields' order, a Group fits the allocator's 320-byte class
	// (TestGroupSize).
	envelope *[]byte
	// failed is why the group stopped (an ErrGroupFailed), or nil.
	failed error
	// marks are the leader's recent appends (commitMarks), allocated when
	// it first leads with a commit observer; electedTerm is the term of
	// the last leader counted as an election.
	marks       *[commitMarks]commitMark
	electedTerm uint64
	// snapCurrent: SnapshotStale found the latest snapshot naming every
	// member of cs, and neither changed since (every assignment of cs or
	// of the snapshot clears it, Compact sets it). SnapshotStale is asked
	// after every Ready the owner applies, and reading both
	// configurations of each of many groups cost a few percent of a
	// creation of thousands of partitions (issue 33).
	snapCurrent bool
}

var (
	// ErrNotLeader is returned by Propose on a follower.
	ErrNotLeader = errors.New("parkway: not the raft leader")
	// ErrNoLeader is returned by Propose while no leader is known.
	ErrNoLeader = errors.New("parkway: no raft leader known")
	errShort    = errors.New("parkway: raft entry shorter than its envelope")
	// ErrGroupFailed reports a group that stopped: raft (or the Handler)
	// panicked inside one of its calls, or a Handle failed half way, which
	// leaves raft waiting for an Advance that never comes. The error wraps
	// the cause. Every later call that would reach raft returns it; the
	// owner fences what the group replicates and closes it, and a restart
	// recovers the member from its Disk.
	ErrGroupFailed = errors.New("parkway: raft group failed")
)

// PanicError is the cause of an ErrGroupFailed raised by a panic: the value
// passed to panic and the stack it was raised on.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// fail stops the group for cause (once) and returns why it stopped.
func (g *Group) fail(cause error) error {
	if g.failed == nil {
		g.failed = fmt.Errorf("%w: group %d: %w", ErrGroupFailed, g.cfg.Group, cause)
	}
	return g.failed
}

// guard contains a panic raised below a Group call: deferred by every
// method that reaches raft or the Handler, it turns the panic into the
// group's failure and stores it in *err. The raft state may be half
// updated, so the group is never driven again.
func (g *Group) guard(err *error) {
	r := recover()
	if r == nil {
		return
	}
	pe := &PanicError{Value: r, Stack: debug.Stack()}
	g.cfg.Logger.Error("raft group panicked; the group is stopped", "group", g.cfg.Group, "panic", fmt.Sprint(r), "stack", string(pe.Stack))
	*err = g.fail(pe)
}

// Err returns why the group stopped (an error matching ErrGroupFailed),
// or nil while it runs.
func (g *Group) Err() error { return g.failed }

// New starts a group member. A new group starts every member from the
// same initial snapshot — index 1, term 1, every peer a voter — rather
// than from raft's bootstrap entries, so the voters are always in the
// snapshot and a restarted member knows them before it applies anything.
func New(cfg Config) (g *Group, err error) {
	if cfg.Node == 0 || len(cfg.Peers) == 0 {
		return nil, fmt.Errorf("parkway: raft group %d needs a node id and peers", cfg.Group)
	}
	if err := checkConfState(&raftpb.ConfState{Voters: cfg.Peers}, nil); err != nil {
		return nil, fmt.Errorf("parkway: raft group %d peers: %w", cfg.Group, err)
	}
	if cfg.ElectionTicks == 0 {
		cfg.ElectionTicks = DefaultElectionTicks
	}
	if cfg.HeartbeatTicks == 0 {
		cfg.HeartbeatTicks = 1
	}
	if cfg.CatchUpEntries == 0 {
		cfg.CatchUpEntries = 512
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	storage := &logStorage{}
	// Proposal ids start from a random base on every start: a member
	// that restarts must not reissue the ids its earlier life gave entries
	// still in the log, or re-applying one would answer the new proposal
	// waiting under the same id.
	base, err := IDBase()
	if err != nil {
		return nil, fmt.Errorf("parkway: raft group %d: proposal id base: %w", cfg.Group, err)
	}
	g = &Group{cfg: cfg, storage: storage, nextID: base}
	if cfg.Disk != nil && cfg.Fsync != nil {
		cfg.Disk.ObserveSyncs(cfg.Fsync)
	}
	var rec Recovered
	if g.cfg.Disk != nil {
		rec = g.cfg.Disk.Recovered()
		// OpenDisk checked the records against each other; what is left
		// needs the group's members.
		if rec.Snapshot != nil {
			if err := checkConfState(rec.Snapshot.GetMetadata().GetConfState(), g.staticPeers()); err != nil {
				return nil, g.cfg.Disk.corrupt(g.cfg.Disk.snapOff, err)
			}
		}
	}
	// Defence in depth: OpenDisk and the check above refuse what is known
	// to make raft panic; anything else raft panics on is a log it cannot
	// run from, not a crash.
	defer func() {
		if r := recover(); r != nil {
			g, err = nil, fmt.Errorf("%w: group %d: raft refused the recovered state: %v", ErrCorruptLog, cfg.Group, r)
		}
	}()
	if cfg.Join && rec.Snapshot.GetMetadata().GetIndex() == 0 && len(rec.Entries) == 0 {
		// A joining member that has installed no snapshot yet. Its log
		// may hold the hard state it saved on hearing from the leader
		// (term and vote) before the snapshot came, or before a write
		// of it failed: it restarts as the joiner it still is, keeping
		// its term and vote. With no log, nothing is committed.
		g.cs = &raftpb.ConfState{}
		if hs := rec.HardState; hs != nil {
			if err := storage.SetHardState(&raftpb.HardState{Term: new(hs.GetTerm()), Vote: new(hs.GetVote()), Commit: new(uint64(0))}); err != nil {
				return nil, err
			}
		}
		if err := g.start(storage); err != nil {
			return nil, err
		}
		return g, nil
	}
	if rec.empty() {
		rec = Recovered{
			Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
				Index: new(uint64(1)), Term: new(uint64(1)),
				ConfState: &raftpb.ConfState{Voters: slices.Clone(cfg.Peers)},
			}, Data: cfg.InitialData},
			HardState: &raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))},
		}
		if g.cfg.Disk != nil {
			if err := g.cfg.Disk.Save(rec.Snapshot, nil, rec.HardState); err != nil {
				return nil, err
			}
		}
	}
	if rec.Snapshot == nil || rec.Snapshot.GetMetadata().GetIndex() == 0 {
		return nil, fmt.Errorf("%w: group %d: no snapshot", ErrCorruptLog, cfg.Group)
	}
	if err := storage.ApplySnapshot(rec.Snapshot); err != nil {
		return nil, err
	}
	// A snapshot is applied, hence committed, state. The hard state saved
	// after it may have been torn away (Save writes the snapshot record
	// first): the commit index is then raised to the snapshot's, and the
	// term to at least its term, rather than handed to raft below it.
	if md := rec.Snapshot.GetMetadata(); rec.HardState == nil || rec.HardState.GetCommit() < md.GetIndex() || rec.HardState.GetTerm() < md.GetTerm() {
		hs := &raftpb.HardState{Term: new(max(rec.HardState.GetTerm(), md.GetTerm())),
			Vote: new(rec.HardState.GetVote()), Commit: new(max(rec.HardState.GetCommit(), md.GetIndex()))}
		if rec.HardState.GetTerm() < md.GetTerm() {
			hs.Vote = new(uint64(0)) // a vote belongs to its term
		}
		rec.HardState = hs
	}
	if rec.HardState != nil {
		if err := storage.SetHardState(rec.HardState); err != nil {
			return nil, err
		}
	}
	if err := storage.Append(rec.Entries); err != nil {
		return nil, err
	}
	g.snap = rec.Snapshot.GetMetadata().GetIndex()
	g.applied = g.snap
	if cfg.Applied > g.applied {
		if commit := rec.HardState.GetCommit(); cfg.Applied > commit {
			return nil, fmt.Errorf("%w: group %d: the log commits up to index %d, but its owner applied up to %d", ErrCorruptLog, cfg.Group, commit, cfg.Applied)
		}
		g.applied = cfg.Applied
	}
	g.cs = rec.Snapshot.GetMetadata().GetConfState()
	// Configuration changes after the snapshot are in the entries. raft
	// delivers none of the entries up to Applied again, so it starts from
	// the configuration as of Applied, not the snapshot's: a change
	// between the two would otherwise never reach it. The voters are that
	// configuration too, not the one as of the log's end: a change beyond
	// Applied may never commit (a leader cut off as it proposed it), and a
	// new leader overwrites it; counted already, it would stay counted —
	// a move driver taking a voter for added that the group never had.
	// raft applies the changes after Applied as it applies them (Handle).
	var atApplied *raftpb.ConfState
	for _, e := range rec.Entries {
		if e.GetIndex() > g.applied {
			break
		}
		if cs := confAfter(g.cs, e); cs != nil {
			g.cs, atApplied = cs, cs
		}
	}
	var st raft.Storage = storage
	if atApplied != nil {
		st = confStorage{storage, atApplied}
	}
	if err := g.start(st); err != nil {
		return nil, err
	}
	return g, nil
}

// confStorage is the raft log's storage with the configuration raft
// restarts from replaced: the one as of the entries the owner applied
// (raft reads it once, when it starts).
type confStorage struct {
	*logStorage
	cs *raftpb.ConfState
}

func (s confStorage) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	hs, _, err := s.logStorage.InitialState()
	return hs, proto.Clone(s.cs).(*raftpb.ConfState), err
}

// start builds the raft node over storage.
func (g *Group) start(storage raft.Storage) error {
	cfg := g.cfg
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        cfg.Node,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   storage,
		Applied:                   g.applied,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 64 << 20,
		// CheckQuorum makes a leader cut off from a majority step down, so
		// a minority side stops accepting writes; PreVote keeps a
		// partitioned node from disrupting the majority when it returns.
		CheckQuorum: true,
		PreVote:     true,
		// A leader that applies its own removal stops leading at once
		// rather than leading a group it is no longer a member of.
		StepDownOnRemoval: true,
		Logger:            raftLogger{cfg.Logger.Named("raft")},
	})
	if err != nil {
		return err
	}
	g.rn = rn
	return nil
}

// confAfter is the configuration after entry e on top of cs, or nil when
// e changes nothing. Only adding a learner, adding (or promoting) a voter
// and removing a member are ever proposed, one node at a time, as raft
// applies them: a learner added is no voter, a voter added is no longer
// a learner, and a removal takes either.
func confAfter(cs *raftpb.ConfState, e *raftpb.Entry) *raftpb.ConfState {
	if e.GetType() != raftpb.EntryConfChange {
		return nil
	}
	var cc raftpb.ConfChange
	if proto.Unmarshal(e.GetData(), &cc) != nil {
		return nil
	}
	voters, learners := slices.Clone(cs.GetVoters()), slices.Clone(cs.GetLearners())
	is := func(v uint64) func(uint64) bool { return func(x uint64) bool { return x == v } }
	switch id := cc.GetNodeId(); cc.GetType() {
	case raftpb.ConfChangeAddNode:
		learners = slices.DeleteFunc(learners, is(id))
		if !slices.Contains(voters, id) {
			voters = append(voters, id)
		}
	case raftpb.ConfChangeAddLearnerNode:
		if slices.Contains(voters, id) {
			return nil // a voter is never demoted (Handle applies it as no change)
		}
		if !slices.Contains(learners, id) {
			learners = append(learners, id)
		}
	case raftpb.ConfChangeRemoveNode:
		voters = slices.DeleteFunc(voters, is(id))
		learners = slices.DeleteFunc(learners, is(id))
	default:
		return nil
	}
	if len(learners) == 0 {
		learners = nil
	}
	return &raftpb.ConfState{Voters: voters, Learners: learners}
}

// ProposeConfChange proposes a change of the group's voters (a Dynamic
// group only): adding or removing one member, with ctx carried to every
// member's ConfChanger. raft takes one change at a time: a proposal while
// another is not yet applied is dropped (ErrProposalDropped), and the
// caller tries again. A follower forwards it to the leader.
func (g *Group) ProposeConfChange(add bool, node uint64, ctx []byte) (err error) {
	if g.failed != nil {
		return g.failed
	}
	if !g.cfg.Dynamic {
		return fmt.Errorf("parkway: raft group %d has a static membership", g.cfg.Group)
	}
	if node == 0 {
		return fmt.Errorf("parkway: raft group %d: configuration change of node 0", g.cfg.Group)
	}
	defer g.guard(&err)
	if g.Leader() == 0 {
		return ErrNoLeader
	}
	if err := g.awaken(); err != nil {
		return err
	}
	typ := raftpb.ConfChangeRemoveNode
	if add {
		typ = raftpb.ConfChangeAddNode
	}
	return g.rn.ProposeConfChange(&raftpb.ConfChange{Type: typ.Enum(), NodeId: new(node), Context: ctx})
}

// ProposeLearner proposes adding node as a learner (a Dynamic group
// only): a member that receives the log and votes in no election and no
// quorum, so a group that adds one keeps its fault tolerance while the
// newcomer catches up. ProposeConfChange(true, node, ctx) later promotes
// it to a voter. The rules of ProposeConfChange hold: one change at a
// time, the caller tries again. A learner's addition that finds node a
// voter when it applies changes nothing (raft itself would demote the
// voter): one proposed again after the promotion, by a member whose view
// lagged, is harmless.
func (g *Group) ProposeLearner(node uint64, ctx []byte) (err error) {
	if g.failed != nil {
		return g.failed
	}
	if !g.cfg.Dynamic {
		return fmt.Errorf("parkway: raft group %d has a static membership", g.cfg.Group)
	}
	if node == 0 {
		return fmt.Errorf("parkway: raft group %d: configuration change of node 0", g.cfg.Group)
	}
	defer g.guard(&err)
	if g.Leader() == 0 {
		return ErrNoLeader
	}
	if err := g.awaken(); err != nil {
		return err
	}
	return g.rn.ProposeConfChange(&raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: new(node), Context: ctx})
}

// staticPeers is what a snapshot's voters must be among: Peers, or
// anything in a Dynamic group, whose voters change.
func (g *Group) staticPeers() []uint64 {
	if g.cfg.Dynamic {
		return nil
	}
	return g.cfg.Peers
}

// Voters are the group's voters as this member last applied them.
func (g *Group) Voters() []uint64 { return slices.Clone(g.cs.GetVoters()) }

// Learners are the group's learners as this member last applied them:
// members that receive the log but vote in nothing.
func (g *Group) Learners() []uint64 { return slices.Clone(g.cs.GetLearners()) }

// IsLearner reports whether node is a learner as this member last applied
// the configuration.
func (g *Group) IsLearner(node uint64) bool { return slices.Contains(g.cs.GetLearners(), node) }

// AppliedLearners are the learners of the configuration raft itself
// holds, as AppliedVoters (none for a failed group).
func (g *Group) AppliedLearners() []uint64 {
	if g.failed != nil {
		return nil
	}
	if g.rn == nil {
		// A hibernating member applied everything: raft's configuration
		// is the one as of the applied index.
		return slices.Sorted(slices.Values(g.cs.GetLearners()))
	}
	ids := g.rn.Status().Config.Learners
	out := make([]uint64, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// AppliedVoters are the voters of the configuration raft itself holds:
// the last one it applied, as Voters. A failed group reports none: raft
// may have taken a configuration (from a snapshot whose write then
// failed) that its state machine never received, and the owner reopens
// the member from its log.
func (g *Group) AppliedVoters() []uint64 {
	if g.failed != nil {
		return nil
	}
	if g.rn == nil {
		return slices.Sorted(slices.Values(g.cs.GetVoters())) // as AppliedLearners
	}
	ids := g.rn.Status().Config.Voters.IDs()
	out := make([]uint64, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// ConfChanger is an optional Handler method: it is called when a change of
// the group's members is applied, at its index, with the context the
// proposer gave it, after raft applied it. add is true for a learner
// added and for a voter added or promoted (Voters and Learners then tell
// which; a learner's addition that named a voter changed nothing), false
// for a member removed.
type ConfChanger interface {
	ConfChanged(index uint64, add bool, node uint64, ctx []byte) error
}

// Snapshot returns the index and data of the member's latest snapshot:
// after New, what the owner restores its state machine from before Handle
// applies the entries that follow it (nil data: the initial, empty state).
func (g *Group) Snapshot() (index uint64, data []byte) {
	return g.storage.snapIndex, g.storage.snapData
}

// Committed is the member's commit index: on the leader, the index up
// to which a quorum of voters holds the log (0 for a failed group).
func (g *Group) Committed() uint64 {
	if g.failed != nil {
		return 0
	}
	if g.rn == nil {
		return g.storage.hs.commit // hibernating: all of it persisted
	}
	return g.rn.BasicStatus().HardState.GetCommit()
}

// Applied is the index of the last entry applied (or of the snapshot
// restored).
func (g *Group) Applied() uint64 { return g.applied }

// SnapshotIndex is the index of the latest snapshot.
func (g *Group) SnapshotIndex() uint64 { return g.snap }

// SnapshotStale reports whether the latest snapshot leaves out a voter or
// learner of the configuration as of the last applied entry: a member
// added since. raft can send such a member only the latest snapshot, and
// the member refuses one that does not name it (sendSnapshot withholds
// it), so the owner compacts as soon as it can: a joining member takes
// only a snapshot taken after it was added. False for a failed group.
func (g *Group) SnapshotStale() bool {
	if g.failed != nil || g.snapCurrent {
		return false
	}
	snap := g.storage.snapConf
	for _, id := range g.cs.GetVoters() {
		if !names(snap, id) {
			return true
		}
	}
	for _, id := range g.cs.GetLearners() {
		if !names(snap, id) {
			return true
		}
	}
	g.snapCurrent = true
	return false
}

// Compact records data as the state machine's state at index (at most
// Applied) and drops the log before it, keeping CatchUpEntries entries in
// memory for lagging followers. With a Disk the log file is rewritten to
// the snapshot plus the entries after it. The owner must have made the
// state at index durable first: after this, the entries that built it are
// gone.
func (g *Group) Compact(index uint64, data []byte) (err error) {
	if g.failed != nil {
		return g.failed
	}
	defer g.guard(&err)
	if index > g.applied || index <= g.snap {
		return fmt.Errorf("parkway: raft group %d: compact at %d outside (%d, %d]", g.cfg.Group, index, g.snap, g.applied)
	}
	snap, err := g.storage.CreateSnapshot(index, g.cs, data)
	if err != nil {
		return err
	}
	g.snapCurrent = false // the snapshot's configuration changed: SnapshotStale reads it again
	if g.cfg.Disk != nil {
		hs, _, _ := g.storage.InitialState()
		last, _ := g.storage.LastIndex()
		var ents []*raftpb.Entry
		if last > index {
			if ents, err = g.storage.Entries(index+1, last+1, math.MaxUint64); err != nil {
				return err
			}
		}
		if err := g.cfg.Disk.Rewrite(snap, hs, ents); err != nil {
			return err
		}
	}
	g.snap = index
	if index > g.cfg.CatchUpEntries {
		if err := g.storage.Compact(index - g.cfg.CatchUpEntries); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	return nil
}

// Disk is the member's raft log (nil: memory only).
func (g *Group) Disk() *Disk { return g.cfg.Disk }

// Close closes the member's raft log.
func (g *Group) Close() error {
	if g.cfg.Disk == nil {
		return nil
	}
	return g.cfg.Disk.Close()
}

// Tick advances the group's logical clock by one tick. It fails only
// with ErrGroupFailed.
func (g *Group) Tick() (err error) {
	if g.failed != nil {
		return g.failed
	}
	defer g.guard(&err)
	if err := g.awaken(); err != nil {
		return err
	}
	g.rn.Tick()
	if g.quiet < math.MaxInt32 {
		g.quiet++
	}
	return nil
}

// Step feeds a message from a peer. A message no correct member sends is
// refused with ErrInvalidMessage and changes nothing; raft's own refusals
// (a stale or misdirected message) are returned as raft gives them.
func (g *Group) Step(m *raftpb.Message) (err error) {
	if g.failed != nil {
		return g.failed
	}
	term := g.Term()
	if err := g.checkMessage(m, term); err != nil {
		return err
	}
	defer g.guard(&err)
	if err := g.awaken(); err != nil {
		return err
	}
	if err := g.rn.Step(m); err != nil {
		return err
	}
	switch m.GetType() {
	case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap:
		// raft restarts its election clock on a leader's message at its
		// term or above (it follows the sender then): so does quiet.
		if m.GetTerm() >= term {
			g.quiet = 0
		}
	}
	return nil
}

// Campaign makes this member stand for election now (tests, and a host
// that wants a preferred leader).
//
// A member of a group that has never held an election (term 1: a new
// group's first campaign) asks for votes at once, without raft's
// pre-vote round, so a new group has its leader after one round trip,
// not two. Pre-vote exists so that a member returning from a partition
// with a raised term does not depose a working leader; this vote can
// raise no one's term past 2, and a leader elected without this member
// holds term 2 at least, so it neither deposes a leader nor is followed
// by the higher-term answer that would (raft answers a lower-term
// leader's append with its own term; the leader's term is not lower). A
// member that has seen an election campaigns through pre-vote as
// before.
func (g *Group) Campaign() (err error) {
	if g.failed != nil {
		return g.failed
	}
	defer g.guard(&err)
	if err := g.awaken(); err != nil {
		return err
	}
	if st := g.rn.BasicStatus(); st.HardState.GetTerm() <= 1 && st.RaftState == raft.StateFollower {
		// raft's own way to campaign without pre-vote is a leadership
		// transfer's: a local MsgTimeoutNow (term 0) makes a follower
		// stand at once.
		return g.rn.Step(&raftpb.Message{Type: raftpb.MessageType_MsgTimeoutNow.Enum(), To: new(g.cfg.Node), From: new(g.cfg.Node)})
	}
	return g.rn.Campaign()
}

// TransferLeader asks the leader to hand leadership to member to: raft
// brings to's log up to date, then tells it to campaign at once. The
// transfer is abandoned after an election timeout if it does not happen;
// proposals are dropped while it is under way. Only a leader transfers.
// It fails only with ErrGroupFailed.
func (g *Group) TransferLeader(to uint64) (err error) {
	if g.failed != nil {
		return g.failed
	}
	defer g.guard(&err)
	if err := g.awaken(); err != nil {
		return err
	}
	g.rn.TransferLeader(to)
	return nil
}

// Caught reports, on the leader, whether node is a voter or learner whose
// log the leader knows to reach its latest snapshot and that it
// replicates to normally (not probing, not sending a snapshot): a member
// that joined has installed a snapshot taken after it was added. False
// elsewhere.
func (g *Group) Caught(node uint64) (ok bool) {
	if g.failed != nil || !g.IsLeader() {
		return false
	}
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == node {
			ok = pr.Match >= g.snap && pr.State == tracker.StateReplicate
		}
	})
	return ok
}

// Match reports, on the leader, the highest log index the leader knows
// node's log to hold; 0 elsewhere, or for a node that is neither a voter
// nor a learner. On one leader it never decreases: the move driver reads
// a rise as a newcomer making progress towards Caught.
func (g *Group) Match(node uint64) (match uint64) {
	if g.failed != nil || !g.IsLeader() {
		return 0
	}
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == node {
			match = pr.Match
		}
	})
	return match
}

// Leader is the member this one believes leads (0: none known, or the
// group failed).
func (g *Group) Leader() uint64 {
	if g.failed != nil {
		return 0
	}
	if g.rn == nil {
		return g.lead // hibernating: the leader it followed
	}
	return g.rn.BasicStatus().Lead
}

// ReadIndex asks the group to confirm this member's leadership for a
// read: once a quorum has acknowledged it (a heartbeat round), the read
// state with ctx and the commit index at the time of the request comes
// out of a later Handle, and TakeReadStates returns it. A read served once
// the applied index reaches that index is linearizable. Requests are
// dropped silently when leadership is lost: the owner must answer its
// waiting reads on LeaderChanged. It fails only with ErrGroupFailed.
func (g *Group) ReadIndex(ctx []byte) (err error) {
	if g.failed != nil {
		return g.failed
	}
	defer g.guard(&err)
	if err := g.awaken(); err != nil {
		return err
	}
	g.rn.ReadIndex(ctx)
	return nil
}

// TakeReadStates returns the read states Handle collected since the last
// call.
func (g *Group) TakeReadStates() []raft.ReadState {
	if g.readStates == nil {
		return nil
	}
	rs := *g.readStates
	*g.readStates = nil
	return rs
}

// IsLeader reports whether this member leads.
func (g *Group) IsLeader() bool { return g.Leader() == g.cfg.Node }

// Propose proposes payload and returns its proposal id. The payload is
// copied: the caller may reuse it as soon as Propose returns. Only the leader
// proposes: a follower would forward the proposal, and an entry forwarded
// and then dropped by a leader change leaves its request with no outcome.
func (g *Group) Propose(payload []byte) (_ uint64, err error) {
	if g.failed != nil {
		return 0, g.failed
	}
	defer g.guard(&err)
	if !g.cfg.ForwardProposals && !g.IsLeader() {
		return 0, ErrNotLeader
	}
	if g.Leader() == 0 {
		return 0, ErrNoLeader
	}
	if err := g.awaken(); err != nil {
		return 0, err
	}
	g.nextID++
	id := g.nextID
	// A leader's raft clones a proposed entry, its data included, before
	// Propose returns (raft.appendEntry), so a group that never forwards
	// proposals builds the entry in a buffer it reuses (up to 64 KiB);
	// a forwarding follower's proposal travels on as it is, so it gets a
	// buffer of its own. TestReplicateAndFailOver proposes several entries
	// before any is sent and would see them all alike if raft kept it.
	var data []byte
	if !g.cfg.ForwardProposals {
		if g.envelope != nil {
			data = (*g.envelope)[:0]
		}
	}
	data = binary.LittleEndian.AppendUint64(slices.Grow(data, 8+len(payload)), id)
	data = append(data, payload...)
	if !g.cfg.ForwardProposals && cap(data) <= maxEnvelope {
		if g.envelope == nil {
			g.envelope = new([]byte)
		}
		*g.envelope = data[:0]
	}
	if err := g.rn.Propose(data); err != nil {
		return 0, err
	}
	return id, nil
}

// maxEnvelope bounds the proposal buffer a Group keeps: a large entry's
// is let go rather than held for the group's life.
const maxEnvelope = 64 << 10

// HasReady reports whether Handle has work (never once the group
// failed).
func (g *Group) HasReady() bool {
	if g.failed != nil || g.rn == nil {
		return false // a hibernating member has nothing ready
	}
	return g.rn.HasReady()
}

// Handler receives what a Ready produces.
type Handler interface {
	// Send delivers a raft message to its peer (m.To); loss is fine, raft
	// re-sends.
	Send(m *raftpb.Message)
	// Apply applies a committed entry, in log order, exactly once per
	// member. id is the proposal id (0 for entries with no envelope).
	Apply(index, id uint64, payload []byte) error
	// LeaderChanged reports a change of leader (0: none known). Proposals
	// this member made as leader may or may not commit after it.
	LeaderChanged(lead uint64)
	// ApplySnapshot replaces the state machine with a snapshot the leader
	// sent (the member lagged behind the leader's compacted log). The
	// entries after index follow through Apply.
	ApplySnapshot(index uint64, data []byte) error
}

// BeforeSave is an optional Handler method, called before a Ready is
// written to the Disk: an owner that holds sent messages back (to batch
// them) hands them over there, so none waits for the write of the log.
type BeforeSave interface{ BeforeSave() }

// Handle processes one Ready: the snapshot, entries and hard state are
// persisted (synced if the Disk says so) before the messages that depend
// on them are sent (a leader's messages depend on nothing it persists),
// committed entries are applied in order, and the group is advanced.
//
// An error leaves the Ready half handled, and raft cannot take another
// without its Advance: the group is failed, and the error matches both
// ErrGroupFailed and its cause.
func (g *Group) Handle(h Handler) (err error) {
	if g.failed != nil {
		return g.failed
	}
	defer g.guard(&err)
	if g.rn == nil || !g.rn.HasReady() {
		return nil
	}
	rd := g.rn.Ready()
	if err := g.handle(h, rd); err != nil {
		return g.fail(err)
	}
	g.rn.Advance(rd)
	return nil
}

func (g *Group) handle(h Handler, rd raft.Ready) error {
	if rd.SoftState != nil && rd.SoftState.Lead != g.lead {
		g.lead = rd.SoftState.Lead
		g.leaderObserved()
		h.LeaderChanged(g.lead)
	}
	if len(rd.ReadStates) > 0 {
		if g.readStates == nil {
			g.readStates = new([]raft.ReadState)
		}
		*g.readStates = append(*g.readStates, rd.ReadStates...)
	}
	hasSnap := !raft.IsEmptySnap(rd.Snapshot)
	// A leader sends before it persists: its appends reach the followers
	// while it writes its own copy, so a commit waits for the slowest of
	// the quorum's fsyncs, not for the leader's and then a follower's.
	// Safe (raft thesis §10.2.1): the leader counts its own copy toward a
	// commit only when Advance confirms it was persisted.
	early := g.rn.BasicStatus().RaftState == raft.StateLeader
	if early {
		g.send(h, rd.Messages)
	}
	if g.cfg.Disk != nil {
		var snap *raftpb.Snapshot
		if hasSnap {
			snap = rd.Snapshot
		}
		if f, ok := h.(BeforeSave); ok && (hasSnap || len(rd.Entries) > 0 || (rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState))) {
			f.BeforeSave()
		}
		if err := g.cfg.Disk.Save(snap, rd.Entries, rd.HardState); err != nil {
			return err
		}
	}
	if hasSnap {
		if err := g.storage.ApplySnapshot(rd.Snapshot); err != nil {
			return err
		}
		md := rd.Snapshot.GetMetadata()
		if err := h.ApplySnapshot(md.GetIndex(), rd.Snapshot.GetData()); err != nil {
			return err
		}
		g.snap, g.applied, g.cs = md.GetIndex(), md.GetIndex(), md.GetConfState()
		g.snapCurrent = false
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		if err := g.storage.SetHardState(rd.HardState); err != nil {
			return err
		}
	}
	if early && len(rd.Entries) > 0 {
		g.markAppends(rd.Entries)
	}
	if g.marks != nil && len(rd.CommittedEntries) > 0 {
		g.observeCommits(rd.CommittedEntries)
	}
	if err := g.storage.Append(rd.Entries); err != nil {
		return err
	}
	if !early {
		g.send(h, rd.Messages)
	}
	for _, e := range rd.CommittedEntries {
		if t := e.GetType(); (t == raftpb.EntryConfChange || t == raftpb.EntryConfChangeV2) && g.cfg.Disk != nil {
			// A commit index is normally not synced (a lost one is
			// learned again from the leader), but one that commits a
			// change of the voters is, whatever the Disk's policy, before
			// the change is applied: once it removed the other voters,
			// none is left to teach a member that restarts after a power
			// loss that the change committed, and it would count the
			// removed voters for ever (a one-replica partition moved to a
			// new node: that node, restarted, waited for the old node's
			// vote).
			if err := g.cfg.Disk.Sync(); err != nil {
				return err
			}
		}
		switch e.GetType() {
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return err
			}
			applied := &cc
			if cc.GetType() == raftpb.ConfChangeAddLearnerNode && slices.Contains(g.cs.GetVoters(), cc.GetNodeId()) {
				// raft would demote the voter to a learner. No owner means
				// that: such a change is a learner's addition proposed
				// again by a member whose view lagged behind its
				// promotion. It is applied as no change (node 0, which
				// raft skips), as confAfter replays it; the owner is told
				// of it all the same, its node still a voter.
				applied = &raftpb.ConfChange{Type: cc.Type, NodeId: new(uint64(0))}
			}
			g.cs, g.snapCurrent = g.rn.ApplyConfChange(applied), false
			if c, ok := h.(ConfChanger); ok {
				add := cc.GetType() == raftpb.ConfChangeAddNode || cc.GetType() == raftpb.ConfChangeAddLearnerNode
				if err := c.ConfChanged(e.GetIndex(), add, cc.GetNodeId(), cc.GetContext()); err != nil {
					return err
				}
			}
		case raftpb.EntryConfChangeV2:
			var cc raftpb.ConfChangeV2
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return err
			}
			g.cs, g.snapCurrent = g.rn.ApplyConfChange(&cc), false
		case raftpb.EntryNormal:
			id, payload, ok, err := unwrap(e)
			if err != nil {
				return err
			}
			if !ok {
				break // a new leader's empty entry
			}
			if err := h.Apply(e.GetIndex(), id, payload); err != nil {
				return err
			}
		}
		g.applied = e.GetIndex()
	}
	return nil
}

// unwrap takes a normal entry's envelope off: the proposal id and the
// owner's payload, ok false for a new leader's empty entry.
func unwrap(e *raftpb.Entry) (id uint64, payload []byte, ok bool, err error) {
	data := e.GetData()
	if len(data) == 0 {
		return 0, nil, false, nil
	}
	if len(data) < 8 {
		return 0, nil, false, fmt.Errorf("%w: index %d", errShort, e.GetIndex())
	}
	return binary.LittleEndian.Uint64(data), data[8:], true, nil
}

// leaderObserved counts an election when the leader just learned of is
// new with a term this member has not counted, and forgets the appends
// marked under the previous leadership (their commit is not this
// member's to time).
func (g *Group) leaderObserved() {
	if g.marks != nil {
		*g.marks = [commitMarks]commitMark{}
	}
	if g.lead == 0 || g.cfg.Metrics.Elections == nil {
		return
	}
	if term := g.rn.BasicStatus().HardState.GetTerm(); term > g.electedTerm {
		g.electedTerm = term
		g.cfg.Metrics.Elections.Inc()
	}
}

// markAppends remembers when the leader appended the last commitMarks of
// ents, for observeCommits.
func (g *Group) markAppends(ents []*raftpb.Entry) {
	if g.cfg.Metrics.Commit == nil || g.cfg.Clock == nil {
		return
	}
	if g.marks == nil {
		g.marks = new([commitMarks]commitMark)
	}
	now := g.cfg.Clock.Now().UnixNano()
	for _, e := range ents[max(len(ents)-commitMarks, 0):] {
		i := e.GetIndex()
		g.marks[i%commitMarks] = commitMark{index: i, at: now}
	}
}

// observeCommits observes the commit latency of the marked entries among
// ents.
func (g *Group) observeCommits(ents []*raftpb.Entry) {
	var now int64
	for _, e := range ents {
		i := e.GetIndex()
		m := &g.marks[i%commitMarks]
		if m.index != i {
			continue
		}
		if now == 0 {
			now = g.cfg.Clock.Now().UnixNano()
		}
		g.cfg.Metrics.Commit.Observe(float64(now-m.at) / 1e9)
		*m = commitMark{}
	}
}

func (g *Group) send(h Handler, msgs []*raftpb.Message) {
	for _, m := range msgs {
		if m.GetType() == raftpb.MsgSnap {
			g.sendSnapshot(h, m)
			continue
		}
		h.Send(m)
	}
}

// sendSnapshot sends a snapshot raft wants a peer to have, unless its
// configuration does not name the peer: raft there refuses such a
// snapshot (it restores only one that names it) and answers with the
// index it holds. Reported finished, that answer puts the peer back in
// probing, the probe finds the entries compacted, and raft sends the same
// snapshot at once: the two members trade it for ever, at one instant
// (cluster seed 616: a leader whose partition log was still being fetched
// could not compact after a learner joined, and sent the learner its
// older snapshot without end). Withheld and reported failed, raft tries
// again only after the peer's next heartbeat answer, and the owner
// compacts as soon as it can (SnapshotStale) behind a snapshot that names
// the peer, which the next try sends.
//
// A snapshot sent is reported finished: the transport cannot tell whether
// it arrived, reporting it puts the follower back in probing, and a lost
// snapshot is simply sent again.
func (g *Group) sendSnapshot(h Handler, m *raftpb.Message) {
	if !names(m.GetSnapshot().GetMetadata().GetConfState(), m.GetTo()) {
		g.rn.ReportSnapshot(m.GetTo(), raft.SnapshotFailure)
		return
	}
	h.Send(m)
	g.rn.ReportSnapshot(m.GetTo(), raft.SnapshotFinish)
}

// names reports whether a snapshot of configuration cs names member id as
// raft's restore judges it: among the voters, the learners or the
// outgoing voters (a member in LearnersNext is an outgoing voter).
func names(cs *raftpb.ConfState, id uint64) bool {
	return slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id) ||
		slices.Contains(cs.GetVotersOutgoing(), id)
}

// raftLogger adapts hclog to raft's logger. Raft's Panic and Fatal are
// invariant violations: they panic, as raft's own logger does.
type raftLogger struct{ l hclog.Logger }

// raftLogger formats a line only when its level is logged: raft logs at
// Info on every start of a raft node (a group's creation, a reopen), and
// an election logs several lines; with logging off (the default) they
// were formatted for nobody.
func (r raftLogger) Debug(v ...any) {
	if r.l.IsDebug() {
		r.l.Debug(fmt.Sprint(v...))
	}
}

func (r raftLogger) Debugf(f string, v ...any) {
	if r.l.IsDebug() {
		r.l.Debug(fmt.Sprintf(f, v...))
	}
}

func (r raftLogger) Info(v ...any) { r.Debug(v...) }

func (r raftLogger) Infof(f string, v ...any) { r.Debugf(f, v...) }

func (r raftLogger) Warning(v ...any) {
	if r.l.IsWarn() {
		r.l.Warn(fmt.Sprint(v...))
	}
}

func (r raftLogger) Warningf(f string, v ...any) {
	if r.l.IsWarn() {
		r.l.Warn(fmt.Sprintf(f, v...))
	}
}

func (r raftLogger) Error(v ...any) {
	if r.l.IsError() {
		r.l.Error(fmt.Sprint(v...))
	}
}

func (r raftLogger) Errorf(f string, v ...any) {
	if r.l.IsError() {
		r.l.Error(fmt.Sprintf(f, v...))
	}
}
func (r raftLogger) Fatal(v ...any)            { panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
func (r raftLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
