package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/run"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/vfs"
)

// Errors of the engine. The root package re-exports them.
var (
	// ErrClosed reports a call on a closed engine.
	ErrClosed = errors.New("parkway: node closed")
	// ErrMetadataFailed reports that this node's member of the metadata
	// raft group stopped for good: its raft log cannot be reopened (it is
	// corrupt, or commits less than the node applied), or the cluster
	// keeps its raft state in memory. The node takes no metadata commands
	// until it is restarted. A raft log write that merely fails is not
	// this error: the member is reopened from its log by itself, and
	// metadata calls meanwhile fail with retriable errors.
	ErrMetadataFailed = errors.New("parkway: metadata group stopped on this node: its raft log cannot be reopened; restart the node")
	// ErrManual reports Start or Run on a manual engine, or a blocking
	// call that only a driven engine can answer.
	ErrManual = errors.New("parkway: the engine is manual; drive it with its step methods")
)

// Engine is one parkway node: its metadata (local, durable, or a member of
// the metadata raft group), partition store, router, shards and a
// reconciler per shard, plus — in a cluster — the transport demultiplexer
// and request forwarding.
//
// New builds it without starting a goroutine. Start (or Run) launches the
// drivers: the shards' pumps, one reconciler loop per shard, and in a
// cluster the metadata group's loop and the transport receiver. A manual
// engine (Config.Manual) never starts any: its caller steps each part,
// and the code that runs is the same.
type Engine struct {
	cfg     Config
	meta    *metadata.Store
	durable *metadata.Durable // single node with a DataDir
	lock    io.Closer         // the DataDir's lock (datadir.go)
	ident   *dataDir          // the DataDir's identity (identity.go)
	store   partition.Store
	fstore  *partition.FileStore // the store under any WrapStore, nil in memory
	table   *router.Table
	router  *router.Router[shard.Frame]
	shards  []*shard.Shard
	// waited is shards when the router sends to them unwrapped
	// (Config.WrapSender unset): synchronous calls queue their frames in
	// a shard's waited lane (waitedPort); nil, they take the inbox.
	waited  []*shard.Shard
	recs    []reconciler.Reconciler
	wakes   []<-chan struct{}
	cancels []func()
	metrics *metrics.Metrics
	drops   *metrics.Shard
	cl      *clusterNode // nil for a single node
	// callCfg is what every client call's driver reads (call.go), set
	// once the cluster side exists.
	callCfg CallConfig
	// keep is the members whose leases it keeps (KeepLease).
	keep *leaseKeeper

	// announced wake the reconcilers' prebuilds (started engines only).
	announced []<-chan struct{}

	group     *run.Group
	started   atomic.Bool
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// New validates cfg, applies its defaults and builds an engine: metadata
// restored from disk (or the metadata group's raft log), orphan
// partitions removed, shards and reconcilers created. Nothing runs until
// Start, Run, or the caller's steps.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	e := &Engine{cfg: cfg, metrics: cfg.Metrics, group: run.NewGroup(), keep: newLeaseKeeper()}
	e.callCfg = e.callConfig() // a single node's; a cluster's once its side exists
	if e.metrics == nil {
		var labels prometheus.Labels
		if cfg.Cluster != nil {
			labels = prometheus.Labels{"node": strconv.FormatUint(uint64(cfg.Cluster.ID), 10)}
		}
		e.metrics = metrics.NewLabeled(labels)
	}
	e.drops = e.metrics.Shard(-1)
	e.exposeTransport()
	ok := false
	defer func() {
		if !ok {
			e.release(false)
		}
	}()
	if err := e.openMetadata(); err != nil {
		return nil, err
	}
	e.exposeGroups() // e.meta is set: a scrape may read it from now on
	if err := e.openStore(); err != nil {
		return nil, err
	}
	e.table = &router.Table{}
	var err error
	if e.router, err = router.New[shard.Frame](e.table, cfg.Shards); err != nil {
		return nil, err
	}
	var repl *shard.Replication
	if c := e.cl; c != nil {
		repl = &shard.Replication{Node: uint64(c.cfg.ID), Peers: c.peers, Send: c.sendRaft,
			SendCatchUp: c.sendCatchUp, TickInterval: c.cfg.TickInterval,
			CompactEntries: c.cfg.CompactEntries, CompactBytes: c.cfg.CompactBytes,
			// Node liveness (liveness.go) reports dead peers to the shards.
			Quiesce: true,
			// Group leaders settle replica moves through the metadata.
			Settle: c.settle,
			// Waiting polls forwarded to an old leader follow the new one.
			LeaderChanged: c.leaderChanged}
	}
	// A parked frame's age bound by the shard's clock matches its bound
	// in passes: MaxPasses reconcile periods.
	park := cfg.Park
	if park.MaxAge == 0 {
		passes := park.MaxPasses
		if passes == 0 {
			passes = shard.DefaultMaxPasses
		}
		park.MaxAge = time.Duration(passes) * cfg.ReconcileInterval
	}
	for i := range cfg.Shards {
		clk := cfg.Clock
		if cfg.ShardClock != nil {
			clk = cfg.ShardClock(i)
		}
		rep := repl
		if repl != nil {
			// Each shard coalesces its own raft messages per peer: the
			// batcher belongs to the shard's pump.
			rc := *repl
			b := newRaftBatcher(e.cl.send)
			rc.Send, rc.Flush = b.add, b.flush
			rep = &rc
		}
		// A single node's shard commits its FsyncAlways groups through a
		// handle on the store's journal (one fsync per group, not per
		// partition, shared by the shards' groups that coincide);
		// replicated partitions have their raft logs instead.
		var journal *partition.Journal
		if e.fstore != nil && e.cl == nil {
			journal = e.fstore.NewJournal()
		}
		var carried func(metadata.Namespace, uint64) *shard.Request
		if e.durable != nil {
			carried = e.carriedFor
		}
		s, err := shard.New(shard.Config{
			ID: i, InboxSize: cfg.InboxSize, InboxBytes: cfg.InboxBytes, Park: park, Clock: clk, Replication: rep, Journal: journal,
			PinCPU: cfg.PinShards, CPU: i % runtime.NumCPU(), Manual: cfg.Manual,
			Logger: cfg.Logger, Metrics: e.metrics, Carried: carried,
		}, e.meta, e.router)
		if err != nil {
			return nil, err
		}
		var sender router.Sender[shard.Frame] = s
		if cfg.WrapSender != nil {
			sender = cfg.WrapSender(i, s)
		} else {
			e.waited = append(e.waited, s)
		}
		e.router.Register(i, sender)
		e.shards = append(e.shards, s)
	}
	// A replica whose raft log is damaged is re-seeded through the
	// metadata, in a cluster (reconciler.Config.Reseed).
	var reseed func(metadata.Namespace, uint64, uint64)
	if c := e.cl; c != nil {
		reseed = c.reseed
	}
	newRec := cfg.NewReconciler
	if newRec == nil {
		newRec = func(c reconciler.Config, t *router.Table) (reconciler.Reconciler, error) { return reconciler.New(c, t) }
	}
	for _, s := range e.shards {
		rec, err := newRec(reconciler.Config{
			Shard: s, Meta: e.meta, Store: e.store, Clock: cfg.Clock,
			BackoffMin: cfg.BuildBackoffMin, BackoffMax: cfg.BuildBackoffMax, Node: e.NodeID(),
			Defaults: cfg.Defaults, RetentionInterval: cfg.RetentionInterval,
			Logger: cfg.Logger, Metrics: e.metrics, Reseed: reseed,
		}, e.table)
		if err != nil {
			return nil, err
		}
		wake, cancel := e.meta.Subscribe()
		e.recs = append(e.recs, rec)
		e.wakes = append(e.wakes, wake)
		e.cancels = append(e.cancels, cancel)
		if cfg.PrebuildPartitions && !cfg.Manual {
			// A manual engine's driver runs the passes itself, in a
			// fixed order; only started engines prebuild.
			ann, cancel := e.meta.SubscribeAnnouncements()
			e.announced = append(e.announced, ann)
			e.cancels = append(e.cancels, cancel)
		}
	}
	if e.cl != nil {
		e.cl.live.hello()
		e.cl.campaignFirst()
	}
	ok = true
	return e, nil
}

