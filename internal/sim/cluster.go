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
	"syscall"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// Cluster mode (Config.Nodes > 1) runs several nodes in one process, each
// a manual host.Engine — the engine parkway.Open starts — on its own disk
// (errorfs over a vfs.MemFS): the metadata group member, the replicated
// shards and the reconcilers are the engine's. The nodes talk over a
// transport.Network with ManualDelivery; the simulator hands each
// delivered message to the engine's Deliver, steps its shards, runs its
// reconcile passes, ticks its metadata group and proposes metadata
// commands through it. Every raft tick comes from the virtual clock; every
// delivery, step, pass, proposal and fault is a scheduler choice from the
// seed. The simulator observes the engine only through public seams: the
// store and router wrappers, the per-shard clock, the Events hooks and a
// transport wrapper that holds an action's messages until it returns.

// maxNodes bounds Config.Nodes: each step is one node's action, so a
// bigger cluster does less per node in a run of Config.Steps steps.
const maxNodes = 7

// Where a cluster node keeps its metadata group's raft log (the engine's
// layout: <DataDir>/metadata-raft/raft.log).
const metaRaftLog = "/data/metadata-raft/raft.log"

// Cluster-mode timing. forwardTicks is the engine's bound on one metadata
// proposal (host.Engine.ForwardTimeout: 50 ticks) before the client
// proposes it again.
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
	ctx context.Context
	net *transport.Network
	// fwds are the forwarded attempts by their forward's request on the
	// bus (the forwarding node, the request id); delivering is the one
	// whose request a node is taking from the bus.
	fwds       map[fwdKey]*attempt
	delivering *attempt
	fromBus    bool
	// barriers are the read barriers in flight (cbarrier.go).
	barriers    []*barrier
	nextBarrier int
	// wrongDisk is set while a node is started on another's data
	// directory (startOnWrongDisk): the refusal is the expected outcome.
	wrongDisk bool
	// peers are every node that ever ran, founders first, then the nodes
	// that joined (cjoin.go), in the order they started: node i+1 was the
	// i-th to start. The members (base.nodes) are in id order: every node
	// that ran but those removed (cremove.go), which are in gone.
	peers    []uint64
	founders []uint64
	gone     []*node

	nextSeq  uint64
	metaDone []metaAnswer

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
	// placed records, for each incarnation built somewhere, every set of
	// voters its group may have had: its replicas as the metadata of the
	// first node to build it placed them, and the configurations of its
	// moves since (notePlacement).
	placed map[incKey][][]uint64

	netf netState
	// compactEntries is the partitions' raft log compaction interval
	// (shard.Replication.CompactEntries), picked per seed: mostly small,
	// so snapshots and catch-up happen.
	compactEntries uint64
	// actions counts the ends of scheduler actions: raft's random draws
	// during one action are a function of it (see seededReader).
	actions uint64

	// storm is what a join storm's run measures (Config.MemberPartitions,
	// cmembers.go).
	storm stormState
	// delivered are the offsets the group members handed to their
	// applications (invariant 12, invariant_delivered.go).
	delivered map[deliveryKey]*deliveredSet

	// Membership and failover (cjoin.go, cfailover.go): the node being
	// added, how many were, the failover to check after a quiesced
	// leader's crash, and the end of the calm that crash imposed.
	join   *joining
	joins  int
	remove *removing
	// earlySettles are BreakEarlySettle's settles to propose.
	earlySettles []earlySettle
	failover     *failoverCheck
	deafWait     *deafWait
	calmUntil    time.Time

	// peerf is the misbehaving member's spells (cpeer.go).
	peerf peerState
	// raftStateLost is set when the liar removed its copy of a committed
	// incarnation it is a replica of after a lie on that copy's
	// incarnation file (knownReplicaIncarnationDamage), even one holding
	// no message: its raft term, vote and log went with it.
	raftStateLost bool

	// lies are the liar's lies (clie.go), nil when FaultRates.Lie is 0.
	lies *lies
	liar uint64
}

