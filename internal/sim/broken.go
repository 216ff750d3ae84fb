package sim

import (
	"context"
	"encoding/binary"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/transport"
)

// Broken builds for the simulator's self-tests: each is set by one test,
// which expects the simulator to report a violation within its default
// seeds, and cleared after it. They break the engine from the outside,
// through its public seams (host.Config.NewReconciler, the Bus the
// simulator hands it), so production code reads no test switch.
var (
	// BreakFastSkip gives every shard a reconciler whose fast-skip
	// ignores the park buffer: a pass is skipped whenever the revision did
	// not move and the last pass did nothing, so parked frames are never
	// aged or answered (breaks DESIGN behaviour 12).
	BreakFastSkip atomic.Bool
	// BreakRaftEpoch strips the incarnation from partition raft messages
	// as they leave a node, as the reference design sends them (breaks
	// DESIGN behaviour 20). Cluster mode only.
	BreakRaftEpoch atomic.Bool
	// BreakPlacement gives every node a reconciler that materialises
	// every partition its shard owns, replica or not (reconciler.Config.Node
	// 0, as on a single node): a node the placement leaves out builds a
	// copy nonetheless. Cluster mode only.
	BreakPlacement atomic.Bool
	// BreakLeaderTransfer drops every partition raft message that carries
	// a MsgTimeoutNow — the leader's go-ahead to the member it hands
	// leadership to — as it leaves a node, so no leadership transfer
	// completes and leader balance never hands a group back to its
	// preferred leader. Cluster mode only.
	BreakLeaderTransfer atomic.Bool
	// BreakZombieLiveness keeps a crashed node's liveness heartbeats
	// arriving at every running node (as if its liveness loop outlived its
	// raft groups): the survivors never declare it dead, so the groups it
	// led while quiesced, which send nothing, never elect a new leader.
	// Cluster mode only.
	BreakZombieLiveness atomic.Bool
	// BreakEarlySettle settles every replica move as soon as it is
	// planned: after the first node applies a DrainNode or Rebalance that
	// leaves replicas leaving, the simulator proposes SettleReplicas for
	// each of them at once, as a group leader would that reported the old
	// replica gone before the new one held the log. The leaving node then
	// drops its copy while it may be the only one holding the data.
	// Cluster mode only.
	BreakEarlySettle atomic.Bool
	// BreakSwallowDamage makes every partition read that meets damage —
	// a *partition.CorruptError, or EIO — answer "no messages here"
	// instead, as a node would that skipped records failing their
	// checksum (the storage wrapper does it, above the engine's store):
	// the lying disk's damage is then served as a silent loss. Both
	// modes (in a cluster, the liar serves it to its clients; peers
	// catching up from it still see the damage).
	BreakSwallowDamage atomic.Bool
	// BreakRebuildOnDamage makes a partition build that fails for damage
	// (a *partition.CorruptError or EIO) remove the partition's data and
	// build it empty, as a node would that "repaired" damage by starting
	// the partition over (the storage wrapper does it, above the
	// engine's store). Single-node mode.
	BreakRebuildOnDamage atomic.Bool
	// BreakIdentityCheck hides a node's IDENTITY file from it when it is
	// started on another node's data directory (FaultRates.WrongDisk),
	// as an engine that kept no identity would see the directory.
	// Cluster mode only.
	BreakIdentityCheck atomic.Bool
	// BreakReplyPath sends a message whose own direction is cut or
	// clogged over the reverse direction when that one is up, straight
	// into the receiving engine — as a transport would that answered a
	// peer over the connection the peer opened, whatever became of its
	// own: a leader that cannot hear its followers (or whose messages to
	// them stall) still gets their acknowledgements and commits. Only a
	// one-way partition or a clog tells it from a working transport
	// (every other cut is symmetric). Cluster mode only.
	BreakReplyPath atomic.Bool
	// BreakAppendTimeOrder serves every read with the append times the
	// shard stamped rather than those the partition kept — as a partition
	// would that did not keep append times non-decreasing: a leader whose
	// clock is behind its predecessor's, or a node whose clock stepped
	// back, stamps later messages with earlier times. Only the clock
	// faults tell it from a working partition (on one shared clock the
	// stamps never decrease). Both modes.
	BreakAppendTimeOrder atomic.Bool
	// BreakLivenessReport strips from every liveness heartbeat the peers
	// its sender does not hear, as node liveness did before it was judged
	// both ways: a node that can send but not hear is held alive by the
	// peers that hear it, and the quiesced groups it led never elect
	// another leader. Only a one-way partition exposes it (caught by the
	// failover check after a leader went deaf). Cluster mode only.
	BreakLivenessReport atomic.Bool
)

