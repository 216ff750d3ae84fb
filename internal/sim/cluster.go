package sim

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/internal/testhooks"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// Cluster mode (Config.Nodes > 1) runs several nodes of the real engine in
// one process, each built the way parkway.Open builds a cluster node, with
// Manual shards: its own disk (errorfs over a vfs.MemFS), metadata store,
// router, shards whose every partition is a raft group
// (shard.Config.Replication) and reconcilers; plus a member of the
// metadata raft group (internal/replica) that applies committed commands
// to the node's store, as the root package's metaHandler does. The nodes
// talk over a transport.Network with ManualDelivery, in cluster.go's message
// kinds and encoding (a partition raft message carries its incarnation).
// Every raft tick comes from the virtual clock; every delivery, step,
// pass, proposal and fault is a scheduler choice from the seed.

// maxNodes bounds Config.Nodes: every node holds every partition.
const maxNodes = 7

// Bus message kinds, as in cluster.go.
const (
	kindPartitionRaft uint8 = iota + 1
	kindMetaRaft
	_ // kindRequest: the simulated clients go to the leader themselves
	_ // kindReply
	kindCatchUp
)

// Where a cluster node keeps its metadata group's raft log (cluster.go:
// <DataDir>/metadata-raft/raft.log).
const metaRaftLog = "/data/metadata-raft/raft.log"

// Cluster-mode timing. forwardTimeout is cluster.go's bound on one
// metadata proposal (50 ticks) before the client proposes it again.
const (
	forwardTicks = 50
	maxHops      = 3
	// metaSnapshotEvery is the metadata group's compaction interval
	// (Config.MetadataSnapshotEvery, default 1,024): small, so members
	// restart from snapshots and lagging ones are sent the store whole.
	metaSnapshotEvery = 16
)

// csim is one cluster run. Everything runs on the caller's goroutine.
type csim struct {
	base
	ctx   context.Context
	net   *transport.Network
	peers []uint64
	nodes []*cnode

	clients     []*client
	allOps      []*op
	metaOps     []*op
	finalOps    []*op
	allAttempts []*attempt
	attempts    map[*shard.Request]*attempt
	inflight    []*attempt
	nextOp      uint64
	nextAttempt uint64
	nextMsg     uint64
	nextSeq     uint64
	metaDone    []metaAnswer

	msgs   map[uint64]*msgInfo
	oracle map[incKey]*repLog
	// oldMetrics are the counters of crashed node incarnations.
	oldMetrics []*metrics.Metrics
	// builds counts how often each replica was built (opened);
	// applyFailed marks the replicas an append failed on.
	builds      map[buildKey]int
	applyFailed map[buildKey]bool
	// storeFailed marks the replicas a consumer offset write failed on;
	// storeOutcomes collects how each consumer offset write was applied.
	storeFailed   map[buildKey]bool
	storeOutcomes map[storeKey]uint8
	// metaLog holds, per metadata raft index, a fingerprint of the store
	// the first node to apply it held after it: every other node must hold
	// the same. metaDup records whether that node's metaHandler found the
	// command a duplicate.
	metaLog map[uint64]string
	metaDup map[uint64]bool

	faults FaultCounts
	ops    OpCounts
	netf   netState
	// compactEntries is the partitions' raft log compaction interval
	// (shard.Replication.CompactEntries), picked per seed: mostly small,
	// so snapshots and catch-up happen.
	compactEntries uint64
	// actions counts the ends of scheduler actions: raft's random draws
	// during one action are a function of it (see seededReader).
	actions uint64
	depth   int // > 0 while a slow build runs nested scheduler steps

	quiescing bool
}

// cnode is one simulated cluster node.
type cnode struct {
	c   *csim
	id  uint64
	mem *vfs.MemFS
	inj *injector
	ep  transport.Bus

	meta *metadata.Store
	mg   *replica.Group
	mh   *metaApplier
	// metaTickAt is when the metadata group's next tick is due.
	metaTickAt time.Time

	store    *cstore
	table    *router.Table
	rt       *router.Router[shard.Frame]
	shards   []*shard.Shard
	recs     []*reconciler.Partitions
	wakes    []<-chan struct{}
	cancels  []func()
	nextPass []time.Time
	busy     []bool
	// clocks are the shards' views of the clock, which know when each
	// shard's raft tick is due.
	clocks []*watchedClock
	// shadow mirrors each shard's inbox, in order: the client attempt of
	// each queued frame, nil for replication traffic (catchUpFrame for a
	// catch-up frame).
	shadow [][]*attempt
	// fetching is set while a shard handles a catch-up frame: the reads
	// it makes serve a peer's fetch, not a client.
	fetching bool
	m        *metrics.Metrics
	outbox   []outMsg

	// incs is this node's view of when incarnations were committed.
	incs *timeline
	// lastServe: per namespace, the incarnation that last served a client
	// request here.
	lastServe map[metadata.Namespace]uint64
	// stored lists the consumer offsets stored during the current action.
	stored []storeRecord

	stopped       bool
	stopUntil     time.Time
	diskFullUntil time.Time
	// down: the node crashed and is not running; it restarts on its disk
	// at restartAt.
	down      bool
	restartAt time.Time
	gen       int
}