// openMetadata builds the node's metadata store: in memory, from the
// metadata log on disk, or from the metadata group's raft log.
func (e *Engine) openMetadata() error {
	cfg := e.cfg
	mcfg := metadata.Config{Shards: cfg.Shards, Assign: router.Assign}
	if cfg.Cluster != nil {
		for _, p := range cfg.Cluster.Peers {
			mcfg.Nodes = append(mcfg.Nodes, uint64(p))
		}
	}
	if cfg.DataDir != "" {
		if err := cfg.FS.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return fmt.Errorf("parkway: data dir: %w", err)
		}
		// Every entry point opens the data directory here, first.
		lock, err := lockDataDir(cfg.FS, cfg.DataDir)
		if err != nil {
			return err
		}
		e.lock = lock
		if err := e.openIdentity(); err != nil {
			return err
		}
	}
	var err error
	switch {
	case cfg.Cluster != nil:
		if e.cl, err = newClusterNode(e); err != nil {
			return err
		}
		e.callCfg = e.callConfig()
		dir := ""
		if cfg.DataDir != "" {
			dir = filepath.Join(cfg.DataDir, "metadata-raft")
		}
		err = e.cl.openMetadata(dir, mcfg)
	case cfg.DataDir != "":
		e.durable, err = metadata.OpenDurable(cfg.FS, filepath.Join(cfg.DataDir, "metadata"), mcfg,
			metadata.DurableOptions{SnapshotEvery: cfg.MetadataSnapshotEvery, Syncs: e.metrics.Fsync(metrics.LogMetadata)})
		if err == nil {
			e.meta = e.durable.Store()
		}
	default:
		e.meta, err = metadata.NewStore(mcfg)
	}
	if err != nil {
		return fmt.Errorf("parkway: open metadata: %w", err)
	}
	if e.cl == nil {
		// A single node leads its own metadata: it keeps its groups'
		// member leases (runLeases expires them).
		e.meta.StartLeases(cfg.Clock.Now().UnixNano())
	}
	return nil
}