func runCluster(cfg Config) (Result, error) {
	c := newCluster(cfg)
	release := seedRaftRand(cfg.Seed, &c.actions)
	defer release()
	c.guard(c.run)
	c.guard(c.close)
	res := c.result()
	c.clusterCounts(&res)
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
		base:           newBase(cfg, rng, clk),
		ctx:            context.Background(),
		net:            transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true}),
		metaLog:        make(map[uint64]string),
		metaDup:        make(map[uint64]bool),
		placed:         make(map[incKey][][]uint64),
		builds:         make(map[buildKey]int),
		applyFailed:    make(map[buildKey]bool),
		storeFailed:    make(map[buildKey]bool),
		storeOutcomes:  make(map[storeKey]uint8),
		compactEntries: compact,
		fwds:           make(map[fwdKey]*attempt),
	}
	for i := range cfg.Nodes {
		c.peers = append(c.peers, uint64(i+1))
	}
	c.founders = slices.Clone(c.peers)
	c.h, c.kind = c, c
	c.memberDone = c.memberDoneOf
	c.startMembers()
	c.startLies()
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
	// A join storm's run goes on past its steps until it settles.
	c.drive(c, c.stormRunning)
}

func (c *csim) close() {
	for _, n := range slices.Concat(c.nodes, c.gone) {
		n.inj.dead = true // what shutdown writes reaches nothing anyone checks
		n.close()
	}
	_ = c.net.Close()
}

// clusterCounts adds to res what only a cluster counts: the network's
// faults, the misbehaving member's, leadership transfers and a join
// storm's figures.
func (c *csim) clusterCounts(res *Result) {
	st := c.net.Stats()
	f := &res.Faults
	res.Ops.LeaderTransfers = c.leaderTransfers()
	f.MsgDropped, f.MsgDuplicated, f.MsgReordered = int(st.Dropped), int(st.Duplicated), int(st.Reordered)
	f.MsgDelayed, f.MsgCut, f.MsgClogged = int(st.Delayed), int(st.Cut), int(st.Clogged)
	c.peerCounts(f)
	res.StormSettled = c.storm.settled
	res.StormSettledDelivered = c.storm.deliveredThen
	res.StormDelivered = res.Ops.MemberDelivered - c.storm.deliveredThen
}