// outMsg is a partition raft message a shard step sent, held until the
// step returns (see flushOutbox).
type outMsg struct {
	kind    uint8
	to      uint64
	ns      metadata.Namespace
	what    string
	payload []byte
}

func runCluster(cfg Config) (Result, error) {
	c := newCluster(cfg)
	release := seedRaftRand(cfg.Seed, &c.actions)
	defer release()
	c.guard(c.run)
	c.guard(c.close)
	res := c.result()
	if c.viol != nil {
		return res, c.viol
	}
	return res, nil
}

func newCluster(cfg Config) *csim {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6a09e667f3bcc909))
	if cfg.Shards == 0 {
		cfg.Shards = 1 + rng.IntN(2)
	}
	compact := [...]uint64{4, 16, 64, shard.DefaultCompactEntries}[rng.IntN(4)]
	clk := clock.NewManual(epoch0)
	c := &csim{
		base:           base{cfg: cfg, rng: rng, clk: clk, tr: newTrace(cfg.Trace)},
		ctx:            context.Background(),
		net:            transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true}),
		attempts:       make(map[*shard.Request]*attempt),
		msgs:           make(map[uint64]*msgInfo),
		oracle:         make(map[incKey]*repLog),
		metaLog:        make(map[uint64]string),
		metaDup:        make(map[uint64]bool),
		builds:         make(map[buildKey]int),
		applyFailed:    make(map[buildKey]bool),
		storeFailed:    make(map[buildKey]bool),
		storeOutcomes:  make(map[storeKey]uint8),
		compactEntries: compact,
	}
	for i := range cfg.Nodes {
		c.peers = append(c.peers, uint64(i+1))
	}
	for i := range cfg.Clients {
		c.clients = append(c.clients, &client{id: i})
	}
	return c
}