// openStore opens the partition store and removes orphans from it.
func (e *Engine) openStore() error {
	cfg := e.cfg
	if cfg.DataDir == "" {
		e.store = partition.NewMemStore()
		if cfg.WrapStore != nil {
			e.store = cfg.WrapStore(e.store, e.meta)
		}
		return nil
	}
	fcfg := partition.FileConfig{
		Dir: cfg.DataDir, FS: cfg.FS, SegmentSize: cfg.SegmentSize, Preallocate: cfg.Preallocate,
		VerifyOnOpen: cfg.VerifyOnOpen, MaxOpenFiles: cfg.MaxOpenFiles,
		// A manual engine is stepped by a simulator: its filesystem calls
		// must come in a fixed order, as its shards' are.
		SerialSyncs:  cfg.Manual,
		SegmentSyncs: e.metrics.Fsync(metrics.LogSegment),
		JournalSyncs: e.metrics.Fsync(metrics.LogJournal),
		// Every incarnation the store may hold records of is committed
		// by now: one created later cannot be in a damaged journal.
		CommittedRevision: e.meta.Revision(),
	}
	if cfg.Cluster != nil {
		fcfg.OwnerIncarnation = raftLogIncarnation
	}
	fstore, err := partition.NewFileStore(fcfg)
	if err != nil {
		return err
	}
	e.store, e.fstore = fstore, fstore
	if cfg.WrapStore != nil {
		e.store = cfg.WrapStore(fstore, e.meta)
	}
	return e.removeOrphans()
}

// raftLogIncarnation is a cluster's partition.FileConfig.OwnerIncarnation:
// a replica built deferred has its raft log in its directory and no file
// of the partition's own, and the log's tag names its incarnation (see
// shard.RaftLogOf). The orphan sweep and the builds then tell it from a
// directory left by another incarnation, and keep its term, vote and
// entries. A damaged log is reported with the incarnation its sync mark,
// or else its valid prefix, is tagged with (see
// partition.FileConfig.OwnerIncarnation): a
// build of a later incarnation discards the directory of an earlier
// one, damaged or not.
func raftLogIncarnation(fsys vfs.FS, dir string) (uint64, error) {
	l, err := shard.RaftLogOf(fsys, dir)
	if !l.Tagged {
		return 0, err
	}
	return l.Incarnation, err
}