// openNode builds node id on disk mem with host.New, as parkway.Open
// builds a cluster node with a DataDir, in manual mode. Faults are held
// off while it opens.
func (c *csim) openNode(id uint64, ep transport.Bus, mem *vfs.MemFS, prev *node) *node {
	n := &node{b: &c.base, c: c, id: id, mem: mem, ep: ep, m: metrics.New(), incs: newTimeline(),
		lastServe: make(map[metadata.Namespace]uint64)}
	if prev != nil {
		// The node's view of incarnations and what served it carry over:
		// they are the simulator's record of it, not the node's memory;
		// so does its configuration.
		n.incs, n.lastServe, n.gen = prev.incs, prev.lastServe, prev.gen
		n.peers, n.join, n.joined = prev.peers, prev.join, prev.joined
		n.clk = prev.clk
	} else if slices.Contains(c.founders, id) {
		n.peers, n.joined = c.founders, true
	} else {
		n.peers, n.join = append(c.memberIDs(), id), true
	}
	if n.clk == nil {
		n.clk = c.newNodeClock()
	}
	n.gen++
	n.inj = newInjector(n)
	if c.cfg.Faults.SpareMetadataLog {
		n.inj.spare = path.Dir(metaRaftLog) + "/"
	}
	if c.isLiar(n) {
		n.inj.lies, n.inj.lied = c.lies, c.lies.lieFired
	}
	n.inj.quiet++
	defer func() { n.inj.quiet-- }()
	peers := make([]transport.NodeID, len(n.peers))
	for i, p := range n.peers {
		peers[i] = transport.NodeID(p)
	}
	n.shadow = make([][]*attempt, c.cfg.Shards)
	n.busy = make([]bool, c.cfg.Shards)
	hc := n.hostConfig(c.nodeFS(n), metaSnapshotEvery, func(st partition.Store) partition.Store {
		return &store{n: n, o: c, inner: st}
	})
	hc.Cluster = &host.Cluster{ID: transport.NodeID(id), Peers: peers, Join: n.join, Bus: &outboxBus{n: n},
		TickInterval: c.cfg.TickInterval, CompactEntries: c.compactEntries,
		MaxForwardedBytes: simForwardedBytes, MaxForwardedPeerBytes: simForwardedPeerBytes}
	hc.Events = host.Events{
		MetadataOpened:            func(meta *metadata.Store) { n.meta = meta },
		MetadataApplied:           n.metaApplied,
		MetadataSnapshotInstalled: n.metaSnapshotInstalled,
		MetadataLeaderChanged:     n.metaLeaderChanged,
		MetadataCompacted: func(index uint64, err error) {
			c.event("n%d meta compact at %d err=%v", n.id, index, errString(err))
		},
		MetadataReopened: func(index uint64) {
			c.faults.MetaReopens++
			c.event("n%d meta reopened applied=%d", n.id, index)
		},
	}
	eng, err := host.New(hc)
	if err != nil && c.wrongDisk && errors.Is(err, host.ErrWrongDataDir) {
		c.event("n%d refused the wrong data directory: %v", id, err)
		return n
	}
	if err != nil {
		c.fail(0, "n%d open: %v", id, err)
		return n
	}
	n.opened(eng)
	n.metaTickAt = n.clk.monoNow().Add(c.cfg.TickInterval)
	n.metaRev = n.meta.Revision()
	st := eng.MetadataStatus()
	c.event("n%d open gen=%d shards=%d revision=%d applied=%d snapshot=%d join=%v",
		id, n.gen, c.cfg.Shards, n.meta.Revision(), st.Applied, st.SnapshotIndex, n.join)
	return n
}

// nodeFS is n's filesystem: its disk behind its fault injector (and,
// under BreakIdentityCheck on a wrong disk, without its IDENTITY file).
func (c *csim) nodeFS(n *node) vfs.FS {
	var inj errorfs.Injector = n.inj
	if c.wrongDisk && BreakIdentityCheck.Load() {
		identity := path.Join(dataDir, "IDENTITY")
		inj = errorfs.Chain(errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Path == identity && (op.Kind == errorfs.OpOpen || op.Kind == errorfs.OpStat) {
				return syscall.ENOENT
			}
			return nil
		}), n.inj)
	}
	return errorfs.New(n.mem, inj)
}

// newNodeClock is a new node's clock, skewed when clock faults are on.
func (c *csim) newNodeClock() *nodeClock {
	k := newNodeClock(c.initialSkew())
	// Its monotonic clock starts where the virtual clock stands.
	k.mono.Advance(c.clk.Now().Sub(epoch0))
	return k
}

