package sim

import (
	"fmt"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// The store tap: every node, of either kind, opens its partitions through
// a store that wraps the engine's FileStore (store), and every partition
// it builds is wrapped in a tap. Together they slow builds down (the
// SlowBuild fault), check what a build opens and every append and read
// against the oracle, and check the incarnation fence where a client is
// served. What the oracle makes of a build, an append or a read is the
// harness's (tapOracle): there the kinds really differ.

// tapOracle is what the store tap leaves to its harness. A single node's
// partition log is its incarnation's log: a power loss may take its
// unsynced tail, whose offsets later appends reuse. A replica's is one
// copy of the log its group agrees on, appended to as raft applies
// entries on every replica, and read by peers catching up as well as by
// clients.
type tapOracle interface {
	// tapBuilt checks a build of key on n that succeeded, and records
	// it in the oracle.
	tapBuilt(n *node, key incKey, p partition.Partition)
	// tapBuildFailed judges a build of key on n that failed with err.
	tapBuildFailed(n *node, key incKey, err error)
	// tapRemoved checks and records the removal of ns's data on n.
	tapRemoved(n *node, ns metadata.Namespace)
	// tapAppended checks and records an append to key on n: msgs at
	// first, or err.
	tapAppended(n *node, key incKey, first uint64, msgs []partition.Message, err error)
	// tapRead checks a read of key on n from from, for a client unless
	// a peer's catch-up fetch made it.
	tapRead(n *node, key incKey, from uint64, msgs []partition.Message, client bool)
	// tapStoreOffset stores a consumer offset in t, as the node's
	// engine asked.
	tapStoreOffset(t *tap, consumer string, offset uint64) error
}

// store wraps node n's FileStore (inner): the partition.Store the
// node's engine opens its partitions through.
type store struct {
	n     *node
	o     tapOracle
	inner partition.Store
}

// Build implements partition.Store.
func (st *store) Build(ns metadata.Namespace, epoch uint64) (partition.Partition, error) {
	return st.build(ns, epoch, st.inner.Build)
}

// BuildDeferred passes on partition.FileStore.BuildDeferred, which the
// reconciler uses for every replicated partition (DESIGN behaviour 32),
// with Build's checks.
func (st *store) BuildDeferred(ns metadata.Namespace, epoch uint64) (partition.Partition, error) {
	return st.build(ns, epoch, st.files().BuildDeferred)
}

// build builds ns's incarnation epoch with build and checks what it
// opened. A slow build runs further scheduler steps first; crashes wait
// until no build is blocked (base.depth), so st.n is still running when
// the nested steps are done.
func (st *store) build(ns metadata.Namespace, epoch uint64, build func(metadata.Namespace, uint64) (partition.Partition, error)) (partition.Partition, error) {
	n, b := st.n, st.n.b
	if k := b.slowBuild(); k > 0 {
		by := ""
		if !n.replicated() {
			// The single-node trace names the shard whose pass blocks.
			by = fmt.Sprintf(" by shard %d", n.building[len(n.building)-1])
		}
		b.event("%sslow build ns=%v epoch=%d%s: %d steps", n.tag(), ns, epoch, by, k)
		b.nested(k, b.tick)
		b.event("%sslow build ns=%v epoch=%d resumes", n.tag(), ns, epoch)
	}
	p, err := build(ns, epoch)
	if err != nil && BreakRebuildOnDamage.Load() && isDamageError(err) {
		b.event("%sbuild ns=%v epoch=%d: damage, started over (broken): %v", n.tag(), ns, epoch, err)
		if err = st.inner.Remove(ns); err == nil {
			p, err = build(ns, epoch)
		}
	}
	key := incKey{ns, epoch}
	if err != nil {
		b.event("%sbuild ns=%v epoch=%d err=%v", n.tag(), ns, epoch, err)
		st.o.tapBuildFailed(n, key, err)
		return nil, err
	}
	st.o.tapBuilt(n, key, p)
	b.event("%sbuild ns=%v epoch=%d next=%d", n.tag(), ns, epoch, p.NextOffset())
	return &tap{Partition: p, n: n, o: st.o, key: key}, nil
}

// Remove implements partition.Store; the oracle checks that no data the
// node must keep goes.
func (st *store) Remove(ns metadata.Namespace) error {
	n := st.n
	if err := st.inner.Remove(ns); err != nil {
		n.b.event("%sremove ns=%v err=%v", n.tag(), ns, err)
		return err
	}
	st.o.tapRemoved(n, ns)
	n.b.event("%sremove ns=%v", n.tag(), ns)
	return nil
}

// List implements partition.Store, and records what it listed: a node's
// start removes the directories of incarnations not committed (the
// orphan sweep), which may leave the committed one's data where it is
// (tapRemoved).
func (st *store) List() ([]partition.Stored, error) {
	stored, err := st.inner.List()
	for _, d := range stored {
		if st.n.listed == nil {
			st.n.listed = make(map[metadata.Namespace]uint64)
		}
		st.n.listed[d.NS] = d.Epoch
	}
	return stored, err
}

// SetAside passes the reconciler's repair of a damaged replica on to the
// file store (partition.FileStore.SetAside): the simulated node repairs
// as the engine does. The copy's next build is checked as a reopen: an
// empty log is a prefix of what it held.
func (st *store) SetAside(ns metadata.Namespace, keep ...string) (string, error) {
	aside, err := st.files().SetAside(ns, keep...)
	st.n.b.event("%sset aside ns=%v to %q err=%v", st.n.tag(), ns, aside, err)
	return aside, err
}

// Reincarnate passes on partition.FileStore.Reincarnate, as SetAside.
func (st *store) Reincarnate(ns metadata.Namespace, epoch uint64, keep ...string) (string, error) {
	aside, err := st.files().Reincarnate(ns, epoch, keep...)
	st.n.b.event("%sreincarnate ns=%v epoch=%d to %q err=%v", st.n.tag(), ns, epoch, aside, err)
	return aside, err
}

// files is the file store under st: every node keeps its data in a
// directory of its simulated disk.
func (st *store) files() *partition.FileStore { return st.inner.(*partition.FileStore) }

// Location passes on partition.FileStore.Location.
func (st *store) Location(ns metadata.Namespace) (vfs.FS, string) {
	return st.files().Location(ns)
}

// tap observes one partition incarnation on one node (a replica of it,
// in a cluster): every append and read is checked against the oracle.
type tap struct {
	partition.Partition
	n   *node
	o   tapOracle
	key incKey
}

// Unwrap returns the tapped partition: a single node's journal
// (partition.Journal) commits it as the store's own, so the simulated
// node runs the journal as a real one does. Appends still go through the
// tap.
func (t *tap) Unwrap() partition.Partition { return t.Partition }

// serving records that the node serves a client request of this
// incarnation and checks the incarnation fence against the node's own
// metadata (behaviour 10): a shard serves only the committed incarnation.
func (t *tap) serving(what string) {
	n := t.n
	if n.inj.dead {
		return
	}
	n.lastServe[t.key.ns] = t.key.epoch
	if rev, ok := n.meta.CreatedRevision(t.key.ns); !ok || rev != t.key.epoch {
		n.b.fail(2, "%s served %v%s while its committed incarnation is %d (committed: %v)", what, t.key, n.on(), rev, ok)
	}
}

// Location implements partition.Located when the partition does: a
// replicated partition keeps its raft log in its directory.
func (t *tap) Location() (vfs.FS, string) {
	if loc, ok := t.Partition.(partition.Located); ok {
		return loc.Location()
	}
	return nil, ""
}

// Lodge implements partition.Lodger when the partition does (a
// replicated partition's raft log goes in its directory), and Location
// otherwise, made durable with durable as shard's replicate would.
func (t *tap) Lodge(durable bool) (vfs.FS, string, error) {
	if l, ok := t.Partition.(partition.Lodger); ok {
		return l.Lodge(durable)
	}
	fsys, dir := t.Location()
	if durable {
		if err := t.Sync(); err != nil {
			return nil, "", err
		}
	}
	return fsys, dir, nil
}

// Deferred implements partition.Deferred when the partition does: the
// shard leaves a deferred replica's files uncreated when its group
// quiesces, as it does outside the simulator.
func (t *tap) Deferred() bool {
	d, ok := t.Partition.(partition.Deferred)
	return ok && d.Deferred()
}

// Damage implements partition.Damaged when the partition does: the
// reconciler repairs a replica whose build found damage (a damaged last
// segment, a sealed one cut short). Hidden behind the tap, it never did
// in the simulator: the liar's copy with a byte flipped in its last
// segment stayed short of the log until a write reached it, or for good
// (cluster lying seed 150).
func (t *tap) Damage() error {
	if d, ok := t.Partition.(partition.Damaged); ok {
		return d.Damage()
	}
	return nil
}

// WritesRefused implements partition.WriteFenced when the partition
// does: a leader asks before it proposes a write its own copy would
// refuse (package shard, damage.go).
func (t *tap) WritesRefused() error {
	if w, ok := t.Partition.(partition.WriteFenced); ok {
		return w.WritesRefused()
	}
	return nil
}

// SkipTo implements partition.Partition. A replica skips offsets only
// when its peers removed them (truncation, purge, retention), none of
// which the workload does: skipping would lose messages.
func (t *tap) SkipTo(offset uint64) error {
	if !t.n.inj.dead {
		t.n.b.fail(3, "%s skipped %v to offset %d, though nothing was ever removed", t.n.name(), t.key, offset)
	}
	return t.Partition.SkipTo(offset)
}

// Append implements partition.Partition. On a single node the
// incarnation fence is not asserted here but where the shard admitted
// each produce: a shard queues the produces it takes in one pump step and
// appends them together when its inbox runs dry or before anything else
// touches the partition (shard/coalesce.go), so a metadata commit may
// fall between the admission and the append. That is harmless — the
// produce was concurrent with the delete and linearizes before it, no
// read is served from the incarnation after the commit, and the teardown
// appends whatever is queued before it closes the partition — so the
// oracle checks every message against the incarnation its frame was
// stamped with when the shard took it instead. In a cluster, appends come
// from raft applying committed entries, on every replica, and from a
// replica catching up from a peer's log.
func (t *tap) Append(msgs []partition.Message) (uint64, error) {
	if t.n.inj.dead {
		// A crashed node's shutdown appends what it had queued to a disk
		// that is gone: nothing anyone will see.
		return t.Partition.Append(msgs)
	}
	first, err := t.Partition.Append(msgs)
	if err != nil {
		t.n.b.event("%sappend %v err=%v", t.n.tag(), t.key, err)
	}
	t.o.tapAppended(t.n, t.key, first, msgs, err)
	return first, err
}

// Read implements partition.Partition: a client's poll, or a peer's
// catch-up fetch (n.fetching), whose data must be the log's all the same.
func (t *tap) Read(from uint64, max int) ([]partition.Message, error) {
	n := t.n
	if !n.fetching {
		t.serving("read")
	}
	msgs, err := t.Partition.Read(from, max)
	if err != nil && BreakSwallowDamage.Load() && isDamageError(err) && !n.fetching {
		// What the broken build serves is checked as any answer is.
		n.b.event("%sread of %v from %d: damage swallowed (broken): %v", n.tag(), t.key, from, err)
		msgs, err = nil, nil
	}
	if err == nil && !n.inj.dead {
		if log := n.b.oracle[t.key]; BreakAppendTimeOrder.Load() && log != nil {
			msgs = rawAppendTimes(msgs, log.raw)
		}
		t.o.tapRead(n, t.key, from, msgs, !n.fetching)
	}
	return msgs, err
}

// StoreConsumerOffset implements partition.Partition.
func (t *tap) StoreConsumerOffset(consumer string, offset uint64) error {
	return t.o.tapStoreOffset(t, consumer, offset)
}

// ConsumerOffset implements partition.Partition.
func (t *tap) ConsumerOffset(consumer string) (uint64, bool, error) {
	t.serving("get offset")
	return t.Partition.ConsumerOffset(consumer)
}