// removeOrphans deletes partitions the store holds that committed metadata
// does not (or holds at another incarnation): a crash between a delete's
// commit and its teardown leaves them behind, and nothing else would ever
// remove them. Partitions whose incarnation matches are left for the
// reconcilers, which reopen them from disk instead of building them fresh.
func (e *Engine) removeOrphans() error {
	stored, err := e.store.List()
	if err != nil {
		return fmt.Errorf("parkway: list partitions: %w", err)
	}
	for _, st := range stored {
		rev, ok := e.meta.CreatedRevision(st.NS)
		if ok && rev == st.Epoch {
			continue
		}
		if ok && st.Damage != nil {
			switch inc := e.damagedOwnerIncarnation(st); {
			case inc == rev:
				// The committed incarnation's replica, whose raft log is
				// damaged or was refused: its build reports it (and has
				// the replica re-seeded), not the sweep at every start.
				continue
			case inc != 0 && inc < rev:
				// An earlier incarnation's, as the log's tag says:
				// nothing of the committed one's, an orphan (its build
				// would discard it the same way).
			default:
				// Whose data this is cannot be told: removing it could
				// delete the committed incarnation's acknowledged
				// messages. Its Build reports the damage instead.
				e.cfg.Logger.Error("partition directory with a damaged incarnation record kept", "ns", st.NS, "err", st.Damage)
				continue
			}
		}
		if err := e.store.Remove(st.NS); err != nil {
			return fmt.Errorf("parkway: remove orphan partition %v: %w", st.NS, err)
		}
		e.cfg.Logger.Info("removed orphan partition", "ns", st.NS, "epoch", st.Epoch)
	}
	return nil
}

// damagedOwnerIncarnation returns the incarnation the raft log in st's
// directory names (its tag, which a damaged log's sync mark or valid
// prefix still holds, and a refused log's record keeps: shard.RaftLogOf)
// when st's damage is that log's — not the partition's incarnation
// record's — and 0 when it names none or the damage is another.
//
// Why. A replica's directory with no incarnation file of its own is at
// the incarnation its raft log names; a log refused as damaged
// (shard.RefuseRaftLog) or damaged is listed with that damage, and was
// taken for a damaged incarnation record: kept for good, and logged as
// such at every start, even when the log's tag says whose it is — an
// earlier incarnation's, or the committed one's awaiting its re-seed.
func (e *Engine) damagedOwnerIncarnation(st partition.Stored) uint64 {
	if e.fstore == nil || !shard.RaftLogLost(st.Damage) {
		return 0
	}
	l, _ := shard.RaftLogOf(e.fstore.Location(st.NS))
	if !l.Tagged {
		return 0
	}
	return l.Incarnation
}

// Start launches the engine's drivers and returns: the shards' pumps, a
// reconciler loop per shard (reconciler.RunPrebuilding: a pass at start,
// on every metadata wake and every ReconcileInterval, and with
// PrebuildPartitions a prebuild on every metadata announcement), and in a
// cluster the
// metadata group's loop and the transport receiver. Close stops them.
func (e *Engine) Start() error {
	if e.cfg.Manual {
		return ErrManual
	}
	if e.closed.Load() {
		return ErrClosed
	}
	if e.started.Swap(true) {
		return nil
	}
	for _, s := range e.shards {
		s.Start()
	}
	for i, rec := range e.recs {
		var ann <-chan struct{} // nil: never ready
		if e.announced != nil {
			ann = e.announced[i]
		}
		wake := e.wakes[i]
		e.group.Go(func(ctx context.Context) {
			reconciler.RunPrebuilding(ctx, rec, wake, ann, e.cfg.Clock, e.cfg.ReconcileInterval, e.cfg.Logger)
		})
	}
	if e.cl != nil {
		e.group.Go(e.cl.receive)
		e.cl.live.beater = true // before the driver starts: it reads it
		e.group.Go(e.cl.live.runBeater)
		e.group.Go(e.cl.runMetadata)
		e.group.Go(e.cl.runLeaseSender)
	} else {
		e.group.Go(e.runLeases)
	}
	return nil
}

