package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/btree"
	"github.com/hashicorp/go-hclog"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/vfs"
)

// Backoff defaults, the reference server's: 1 s doubling, clamped at 60 s
// (the pace of every failed raft group's reopen, groups.Reopen).
// They are written out rather than named after groups' constants, which
// an exported declaration must not expose (the values are the same,
// TestBackoffDefaultsAreGroups).
const (
	DefaultBackoffMin = time.Second
	DefaultBackoffMax = time.Minute
)

// Config configures the default Partitions reconciler.
type Config struct {
	Shard *shard.Shard
	Meta  *metadata.Store
	Store partition.Store
	// Node is this node's id in a cluster: the shard materialises only the
	// partitions whose replica set names it (metadata.PartitionInfo.Holds)
	// and removes those it holds that moved away. 0 (a single node) holds
	// every partition the shard owns.
	Node uint64
	// Clock times backoffs (default: the wall clock).
	Clock clock.Clock
	// BackoffMin and BackoffMax bound the retry delay of a failed build or
	// removal (defaults 1 s and 60 s).
	BackoffMin, BackoffMax time.Duration
	Logger                 hclog.Logger
	Metrics                *metrics.Metrics
	// Defaults fills the fields a topic's configuration leaves zero. An
	// fsync policy left at FsyncDefault by both resolves to FsyncAlways.
	Defaults metadata.TopicConfig
	// RetentionInterval is how often retention is enforced on partitions
	// that have a bound (default 10 s). It runs even when a pass would
	// otherwise be skipped: age-based retention changes with time alone.
	RetentionInterval time.Duration
	// Reseed, in a cluster, proposes metadata.ReseedReplica for the
	// replica of raft id replica of partition (ns, epoch), held by this
	// node, whose raft log is damaged (see reseed). It must not block: a
	// proposal lost is proposed again at the next retry of the build.
	// Nil leaves such a replica refused, retried with backoff.
	Reseed func(ns metadata.Namespace, epoch, replica uint64)
}

// DefaultRetentionInterval is how often retention bounds are enforced.
const DefaultRetentionInterval = 10 * time.Second

// DefaultFsyncInterval is the loss window of FsyncInterval when neither
// the topic nor the node sets one.
const DefaultFsyncInterval = time.Second

// cause separates backoffs of the same namespace: a failing delete must not
// delay the build of its replacement, and vice versa.
type cause uint8

const (
	causeAdd cause = iota
	causeDelete
)

type backoffKey struct {
	ns    metadata.Namespace
	cause cause
}

// heldPartition is a partition the shard owns, as the reconciler knows it.
type heldPartition struct {
	ns    metadata.Namespace
	epoch uint64
	dur   shard.Durability
	// members is the group membership the shard was last told of (see
	// placed); nil until the first pass that saw the partition held.
	members []uint64
}

// newHeld is an empty set of held partitions, in namespace order.
func newHeld() *btree.BTreeG[heldPartition] {
	return btree.NewG(16, func(a, b heldPartition) bool { return a.ns < b.ns })
}

// Partitions is the default reconciler of one shard. It is not safe for
// concurrent passes; Run calls it from one goroutine.
type Partitions struct {
	cfg   Config
	id    int
	log   hclog.Logger
	m     *metrics.Shard
	table *router.Table

	// backoffs are the namespaces whose build or delete failed: their
	// retry schedule and their last error (parked frames are answered
	// with it). A partition whose raft group failed is rebuilt, its group
	// reopened from its raft log, at the pace every failed group's reopen
	// keeps (groups.Reopen).
	backoffs map[backoffKey]groups.Reopen
	// damaged are the namespaces evicted for damage in their local copy
	// of a replicated partition (shard.State.Damaged), with the damage:
	// their next build sets the copy aside first (see repair).
	damaged map[metadata.Namespace]error
	// reseeding are the replicated partitions whose raft log on this node
	// was found damaged, with the raft id of the replica that lost it,
	// reported to the metadata (Config.Reseed), and those whose replica
	// the metadata replaced while it ran (shard.State.Replaced), with the
	// id it ran under: once the metadata names a newer replica here, the
	// copy is set aside whole (see reseed).
	reseeding map[metadata.Namespace]uint64
	// held is what the shard owns, as this reconciler left it (it is the
	// only one that builds, evicts or removes): namespace, epoch and
	// durability, in namespace order so a pass over changed ranges finds
	// the partitions held in them. Every full pass reloads it from the
	// shard.
	held *btree.BTreeG[heldPartition]
	// resync forces the next pass to be a full one: held may be wrong.
	resync bool

	ran     bool
	lastRev uint64
	lastDid bool

	retain     bool      // some owned partition has a retention bound
	nextRetain time.Time // when retention is next enforced

	// prebuilt are partitions built for announced commands (Prebuild),
	// not yet handed to the shard.
	prebuilt map[metadata.Namespace]prebuilt
}

// durability resolves info's topic configuration against the defaults.
func (r *Partitions) durability(info metadata.PartitionInfo) shard.Durability {
	var tc metadata.TopicConfig
	if t, ok := r.cfg.Meta.Topic(info.Stream, info.Topic); ok {
		tc = t.Config
	}
	return r.durabilityOf(tc)
}