func (c *csim) run() {
	c.event("start cluster seed=%d nodes=%d shards=%d clients=%d steps=%d tick=%v compact=%d",
		c.cfg.Seed, c.cfg.Nodes, c.cfg.Shards, c.cfg.Clients, c.cfg.Steps, c.cfg.TickInterval, c.compactEntries)
	// Every endpoint exists before any node sends.
	eps := make([]transport.Bus, len(c.peers))
	for i, id := range c.peers {
		eps[i] = c.net.Endpoint(transport.NodeID(id))
	}
	for i, id := range c.peers {
		n := c.openNode(id, eps[i], vfs.NewMem(), nil)
		if c.viol != nil {
			return
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		c.processMeta(n)
	}
	c.afterAction()
	for range c.cfg.Steps {
		if c.viol != nil {
			return
		}
		c.tick()
	}
	if c.viol != nil {
		return
	}
	c.quiesce()
	if c.viol != nil {
		return
	}
	c.finalChecks()
	c.event("end")
}

func (c *csim) close() {
	for _, n := range c.nodes {
		for _, cancel := range n.cancels {
			cancel()
		}
		n.inj.dead = true // what shutdown writes reaches nothing anyone checks
		for _, sh := range n.shards {
			_ = sh.Close()
		}
	}
	_ = c.net.Close()
}

func (c *csim) result() Result {
	st := c.net.Stats()
	f := c.faults
	f.MsgDropped, f.MsgDuplicated, f.MsgReordered = int(st.Dropped), int(st.Duplicated), int(st.Reordered)
	f.MsgDelayed, f.MsgCut = int(st.Delayed), int(st.Cut)
	return Result{
		Seed:        c.cfg.Seed,
		Nodes:       c.cfg.Nodes,
		Shards:      c.cfg.Shards,
		TraceHash:   c.tr.sum(),
		Events:      c.tr.n,
		VirtualTime: c.clk.Now().Sub(epoch0),
		Faults:      f,
		Ops:         c.ops,
	}
}

// openNode builds node id on disk mem the way parkway.Open builds a
// cluster node with a DataDir: the metadata store from the metadata
// group's raft log (its snapshot, then every committed command in it,
// before anything else runs), the orphan sweep, the file store, the
// router, the replicated shards (each partition's raft log beside its
// segments) and the reconcilers. Faults are held off while it opens.
func (c *csim) openNode(id uint64, ep transport.Bus, mem *vfs.MemFS, prev *cnode) *cnode {
	n := &cnode{c: c, id: id, mem: mem, ep: ep, m: metrics.New(), incs: newTimeline(),
		lastServe: make(map[metadata.Namespace]uint64)}
	if prev != nil {
		// The node's view of incarnations and what served it carry over:
		// they are the simulator's record of it, not the node's memory.
		n.incs, n.lastServe, n.gen = prev.incs, prev.lastServe, prev.gen
	}
	n.gen++
	n.inj = newInjector(n)
	if c.cfg.Faults.SpareMetadataLog {
		n.inj.spare = path.Dir(metaRaftLog) + "/"
	}
	n.inj.quiet++
	defer func() { n.inj.quiet-- }()
	fsys := errorfs.New(n.mem, n.inj)
	mcfg := metadata.Config{Shards: c.cfg.Shards, Assign: router.Assign}

	disk, err := replica.OpenDisk(fsys, metaRaftLog, true)
	if err != nil {
		c.fail(0, "n%d open metadata raft log: %v", id, err)
		return n
	}
	disk.SyncCommit()
	n.mg, err = replica.New(replica.Config{Group: uint64(metadata.MetadataNamespace), Node: id,
		Peers: c.peers, ForwardProposals: true, Disk: disk, CatchUpEntries: metaSnapshotEvery})
	if err != nil {
		c.fail(0, "n%d metadata group: %v", id, err)
		return n
	}
	n.mh = &metaApplier{n: n, pending: make(map[uint64]metaWait)}
	n.meta, err = metadata.NewStore(mcfg)
	if _, data := n.mg.Snapshot(); len(data) > 0 && err == nil {
		var snap metadata.StoreSnapshot
		if snap, err = n.mh.decodeSnapshot(data); err == nil {
			n.meta, err = metadata.Restore(mcfg, snap)
		}
	}
	if err != nil {
		c.fail(0, "n%d metadata snapshot: %v", id, err)
		return n
	}
	c.processMeta(n) // the committed commands of the raft log
	if c.viol != nil {
		return n
	}

	fstore, err := partition.NewFileStore(partition.FileConfig{
		Dir: dataDir, FS: fsys, SegmentSize: partition.MinSegmentSize,
	})
	if err != nil {
		c.fail(0, "n%d partition store: %v", id, err)
		return n
	}
	n.store = &cstore{n: n, inner: fstore}
	// Orphans: partitions whose deletion committed before the crash.
	stored, err := fstore.List()
	if err != nil {
		c.fail(0, "n%d list partitions: %v", id, err)
		return n
	}
	for _, st := range stored {
		if rev, ok := n.meta.CreatedRevision(st.NS); ok && rev == st.Epoch {
			continue
		}
		if err := n.store.Remove(st.NS); err != nil {
			c.fail(0, "n%d remove orphan %v: %v", id, st.NS, err)
			return n
		}
		c.event("n%d orphan removed ns=%v epoch=%d", id, st.NS, st.Epoch)
	}
	n.table = &router.Table{}
	if n.rt, err = router.New[shard.Frame](n.table, c.cfg.Shards); err != nil {
		c.fail(0, "n%d router: %v", id, err)
		return n
	}
	repl := &shard.Replication{Node: id, Peers: c.peers, Send: n.sendRaft, SendCatchUp: n.sendCatchUp,
		TickInterval: c.cfg.TickInterval, CompactEntries: c.compactEntries}
	n.shadow = make([][]*attempt, c.cfg.Shards)
	n.busy = make([]bool, c.cfg.Shards)
	for i := range c.cfg.Shards {
		clk := &watchedClock{Manual: c.clk}
		n.clocks = append(n.clocks, clk)
		sh, err := shard.New(shard.Config{
			ID: i, InboxSize: c.cfg.InboxSize, Manual: true, Clock: clk, Metrics: n.m, Replication: repl,
		}, n.meta, n.rt)
		if err != nil {
			c.fail(0, "n%d shard %d: %v", id, i, err)
			return n
		}
		n.rt.Register(i, &cmirror{n: n, i: i, sh: sh})
		sh.Start()
		n.shards = append(n.shards, sh)
	}
	for i, sh := range n.shards {
		rec, err := reconciler.New(reconciler.Config{
			Shard: sh, Meta: n.meta, Store: n.store, Clock: c.clk,
			BackoffMin: backoffMin, BackoffMax: backoffMax, Metrics: n.m,
			Defaults: metadata.TopicConfig{Fsync: metadata.FsyncAlways},
		}, n.table)
		if err != nil {
			c.fail(0, "n%d reconciler %d: %v", id, i, err)
			return n
		}
		wake, cancel := n.meta.Subscribe()
		n.recs = append(n.recs, rec)
		n.wakes = append(n.wakes, wake)
		n.cancels = append(n.cancels, cancel)
		n.nextPass = append(n.nextPass, c.clk.Now())
	}
	if id == c.peers[0] {
		// cluster.go: a deterministic first leader, no election wait.
		if err := n.mg.Campaign(); err != nil {
			c.fail(0, "n%d campaign: %v", id, err)
		}
	}
	n.metaTickAt = c.clk.Now().Add(c.cfg.TickInterval)
	c.event("n%d open gen=%d shards=%d revision=%d applied=%d snapshot=%d orphans-checked=%d",
		id, n.gen, c.cfg.Shards, n.meta.Revision(), n.mg.Applied(), n.mg.SnapshotIndex(), len(stored))
	return n
}

func (c *csim) node(id uint64) *cnode {
	if id == 0 || id > uint64(len(c.nodes)) {
		return nil
	}
	return c.nodes[id-1]
}

// diskFault implements faultSink.
func (n *cnode) diskFault(enospc bool, what string, op errorfs.Op) {
	c := n.c
	if enospc {
		c.faults.DiskFull++
		c.event("n%d fault ENOSPC %v %s", n.id, op.Kind, op.Path)
		return
	}
	c.faults.DiskError++
	c.event("n%d fault EIO (%s) %v %s", n.id, what, op.Kind, op.Path)
}

// sendRaft is the shards' Replication.Send: cluster.go's encoding (the
// incarnation, then the message). The message is held until the shard
// step that sent it returns: a shard ticks its groups in map order, so
// the order in which one step's messages of different groups are sent is
// not a function of the seed; flushOutbox puts them in namespace order,
// keeping each group's own order, before the network (whose fault PCG
// draws per message) sees them.
func (n *cnode) sendRaft(to uint64, ns metadata.Namespace, epoch uint64, m *raftpb.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		n.c.fail(0, "n%d marshal raft message: %v", n.id, err)
		return
	}
	if testhooks.SimRaftWithoutEpoch.Load() {
		epoch = 0 // a deliberately broken build (package testhooks)
	}
	payload := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(b)), epoch)
	payload = append(payload, b...)
	n.outbox = append(n.outbox, outMsg{kind: kindPartitionRaft, to: to, ns: ns, what: m.GetType().String(), payload: payload})
}

