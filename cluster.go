package parkway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
)

// NodeID identifies a node of a cluster (non-zero).
type NodeID = transport.NodeID

// Bus is a node's endpoint on the node-to-node transport.
type Bus = transport.Bus

// Network is the in-memory transport, for tests and for hosts that run
// several nodes in one process: Endpoint(id) gives each node its Bus, and
// Disconnect, Partition, Heal and SetFaults inject network faults.
type Network = transport.Network

// NetworkOptions configures a Network.
type NetworkOptions = transport.NetworkOptions

// NewNetwork returns an in-memory network.
func NewNetwork(opts NetworkOptions) *Network { return transport.NewNetwork(opts) }

// Cluster makes a Node one replica of a cluster with static membership:
// every node holds every partition, each partition is its own raft group
// driven by its owner shard, and the metadata is one more raft group.
type Cluster struct {
	// ID is this node; Peers lists every node, this one included.
	ID    NodeID
	Peers []NodeID
	// Bus is this node's endpoint on the transport.
	Bus Bus
	// TickInterval is the raft tick (default 10 ms); leaders are elected
	// within 10–20 ticks.
	TickInterval time.Duration
	// CompactEntries and CompactBytes bound each partition's raft log
	// (see shard.Replication; defaults 4096 entries, 16 MiB).
	CompactEntries uint64
	CompactBytes   int64
}

func (c *Cluster) validate() []error {
	var errs []error
	if c.ID == 0 || !slices.Contains(c.Peers, c.ID) {
		errs = append(errs, fmt.Errorf("Cluster.ID %d must be non-zero and listed in Peers", c.ID))
	}
	if c.Bus == nil {
		errs = append(errs, errors.New("Cluster.Bus is required"))
	} else if c.Bus.ID() != c.ID {
		errs = append(errs, fmt.Errorf("Cluster.Bus is node %d's endpoint, not %d's", c.Bus.ID(), c.ID))
	}
	if c.CompactBytes < 0 {
		errs = append(errs, fmt.Errorf("Cluster.CompactBytes %d < 0", c.CompactBytes))
	}
	if c.TickInterval < 0 {
		errs = append(errs, fmt.Errorf("Cluster.TickInterval %v < 0", c.TickInterval))
	}
	return errs
}

// Message kinds on the bus.
const (
	kindPartitionRaft uint8 = iota + 1
	kindMetaRaft
	kindRequest
	kindReply
	kindCatchUp
)

// cluster is the replicated side of a Node.
type cluster struct {
	n    *Node
	cfg  Cluster
	bus  Bus
	meta chan metaOp          // proposals and raft messages for the metadata group
	in   chan *raftpb.Message // metadata raft messages from peers

	reqID    atomic.Uint64
	producer uint64        // this Node's producer id for deduplication
	seq      atomic.Uint64 // per-produce sequence numbers
	mu       sync.Mutex
	waiting  map[uint64]chan []byte // forwarded requests awaiting replies

	// The metadata group and its handler: opened with the Node, driven by
	// runMetadata once started.
	g *replica.Group
	h *metaHandler
	// metaFailed is closed (after metaErr is set) when the metadata group
	// stopped on a failed Ready.
	metaFailed chan struct{}
	metaErr    error
}

type metaOp struct {
	data  []byte
	reply chan metaResult
}

type metaResult struct {
	res metadata.Result
	err error
}

func peersOf(c Cluster) []uint64 {
	out := make([]uint64, len(c.Peers))
	for i, p := range c.Peers {
		out[i] = uint64(p)
	}
	return out
}

func newCluster(n *Node) *cluster {
	cfg := *n.cfg.Cluster
	if cfg.TickInterval == 0 {
		cfg.TickInterval = shard.DefaultTickInterval
	}
	return &cluster{n: n, cfg: cfg, bus: cfg.Bus, producer: rand.Uint64() | 1,
		meta: make(chan metaOp), in: make(chan *raftpb.Message, 1024),
		waiting: make(map[uint64]chan []byte), metaFailed: make(chan struct{})}
}