// durabilityOf resolves a topic configuration against the defaults.
func (r *Partitions) durabilityOf(tc metadata.TopicConfig) shard.Durability {
	return DurabilityOf(r.cfg.Defaults, tc)
}

// DurabilityOf resolves a topic configuration against defaults (the
// Config.Defaults of the reconcilers): what a partition of the topic is
// served with. A policy neither sets is FsyncAlways.
func DurabilityOf(defaults, tc metadata.TopicConfig) shard.Durability {
	d := defaults
	if tc.Fsync != metadata.FsyncDefault {
		d.Fsync = tc.Fsync
	}
	if tc.FsyncInterval != 0 {
		d.FsyncInterval = tc.FsyncInterval
	}
	if tc.RetentionAge != 0 {
		d.RetentionAge = tc.RetentionAge
	}
	if tc.RetentionBytes != 0 {
		d.RetentionBytes = tc.RetentionBytes
	}
	if d.Fsync == metadata.FsyncDefault {
		d.Fsync = metadata.FsyncAlways
	}
	if d.FsyncInterval <= 0 {
		d.FsyncInterval = DefaultFsyncInterval
	}
	return shard.Durability{Fsync: d.Fsync, Interval: d.FsyncInterval, RetentionAge: d.RetentionAge, RetentionBytes: d.RetentionBytes}
}