// sendCatchUp is the shards' Replication.SendCatchUp, in cluster.go's
// encoding; held like sendRaft's messages.
func (n *cnode) sendCatchUp(to uint64, ns metadata.Namespace, epoch uint64, data []byte) {
	payload := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(data)), epoch)
	payload = append(payload, data...)
	what := "catchup"
	if len(data) > 0 {
		what = fmt.Sprintf("catchup/%d", data[0])
	}
	n.outbox = append(n.outbox, outMsg{kind: kindCatchUp, to: to, ns: ns, what: what, payload: payload})
}

func (n *cnode) flushOutbox() {
	if len(n.outbox) == 0 {
		return
	}
	slices.SortStableFunc(n.outbox, func(a, b outMsg) int { return cmp.Compare(a.ns, b.ns) })
	for i, o := range n.outbox {
		err := n.ep.Send(transport.Message{To: transport.NodeID(o.to), Kind: o.kind, Group: uint64(o.ns), Payload: o.payload})
		n.c.event("n%d send %v %s to=n%d err=%v", n.id, o.ns, o.what, o.to, errString(err))
		n.outbox[i] = outMsg{}
	}
	n.outbox = n.outbox[:0]
}

// cmirror is the router's view of shard i of node n: it forwards to the
// shard and records every frame the inbox takes.
type cmirror struct {
	n  *cnode
	i  int
	sh *shard.Shard
}