// openMetadata opens the metadata raft group and builds the node's
// metadata store from it: the snapshot in its log, then every command the
// log holds as committed, applied here before anything else runs — so the
// orphan sweep and the reconcilers of a restarted node start from at least
// what it had applied before. fsys nil keeps the raft state in memory.
// The metadata log is always synced: it is small, and a member that loses
// its vote or acknowledged entries undermines every partition.
func (c *cluster) openMetadata(fsys vfs.FS, dir string, metaCfg metadata.Config) error {
	var disk *replica.Disk
	if fsys != nil {
		var err error
		if disk, err = replica.OpenDisk(fsys, filepath.Join(dir, "raft.log"), true); err != nil {
			return fmt.Errorf("parkway: open metadata raft log: %w", err)
		}
		disk.SyncCommit()
	}
	// The log keeps as many commands behind a snapshot as between two, so
	// a node that lags by less than that catches up without one.
	g, err := replica.New(replica.Config{Group: uint64(metadata.MetadataNamespace), Node: uint64(c.cfg.ID),
		Peers: peersOf(c.cfg), Logger: c.n.cfg.Logger, ForwardProposals: true, Disk: disk,
		CatchUpEntries: c.snapshotEvery()})
	if err != nil {
		if disk != nil {
			_ = disk.Close()
		}
		return fmt.Errorf("parkway: metadata group: %w", err)
	}
	fail := func(err error) error {
		_ = g.Close()
		return err
	}
	h := &metaHandler{c: c, pending: make(map[uint64]chan metaResult)}
	store, err := metadata.NewStore(metaCfg)
	if _, data := g.Snapshot(); len(data) > 0 && err == nil {
		var snap metadata.StoreSnapshot
		if snap, err = h.decodeSnapshot(data); err == nil {
			store, err = metadata.Restore(metaCfg, snap)
		}
	}
	if err != nil {
		return fail(fmt.Errorf("parkway: metadata snapshot: %w", err))
	}
	c.n.meta = store
	c.g, c.h = g, h
	for g.HasReady() {
		if err := g.Handle(c.h); err != nil {
			return fail(fmt.Errorf("parkway: replaying the metadata log: %w", err))
		}
	}
	return nil
}

// sendCatchUp is the shards' transport for partition catch-up traffic,
// with the incarnation, like sendRaft.
func (c *cluster) sendCatchUp(to uint64, ns metadata.Namespace, epoch uint64, data []byte) {
	payload := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(data)), epoch)
	payload = append(payload, data...)
	_ = c.bus.Send(transport.Message{To: NodeID(to), Kind: kindCatchUp, Group: uint64(ns), Payload: payload})
}

// start runs the receiver and the metadata group.
func (c *cluster) start() {
	c.n.group.Go(c.receive)
	c.n.group.Go(c.runMetadata)
}

// sendRaft is the shards' transport for partition raft messages: the
// incarnation travels with every message (behaviour 20).
func (c *cluster) sendRaft(to uint64, ns metadata.Namespace, epoch uint64, m *raftpb.Message) {
	opts := proto.MarshalOptions{}
	payload := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+opts.Size(m)), epoch)
	payload, err := opts.MarshalAppend(payload, m)
	if err != nil {
		return
	}
	_ = c.bus.Send(transport.Message{To: NodeID(to), Kind: kindPartitionRaft, Group: uint64(ns), Payload: payload})
}

// receive dispatches what the bus delivers. It never blocks on a shard:
// raft traffic goes through the router's non-blocking send, and a full
// inbox drops it (raft re-sends).
func (c *cluster) receive(ctx context.Context) {
	recv := c.bus.Recv()
	for {
		var m transport.Message
		var ok bool
		select {
		case <-ctx.Done():
			return
		case m, ok = <-recv:
			if !ok {
				return
			}
		}
		switch m.Kind {
		case kindPartitionRaft:
			if len(m.Payload) < 8 {
				continue
			}
			msg := &raftpb.Message{}
			if proto.Unmarshal(m.Payload[8:], msg) != nil {
				continue
			}
			ns := metadata.Namespace(m.Group)
			f := shard.Frame{Req: &shard.Request{Op: shard.OpRaft, NS: ns,
				Epoch: binary.LittleEndian.Uint64(m.Payload), Raft: msg}}
			if _, err := c.n.router.Send(ns, f); err != nil {
				c.n.countSendFailure(f.Req, err)
			}
		case kindCatchUp:
			if len(m.Payload) < 8 {
				continue
			}
			ns := metadata.Namespace(m.Group)
			f := shard.Frame{Req: &shard.Request{Op: shard.OpCatchUp, NS: ns,
				Epoch: binary.LittleEndian.Uint64(m.Payload), Payload: m.Payload[8:]}}
			if _, err := c.n.router.Send(ns, f); err != nil {
				c.n.countSendFailure(f.Req, err)
			}
		case kindMetaRaft:
			msg := &raftpb.Message{}
			if proto.Unmarshal(m.Payload, msg) != nil {
				continue
			}
			select {
			case c.in <- msg:
			default: // raft re-sends
			}
		case kindRequest:
			c.n.group.Go(func(ctx context.Context) { c.serveRemote(ctx, m) })
		case kindReply:
			c.mu.Lock()
			ch := c.waiting[m.Group]
			delete(c.waiting, m.Group)
			c.mu.Unlock()
			if ch != nil {
				ch <- m.Payload
			}
		}
	}
}