// New returns the default reconciler for cfg.Shard.
func New(cfg Config, table *router.Table) (*Partitions, error) {
	if cfg.Shard == nil || cfg.Meta == nil || cfg.Store == nil || table == nil {
		return nil, errNilDependency
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin = DefaultBackoffMin
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.BackoffMin < 0 || cfg.BackoffMax < cfg.BackoffMin {
		return nil, fmt.Errorf("parkway: backoff bounds [%v, %v] invalid", cfg.BackoffMin, cfg.BackoffMax)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.RetentionInterval <= 0 {
		cfg.RetentionInterval = DefaultRetentionInterval
	}
	id := cfg.Shard.ID()
	return &Partitions{
		cfg:       cfg,
		id:        id,
		log:       cfg.Logger.Named(fmt.Sprintf("reconciler-%d", id)),
		m:         cfg.Metrics.Shard(id),
		table:     table,
		backoffs:  make(map[backoffKey]groups.Reopen),
		damaged:   make(map[metadata.Namespace]error),
		reseeding: make(map[metadata.Namespace]uint64),
		prebuilt:  make(map[metadata.Namespace]prebuilt),
		held:      newHeld(),
	}, nil
}

// Reconcile runs one pass (DESIGN behaviours 12–16). The pass is skipped
// only when all four hold: the metadata revision is unchanged since the
// last pass, the last pass did no work, no failure is waiting for a retry
// (a partition fenced after a failed fsync counts as one), and the park
// buffer is empty. Any one of them alone would be wrong: a
// parked frame must age even when nothing commits, and a backed-off build
// must be retried even when the revision stands still.
//
// A pass converges only the namespaces the commits since the last pass
// touched (metadata.Store.Changes), retries the failures whose backoff is
// due, one namespace each, and sweeps the parked namespaces: everything
// else was converged by an earlier pass and has not changed since, so the
// pass that materialises a new topic, and the passes between commits
// while frames are parked or a build is backed off, cost the same with
// ten or ten thousand topics committed. A full pass, which reloads what
// the shard holds and diffs every committed partition, runs only when
// the reconciler's view may be wrong: the first pass, after a pass that
// failed midway or found a partition already owned, while a partition is
// fenced (its eviction reads the shard's account), and when the commits
// since the last pass are older than the store's change log.
func (r *Partitions) Reconcile(ctx context.Context) (Report, error) {
	if r.retain && !r.cfg.Clock.Now().Before(r.nextRetain) {
		var rep Report
		if err := r.enforceRetention(ctx, &rep); err != nil {
			return rep, err
		}
		return r.reconcile(ctx, rep.Retained)
	}
	return r.reconcile(ctx, 0)
}

func (r *Partitions) reconcile(ctx context.Context, retained uint64) (Report, error) {
	if len(r.prebuilt) > 0 {
		if err := r.discard(ctx, r.cfg.Meta.Announced()); err != nil {
			return Report{}, err
		}
	}
	// The skip is decided before anything is read from the store: an idle
	// node's periodic pass (every shard, every period) then costs a few
	// atomic loads and a read lock, not a copy of every committed
	// partition (Snapshot), whatever the partition count.
	if r.idle() {
		if rev := r.cfg.Meta.Revision(); rev == r.lastRev {
			return Report{Revision: rev, Retained: retained, Skipped: true}, nil
		}
	}
	// Every pass that can be incremental is: the pass at an unchanged
	// revision after one that did work, or with frames parked, or with a
	// failure waiting for its retry, converges what changed (nothing),
	// retries what is due, and sweeps, in O(changes + backoffs + parked)
	// whatever the partition count. Only a view that may be wrong (no
	// pass yet, a resync, a pass that failed midway, a partition fenced,
	// whose eviction needs the shard's account) or commits older than the
	// change log can answer for takes the full diff.
	if r.ran && !r.resync && r.cfg.Shard.Fenced() == 0 {
		if ch, ok := r.cfg.Meta.Changes(r.lastRev); ok {
			rep := Report{Revision: ch.Revision, Retained: retained, Incremental: true}
			err := r.reconcileChanges(ctx, ch, &rep)
			if err != nil {
				r.resync = true
			}
			return rep, err
		}
	}
	rep, err := r.reconcileAll(ctx, retained)
	if err != nil {
		r.resync = true
	}
	return rep, err
}

// reconcileAll is the full pass: it reloads held from the shard's own
// account and diffs every committed partition against it.
func (r *Partitions) reconcileAll(ctx context.Context, retained uint64) (Report, error) {
	snap := r.cfg.Meta.Snapshot()
	rep := Report{Revision: snap.Revision, Retained: retained}
	if r.idle() && snap.Revision == r.lastRev {
		rep.Skipped = true
		return rep, nil
	}
	st, err := r.cfg.Shard.Inspect(ctx)
	if err != nil {
		return rep, err
	}
	// The shard's own account replaces what the reconciler remembers,
	// but for the membership it told the shard of (placed), kept for the
	// incarnations the shard still holds: forgotten, a change of the
	// replica set that moves nothing (a Rebalance reordering the
	// preferred leader) and commits before this pass would never be told,
	// and leadership would never follow it.
	r.resync = false
	prev := r.held
	r.held = newHeld()
	for ns, epoch := range st.Owned {
		h := heldPartition{ns: ns, epoch: epoch, dur: st.Durability[ns]}
		if t, ok := prev.Get(h); ok && t.epoch == epoch {
			h.members = t.members
		}
		r.held.ReplaceOrInsert(h)
	}
	now := r.cfg.Clock.Now()
	want := make(map[metadata.Namespace]metadata.PartitionInfo, len(snap.Partitions))
	for _, p := range snap.Partitions {
		want[p.NS] = p
	}

	// Partitions fenced after a failed fsync are evicted and rebuilt from
	// disk (reopening recovers what is durable), behind the build backoff
	// so a disk that keeps failing is not hammered every pass.
	for _, ns := range st.Failed {
		evicted, err := r.cfg.Shard.Evict(ctx, ns)
		if err != nil {
			return rep, err
		}
		if evicted {
			r.held.Delete(heldPartition{ns: ns})
			if damage := st.Damaged[ns]; damage != nil {
				// Rebuilt at once: the build sets the damaged copy aside
				// and the group brings the replica back (repair).
				r.damaged[ns] = damage
				continue
			}
			if old, ok := st.Replaced[ns]; ok {
				// Rebuilt at once, as the replica the metadata names
				// now: the copy on disk is old's, set aside whole by
				// the build (reseed), and the new replica starts empty.
				r.reseeding[ns] = old
				continue
			}
			r.fail(backoffKey{ns, causeAdd}, now, &rep, "fsync", errPartitionFenced)
		}
	}

	// Removals first, so a recreated namespace is torn down before its new
	// incarnation is built into the same directory. Both are walked in
	// namespace order for determinism.
	var gone []metadata.Namespace
	r.held.Ascend(func(h heldPartition) bool {
		if info, ok := want[h.ns]; !ok || !r.mine(info) || info.CreatedRevision != h.epoch {
			gone = append(gone, h.ns)
		}
		return true
	})
	for _, ns := range gone {
		if err := r.remove(ctx, ns, now, &rep); err != nil {
			return rep, err
		}
	}
	for _, ns := range sortedKeys(st.Tombstoned) {
		// A removal whose delete failed earlier: retry when due.
		if err := r.remove(ctx, ns, now, &rep); err != nil {
			return rep, err
		}
	}

	rep.Examined = len(snap.Partitions)
	if err := r.converge(ctx, snap.Partitions, now, &rep); err != nil {
		return rep, err
	}
	// Backoffs of namespaces no longer committed here are moot.
	for k := range r.backoffs {
		info, ok := want[k.ns]
		if k.cause == causeAdd && (!ok || !r.mine(info)) {
			delete(r.backoffs, k)
		}
	}

	// Sweep. Absence from committed metadata is NOT evidence of deletion —
	// a lagging replica looks the same — so such frames only age.
	if st.ParkedFrames > 0 || r.cfg.Shard.Parked() > 0 {
		if err := r.sweep(ctx, st.Parked, func(ns metadata.Namespace) (metadata.PartitionInfo, bool) {
			info, ok := want[ns]
			return info, ok
		}, &rep); err != nil {
			return rep, err
		}
	}
	r.finish(&rep)
	return rep, nil
}

// idle reports whether a pass at the last pass's revision has nothing to
// do: a pass ran (and left its view of the shard right), it did no work,
// no failure waits for a retry (a partition fenced after a failed fsync
// counts as one), and nothing is parked. Retention that is due was
// enforced by Reconcile before.
func (r *Partitions) idle() bool {
	return r.ran && !r.resync && !r.lastDid && len(r.backoffs) == 0 && r.cfg.Shard.Fenced() == 0 && r.cfg.Shard.Parked() == 0
}

// reconcileChanges is the pass when the last pass's view can be trusted:
// only the namespaces in ch.Ranges (none at an unchanged revision) can
// differ from what the last pass converged, and those backed off after a
// failure, which are retried when due (retry). Removals are found among
// the partitions held in those ranges, additions and rows among
// ch.Partitions, and the park buffer is swept as in every pass, from the
// shard's list of parked namespaces.
func (r *Partitions) reconcileChanges(ctx context.Context, ch metadata.Changes, rep *Report) error {
	now := r.cfg.Clock.Now()
	want := make(map[metadata.Namespace]metadata.PartitionInfo, len(ch.Partitions))
	for _, p := range ch.Partitions {
		want[p.NS] = p
	}
	var gone []metadata.Namespace
	for _, rg := range ch.Ranges {
		r.held.AscendRange(heldPartition{ns: rg.Lo}, heldPartition{ns: rg.Hi}, func(h heldPartition) bool {
			if info, ok := want[h.ns]; !ok || !r.mine(info) || info.CreatedRevision != h.epoch {
				gone = append(gone, h.ns)
			}
			return true
		})
	}
	for _, ns := range gone {
		if err := r.remove(ctx, ns, now, rep); err != nil {
			return err
		}
	}
	retries := r.retries()
	// Removals whose delete failed first, as in the full pass, so a
	// recreated namespace's new incarnation can be built in this pass.
	for _, k := range retries {
		if k.cause == causeDelete && r.backedOff(k) {
			if err := r.remove(ctx, k.ns, now, rep); err != nil {
				return err
			}
		}
	}
	rep.Examined = len(ch.Partitions)
	if err := r.converge(ctx, ch.Partitions, now, rep); err != nil {
		return err
	}
	for _, k := range retries {
		if k.cause != causeAdd || !r.backedOff(k) {
			continue
		}
		if slices.ContainsFunc(ch.Ranges, func(rg metadata.NamespaceRange) bool { return rg.Contains(k.ns) }) {
			// Converged above, if it is still committed here.
			if info, ok := want[k.ns]; !ok || !r.mine(info) {
				delete(r.backoffs, k) // moot
			}
			continue
		}
		if err := r.retry(ctx, k.ns, now, rep); err != nil {
			return err
		}
	}
	if r.cfg.Shard.Parked() > 0 {
		parked, err := r.cfg.Shard.ParkedNamespaces(ctx)
		if err != nil {
			return err
		}
		if err := r.sweep(ctx, parked, r.cfg.Meta.Partition, rep); err != nil {
			return err
		}
	}
	r.finish(rep)
	return nil
}

// retries are the keys of the failures waiting for a retry, in namespace
// order (then adds before deletes) so that a pass is deterministic.
func (r *Partitions) retries() []backoffKey {
	if len(r.backoffs) == 0 {
		return nil
	}
	keys := make([]backoffKey, 0, len(r.backoffs))
	for k := range r.backoffs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b backoffKey) int {
		if a.ns != b.ns {
			return cmp.Compare(a.ns, b.ns)
		}
		return cmp.Compare(a.cause, b.cause)
	})
	return keys
}