// node is member id (nil: no such member, or removed).
func (c *csim) node(id uint64) *node {
	id = metadata.NodeOf(id) // a replica's raft id names its node
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// memberIDs are the ids of the members, ascending.
func (c *csim) memberIDs() []uint64 {
	out := make([]uint64, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.id
	}
	return out
}

// outboxBus is the engine's transport: it holds what the engine sends
// until the action that sent it returns. A shard ticks its groups in map
// order, so the order in which one step's messages of different groups
// are sent is not a function of the seed; flushOutbox puts them in group
// order, keeping each group's own order, before the network (whose fault
// PCG draws per message) sees them. The endpoint itself belongs to the
// simulator, which closes it when the node crashes.
type outboxBus struct{ n *node }

func (b *outboxBus) Send(m transport.Message) error {
	m.From = transport.NodeID(b.n.id)
	m.Payload = slices.Clone(m.Payload)
	if BreakRaftEpoch.Load() {
		stripRaftEpochs(m)
	}
	if BreakLivenessReport.Load() && m.Kind == host.KindLiveness {
		m.Payload = m.Payload[:min(len(m.Payload), 8)] // the directory's incarnation stays
	}
	if BreakLeaderTransfer.Load() && carriesTimeoutNow(m) {
		b.n.c.event("n%d drop %s (broken leader transfer)", b.n.id, describeMsg(m))
		return nil
	}
	if m.Kind == host.KindReply {
		b.n.c.forwardReplied(b.n, m)
	}
	b.n.outbox = append(b.n.outbox, m)
	return nil
}
func (b *outboxBus) Recv() <-chan transport.Message { return b.n.ep.Recv() }
func (b *outboxBus) ID() transport.NodeID           { return transport.NodeID(b.n.id) }
func (b *outboxBus) Close() error                   { return nil }

func (n *node) flushOutbox() {
	if len(n.outbox) == 0 {
		return
	}
	slices.SortStableFunc(n.outbox, func(a, b transport.Message) int { return cmp.Compare(a.Group, b.Group) })
	for i, o := range n.outbox {
		if BreakReplyPath.Load() && n.c.replyPath(n, o) {
			n.outbox[i] = transport.Message{}
			continue
		}
		err := n.ep.Send(o)
		n.c.event("n%d send %s to=n%d err=%v", n.id, describeMsg(o), o.To, errString(err))
		if n.c.forging(n) {
			n.c.forgeTerms(n, o)
		}
		n.outbox[i] = transport.Message{}
	}
	n.outbox = n.outbox[:0]
}

// describe names a transport message for the trace.
func describeMsg(m transport.Message) string {
	switch m.Kind {
	case host.KindMetaRaft:
		msg := &raftpb.Message{}
		if proto.Unmarshal(m.Payload, msg) == nil {
			return "meta " + msg.GetType().String()
		}
	case host.KindPartitionRaft:
		msg := &raftpb.Message{}
		if len(m.Payload) >= 8 && proto.Unmarshal(m.Payload[8:], msg) == nil {
			typ := msg.GetType().String()
			if replica.IsQuiesce(msg) {
				typ = "quiesce"
			}
			return fmt.Sprintf("%v@%d %s", metadata.Namespace(m.Group), binary.LittleEndian.Uint64(m.Payload), typ)
		}
	case host.KindPartitionRaftBatch:
		if len(m.Payload) >= 4 {
			return fmt.Sprintf("raft batch of %d", binary.LittleEndian.Uint32(m.Payload))
		}
	case host.KindCatchUp:
		if len(m.Payload) > 8 {
			return fmt.Sprintf("%v@%d catchup/%d", metadata.Namespace(m.Group), binary.LittleEndian.Uint64(m.Payload), m.Payload[8])
		}
		return fmt.Sprintf("%v catchup", metadata.Namespace(m.Group))
	}
	return fmt.Sprintf("kind=%d group=%d", m.Kind, m.Group)
}

// catchUpFrame marks a catch-up frame in an inbox mirror, floodFrame a
// request of a misbehaving member's flood.
var (
	catchUpFrame = &attempt{}
	floodFrame   = &attempt{}
)

// afterAction ends every scheduler action: raft messages go out, answers
// are collected, and metadata commands whose commit a client waited for
// are followed up.
func (c *csim) afterAction() {
	c.actions++
	if len(c.earlySettles) > 0 {
		c.proposeEarlySettles()
	}
	for _, n := range c.nodes {
		if n.eng != nil && !n.down {
			n.eng.PumpReplies()
		}
		n.flushOutbox()
		n.collectMeta()
	}
	stepChecks(c)
	c.collect()
	c.stepForwards()
	c.stepBarriers()
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

// stepFaults ends and starts the cluster's faults, and takes the step's
// turn of a join storm's check and of the membership changes under way
// (kind).
func (c *csim) stepFaults() bool {
	c.expireFaults()
	c.startFaults()
	c.stormCheck()
	c.joinAct()
	c.removeAct()
	return false
}

// membersAct lets the group members act: one in eight of them, at least
// one, so that each of many members (a join storm) still heartbeats
// within its session.
func (c *csim) membersAct() {
	ms := c.members()
	for range max(1, len(ms)/8) {
		cl := ms[c.rng.IntN(len(ms))]
		c.cutMember(cl)
		c.clientAct(cl)
	}
}

// advance moves the virtual clock, and every member's clock with it, and
// releases delayed messages now due.
func (c *csim) advance(d time.Duration) {
	c.advanceClocks(d)
	released := c.net.Pump()
	c.event("clock +%v released=%d", d, released)
}

// deliver receives up to k messages from n's endpoint and hands each to
// the engine's Deliver: partition traffic goes into the router (a full
// inbox drops it: raft re-sends), metadata traffic into the metadata group.
func (c *csim) deliver(n *node, k int) {
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
		c.event("n%d recv %s from=n%d", n.id, describeMsg(m), m.From)
		ch, ok := c.frameIn(n, m)
		if !ok {
			if c.viol != nil {
				return
			}
			continue
		}
		ok = c.receive(n, m)
		c.frameOut(n, ch)
		if !ok {
			return
		}
	}
}

// receive hands m to n's engine; it reports false on a violation.
func (c *csim) receive(n *node, m transport.Message) bool {
	if m.Kind == host.KindRequest {
		if a := c.fwds[fwdKey{uint64(m.From), m.Group}]; a != nil && a.node.id == n.id {
			c.delivering = a
		}
		c.fromBus = true
		defer func() { c.delivering, c.fromBus = nil, false }()
	}
	if err := n.eng.Deliver(m); err != nil && !errors.Is(err, router.ErrFull) {
		if errors.Is(err, host.ErrMetadataFailed) {
			c.event("n%d metadata member stopped: %v", n.id, err)
			return true
		}
		c.fail(0, "n%d refused a delivered message: %v", n.id, err)
		return false
	}
	return true
}

// reconcile runs one pass of shard i's reconciler on n. A failed pass is
// logged and counted, as reconciler.Run logs it and goes on (a replicated
// partition's raft log may fail to open on a faulty disk, and
// InsertOwned reports it).
func (c *csim) reconcile(n *node, i int) {
	if err := n.pass(c.ctx, i); err != nil {
		c.event("n%d pass shard=%d failed: %v", n.id, i, err)
		c.faults.FailedPasses++
	}
}

// metaTick ticks n's metadata group (the engine's timer).
func (c *csim) metaTick(n *node) {
	if BreakZombieLiveness.Load() {
		c.zombieHeartbeats(n)
	}
	err := n.eng.TickMetadata()
	if err != nil {
		n.metaTickErr = c.clk.Now()
	}
	n.metaTickAt = n.clk.monoNow().Add(c.cfg.TickInterval)
	c.event("n%d meta tick err=%v", n.id, errString(err))
}

// processMeta handles everything n's metadata group has ready and
// compacts its log when due (the engine takes its member down when a
// Ready fails, and its metadata tick reopens it from its raft log).
func (c *csim) processMeta(n *node) {
	if err := n.eng.HandleMetadata(); err != nil {
		c.event("n%d metadata: %v", n.id, err)
	}
}

// metaWait is a client waiting for a proposal it made through this node.
type metaWait struct {
	o   *op
	key host.MetadataKey
	ch  <-chan host.MetadataResult
}

type metaAnswer struct {
	w metaWait
	r host.MetadataResult
}

// collectMeta moves the outcomes of n's answered proposals to metaDone.
func (n *node) collectMeta() {
	kept := n.waits[:0]
	for _, w := range n.waits {
		select {
		case r := <-w.ch:
			n.c.metaDone = append(n.c.metaDone, metaAnswer{w: w, r: r})
		default:
			kept = append(kept, w)
		}
	}
	clear(n.waits[len(kept):])
	n.waits = kept
}

// metaApplied is the engine's Events.MetadataApplied: it records the
// incarnations a command created and ended on this node, and checks that
// the metadata every node holds after applying an index is the same
// (invariant 3, for the metadata): a fingerprint of the whole store, so a
// command applied on one node and deduplicated on another agrees only if
// neither changed anything.
func (n *node) metaApplied(index uint64, cmd metadata.Command, res metadata.Result, err error, dup bool) {
	c := n.c
	if dup {
		c.event("n%d meta apply index=%d duplicate", n.id, index)
	} else {
		ev := c.event("n%d meta apply index=%d %T%+v rev=%d created=%d removed=%d err=%v",
			n.id, index, cmd, cmd, res.Revision, len(res.Created), len(res.Removed), errString(err))
		if err == nil {
			n.incs.apply(res, ev)
			switch cmd.(type) {
			case metadata.DrainNode, metadata.Rebalance:
				c.notePlacements(n)
				c.breakEarlySettle(n, index)
			case metadata.SettleReplicas:
				if _, seen := c.metaLog[index]; !seen && n.meta.Revision() != n.metaRev {
					c.faults.MovesSettled++
				}
			case metadata.ExpireMembers:
				if _, seen := c.metaLog[index]; !seen && n.meta.Revision() != n.metaRev {
					c.ops.MemberExpired++
				}
			}
		}
	}
	n.metaRev = n.meta.Revision()
	c.checkMetaState(n, index, dup)
}

// checkMetaState records, or compares with what another node recorded,
// the fingerprint of n's metadata after applying index; dup is whether n
// found the command there a duplicate.
func (c *csim) checkMetaState(n *node, index uint64, dup bool) {
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

// metaLeaderChanged is the engine's Events.MetadataLeaderChanged: the
// engine forgot the waiters of proposals in flight; so do the clients
// (after taking the outcomes already delivered). Each proposes again
// after its bounded wait, and deduplication absorbs a copy that commits
// after all.
func (n *node) metaLeaderChanged(lead uint64, forgot int) {
	n.c.ops.MetaElections++
	n.collectMeta()
	n.c.event("n%d meta leader=n%d forgot=%d", n.id, lead, forgot)
	clear(n.waits)
	n.waits = n.waits[:0]
}

// metaSnapshotInstalled is the engine's Events.MetadataSnapshotInstalled:
// the node lagged behind the metadata group's compacted log and installed
// the leader's store whole. The simulator records the incarnations it
// creates and ends on this node, and checks the store against what other
// nodes held at that index.
func (n *node) metaSnapshotInstalled(index uint64, before, after []metadata.PartitionInfo, err error) {
	c := n.c
	if err != nil {
		c.event("n%d meta snapshot at %d refused: %v", n.id, index, err)
		return
	}
	var diff metadata.Result
	// An incarnation is its namespace and creation revision.
	has := func(list []metadata.PartitionInfo, p metadata.PartitionInfo) bool {
		return slices.ContainsFunc(list, func(q metadata.PartitionInfo) bool {
			return q.NS == p.NS && q.CreatedRevision == p.CreatedRevision
		})
	}
	for _, p := range before {
		if !has(after, p) {
			diff.Removed = append(diff.Removed, p)
		}
	}
	for _, p := range after {
		if !has(before, p) {
			diff.Created = append(diff.Created, p)
		}
	}
	ev := c.event("n%d meta snapshot installed index=%d rev=%d created=%d removed=%d", n.id, index, n.meta.Revision(), len(diff.Created), len(diff.Removed))
	n.incs.apply(diff, ev)
	n.metaRev = n.meta.Revision()
	c.notePlacements(n)
	c.checkMetaState(n, index, false)
}