// TrySend implements router.Sender.
func (m *cmirror) TrySend(f shard.Frame) error {
	c := m.n.c
	err := m.sh.TrySend(f)
	var a *attempt
	if op := f.Req.Op; op != shard.OpRaft && op != shard.OpCatchUp {
		if a = c.attempts[f.Req]; a == nil {
			c.fail(0, "n%d shard %d was sent a frame the simulator did not issue", m.n.id, m.i)
			return err
		}
	}
	if err == nil {
		q := a
		if f.Req.Op == shard.OpCatchUp {
			q = catchUpFrame
		}
		m.n.shadow[m.i] = append(m.n.shadow[m.i], q)
	}
	if a != nil {
		c.event("n%d enqueue shard=%d a=%d err=%v", m.n.id, m.i, a.id, errString(err))
	} else if err != nil {
		c.event("n%d enqueue shard=%d %v %v err=%v", m.n.id, m.i, f.Req.Op, f.Req.NS, errString(err))
	}
	return err
}

// catchUpFrame marks a catch-up frame in an inbox mirror.
var catchUpFrame = &attempt{}

// afterAction ends every scheduler action: raft messages go out, answers
// are collected, and metadata commands whose commit a client waited for
// are followed up.
func (c *csim) afterAction() {
	c.actions++
	for _, n := range c.nodes {
		n.flushOutbox()
	}
	c.collect()
	for _, n := range c.nodes {
		n.stored = n.stored[:0]
	}
	for len(c.metaDone) > 0 && c.viol == nil {
		d := c.metaDone[0]
		c.metaDone = c.metaDone[1:]
		c.onMetaResult(d)
		for _, n := range c.nodes {
			n.flushOutbox()
		}
		c.collect()
	}
}

// unit is one piece of engine work the scheduler may pick.
type unit struct {
	kind uint8
	n    *cnode
	i    int
}

const (
	unitDeliver uint8 = iota
	unitStep
	unitMetaTick
	unitPass
)

// units lists the work that is ready: bus messages to receive, shards
// with queued frames or a possibly due raft tick, due metadata ticks, due
// reconciler passes. Stopped nodes do nothing.
func (c *csim) units() []unit {
	var out []unit
	now := c.clk.Now()
	for _, n := range c.nodes {
		if n.stopped || n.down {
			continue
		}
		if len(n.ep.Recv()) > 0 {
			out = append(out, unit{kind: unitDeliver, n: n})
		}
		for i := range n.shards {
			if len(n.shadow[i]) > 0 || n.clocks[i].due(now) {
				out = append(out, unit{kind: unitStep, n: n, i: i})
			}
		}
		if !now.Before(n.metaTickAt) {
			out = append(out, unit{kind: unitMetaTick, n: n})
		}
		for i := range n.shards {
			if !n.busy[i] && (len(n.wakes[i]) > 0 || !now.Before(n.nextPass[i])) {
				out = append(out, unit{kind: unitPass, n: n, i: i})
			}
		}
	}
	return out
}

// tick is one scheduler step: faults start and end, then one action: a
// client acts, the clock moves, or one piece of ready engine work runs.
// The clock moves mostly when nothing is ready (a node's CPU is fast
// next to a raft tick), and now and then regardless (a slow moment).
func (c *csim) tick() {
	if c.viol != nil {
		return
	}
	c.expireFaults()
	c.startFaults()
	units := c.units()
	switch w := c.rng.IntN(100); {
	case w < 20:
		c.clientAct(c.clients[c.rng.IntN(len(c.clients))])
	case len(units) == 0 || w < 22:
		// Up to the next due timer, at most a few milliseconds (network
		// delays are due at times the bus keeps to itself).
		d := time.Duration(1+c.rng.IntN(5000)) * time.Microsecond
		if next := c.nextDue(); !next.IsZero() && next.Sub(c.clk.Now()) < d {
			d = max(next.Sub(c.clk.Now()), time.Microsecond)
		}
		c.advance(d)
	default:
		c.runUnit(units[c.rng.IntN(len(units))])
	}
	c.afterAction()
}

func (c *csim) runUnit(u unit) {
	switch u.kind {
	case unitDeliver:
		c.deliver(u.n, 1+c.rng.IntN(8))
	case unitStep:
		c.stepShard(u.n, u.i)
	case unitMetaTick:
		c.metaTick(u.n)
	case unitPass:
		if u.n.passDue(u.i, c.clk.Now()) {
			c.reconcile(u.n, u.i)
		}
	}
}