// replyPath is BreakReplyPath: it delivers m from n to its receiver over
// the reverse direction when m's own is cut or clogged and the reverse
// one is up, and reports whether it did.
func (c *sim) replyPath(n *node, m transport.Message) bool {
	to := c.node(uint64(m.To))
	if to == nil || to.id > maxNodes || n.id > maxNodes {
		return false
	}
	l := c.links()
	if l[n.id]&(1<<to.id) != 0 || l[to.id]&(1<<n.id) == 0 {
		return false
	}
	c.event("n%d send %s to=n%d over the reverse direction (broken reply path)", n.id, describeMsg(m), to.id)
	c.receive(to, m)
	return true
}

// breakEarlySettle is BreakEarlySettle: it queues, on the first node to
// apply index (a move command), a settle for every replica leaving a
// partition. They are proposed after the action (proposing from inside
// the engine's apply event would re-enter it).
func (c *sim) breakEarlySettle(n *node, index uint64) {
	if !BreakEarlySettle.Load() {
		return
	}
	if _, seen := c.metaLog[index]; seen {
		return
	}
	for _, p := range n.meta.Snapshot().Partitions {
		for _, l := range p.Leaving {
			c.earlySettles = append(c.earlySettles, earlySettle{n: n, cmd: metadata.SettleReplicas{NS: p.NS, CreatedRevision: p.CreatedRevision, Node: l}})
		}
	}
}

// earlySettle is a settle BreakEarlySettle proposes through n.
type earlySettle struct {
	n   *node
	cmd metadata.SettleReplicas
}

// proposeEarlySettles proposes the settles BreakEarlySettle queued,
// through the node that queued them if it still runs.
func (c *sim) proposeEarlySettles() {
	for _, s := range c.earlySettles {
		n := c.cur(s.n)
		if !n.reachable() {
			continue
		}
		c.nextSeq++
		_, err := n.eng.ProposeMetadata(host.MetadataKey{Producer: metaProducer, Seq: c.nextSeq}, s.cmd)
		c.event("n%d early settle %+v (broken): %v", n.id, s.cmd, errString(err))
	}
	c.earlySettles = c.earlySettles[:0]
}

// newReconciler is the engines' host.Config.NewReconciler: the default
// reconciler, wrapped by the broken fast-skip when BreakFastSkip is set.
func newReconciler(cfg reconciler.Config, table *router.Table) (reconciler.Reconciler, error) {
	if BreakPlacement.Load() {
		cfg.Node = 0
	}
	r, err := reconciler.New(cfg, table)
	if err != nil || !BreakFastSkip.Load() {
		return r, err
	}
	return &skipIgnoringParked{inner: r, meta: cfg.Meta}, nil
}

// skipIgnoringParked is the broken fast-skip of BreakFastSkip.
type skipIgnoringParked struct {
	inner    reconciler.Reconciler
	meta     *metadata.Store
	ran, did bool
	rev      uint64
}

func (r *skipIgnoringParked) Reconcile(ctx context.Context) (reconciler.Report, error) {
	if rev := r.meta.Revision(); r.ran && rev == r.rev && !r.did {
		return reconciler.Report{Revision: rev, Skipped: true}, nil
	}
	rep, err := r.inner.Reconcile(ctx)
	r.ran, r.rev = true, rep.Revision
	r.did = rep.Built+rep.Removed+rep.RowsWritten+rep.Failed+rep.Pending+rep.Reconfigured > 0 || rep.Retained > 0
	return rep, err
}

// stripRaftEpochs is BreakRaftEpoch's edit of an outgoing message: the
// incarnation of a partition raft message, alone (its first 8 bytes) or
// batched (each record's, after its namespace), becomes 0. m's payload is
// the simulator's own copy.
func stripRaftEpochs(m transport.Message) {
	switch m.Kind {
	case host.KindPartitionRaft:
		if len(m.Payload) >= 8 {
			clear(m.Payload[:8])
		}
	case host.KindPartitionRaftBatch:
		// count u32, then records: namespace u64, epoch u64, size u32, message.
		b := m.Payload
		if len(b) < 4 {
			return
		}
		for i := 4; i+20 <= len(b); {
			clear(b[i+8 : i+16])
			i += 20 + int(binary.LittleEndian.Uint32(b[i+16:]))
		}
	}
}

// carriesTimeoutNow reports whether m, a partition raft message alone or
// batched, carries a MsgTimeoutNow (BreakLeaderTransfer).
func carriesTimeoutNow(m transport.Message) bool {
	isTimeoutNow := func(b []byte) bool {
		msg := &raftpb.Message{}
		return proto.Unmarshal(b, msg) == nil && msg.GetType() == raftpb.MsgTimeoutNow
	}
	switch m.Kind {
	case host.KindPartitionRaft:
		return len(m.Payload) >= 8 && isTimeoutNow(m.Payload[8:])
	case host.KindPartitionRaftBatch:
		// count u32, then records: namespace u64, epoch u64, size u32, message.
		b := m.Payload
		for i := 4; i+20 <= len(b); {
			size := int(binary.LittleEndian.Uint32(b[i+16:]))
			if size > len(b)-i-20 {
				return false
			}
			if isTimeoutNow(b[i+20 : i+20+size]) {
				return true
			}
			i += 20 + size
		}
	}
	return false
}