// retry is the full pass's treatment of one namespace whose build is
// backed off, outside the ranges that changed: the backoff is dropped if
// the namespace is no longer committed here, and the build retried when
// due otherwise (converge of that one partition).
func (r *Partitions) retry(ctx context.Context, ns metadata.Namespace, now time.Time, rep *Report) error {
	info, ok := r.cfg.Meta.Partition(ns)
	if !ok || !r.mine(info) {
		delete(r.backoffs, backoffKey{ns, causeAdd}) // moot
		return nil
	}
	rep.Examined++
	return r.converge(ctx, []metadata.PartitionInfo{info}, now, rep)
}

// converge builds what parts (committed partitions in namespace order)
// assign to this shard and it does not hold at the committed incarnation,
// updates the durability of those it holds, and writes the routing rows of
// the others.
func (r *Partitions) converge(ctx context.Context, parts []metadata.PartitionInfo, now time.Time, rep *Report) error {
	var (
		dur     shard.Durability
		durOf   [2]uint32 // the (stream, topic) dur was resolved for
		haveDur bool
	)
	for _, info := range parts {
		if info.Owner != r.id {
			row := router.Row{Owner: info.Owner, Epoch: info.CreatedRevision}
			if cur, ok := r.table.Get(info.NS); !ok || cur != row {
				if err := r.cfg.Shard.SetRow(ctx, info.NS, row); err != nil {
					return err
				}
				rep.RowsWritten++
			}
			continue
		}
		if !r.mine(info) {
			continue // another node's replica: the shard points there
		}
		// Partitions are sorted by namespace, so a topic's partitions are
		// adjacent: resolve its durability once.
		if !haveDur || info.Stream != durOf[0] || info.Topic != durOf[1] {
			dur, durOf, haveDur = r.durability(info), [2]uint32{info.Stream, info.Topic}, true
		}
		if dur.RetentionAge > 0 || dur.RetentionBytes > 0 {
			if !r.retain {
				r.retain, r.nextRetain = true, now
			}
		}
		if h, ok := r.held.Get(heldPartition{ns: info.NS}); ok && h.epoch == info.CreatedRevision {
			if err := r.placed(ctx, &h, info); err != nil {
				return err
			}
			if h.dur != dur {
				if err := r.cfg.Shard.SetDurability(ctx, info.NS, dur); err != nil {
					return err
				}
				h.dur = dur
				r.held.ReplaceOrInsert(h)
				rep.Reconfigured++
			}
			continue
		}
		if r.backedOff(backoffKey{info.NS, causeDelete}) {
			// The dead incarnation's teardown failed; building the new one
			// over its leftovers would mix the two. Wait for the retry.
			continue
		}
		if err := r.build(ctx, info, dur, now, rep); err != nil {
			return err
		}
	}
	return nil
}