// runMetadata drives the metadata raft group: every node applies committed
// commands to its own metadata store, in log order, and its reconcilers
// wake as on a single node. A command is acknowledged to its proposer
// only once committed and applied.
func (c *cluster) runMetadata(ctx context.Context) {
	g, h := c.g, c.h
	defer func() {
		if err := g.Close(); err != nil {
			c.n.cfg.Logger.Warn("closing the metadata raft log", "error", err)
		}
	}()
	if c.cfg.Peers[0] == c.cfg.ID {
		_ = g.Campaign() // a deterministic first leader: no election wait
	}
	tick := c.n.cfg.Clock.NewTimer(c.cfg.TickInterval)
	defer tick.Stop()
	for {
		for g.HasReady() {
			if err := g.Handle(h); err != nil {
				// A Ready that failed half way cannot be handled again
				// (raft panics on a second Ready without Advance), and a
				// member whose raft log refuses writes must not vote or
				// acknowledge. The node stops taking part in the metadata
				// group: its metadata calls fail from now on, and the
				// others go on without it. A restart recovers from disk.
				c.n.cfg.Logger.Error("metadata raft ready failed; this node leaves the metadata group until restarted", "error", err)
				c.metaErr = fmt.Errorf("%w: %w", ErrMetadataFailed, err)
				close(c.metaFailed)
				for _, ch := range h.pending {
					ch <- metaResult{err: c.metaErr}
				}
				return
			}
		}
		c.compactMetadata()
		select {
		case <-ctx.Done():
			for _, ch := range h.pending {
				ch <- metaResult{err: ErrClosed}
			}
			return
		case op := <-c.meta:
			id, err := g.Propose(op.data)
			if err != nil {
				op.reply <- metaResult{err: fmt.Errorf("%w: %w", ErrRetry, err)}
				continue
			}
			h.pending[id] = op.reply
		case m := <-c.in:
			_ = g.Step(m)
		case <-tick.C():
			g.Tick()
			tick.Reset(c.cfg.TickInterval)
		}
	}
}

type metaHandler struct {
	c       *cluster
	pending map[uint64]chan metaResult
	seen    map[[2]uint64]metaResult // (proposer, sequence) → result
	order   [][2]uint64              // FIFO of seen keys, bounded
}

// metaDedupeWindow bounds how many recent metadata commands are remembered
// for deduplicating re-proposals.
const metaDedupeWindow = 4096

func (h *metaHandler) Send(m *raftpb.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		return
	}
	_ = h.c.bus.Send(transport.Message{To: NodeID(m.GetTo()), Kind: kindMetaRaft,
		Group: uint64(metadata.MetadataNamespace), Payload: b})
}

// Apply applies a committed command. A command that fails validation fails
// identically on every node, so its error is only the proposer's answer.
func (h *metaHandler) Apply(_, id uint64, payload []byte) error {
	var r metaResult
	if len(payload) < 16 {
		r.err = errWire
	} else {
		key := [2]uint64{binary.LittleEndian.Uint64(payload), binary.LittleEndian.Uint64(payload[8:])}
		if prev, dup := h.seen[key]; dup {
			r = prev
		} else {
			cmd, err := metadata.DecodeCommand(payload[16:])
			if err == nil {
				r.res, err = h.c.n.meta.Apply(cmd)
			}
			r.err = err
			h.remember(key, r)
		}
	}
	if ch, ok := h.pending[id]; ok {
		delete(h.pending, id)
		ch <- r
	}
	return nil
}

func (h *metaHandler) remember(key [2]uint64, r metaResult) {
	if h.seen == nil {
		h.seen = make(map[[2]uint64]metaResult)
	}
	if len(h.order) >= metaDedupeWindow {
		delete(h.seen, h.order[0])
		h.order = h.order[1:]
	}
	h.order = append(h.order, key)
	h.seen[key] = r
}