// Run starts the engine's drivers, waits for ctx to end, and closes the
// engine.
func (e *Engine) Run(ctx context.Context) error {
	if err := e.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	return e.Close()
}

// Close stops the drivers and the shards (requests still queued or parked
// are answered with an error), closes the transport endpoint and the
// metadata log. It is idempotent and waits for every goroutine it started.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		e.group.Stop()
		e.closeErr = e.release(true)
	})
	return e.closeErr
}

// release frees what New acquired; the drivers are stopped. clean is a
// Close of an engine New returned, not the undoing of a failed New.
func (e *Engine) release(clean bool) error {
	for _, cancel := range e.cancels {
		cancel()
	}
	for _, s := range e.shards {
		_ = s.Close()
	}
	if clean && e.fstore != nil {
		// Every partition is closed: record which have directories, so
		// an offline verify can tell a removed one from a partition that
		// never needed files (see partition.FileStore.RecordPartitions).
		// Best effort: without the record verify only says less.
		_ = e.fstore.RecordPartitions()
	}
	var err error
	if e.cl != nil {
		err = errors.Join(err, e.cl.close())
	} else if e.cfg.Cluster != nil {
		// New failed before the cluster side existed (the data directory
		// was refused): the bus is still the engine's to close.
		err = errors.Join(err, e.cfg.Cluster.Bus.Close())
	}
	if e.durable != nil {
		err = errors.Join(err, e.durable.Close())
	}
	// Last: nothing may touch the directory once another node can hold it.
	if e.lock != nil {
		err = errors.Join(err, e.lock.Close())
	}
	return err
}

// Meta returns the node's committed metadata.
func (e *Engine) Meta() *metadata.Store { return e.meta }

// Store returns the partition store (as wrapped by Config.WrapStore).
func (e *Engine) Store() partition.Store { return e.store }

// Router returns the node's router.
func (e *Engine) Router() *router.Router[shard.Frame] { return e.router }

// Shards returns the shards, index = shard id.
func (e *Engine) Shards() []*shard.Shard { return e.shards }

// ShardCount returns how many shards the engine runs.
func (e *Engine) ShardCount() int { return len(e.shards) }

// Inspect returns every shard's state, index = shard id, each read on its
// shard's pump; the error names the shard that could not answer.
func (e *Engine) Inspect(ctx context.Context) ([]shard.State, error) {
	states := make([]shard.State, len(e.shards))
	for i, s := range e.shards {
		st, err := s.Inspect(ctx)
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		states[i] = st
	}
	return states, nil
}

// Reconcilers returns each shard's reconciler, index = shard id.
func (e *Engine) Reconcilers() []reconciler.Reconciler { return e.recs }

// Wake returns shard i's metadata commit wake (capacity 1, coalescing):
// the trigger reconciler.Run waits on, for a caller driving passes itself.
func (e *Engine) Wake(i int) <-chan struct{} { return e.wakes[i] }

// Metrics returns the engine's collectors.
func (e *Engine) Metrics() *metrics.Metrics { return e.metrics }

// Clock returns the engine's clock.
func (e *Engine) Clock() clock.Clock { return e.cfg.Clock }

// Clustered reports whether the engine is a replica of a cluster.
func (e *Engine) Clustered() bool { return e.cl != nil }

// NodeID returns this node's id in its cluster (0 for a single node).
func (e *Engine) NodeID() uint64 {
	if e.cl == nil {
		return 0
	}
	return uint64(e.cl.cfg.ID)
}