// placed tells the shard when the replica set of a partition it holds
// moved (shard.Shard.UpdatePlacement: the group's leader changes the
// group's membership to match), and records the membership told in h.
// A partition first seen held (just built, or held since before a
// restart) has nothing recorded, and only one with a move in flight is
// told: the shard read its placement when it built the group, and any
// move since leaves replicas in Leaving until it settles. What was told
// survives the full passes' reloads from the shard (Reconcile).
func (r *Partitions) placed(ctx context.Context, h *heldPartition, info metadata.PartitionInfo) error {
	m := info.Members()
	if slices.Equal(h.members, m) {
		return nil
	}
	if h.members != nil || len(info.Leaving) > 0 {
		if err := r.cfg.Shard.UpdatePlacement(ctx, info.NS); err != nil {
			return err
		}
	}
	h.members = m
	r.held.ReplaceOrInsert(*h)
	return nil
}

// sweep answers the parked frames of namespaces committed to another shard
// or whose build or teardown is backed off, and ages the rest (behaviour
// 15). lookup is the committed partition of a namespace.
func (r *Partitions) sweep(ctx context.Context, parked []shard.ParkedNamespace, lookup func(metadata.Namespace) (metadata.PartitionInfo, bool), rep *Report) error {
	verdicts := make(map[metadata.Namespace]shard.Verdict)
	var causes map[metadata.Namespace]error
	for _, pn := range parked {
		info, ok := lookup(pn.NS)
		switch {
		case ok && info.Owner != r.id:
			verdicts[pn.NS] = shard.VerdictNotOwner
		case ok && !r.mine(info):
			verdicts[pn.NS] = shard.VerdictNotHeld
		case r.backedOff(backoffKey{pn.NS, causeAdd}), r.backedOff(backoffKey{pn.NS, causeDelete}):
			verdicts[pn.NS] = shard.VerdictBuildFailed
			// The answer carries why: damage on disk is answered as such
			// (not retried in place), not as a generic retry.
			if b, ok := r.backoffs[backoffKey{pn.NS, causeAdd}]; ok && b.Down() != nil {
				if causes == nil {
					causes = make(map[metadata.Namespace]error)
				}
				causes[pn.NS] = b.Down()
			}
		}
	}
	res, err := r.cfg.Shard.Sweep(ctx, verdicts, causes)
	if err != nil {
		return err
	}
	rep.Answered, rep.Expired = res.Answered, res.Expired
	return nil
}

// mine reports whether this shard materialises info: it owns it, and this
// node holds one of its replicas.
func (r *Partitions) mine(info metadata.PartitionInfo) bool {
	return info.Owner == r.id && (r.cfg.Node == 0 || info.Holds(r.cfg.Node))
}

// finish records a completed pass.
func (r *Partitions) finish(rep *Report) {
	rep.Parked = r.cfg.Shard.Parked()
	rep.Pending = len(r.backoffs)
	r.ran, r.lastRev, r.lastDid = true, rep.Revision, rep.DidWork()
}

// build materialises info on this shard (behaviour 13): the store builds
// the partition off the pump, then the shard takes it on its pump.
func (r *Partitions) build(ctx context.Context, info metadata.PartitionInfo, want shard.Durability, now time.Time, rep *Report) error {
	key := backoffKey{info.NS, causeAdd}
	if lost, ok := r.reseeding[info.NS]; ok {
		if id, held := info.ReplicaOf(r.cfg.Node); held && raftid.Gen(id) > raftid.Gen(lost) {
			delete(r.backoffs, key) // re-seeded: the new replica is built at once
		}
	}
	if !r.due(key, now) {
		return nil
	}
	p, ok := r.adopt(ctx, info)
	if !ok {
		var err error
		build, _ := r.builder(want)
		p, err = build(info.NS, info.CreatedRevision)
		damage := r.damaged[info.NS]
		if err == nil && damage == nil {
			if d, ok := p.(partition.Damaged); ok {
				damage = d.Damage()
			}
		} else if err != nil {
			damage = err
		}
		if damage != nil && r.repair(info, p, damage) {
			p, err = build(info.NS, info.CreatedRevision)
		}
		delete(r.damaged, info.NS)
		if err != nil {
			// A replica built deferred holds its raft log and none of
			// its own files: its build reads the log's tag (see
			// partition.FileConfig.OwnerIncarnation), so a damaged log
			// fails the build itself, not the InsertOwned below. It is
			// the same loss, re-seeded the same way: setting the
			// partition's files aside (repair) keeps the damaged log,
			// and retrying the build alone would fail on it for good
			// while the group goes on counting this replica.
			if r.reseed(info, err) {
				delete(r.backoffs, key)
				return r.build(ctx, info, want, now, rep)
			}
			r.fail(key, now, rep, "build", err)
			return nil
		}
		if d, ok := p.(partition.Damaged); ok {
			if err := d.Damage(); err != nil {
				// Served around the damage; the reads that reach it get
				// the error, and the operator hears of it once here.
				r.log.Error("partition opened with damage on disk", "ns", info.NS, "error", err)
			}
		}
	}
	if err := r.cfg.Shard.InsertOwned(ctx, p, want); err != nil {
		switch {
		case errors.Is(err, shard.ErrAlreadyOwned):
			// A concurrent pass got there; level-triggered, harmless. But
			// held missed it: the next pass reloads it from the shard.
			r.resync = true
			return nil
		case errors.Is(err, shard.ErrPartitionFailed):
			// This partition's own failure (a damaged raft log): backed
			// off like a failed build, and the other partitions of the
			// pass are built meanwhile. A copy of a replica the metadata
			// has replaced is set aside and the new replica built now.
			if r.reseed(info, err) {
				delete(r.backoffs, key)
				return r.build(ctx, info, want, now, rep)
			}
			r.fail(key, now, rep, "build", err)
			return nil
		}
		return err
	}
	delete(r.backoffs, key)
	r.held.ReplaceOrInsert(heldPartition{ns: info.NS, epoch: info.CreatedRevision, dur: want, members: info.Members()})
	rep.Built++
	return nil
}