// ApplySnapshot installs the leader's store: this node lagged behind the
// metadata group's compacted log. The shards and reconcilers see the new
// state through the same store and wake as after a commit.
func (h *metaHandler) ApplySnapshot(_ uint64, data []byte) error {
	snap, err := h.decodeSnapshot(data)
	if err != nil {
		return err
	}
	return h.c.n.meta.Replace(snap)
}

// A metadata snapshot is the deduplication table's keys, oldest first,
// then the encoded store. The table is replicated state: a node that
// forgot it would apply a re-proposed command the others skip, and the
// replicas' metadata would diverge. Results are not kept: a duplicate of a
// command older than the snapshot answers errResultForgotten.

var errResultForgotten = fmt.Errorf("%w: the command was applied before the last metadata snapshot, which keeps no results", ErrOutcomeUnknown)

func (h *metaHandler) encodeSnapshot(store metadata.StoreSnapshot) ([]byte, error) {
	return metadata.EncodeGroupSnapshot(h.order, store)
}

// decodeSnapshot restores the deduplication table and decodes the store.
func (h *metaHandler) decodeSnapshot(data []byte) (metadata.StoreSnapshot, error) {
	keys, snap, err := metadata.DecodeGroupSnapshot(data)
	if err != nil {
		return snap, err
	}
	h.seen, h.order = nil, nil
	for _, k := range keys {
		h.remember(k, metaResult{err: errResultForgotten})
	}
	return snap, nil
}

// compactMetadata compacts the metadata group's log behind a snapshot of
// the store once Config.MetadataSnapshotEvery commands were applied since
// the last.
// Only this goroutine applies commands, so the store is exactly the state
// at the applied index.
func (c *cluster) compactMetadata() {
	g := c.g
	if g.Applied()-g.SnapshotIndex() < c.snapshotEvery() {
		return
	}
	data, err := c.h.encodeSnapshot(c.n.meta.Export())
	if err == nil {
		err = g.Compact(g.Applied(), data)
	}
	if err != nil {
		c.n.cfg.Logger.Error("metadata raft log compaction failed", "error", err)
	}
}

// snapshotEvery is Config.MetadataSnapshotEvery with its default.
func (c *cluster) snapshotEvery() uint64 {
	if c.n.cfg.MetadataSnapshotEvery > 0 {
		return uint64(c.n.cfg.MetadataSnapshotEvery)
	}
	return metadata.DefaultSnapshotEvery
}

// LeaderChanged forgets the waiters of proposals in flight: they may never
// commit. Each waiter re-proposes after its bounded wait, and if the old
// copy commits after all, deduplication turns the new one into a no-op.
func (h *metaHandler) LeaderChanged(uint64) { clear(h.pending) }