// passDue is node.passDue for a cluster node.
func (n *cnode) passDue(i int, now time.Time) bool {
	due := false
	select {
	case <-n.wakes[i]:
		due = true
	default:
	}
	if !now.Before(n.nextPass[i]) {
		due = true
		n.nextPass[i] = now.Add(passPeriod)
	}
	return due
}

// advance moves the virtual clock and releases delayed messages now due.
func (c *csim) advance(d time.Duration) {
	c.clk.Advance(d)
	released := c.net.Pump()
	c.event("clock +%v released=%d", d, released)
}

// nextDue is the earliest future time a timer the scheduler knows of is
// due: a shard's, a metadata tick, a reconciler period, a client's retry.
func (c *csim) nextDue() time.Time {
	now := c.clk.Now()
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, n := range c.nodes {
		if n.down {
			consider(n.restartAt)
			continue
		}
		if n.stopped {
			consider(n.stopUntil)
			continue
		}
		consider(n.metaTickAt)
		for i := range n.shards {
			consider(n.clocks[i].next())
			consider(n.nextPass[i])
		}
	}
	for _, cl := range c.clients {
		if o := cl.op; o != nil && o.waiting {
			consider(o.retryAt)
		}
	}
	return next
}

// deliver receives up to k messages from n's bus endpoint and dispatches
// them as cluster.go's receive loop does: partition raft traffic into the
// router (a full inbox drops it: raft re-sends), metadata raft traffic
// into the metadata group.
func (c *csim) deliver(n *cnode, k int) {
	for range k {
		var m transport.Message
		var ok bool
		select {
		case m, ok = <-n.ep.Recv():
			if !ok {
				return
			}
		default:
			return
		}
		switch m.Kind {
		case kindPartitionRaft:
			msg := &raftpb.Message{}
			if len(m.Payload) < 8 || proto.Unmarshal(m.Payload[8:], msg) != nil {
				c.fail(0, "n%d received an undecodable partition raft message", n.id)
				return
			}
			ns := metadata.Namespace(m.Group)
			epoch := binary.LittleEndian.Uint64(m.Payload)
			c.event("n%d recv %v@%d %v from=n%d", n.id, ns, epoch, msg.GetType(), m.From)
			f := shard.Frame{Req: &shard.Request{Op: shard.OpRaft, NS: ns, Epoch: epoch, Raft: msg}}
			if _, err := n.rt.Send(ns, f); err != nil && !errors.Is(err, router.ErrFull) {
				c.fail(0, "n%d router refused a raft frame: %v", n.id, err)
				return
			}
		case kindCatchUp:
			if len(m.Payload) < 8 {
				c.fail(0, "n%d received a short catch-up message", n.id)
				return
			}
			ns := metadata.Namespace(m.Group)
			epoch := binary.LittleEndian.Uint64(m.Payload)
			c.event("n%d recv %v@%d catchup from=n%d", n.id, ns, epoch, m.From)
			f := shard.Frame{Req: &shard.Request{Op: shard.OpCatchUp, NS: ns, Epoch: epoch, Payload: m.Payload[8:]}}
			if _, err := n.rt.Send(ns, f); err != nil && !errors.Is(err, router.ErrFull) {
				c.fail(0, "n%d router refused a catch-up frame: %v", n.id, err)
				return
			}
		case kindMetaRaft:
			msg := &raftpb.Message{}
			if proto.Unmarshal(m.Payload, msg) != nil {
				c.fail(0, "n%d received an undecodable metadata raft message", n.id)
				return
			}
			c.event("n%d recv meta %v from=n%d", n.id, msg.GetType(), m.From)
			_ = n.mg.Step(msg) // refusals are raft's business (a stale message)
			c.processMeta(n)
		default:
			c.fail(0, "n%d received a message of kind %d", n.id, m.Kind)
			return
		}
	}
}

// stepShard steps shard i of n once: the head of its inbox mirror, or
// (inbox empty) a due raft tick.
func (c *csim) stepShard(n *cnode, i int) {
	var a *attempt
	queued, fetch := false, false
	if q := n.shadow[i]; len(q) > 0 {
		a, n.shadow[i] = q[0], q[1:]
		queued = true
		if a == catchUpFrame {
			a, fetch = nil, true
		}
		if a != nil {
			rev, _ := n.meta.CreatedRevision(a.op.ns)
			a.stamp = rev
			a.handles++
		}
	}
	n.fetching = fetch
	did := n.shards[i].Step()
	n.fetching = false
	switch {
	case queued && !did:
		c.fail(0, "n%d shard %d did not step with a frame queued", n.id, i)
	case !queued && !did:
		n.clocks[i].handled(c.clk.Now())
		c.event("n%d step shard=%d idle", n.id, i)
	case !queued:
		c.event("n%d step shard=%d tick", n.id, i)
	case a == nil:
		c.event("n%d step shard=%d raft", n.id, i)
	default:
		c.event("n%d step shard=%d a=%d stamp=%d", n.id, i, a.id, a.stamp)
	}
	n.flushOutbox()
}