// builder returns how a partition of durability want is built, and
// whether that build is deferred (nothing on disk yet).
func (r *Partitions) builder(want shard.Durability) (func(metadata.Namespace, uint64) (partition.Partition, error), bool) {
	journaled := (want.Fsync == metadata.FsyncAlways || want.Fsync == metadata.FsyncInterval) && r.cfg.Shard.Journaled()
	if d, ok := r.cfg.Store.(deferringStore); ok && (journaled || r.cfg.Shard.Replicated()) {
		// Its records go to the shard's journal from the first
		// (committed, or staged under FsyncInterval), or to its raft
		// log, which holds every entry since its last snapshot,
		// whatever the fsync policy: its files are created off the
		// acknowledgement path (DESIGN behaviour 32). On one node
		// under FsyncNever an append is acknowledged without the
		// journal, so it needs the files at once, and they are
		// created here, off the pump.
		return d.BuildDeferred, true
	}
	return r.cfg.Store.Build, false
}

// deferringStore is a store that can build a partition without creating
// anything on disk yet (partition.FileStore.BuildDeferred).
type deferringStore interface {
	BuildDeferred(ns metadata.Namespace, epoch uint64) (partition.Partition, error)
}

// remove is the two-phase teardown (behaviour 14): tombstone on the pump,
// delete from disk here, confirm on the pump.
func (r *Partitions) remove(ctx context.Context, ns metadata.Namespace, now time.Time, rep *Report) error {
	key := backoffKey{ns, causeDelete}
	if !r.due(key, now) {
		return nil
	}
	if _, err := r.cfg.Shard.Tombstone(ctx, ns); err != nil {
		return err
	}
	r.held.Delete(heldPartition{ns: ns})
	delete(r.reseeding, ns)
	if err := r.cfg.Store.Remove(ns); err != nil {
		r.fail(key, now, rep, "remove", err)
		return nil
	}
	if err := r.cfg.Shard.RemoveOwned(ctx, ns); err != nil {
		return err
	}
	delete(r.backoffs, key)
	rep.Removed++
	return nil
}

// fail records a failure and backs its retry off exponentially (behaviour
// 16). Other namespaces carry on in the same pass.
func (r *Partitions) fail(key backoffKey, now time.Time, rep *Report, what string, err error) {
	b := r.backoffs[key]
	delay := b.Fail(now, r.cfg.BackoffMin, r.cfg.BackoffMax, err)
	r.backoffs[key] = b
	rep.Failed++
	r.m.BuildFailed.Inc()
	r.log.Warn("partition "+what+" failed; backing off", "ns", key.ns, "retry_in", delay, "error", err)
}

func (r *Partitions) due(key backoffKey, now time.Time) bool {
	b, ok := r.backoffs[key]
	if !ok {
		return true
	}
	// Due may move the schedule (a clock set back restarts the wait), so
	// the moved copy is stored: dropped, a clock set back further than the
	// delay kept the retry from ever being due again (simulator seed 5474).
	due := b.Due(now)
	r.backoffs[key] = b
	return due
}

func (r *Partitions) backedOff(key backoffKey) bool {
	_, ok := r.backoffs[key]
	return ok
}

// enforceRetention runs the shard's retention pass and schedules the next.
func (r *Partitions) enforceRetention(ctx context.Context, rep *Report) error {
	now := r.cfg.Clock.Now()
	res, err := r.cfg.Shard.EnforceRetention(ctx, now)
	if err != nil {
		return err
	}
	rep.Retained = res.Messages
	r.nextRetain = now.Add(r.cfg.RetentionInterval)
	return nil
}

// asidingStore is a store that can set a damaged partition's data aside
// (partition.FileStore.SetAside).
type asidingStore interface {
	SetAside(ns metadata.Namespace, keep ...string) (string, error)
	Reincarnate(ns metadata.Namespace, epoch uint64, keep ...string) (string, error)
	Location(ns metadata.Namespace) (vfs.FS, string)
}

