// Package replica is one raft group as a single-threaded state machine: a
// thin layer over go.etcd.io/raft/v3's RawNode that the owner drives by
// hand — Tick, Step, Propose, then Handle to persist, send and apply what
// raft has ready. It starts no goroutine and reads no clock, so a shard's
// pump can host many groups (multi-raft) and a simulator can drive them
// deterministically.
//
// Proposals are enveloped with a proposal id so the proposer can match a
// committed entry to the request waiting for it; entries proposed by other
// nodes carry ids the local node never issued and simply apply.
package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Config configures a Group.
type Config struct {
	// Group identifies the group (a partition's namespace, or the metadata
	// group); it only labels logs here.
	Group uint64
	// Node is this node's raft id (non-zero); Peers lists every voter,
	// this node included. Membership is static for now; ConfChange entries
	// are applied as raft commits them, which leaves room for changes.
	Node  uint64
	Peers []uint64
	// ElectionTicks and HeartbeatTicks are in Tick calls (defaults 10
	// and 1, raft's conventional ratio).
	ElectionTicks, HeartbeatTicks int
	// Logger receives raft's own logging (default: silent).
	Logger hclog.Logger
	// ForwardProposals lets a follower propose: raft forwards the entry
	// to the leader. The proposer learns the outcome only by seeing its
	// proposal id applied, so its caller needs a deadline. Partition
	// groups leave it off and answer "not leader" instead.
	ForwardProposals bool
}

// Group is one raft group member. Not safe for concurrent use.
type Group struct {
	cfg     Config
	rn      *raft.RawNode
	storage *raft.MemoryStorage
	nextID  uint64
	lead    uint64
}

var (
	// ErrNotLeader is returned by Propose on a follower.
	ErrNotLeader = errors.New("parkway: not the raft leader")
	// ErrNoLeader is returned by Propose while no leader is known.
	ErrNoLeader = errors.New("parkway: no raft leader known")
	errShort    = errors.New("parkway: raft entry shorter than its envelope")
)

// New starts a group member. Every member of a new group is created with
// the same Peers, so their bootstrap entries agree.
func New(cfg Config) (*Group, error) {
	if cfg.Node == 0 || len(cfg.Peers) == 0 {
		return nil, fmt.Errorf("parkway: raft group %d needs a node id and peers", cfg.Group)
	}
	if cfg.ElectionTicks == 0 {
		cfg.ElectionTicks = 10
	}
	if cfg.HeartbeatTicks == 0 {
		cfg.HeartbeatTicks = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	storage := raft.NewMemoryStorage()
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        cfg.Node,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   storage,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 64 << 20,
		// CheckQuorum makes a leader cut off from a majority step down, so
		// a minority side stops accepting writes; PreVote keeps a
		// partitioned node from disrupting the majority when it returns.
		CheckQuorum: true,
		PreVote:     true,
		Logger:      raftLogger{cfg.Logger.Named("raft")},
	})
	if err != nil {
		return nil, err
	}
	peers := make([]raft.Peer, len(cfg.Peers))
	for i, p := range cfg.Peers {
		peers[i] = raft.Peer{ID: p}
	}
	if err := rn.Bootstrap(peers); err != nil {
		return nil, err
	}
	return &Group{cfg: cfg, rn: rn, storage: storage, nextID: cfg.Node << 40}, nil
}

// Tick advances the group's logical clock by one tick.
func (g *Group) Tick() { g.rn.Tick() }

// Step feeds a message from a peer.
func (g *Group) Step(m *raftpb.Message) error { return g.rn.Step(m) }

// Campaign makes this member stand for election now (tests, and a host
// that wants a preferred leader).
func (g *Group) Campaign() error { return g.rn.Campaign() }

// Leader is the member this one believes leads (0: none known).
func (g *Group) Leader() uint64 { return g.rn.BasicStatus().Lead }

// IsLeader reports whether this member leads.
func (g *Group) IsLeader() bool { return g.Leader() == g.cfg.Node }

// Propose proposes payload and returns its proposal id. Only the leader
// proposes: a follower would forward the proposal, and an entry forwarded
// and then dropped by a leader change leaves its request with no outcome.
func (g *Group) Propose(payload []byte) (uint64, error) {
	if !g.cfg.ForwardProposals && !g.IsLeader() {
		return 0, ErrNotLeader
	}
	if g.Leader() == 0 {
		return 0, ErrNoLeader
	}
	g.nextID++
	id := g.nextID
	data := make([]byte, 8+len(payload))
	binary.LittleEndian.PutUint64(data, id)
	copy(data[8:], payload)
	if err := g.rn.Propose(data); err != nil {
		return 0, err
	}
	return id, nil
}

// HasReady reports whether Handle has work.
func (g *Group) HasReady() bool { return g.rn.HasReady() }

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
}

// Handle processes one Ready: entries are persisted before messages that
// depend on them are sent, committed entries are applied in order, and the
// group is advanced. The storage is in memory: a member that restarts
// rejoins empty and catches up from the others.
func (g *Group) Handle(h Handler) error {
	if !g.rn.HasReady() {
		return nil
	}
	rd := g.rn.Ready()
	if rd.SoftState != nil && rd.SoftState.Lead != g.lead {
		g.lead = rd.SoftState.Lead
		h.LeaderChanged(g.lead)
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := g.storage.ApplySnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := g.storage.SetHardState(rd.HardState); err != nil {
			return err
		}
	}
	if err := g.storage.Append(rd.Entries); err != nil {
		return err
	}
	for _, m := range rd.Messages {
		h.Send(m)
	}
	for _, e := range rd.CommittedEntries {
		switch e.GetType() {
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return err
			}
			g.rn.ApplyConfChange(&cc)
		case raftpb.EntryConfChangeV2:
			var cc raftpb.ConfChangeV2
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return err
			}
			g.rn.ApplyConfChange(&cc)
		case raftpb.EntryNormal:
			data := e.GetData()
			if len(data) == 0 {
				continue // a new leader's empty entry
			}
			if len(data) < 8 {
				return fmt.Errorf("%w: index %d", errShort, e.GetIndex())
			}
			if err := h.Apply(e.GetIndex(), binary.LittleEndian.Uint64(data), data[8:]); err != nil {
				return err
			}
		}
	}
	g.rn.Advance(rd)
	return nil
}

// raftLogger adapts hclog to raft's logger. Raft's Panic and Fatal are
// invariant violations: they panic, as raft's own logger does.
type raftLogger struct{ l hclog.Logger }

func (r raftLogger) Debug(v ...any)              { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(f string, v ...any)   { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Info(v ...any)               { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any)    { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Warning(v ...any)            { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) { r.l.Warn(fmt.Sprintf(f, v...)) }
func (r raftLogger) Error(v ...any)              { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any)   { r.l.Error(fmt.Sprintf(f, v...)) }
func (r raftLogger) Fatal(v ...any)              { panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
func (r raftLogger) Panic(v ...any)              { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