// reconcile runs one pass of shard i's reconciler on n.
func (c *csim) reconcile(n *cnode, i int) {
	n.busy[i] = true
	rep, err := n.recs[i].Reconcile(c.ctx)
	n.busy[i] = false
	n.flushOutbox()
	if err != nil {
		// reconciler.Run logs a failed pass and goes on; so does the
		// simulator (a replicated partition's raft log may fail to open
		// on a faulty disk, and InsertOwned reports it).
		c.event("n%d pass shard=%d failed: %v", n.id, i, err)
		c.faults.FailedPasses++
		return
	}
	if rep.Skipped {
		c.event("n%d pass shard=%d rev=%d skipped", n.id, i, rep.Revision)
		return
	}
	c.event("n%d pass shard=%d rev=%d built=%d removed=%d rows=%d failed=%d answered=%d expired=%d parked=%d pending=%d",
		n.id, i, rep.Revision, rep.Built, rep.Removed, rep.RowsWritten, rep.Failed, rep.Answered, rep.Expired, rep.Parked, rep.Pending)
}

// metaTick ticks n's metadata group (cluster.go's timer).
func (c *csim) metaTick(n *cnode) {
	n.mg.Tick()
	n.metaTickAt = c.clk.Now().Add(c.cfg.TickInterval)
	c.event("n%d meta tick", n.id)
	c.processMeta(n)
}

// processMeta handles everything n's metadata group has ready and
// compacts its log when due, as cluster.go's loop does after every event
// (a Ready that fails is logged and the loop goes on).
func (c *csim) processMeta(n *cnode) {
	for n.mg.HasReady() && c.viol == nil {
		if err := n.mg.Handle(n.mh); err != nil {
			c.event("n%d metadata raft ready failed: %v", n.id, err)
			break
		}
	}
	g := n.mg
	if g.Applied()-g.SnapshotIndex() < metaSnapshotEvery {
		return
	}
	data, err := n.mh.encodeSnapshot(n.meta.Export())
	if err == nil {
		err = g.Compact(g.Applied(), data)
	}
	c.event("n%d meta compact at %d err=%v", n.id, g.Applied(), errString(err))
}

// metaApplier is cluster.go's metaHandler for one simulated node.
type metaApplier struct {
	n       *cnode
	pending map[uint64]metaWait
	seen    map[[2]uint64]metaOutcome
	order   [][2]uint64
}

// metaWait is a client waiting for a proposal it made through this node.
type metaWait struct {
	o   *op
	key [2]uint64
}

type metaOutcome struct {
	res metadata.Result
	err error
}

type metaAnswer struct {
	w metaWait
	r metaOutcome
}

const metaDedupeWindow = 4096

// Send implements replica.Handler.
func (h *metaApplier) Send(m *raftpb.Message) {
	n := h.n
	b, err := proto.Marshal(m)
	if err != nil {
		n.c.fail(0, "n%d marshal metadata raft message: %v", n.id, err)
		return
	}
	err = n.ep.Send(transport.Message{To: transport.NodeID(m.GetTo()), Kind: kindMetaRaft,
		Group: uint64(metadata.MetadataNamespace), Payload: b})
	n.c.event("n%d send meta %v to=n%d err=%v", n.id, m.GetType(), m.GetTo(), errString(err))
}

var errShortCommand = errors.New("sim: metadata entry shorter than its header")