// repair handles damage found in this node's copy of a replicated
// partition (a *partition.CorruptError from its build, from the
// partition it opened, or from a read that evicted it): the copy is not
// served around the damage, as a single node's is, but set aside (its
// raft log kept) so that the build opens it empty and the group brings it
// back: the raft log's snapshot says how far its log reached, and the
// replica fetches that from its peers (see package shard, damage.go).
// p, if not nil, is the damaged partition, closed here. It reports
// whether the copy was set aside, so the caller builds again; false
// leaves p as it was: a single node, a partition with no other replica
// (nothing to fetch from), damage of another kind, or nothing to set
// aside.
func (r *Partitions) repair(info metadata.PartitionInfo, p partition.Partition, damage error) bool {
	a, ok := r.cfg.Store.(asidingStore)
	if !ok || r.cfg.Node == 0 || !errors.Is(damage, partition.ErrCorrupt) {
		return false
	}
	if len(info.Replicas) > 0 && !slices.ContainsFunc(info.Members(), func(id uint64) bool { return metadata.NodeOf(id) != r.cfg.Node }) {
		return false
	}
	if p != nil {
		if err := p.Close(); err != nil {
			r.log.Warn("closing a damaged replica", "ns", info.NS, "error", err)
		}
	}
	// The raft log stays, and so does the record of a log refused
	// before (shard.RefuseRaftLog): moved aside with the partition's
	// files, it would let the next build take the directory for one
	// with no raft log.
	aside, err := a.SetAside(info.NS, shard.RaftLogName, shard.RaftMarkName, shard.RaftRefusedName)
	if errors.Is(err, partition.ErrIncarnationDamaged) {
		aside, err = reincarnate(a, info)
	}
	if err == nil && aside == "" {
		// Nothing of the replica's own is on disk to set aside (a
		// replica built deferred keeps only its raft log, whose damage
		// the re-seed handles): no failure to report.
		return p != nil // closed: build it again all the same
	}
	if err != nil {
		r.log.Error("setting a damaged replica aside failed", "ns", info.NS, "damage", damage, "error", err)
		return p != nil // closed: build it again all the same
	}
	r.m.ReplicaRepairs.Inc()
	r.log.Error("replica damaged on disk: its copy is set aside and fetched again from its peers", "ns", info.NS, "aside", aside, "error", damage)
	return true
}

// reseed handles cause, the failure of this node's replica of info to
// build, if its raft log is damaged or belongs to a replica the metadata
// has replaced. It reports whether it set the copy aside, whole, raft log
// included, so the caller builds the new replica at once.
//
// Why. A replica whose raft log is damaged (a record failing its
// checksum, a log cut short or rolled back past its sync mark) has lost
// its term, its vote and the entries it acknowledged; empty under the
// same raft id it could vote twice in a term, or complete a quorum that
// lacks a committed entry. So it is never rebuilt under its id: the node
// reports it (Config.Reseed), the metadata gives the node's replica the
// partition's next generation (metadata.ReseedReplica, a raft id the
// group never had, internal/raftid), and the group's leader moves the
// new replica in as a learner, sends it a snapshot and the partition
// log, and promotes it once whole. Here, once the metadata names a newer
// replica than the one whose log is in the directory, the directory is
// set aside (partition.FileStore.SetAside keeps it for an operator) and
// the new replica starts empty. A log whose replica cannot be read (it
// is damaged) is the reported one's when this reconciler reported it; a
// log of an older generation than the metadata's, read from its tag, is
// replaced for sure — a damaged log's tag included (its sync mark's, its
// valid prefix's) and a refused one's (the record keeps the log), so a
// reconciler restarted after the re-seed committed, which remembers no
// report, does not report it again. The report waits for the refusal's
// record on disk (shard.RefuseRaftLog). What it never does is empty a
// log of the replica the metadata names: that replica lost its log and
// is reported again.
// (A log newer than the metadata — a node whose metadata lags its raft
// log — is refused by its tag, reported to no effect, and taken once the
// metadata catches up: ReseedReplica of an id no longer in the replica
// set is a no-op.)
func (r *Partitions) reseed(info metadata.PartitionInfo, cause error) bool {
	a, ok := r.cfg.Store.(asidingStore)
	if !ok || r.cfg.Node == 0 || len(info.Replicas) == 0 || !errors.Is(cause, partition.ErrCorrupt) {
		return false
	}
	id, ok := info.ReplicaOf(r.cfg.Node)
	if !ok || !slices.ContainsFunc(info.Members(), func(m uint64) bool { return metadata.NodeOf(m) != r.cfg.Node }) {
		return false // nothing to fetch a new copy from
	}
	fsys, dir := a.Location(info.NS)
	// older: the log names an older replica of this node's. unread: the
	// log is too damaged to say whose it is. unproven: the incarnation
	// file is damaged and the raft log does not prove the directory is
	// this incarnation's (reincarnate refused it).
	var older, unread, unproven bool
	l, lerr := shard.RaftLogOf(fsys, dir)
	unread = lerr != nil
	if l.Held || l.Tagged {
		// A damaged or refused log still names whose it was (its sync
		// mark's tag, its valid prefix's, the refused record's): one of
		// an older replica than the metadata's is set aside, though no
		// report of it is remembered (a restart after the re-seed
		// committed forgets r.reseeding).
		of := l.Replica
		if of == 0 {
			of = r.cfg.Node // tagged before tags named the replica: generation 0
		}
		older = of != id && raftid.Gen(of) < raftid.Gen(id)
	}
	if incarnationDamaged(cause) {
		unproven = unread || l.Held && (!l.Tagged || l.Incarnation != info.CreatedRevision)
	}
	lost, reported := r.reseeding[info.NS]
	switch {
	case older, reported && raftid.Gen(lost) < raftid.Gen(id):
		aside, err := a.SetAside(info.NS)
		if errors.Is(err, partition.ErrIncarnationDamaged) {
			// The whole copy goes, raft log included, whichever
			// incarnation it held: the new replica starts empty, so
			// nothing of the old one has to prove its incarnation.
			aside, err = a.Reincarnate(info.NS, info.CreatedRevision)
		}
		if err != nil {
			r.log.Error("setting a re-seeded replica's old copy aside failed", "ns", info.NS, "error", err)
			return false
		}
		delete(r.reseeding, info.NS)
		r.m.ReplicaRepairs.Inc()
		r.log.Warn("replica re-seeded: its old copy is set aside and the new replica is fetched from its peers",
			"ns", info.NS, "replica", id, "aside", aside)
		return true
	case (shard.RaftLogLost(cause) || unproven) && r.cfg.Reseed != nil:
		// The refusal is recorded on disk first (the damaged log set
		// aside beside the replica's copy), and the re-seed reported
		// only once it is: the report is a proposal a power loss may
		// drop, and a later lie may hide the damage, so without the
		// record a restart could build the replica under its raft id
		// from the log it refused (shard.RefuseRaftLog) — and once the
		// re-seed commits, the record is what still refuses that log.
		// A failed record is retried at the next build, which finds
		// the damage again; the report waits for it.
		q, err := shard.RefuseRaftLog(fsys, dir, cause, lerr)
		if err != nil {
			r.log.Error("recording a refused raft log on disk failed; the re-seed is reported once it is recorded", "ns", info.NS, "error", err)
			return false
		}
		if q != "" {
			r.log.Warn("refused raft log set aside", "ns", info.NS, "aside", q)
		}
		if unread || unproven {
			// Whose the log is can be told only now: the node's
			// metadata, durable with what it acted on, names id, so the
			// log was written by id or an older replica of this node's
			// (or of an earlier incarnation, which the new replica
			// replaces all the same).
			r.reseeding[info.NS] = id
		}
		r.log.Error("raft log damaged or of unproven incarnation: the replica is re-seeded from its peers under a new raft id", "ns", info.NS, "replica", id, "error", cause)
		r.cfg.Reseed(info.NS, info.CreatedRevision, id)
	}
	return false
}