// ApplyMetadata commits cmd: a local apply on one node (logged and
// fsynced first with a DataDir), a commit through the metadata raft group
// in a cluster — acknowledged only once committed and applied here. In a
// cluster it needs a started engine; a manual one proposes with
// ProposeMetadata instead.
func (e *Engine) ApplyMetadata(ctx context.Context, cmd metadata.Command) (metadata.Result, error) {
	if e.closed.Load() {
		return metadata.Result{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return metadata.Result{}, err
	}
	switch {
	case e.cl != nil:
		if e.cfg.Manual {
			return metadata.Result{}, ErrManual
		}
		return e.cl.applyReplicated(ctx, cmd)
	case e.durable != nil:
		return e.durable.Apply(cmd)
	default:
		return e.meta.Apply(cmd)
	}
}

// ApplyMetadataLogged is ApplyMetadata, and on one node with a DataDir
// calls logged with the partitions cmd creates once cmd is written to the
// metadata log and before the log is synced (metadata.Durable.ApplyLogged):
// a produce sent from logged to a new partition is written while the
// command is made durable, and answered once it commits (DESIGN behaviour
// 32). Elsewhere logged is not called.
func (e *Engine) ApplyMetadataLogged(ctx context.Context, cmd metadata.Command, logged func([]metadata.AnnouncedPartition)) (metadata.Result, error) {
	if e.cl == nil && e.durable != nil && !e.closed.Load() && ctx.Err() == nil {
		return e.durable.ApplyLogged(cmd, logged)
	}
	return e.ApplyMetadata(ctx, cmd)
}

// ConfirmProvisional tells ns's owner shard that ns's incarnation may
// have committed (shard.Shard.Confirm): a provisional partition's held
// answers go out without waiting for the reconciler's pass.
func (e *Engine) ConfirmProvisional(ctx context.Context, ns metadata.Namespace, owner int) error {
	if owner < 0 || owner >= len(e.shards) {
		return nil
	}
	return e.shards[owner].Confirm(ctx, ns)
}

// deadline bounds ctx by RequestTimeout, on the engine's clock, when it
// has no earlier deadline.
func (e *Engine) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return clock.WithTimeout(ctx, e.cfg.Clock, e.cfg.RequestTimeout)
}

// Once runs req on this node's owner shard and returns its answer,
// without retrying or forwarding (the serving side of a forwarded
// request).
func (e *Engine) Once(ctx context.Context, req *shard.Request) shard.Response {
	reply := make(chan shard.Response, 1)
	if _, err := e.router.Send(req.NS, shard.Frame{Req: req, Reply: reply}); err != nil {
		e.countSendFailure(req, err)
		return shard.Response{Err: fmt.Errorf("%w: %w", shard.ErrRetry, err)}
	}
	select {
	case r := <-reply:
		return r
	case <-ctx.Done():
		return shard.Response{Err: ErrClosed}
	}
}

// countSendFailure counts a frame the router could not hand to a shard.
func (e *Engine) countSendFailure(req *shard.Request, err error) {
	reason := metrics.ReasonUnroutable
	switch {
	case errors.Is(err, shard.ErrInboxBytes):
		reason = metrics.ReasonInboxBytes
	case errors.Is(err, router.ErrFull):
		reason = metrics.ReasonFull
	case errors.Is(err, router.ErrDisconnected):
		reason = metrics.ReasonDisconnected
	}
	e.drops.Drop(req.Op.String(), reason)
}

// replicaFor returns where to send a request for ns when this node holds
// no replica of it: the first replica, from the preferred leader on, that
// node liveness holds alive (the preferred leader if none is). It returns
// 0 on a single node, and for a partition held here or not known here.
func (e *Engine) replicaFor(ns metadata.Namespace) uint64 {
	if e.cl == nil {
		return 0
	}
	info, ok := e.meta.Partition(ns)
	if !ok || info.Holds(uint64(e.cl.cfg.ID)) {
		return 0
	}
	nodes := metadata.NodesOf(info.Replicas) // the replicas' raft ids name their nodes
	for _, r := range nodes {
		if e.cl.live.heardRecently(r) {
			return r
		}
	}
	return nodes[0]
}

// Leader returns the node that leads ns's raft group as this node sees it
// (0 while none is known): its replica's group knows, and for a partition
// held elsewhere the node asks a replica (leaderhint.go).
func (e *Engine) Leader(ctx context.Context, ns metadata.Namespace) (uint64, error) {
	lead, _, err := e.LeaderTerm(ctx, ns)
	return lead, err
}

// LeaderTerm is Leader and the group's term: the one the leader was
// elected in while one is known (Kafka's leader epoch).
func (e *Engine) LeaderTerm(ctx context.Context, ns metadata.Namespace) (lead, term uint64, err error) {
	if e.replicaFor(ns) != 0 {
		lead, term = e.cl.remoteLeader(ctx, ns)
		return lead, term, nil
	}
	return e.shards[e.router.Owner(ns)].LeaderTerm(ctx, ns)
}
