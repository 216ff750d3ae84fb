package sim

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
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

// node is one simulated node, of either engine kind, built as
// parkway.Open builds one: a cluster member (member set: the metadata group
// member, replicated shards, a network endpoint) or the single-node
// engine (member unset: metadata.Durable on its disk, no raft, no bus), which
// uses the fields a node without raft or bus has. One incarnation
// of the node's process is one node value; a restart builds a new one
// that carries over what outlives the process (its disk, its clock, the
// simulator's record of it: openNode's prev).
type node struct {
	// b is the run's harness; member is the node's engine kind: a
	// cluster member, or the single-node engine.
	b      *sim
	member bool
	id     uint64
	mem    *vfs.MemFS
	inj    *injector
	// ep is the node's network endpoint (the simulator's to close on a
	// crash); the engine sends through the outbox wrapper around it.
	ep  transport.Bus
	eng *host.Engine
	// peers is the node's Cluster.Peers: the founders, or for a node
	// that joined, the nodes running when it started, itself included
	// (its engine runs with Cluster.Join). joined is set once a member
	// has applied its addition (always for a founder): clients use it
	// from then on.
	peers  []uint64
	join   bool
	joined bool

	meta *metadata.Store
	// metaRev is meta's revision after the last command or snapshot this
	// node applied: a command that leaves it is a no-op.
	metaRev uint64
	// metaTickAt is when the metadata group's next tick is due;
	// metaTickErr when a tick last found the member down.
	metaTickAt  time.Time
	metaTickErr time.Time
	// waits are the metadata proposals clients made through this node,
	// with the channel each outcome arrives on.
	waits []metaWait

	rt     *router.Router[shard.Frame]
	shards []*shard.Shard
	recs   []reconciler.Reconciler
	passes
	busy []bool
	// clk is the node's own clock (clock.go); clocks are the shards'
	// views of it, which know when each shard's raft tick is due.
	clk    *nodeClock
	clocks []*watchedClock
	// shadow mirrors each shard's inbox, in order: the client attempt of
	// each queued frame, nil for replication traffic (catchUpFrame for a
	// catch-up frame).
	shadow [][]*attempt
	// building is the stack of shards whose reconciler pass is running.
	building []int
	// fetching is set while a shard handles a catch-up frame: the reads
	// it makes serve a peer's fetch, not a client.
	fetching bool
	m        *metrics.Metrics
	outbox   []transport.Message

	// incs is this node's view of when incarnations were committed.
	incs *timeline
	// lastServe: per namespace, the incarnation that last served a client
	// request here.
	lastServe map[metadata.Namespace]uint64
	// listed: per namespace, the incarnation the store's List reported
	// its directory at (the orphan sweep of the node's start), until the
	// namespace is removed.
	listed map[metadata.Namespace]uint64
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

// replicated reports whether n is a cluster member (metadata through
// the metadata raft group, partitions replicated, clients' polls asking
// for the leader and produces carrying a producer id), not the
// single-node kind; false for no node.
func (n *node) replicated() bool { return n != nil && n.member }

// name names the node in a violation's text: "n2" in a cluster, "node"
// for the single-node kind.
func (n *node) name() string {
	if !n.replicated() {
		return "node"
	}
	return fmt.Sprintf("n%d", n.id)
}

// tag prefixes the node's trace lines: its name in a cluster, nothing for
// the single-node kind (whose trace lines name no node).
func (n *node) tag() string {
	if !n.replicated() {
		return ""
	}
	return n.name() + " "
}

// suffix names the node at the end of a trace line: " n2" in a cluster,
// nothing for the single-node kind.
func (n *node) suffix() string {
	if !n.replicated() {
		return ""
	}
	return " " + n.name()
}

// on names the node at the end of a trace line or a violation's text:
// " on n2" in a cluster, nothing for the single-node kind.
func (n *node) on() string {
	if !n.replicated() {
		return ""
	}
	return " on " + n.name()
}

// close releases the node's resources after a crash. Its injector is dead
// already, and every request in flight was answered by the crash, so what
// the shutdown answers and syncs reaches nobody and nothing durable.
func (n *node) close() {
	if n.eng != nil {
		_ = n.eng.Close()
	}
}

// hostConfig is the engine configuration both kinds of node share, as
// parkway.Open fills it in for a node with a data directory, in manual
// mode: the node's disk fs, its clock and metrics, the simulator's
// wrappers around the partition store (wrap) and the shards' inboxes (the
// mirrors), and the engine parameters that keep quiescence short.
func (n *node) hostConfig(fs vfs.FS, snapshotEvery int, wrap func(partition.Store) partition.Store) host.Config {
	cfg := n.b.cfg
	n.clocks = n.clocks[:0]
	for range cfg.Shards {
		n.clocks = append(n.clocks, &watchedClock{nodeClock: n.clk})
	}
	return host.Config{
		Shards: cfg.Shards, InboxSize: cfg.InboxSize, Manual: true,
		DataDir: dataDir, FS: fs, SegmentSize: partition.MinSegmentSize,
		MetadataSnapshotEvery: snapshotEvery,
		WrapStore: func(st partition.Store, meta *metadata.Store) partition.Store {
			n.meta = meta
			return wrap(st)
		},
		WrapSender: func(i int, sh *shard.Shard) router.Sender[shard.Frame] {
			return &mirror{n: n, i: i, sh: sh}
		},
		Park:            shard.ParkLimits{MaxAge: parkMaxAge(cfg.Seed)},
		Defaults:        metadata.TopicConfig{Fsync: metadata.FsyncAlways},
		BuildBackoffMin: backoffMin, BuildBackoffMax: backoffMax,
		NewReconciler: newReconciler,
		Clock:         n.clk, Metrics: n.m,
		ShardClock: func(i int) clock.Clock { return n.clocks[i] },
	}
}

// opened takes the engine host.New built for the node: its metadata,
// router, shards and reconcilers, each shard's commit wake, and a first
// pass due at once.
func (n *node) opened(eng *host.Engine) {
	n.eng, n.meta, n.rt = eng, eng.Meta(), eng.Router()
	n.shards, n.recs = eng.Shards(), eng.Reconcilers()
	for i := range n.shards {
		n.wakes = append(n.wakes, eng.Wake(i))
		n.nextPass = append(n.nextPass, n.clk.monoNow())
	}
}

// crashDisk leaves the node's disk as the end of its process does, by a
// power loss (power) or a process crash (sim.countCrash counts it). A
// power loss keeps only what was synced, and what the dead engine's
// shutdown then writes and syncs goes to the disk the power loss
// discarded; a process crash keeps everything written (the page cache
// survives) but the dead process's lock on the data directory. A crashed
// process is not closed otherwise: its open files, shards and raft logs
// are simply abandoned.
// l, when set, are the disk's lies: a rollback may restore a copy saved
// at a power loss, and the journal's window is settled.
func (n *node) crashDisk(power bool, l *lies) {
	if power {
		n.mem = n.mem.Crash()
		n.close()
		if l != nil {
			l.saveCopies()
		}
	} else {
		n.mem.ReleaseLocks()
	}
	if l != nil {
		l.settleJournal()
	}
}

// diskFault counts and records a fault the node's injector fired.
func (n *node) diskFault(enospc bool, what string, op errorfs.Op) {
	if enospc {
		n.b.faults.DiskFull++
		n.b.event("%sfault ENOSPC %v %s", n.tag(), op.Kind, op.Path)
		return
	}
	n.b.faults.DiskError++
	n.b.event("%sfault EIO (%s) %v %s", n.tag(), what, op.Kind, op.Path)
}

// faultsOff ends the node's disk and clock faults for quiescence (its
// disk's lies are the run's to stop).
func (n *node) faultsOff() {
	n.inj.enospc.Set(false)
	n.inj.eio = nil
	n.clk.settle()
}

// fillDisk fails the node's space-consuming disk operations for d.
func (n *node) fillDisk(d time.Duration) {
	n.diskFullUntil = n.b.clk.Now().Add(d)
	n.inj.enospc.Set(true)
	n.b.event("%sdisk full for %v", n.tag(), d)
}

// expireDiskFull gives the node its disk space back once its time is up.
func (n *node) expireDiskFull() {
	if n.inj.enospc.On() && !n.b.clk.Now().Before(n.diskFullUntil) {
		n.inj.enospc.Set(false)
		n.b.event("%sdisk space back", n.tag())
	}
}

// armDiskError arms a one-shot EIO on one of the next few fsyncs of the
// node's disk, or a torn write on one of the next few writes, and
// returns which of them (0: the next).
func (n *node) armDiskError() int64 {
	b := n.b
	k := int64(b.rng.IntN(4))
	if b.rng.IntN(10) < 6 {
		n.inj.eio, n.inj.eioKind = errorfs.OnIndex(k, syscall.EIO, errorfs.OpSync), "fsync"
	} else {
		torn := &errorfs.TornWrite{N: b.rng.IntN(64)}
		n.inj.eio, n.inj.eioKind = errorfs.OnIndex(k, torn, errorfs.OpWriteAt), "torn write"
	}
	return k
}

// pass runs one pass of shard i's reconciler, as reconciler.Run's loop
// does, and records its report. A slow build inside it runs further
// scheduler steps; the reconciler is marked busy meanwhile, and building
// names the shards whose passes are on the stack. The error is the
// pass's: what it means is the harness's to judge.
func (n *node) pass(ctx context.Context, i int) error {
	b := n.b
	n.busy[i] = true
	n.building = append(n.building, i)
	rep, err := n.recs[i].Reconcile(ctx)
	n.building = n.building[:len(n.building)-1]
	n.busy[i] = false
	n.flushOutbox()
	if err != nil {
		return err
	}
	if rep.Skipped {
		b.event("%spass shard=%d rev=%d skipped", n.tag(), i, rep.Revision)
		return nil
	}
	b.event("%spass shard=%d rev=%d built=%d removed=%d rows=%d failed=%d answered=%d expired=%d parked=%d pending=%d",
		n.tag(), i, rep.Revision, rep.Built, rep.Removed, rep.RowsWritten, rep.Failed, rep.Answered, rep.Expired, rep.Parked, rep.Pending)
	return nil
}

// step steps shard i once and records what it handled: the head of its
// inbox mirror — a client's frame, stamped with the committed
// created_revision at this instant (what the shard parks it with, or the
// incarnation it serves it against), a catch-up or raft frame — or, with
// nothing queued, a due timer of the shard's own (a raft tick, parked
// frames past their age bound or deadline). It reports whether the shard
// did anything.
func (n *node) step(i int) bool {
	b := n.b
	var a *attempt
	queued, fetch := false, false
	if q := n.shadow[i]; len(q) > 0 {
		a, n.shadow[i] = q[0], q[1:]
		queued = true
		if a == catchUpFrame {
			a, fetch = nil, true
		}
		if a == floodFrame {
			a = nil
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
		b.fail(0, "%sshard %d did not step with a frame queued", n.tag(), i)
	case !queued && !did:
		if n.clocks != nil {
			n.clocks[i].handled()
		}
		b.event("%sstep shard=%d idle", n.tag(), i)
	case !queued:
		b.event("%sstep shard=%d tick", n.tag(), i)
	case a == nil:
		b.event("%sstep shard=%d raft", n.tag(), i)
	default:
		b.event("%sstep shard=%d a=%d stamp=%d", n.tag(), i, a.id, a.stamp)
	}
	n.flushOutbox()
	return did
}

// passes are a node's reconciler triggers, one per shard: the engine's
// commit wake and when the periodic pass is next due (the node's
// monotonic time).
type passes struct {
	wakes    []<-chan struct{}
	nextPass []time.Time
}

// passDue reports whether shard i's reconciler would run now (the
// node's monotonic time): a commit
// woke it or its period elapsed (reconciler.Run's two triggers). It
// consumes the wake and re-arms the period as Run does.
func (p *passes) passDue(i int, now time.Time) bool {
	due := false
	select {
	case <-p.wakes[i]:
		due = true
	default:
	}
	if !now.Before(p.nextPass[i]) {
		due = true
		p.nextPass[i] = now.Add(passPeriod)
	}
	return due
}

// mirror is the router's view of shard i of node n: it forwards to the
// shard and records every frame the inbox takes, so the simulator knows
// which frame each Step handles.
type mirror struct {
	n  *node
	i  int
	sh *shard.Shard
}

// TrySend implements router.Sender.
func (m *mirror) TrySend(f shard.Frame) error {
	n, b, c := m.n, m.n.b, m.n.b
	err := m.sh.TrySend(f)
	var a *attempt
	if isFlood(f.Req) {
		// A misbehaving member's forwarded request (cpeer.go).
		if err == nil {
			n.shadow[m.i] = append(n.shadow[m.i], floodFrame)
		}
		b.event("%senqueue shard=%d flood %d err=%v", n.tag(), m.i, f.Req.Seq, errString(err))
		return err
	}
	if op := f.Req.Op; op != shard.OpRaft && op != shard.OpCatchUp {
		if a = b.attempts[f.Req]; a == nil {
			if c != nil && c.fromBus {
				a = c.forwardedReq(f.Req)
			}
			switch {
			case a != nil:
				// A forwarded attempt, decoded from the bus.
				b.attempts[f.Req] = a
			case c == nil || !c.fromBus:
				b.fail(0, "%sshard %d was sent a frame the simulator did not issue", n.tag(), m.i)
				return err
			default:
				// A forwarded request no attempt forwarded to this node
				// (c.fwds keeps every one, of every life of its sender,
				// so none is expected): nobody waits for its answer, and
				// the storage tap reports a produce of it appended.
				if err == nil {
					n.shadow[m.i] = append(n.shadow[m.i], floodFrame)
				}
				b.event("%senqueue shard=%d stray forwarded %v err=%v", n.tag(), m.i, f.Req.Op, errString(err))
				return err
			}
		}
	}
	switch {
	case err == nil:
		q := a
		if f.Req.Op == shard.OpCatchUp {
			q = catchUpFrame
		}
		n.shadow[m.i] = append(n.shadow[m.i], q)
	case errors.Is(err, router.ErrFull):
		b.faults.InboxFull++
	}
	if a != nil {
		b.event("%senqueue shard=%d a=%d err=%v", n.tag(), m.i, a.id, errString(err))
	} else if err != nil {
		b.event("%senqueue shard=%d %v %v err=%v", n.tag(), m.i, f.Req.Op, f.Req.NS, errString(err))
	}
	return err
}