// Apply implements replica.Handler: cluster.go's metaHandler.Apply, plus
// the check that the metadata every node holds after applying an index is
// the same (invariant 3, for the metadata): a fingerprint of the whole
// store, so a command applied on one node and deduplicated on another
// agrees only if neither changed anything.
func (h *metaApplier) Apply(index, id uint64, payload []byte) error {
	n := h.n
	c := n.c
	var r metaOutcome
	dup := false
	if len(payload) < 16 {
		r.err = errShortCommand
	} else {
		key := [2]uint64{binary.LittleEndian.Uint64(payload), binary.LittleEndian.Uint64(payload[8:])}
		if prev, ok := h.seen[key]; ok {
			r, dup = prev, true
			c.event("n%d meta apply index=%d seq=%d duplicate", n.id, index, key[1])
		} else {
			cmd, err := metadata.DecodeCommand(payload[16:])
			if err == nil {
				r.res, err = n.meta.Apply(cmd)
			}
			r.err = err
			h.remember(key, r)
			ev := c.event("n%d meta apply index=%d seq=%d %T%+v rev=%d created=%d removed=%d err=%v",
				n.id, index, key[1], cmd, cmd, r.res.Revision, len(r.res.Created), len(r.res.Removed), errString(r.err))
			if r.err == nil {
				n.incs.apply(r.res, ev)
			}
		}
	}
	c.checkMetaState(n, index, dup)
	if w, ok := h.pending[id]; ok {
		delete(h.pending, id)
		c.metaDone = append(c.metaDone, metaAnswer{w: w, r: r})
	}
	return nil
}

// checkMetaState records, or compares with what another node recorded,
// the fingerprint of n's metadata after applying index; dup is whether n
// found the command there a duplicate.
func (c *csim) checkMetaState(n *cnode, index uint64, dup bool) {
	b, err := metadata.EncodeSnapshot(n.meta.Export())
	if err != nil {
		c.fail(0, "n%d encode metadata: %v", n.id, err)
		return
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	sum := fmt.Sprintf("%016x rev=%d", h.Sum64(), n.meta.Revision())
	if prev, ok := c.metaLog[index]; !ok {
		c.metaLog[index], c.metaDup[index] = sum, dup
	} else if prev != sum {
		c.fail(3, "metadata replicas disagree after index %d: n%d holds %s, another node held %s", index, n.id, sum, prev)
	}
}

// encodeSnapshot and decodeSnapshot are cluster.go's: the deduplication
// table's keys, oldest first, then the store.
func (h *metaApplier) encodeSnapshot(store metadata.StoreSnapshot) ([]byte, error) {
	return metadata.EncodeGroupSnapshot(h.order, store)
}

var errMetaResultForgotten = errors.New("sim: command applied before the metadata snapshot; result not kept")

func (h *metaApplier) decodeSnapshot(data []byte) (metadata.StoreSnapshot, error) {
	keys, snap, err := metadata.DecodeGroupSnapshot(data)
	if err != nil {
		return snap, err
	}
	h.seen, h.order = nil, nil
	for _, k := range keys {
		h.remember(k, metaOutcome{err: errMetaResultForgotten})
	}
	return snap, nil
}

func (h *metaApplier) remember(key [2]uint64, r metaOutcome) {
	if h.seen == nil {
		h.seen = make(map[[2]uint64]metaOutcome)
	}
	if len(h.order) >= metaDedupeWindow {
		delete(h.seen, h.order[0])
		h.order = h.order[1:]
	}
	h.order = append(h.order, key)
	h.seen[key] = r
}

// LeaderChanged implements replica.Handler: as cluster.go, the waiters of
// proposals in flight are forgotten; each proposes again after its
// bounded wait, and deduplication absorbs a copy that commits after all.
func (h *metaApplier) LeaderChanged(lead uint64) {
	h.n.c.ops.MetaElections++
	h.n.c.event("n%d meta leader=n%d forgot=%d", h.n.id, lead, len(h.pending))
	clear(h.pending)
}

// ApplySnapshot implements replica.Handler: cluster.go's — the node lagged
// behind the metadata group's compacted log and installs the leader's
// store whole. The simulator records the incarnations it creates and ends
// on this node, and checks the store against what other nodes held at
// that index.
func (h *metaApplier) ApplySnapshot(index uint64, data []byte) error {
	n := h.n
	c := n.c
	snap, err := h.decodeSnapshot(data)
	if err != nil {
		return err
	}
	before := n.meta.Snapshot().Partitions
	if err := n.meta.Replace(snap); err != nil {
		c.event("n%d meta snapshot at %d refused: %v", n.id, index, err)
		return err
	}
	after := n.meta.Snapshot().Partitions
	var diff metadata.Result
	for _, p := range before {
		if !slices.Contains(after, p) {
			diff.Removed = append(diff.Removed, p)
		}
	}
	for _, p := range after {
		if !slices.Contains(before, p) {
			diff.Created = append(diff.Created, p)
		}
	}
	ev := c.event("n%d meta snapshot installed index=%d rev=%d created=%d removed=%d", n.id, index, n.meta.Revision(), len(diff.Created), len(diff.Removed))
	n.incs.apply(diff, ev)
	c.checkMetaState(n, index, false)
	return nil
}
