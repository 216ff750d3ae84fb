package sim

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"path"
	"slices"
	"syscall"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
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

func (c *sim) close() {
	for _, n := range slices.Concat(c.nodes, c.gone) {
		n.inj.dead = true // what shutdown writes reaches nothing anyone checks
		n.close()
	}
	if c.net != nil {
		_ = c.net.Close()
	}
}

// clusterCounts adds to res what only a cluster counts: the network's
// faults, the misbehaving member's, leadership transfers and a join
// storm's figures.
func (c *sim) clusterCounts(res *Result) {
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

// nodeFS is n's filesystem: its disk behind its fault injector (and,
// under BreakIdentityCheck on a wrong disk, without its IDENTITY file).
func (c *sim) nodeFS(n *node) vfs.FS {
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
func (c *sim) newNodeClock() *nodeClock {
	k := newNodeClock(c.initialSkew())
	// Its monotonic clock starts where the virtual clock stands.
	k.mono.Advance(c.clk.Now().Sub(epoch0))
	return k
}

// node is member id (nil: no such member, or removed).
func (c *sim) node(id uint64) *node {
	id = metadata.NodeOf(id) // a replica's raft id names its node
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// memberIDs are the ids of the members, ascending.
func (c *sim) memberIDs() []uint64 {
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
		b.n.b.event("n%d drop %s (broken leader transfer)", b.n.id, describeMsg(m))
		return nil
	}
	if m.Kind == host.KindReply {
		b.n.b.forwardReplied(b.n, m)
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
		if BreakReplyPath.Load() && n.b.replyPath(n, o) {
			n.outbox[i] = transport.Message{}
			continue
		}
		err := n.ep.Send(o)
		n.b.event("n%d send %s to=n%d err=%v", n.id, describeMsg(o), o.To, errString(err))
		if n.b.forging(n) {
			n.b.forgeTerms(n, o)
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

// deliver receives up to k messages from n's endpoint and hands each to
// the engine's Deliver: partition traffic goes into the router (a full
// inbox drops it: raft re-sends), metadata traffic into the metadata group.
func (c *sim) deliver(n *node, k int) {
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
		if !c.readIn(n, m) {
			return
		}
	}
}

// readIn reads m off n's connection from its sender, through n's
// inbound budget (frameIn), and hands it to n's engine unless it is not
// to be handed over now (refused, or waiting behind a slow frame or slow
// itself); it reports false on a violation.
func (c *sim) readIn(n *node, m transport.Message) bool {
	ch, ok := c.frameIn(n, m)
	if !ok {
		return c.viol == nil
	}
	ok = c.receive(n, m)
	c.frameOut(n, ch)
	return ok
}

// receive hands m to n's engine; it reports false on a violation.
func (c *sim) receive(n *node, m transport.Message) bool {
	if m.Kind == host.KindRequest {
		c.delivering = c.forwardedTo(n, m)
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

// metaTick ticks n's metadata group (the engine's timer).
func (c *sim) metaTick(n *node) {
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
func (c *sim) processMeta(n *node) {
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
			n.b.metaDone = append(n.b.metaDone, metaAnswer{w: w, r: r})
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
	c := n.b
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
func (c *sim) checkMetaState(n *node, index uint64, dup bool) {
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
	n.b.ops.MetaElections++
	n.collectMeta()
	n.b.event("n%d meta leader=n%d forgot=%d", n.id, lead, forgot)
	clear(n.waits)
	n.waits = n.waits[:0]
}

// metaSnapshotInstalled is the engine's Events.MetadataSnapshotInstalled:
// the node lagged behind the metadata group's compacted log and installed
// the leader's store whole. The simulator records the incarnations it
// creates and ends on this node, and checks the store against what other
// nodes held at that index.
func (n *node) metaSnapshotInstalled(index uint64, before, after []metadata.PartitionInfo, err error) {
	c := n.b
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