// incarnationDamaged reports whether err, a build failure, is damage to
// the partition's incarnation file (a *partition.CorruptError naming it).
//
// Why it leads to a re-seed. A copy whose incarnation file is damaged is
// repaired under its raft id only when its raft log proves the directory
// is this incarnation's (reincarnate); a log that is damaged too, untagged,
// or tagged with another incarnation proves nothing, and the replica
// cannot be built. It is then one the group has lost, as with a damaged
// raft log: left alone, the group runs one voter short for good, and the
// frames its leader sends to it park and expire on this node forever
// (cluster seed 20382: the incarnation file and the raft log of the same
// directory flipped). A new raft id is safe whatever the directory held:
// the old copy is set aside whole and the new replica starts empty.
func incarnationDamaged(err error) bool {
	var ce *partition.CorruptError
	return errors.As(err, &ce) && filepath.Base(ce.Path) == partition.IncarnationName
}

// reincarnate sets aside the copy of a replica whose incarnation file is
// damaged, and rewrites that file from the metadata
// (partition.FileStore.Reincarnate), if its raft log allows: a log
// tagged with the incarnation the metadata names is this incarnation's
// and is kept (shard.RaftLogOf); a log that holds no raft state (or none)
// goes aside with the rest, as the member never took part from it. Raft
// state that does not prove its incarnation — untagged, tagged with
// another, or damaged — is never kept under this one (it could be an
// earlier incarnation's term, vote and entries, and elect this member
// with another group's log), nor discarded under this replica's raft id
// (a member that forgets its vote can vote twice): the copy is not
// repaired here, its build fails, and reseed reports the replica for a
// new raft id (incarnationDamaged), under which the whole copy is set
// aside and the replica starts empty.
func reincarnate(a asidingStore, info metadata.PartitionInfo) (string, error) {
	fsys, dir := a.Location(info.NS)
	l, err := shard.RaftLogOf(fsys, dir)
	switch {
	case err != nil:
		return "", fmt.Errorf("incarnation file damaged, and the raft log: %w", err)
	case !l.Held:
		return a.Reincarnate(info.NS, info.CreatedRevision)
	case !l.Tagged:
		return "", errors.New("incarnation file damaged, and the raft log does not name its incarnation")
	case l.Incarnation != info.CreatedRevision:
		return "", fmt.Errorf("incarnation file damaged, and the raft log is of incarnation %d, not %d", l.Incarnation, info.CreatedRevision)
	}
	return a.Reincarnate(info.NS, info.CreatedRevision, shard.RaftLogName, shard.RaftMarkName)
}