// applyReplicated commits cmd through the metadata group.
func (c *cluster) applyReplicated(ctx context.Context, cmd metadata.Command) (metadata.Result, error) {
	enc, err := metadata.EncodeCommand(cmd)
	if err != nil {
		return metadata.Result{}, err
	}
	// The (proposer, sequence) header makes re-proposing safe: a proposal
	// lost with a leader is proposed again after a bounded wait, and if
	// both copies commit, the second applies as a no-op returning the
	// first's result.
	data := binary.LittleEndian.AppendUint64(nil, c.producer)
	data = binary.LittleEndian.AppendUint64(data, c.seq.Add(1))
	data = append(data, enc...)
	ctx, cancel := c.n.deadline(ctx)
	defer cancel()
	pause := c.n.cfg.RetryBackoffMin
	for {
		reply := make(chan metaResult, 1)
		select {
		case c.meta <- metaOp{data: data, reply: reply}:
		case <-c.metaFailed:
			return metadata.Result{}, c.metaErr
		case <-ctx.Done():
			return metadata.Result{}, ctx.Err()
		}
		var r metaResult
		t := c.n.cfg.Clock.NewTimer(forwardTimeout(c.cfg))
		select {
		case r = <-reply:
		case <-t.C():
			r.err = fmt.Errorf("%w: not committed yet", ErrRetry)
		case <-ctx.Done():
			t.Stop()
			// Proposed but not seen committed: it may still commit.
			return metadata.Result{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
		}
		t.Stop()
		if r.err == nil || !errors.Is(r.err, ErrRetry) {
			return r.res, r.err
		}
		if err := c.n.sleep(ctx, pause); err != nil {
			return metadata.Result{}, err
		}
		pause = min(pause*2, c.n.cfg.RetryBackoffMax)
	}
}

// forward sends a partition request to the node that leads it and waits
// for the answer: the client following a "not leader" hint.
func (c *cluster) forward(ctx context.Context, to uint64, req *shard.Request) (shard.Response, error) {
	id := c.reqID.Add(1)
	ch := make(chan []byte, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
	}()
	payload, err := encodeRequest(req)
	if err != nil {
		return shard.Response{}, err
	}
	if err := c.bus.Send(transport.Message{To: NodeID(to), Kind: kindRequest, Group: id, Payload: payload}); err != nil {
		return shard.Response{}, fmt.Errorf("%w: forward to node %d: %w", ErrRetry, to, err)
	}
	// One attempt waits a bounded time: a leader that died with the
	// request never answers, and the caller's deadline may be far off.
	// The outcome is then unknown; produces carry a (producer, sequence)
	// pair, so the retry that follows cannot apply a batch twice.
	t := c.n.cfg.Clock.NewTimer(forwardTimeout(c.cfg))
	defer t.Stop()
	select {
	case b := <-ch:
		return decodeResponse(b)
	case <-t.C():
		return shard.Response{}, fmt.Errorf("%w: no reply from node %d", ErrOutcomeUnknown, to)
	case <-ctx.Done():
		return shard.Response{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	}
}

// forwardTimeout bounds one forwarded attempt: several election timeouts,
// so a dead leader is replaced before the retry.
func forwardTimeout(c Cluster) time.Duration { return 50 * c.TickInterval }

// serveRemote runs a forwarded request on this node's owner shard, once,
// and replies. It does not forward again: a request that reaches a node
// that no longer leads is answered "not leader" and the client follows the
// new hint.
func (c *cluster) serveRemote(ctx context.Context, m transport.Message) {
	req, err := decodeRequest(m.Payload)
	var r shard.Response
	if err != nil {
		r = shard.Response{Err: err}
	} else {
		r = c.n.once(ctx, req)
	}
	b := encodeResponse(r)
	_ = c.bus.Send(transport.Message{To: m.From, Kind: kindReply, Group: m.Group, Payload: b})
}

// awaitMetadata runs f, and in a cluster retries it while it reports a
// stream, topic or partition as missing: this node's metadata may simply
// lag the commit that created it (a client that creates a topic on one node
// and produces through another must not be told it does not exist). The
// wait is bounded by the request deadline; then the not-found error stands.
func (n *Node) awaitMetadata(ctx context.Context, f func() error) error {
	err := f()
	if n.cluster == nil || !missing(err) {
		return err
	}
	ctx, cancel := n.deadline(ctx)
	defer cancel()
	pause := n.cfg.RetryBackoffMin
	for missing(err) {
		if n.sleep(ctx, pause) != nil {
			return err
		}
		pause = min(pause*2, n.cfg.RetryBackoffMax)
		err = f()
	}
	return err
}

func missing(err error) bool {
	return errors.Is(err, ErrStreamNotFound) || errors.Is(err, ErrTopicNotFound) || errors.Is(err, ErrPartitionNotFound)
}

// resolveWait is resolve through awaitMetadata.
func (n *Node) resolveWait(ctx context.Context, stream, topic, part uint32) (ns metadata.Namespace, err error) {
	err = n.awaitMetadata(ctx, func() (err error) {
		ns, err = n.resolve(stream, topic, part)
		return err
	})
	return ns, err
}

// Leader returns the node that leads a partition's raft group, as this
// node sees it (0 while no leader is known). It is ErrInvalidArgument on a
// node that is not part of a cluster.
func (n *Node) Leader(ctx context.Context, stream, topic, part uint32) (NodeID, error) {
	if err := n.begin(ctx); err != nil {
		return 0, err
	}
	if n.cluster == nil {
		return 0, fmt.Errorf("%w: not a cluster node", ErrInvalidArgument)
	}
	ns, err := n.resolveWait(ctx, stream, topic, part)
	if err != nil {
		return 0, err
	}
	lead, err := n.shards[n.router.Owner(ns)].Leader(ctx, ns)
	return NodeID(lead), err
}

// TCPOptions configures a TCP bus.
type TCPOptions = transport.TCPOptions

// TCPBus is the TCP transport: length-prefixed frames, one connection per
// peer dialled lazily with backoff, bounded send queues. It is
// unauthenticated: run it on a trusted network.
type TCPBus = transport.TCPBus

// ListenTCP starts node id's TCP endpoint on addr, with peers' addresses.
func ListenTCP(id NodeID, addr string, peers map[NodeID]string, opts TCPOptions) (*TCPBus, error) {
	return transport.ListenTCP(id, addr, peers, opts)
}
