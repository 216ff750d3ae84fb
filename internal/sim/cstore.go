package sim

import (
	"errors"
	"maps"
	"slices"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// cstore wraps a cluster node's FileStore: it slows builds down, checks
// what a build opens against the oracle, and wraps every partition in a
// tap.
type cstore struct {
	n     *node
	inner partition.Store
}

// Build implements partition.Store.
func (st *cstore) Build(ns metadata.Namespace, epoch uint64) (partition.Partition, error) {
	return st.build(ns, epoch, st.inner.Build)
}

// BuildDeferred passes on partition.FileStore.BuildDeferred, which the
// reconciler uses for every replicated partition (DESIGN behaviour 32),
// with Build's checks.
func (st *cstore) BuildDeferred(ns metadata.Namespace, epoch uint64) (partition.Partition, error) {
	return st.build(ns, epoch, st.files().BuildDeferred)
}

func (st *cstore) build(ns metadata.Namespace, epoch uint64, build func(metadata.Namespace, uint64) (partition.Partition, error)) (partition.Partition, error) {
	n := st.n
	c := n.c
	if k := c.slowBuild(); k > 0 {
		c.event("n%d slow build ns=%v epoch=%d: %d steps", n.id, ns, epoch, k)
		c.nested(k, c.tick)
		c.event("n%d slow build ns=%v epoch=%d resumes", n.id, ns, epoch)
	}
	p, err := build(ns, epoch)
	if err != nil {
		c.event("n%d build ns=%v epoch=%d err=%v", n.id, ns, epoch, err)
		return nil, err
	}
	key := incKey{ns, epoch}
	c.checkPlacedBuild(n, key)
	if info, ok := n.meta.Partition(ns); ok && info.CreatedRevision == epoch {
		c.notePlacement(info)
	}
	c.builds[buildKey{n.id, key}]++
	rl := c.oracle[key]
	if rl == nil {
		rl = &incLog{lens: make(map[uint64]uint64)}
		c.oracle[key] = rl
	}
	if have, ok := rl.lens[n.id]; ok {
		c.verifyReplicaReopen(n, key, rl, have, p)
	} else if p.NextOffset() != 0 || p.StartOffset() != 0 {
		c.fail(2, "a fresh build of %v on n%d holds offsets [%d, %d): data of another incarnation",
			key, n.id, p.StartOffset(), p.NextOffset())
	}
	rl.lens[n.id] = p.NextOffset()
	c.event("n%d build ns=%v epoch=%d next=%d", n.id, ns, epoch, p.NextOffset())
	return &ctap{Partition: p, n: n, key: key}, nil
}

// verifyReplicaReopen checks a copy rebuilt on a node that held it before
// (a partition evicted after a failed fsync): what it holds is a prefix
// of the log, at most what the replica had appended.
func (c *csim) verifyReplicaReopen(n *node, key incKey, rl *incLog, have uint64, p partition.Partition) {
	next := p.NextOffset()
	// A file the liar's disk rolled back to an earlier copy may hold
	// more than the replica had appended since (a tail recovery cut off,
	// which the copy still had): harmless if every message is the log's
	// at its offset, which the reads below check.
	if next > have && (!c.liedTo(n, key) || next > uint64(len(rl.ids))) {
		c.fail(3, "%v reopened on n%d with %d messages, the replica had appended %d", key, n.id, next, have)
		return
	}
	n.inj.quiet++
	defer func() { n.inj.quiet-- }()
	for from := p.StartOffset(); from < next; {
		msgs, err := p.Read(from, 1024)
		if err != nil && isDamageError(err) && c.liedTo(n, key) {
			// The liar's copy reports the damage a lie did: the offset
			// is skipped, what follows must still be the log's.
			c.faults.Detected++
			c.event("n%d reopen %v: damage reported at offset %d: %v", n.id, key, from, err)
			from++
			continue
		}
		if err != nil {
			c.fail(3, "%v reopened on n%d but unreadable: %v", key, n.id, err)
			return
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			id, ok := decodePayload(m.Payload)
			if !ok || m.Offset >= uint64(len(rl.ids)) || rl.ids[m.Offset] != id {
				c.fail(3, "%v reopened on n%d: offset %d holds message %d (intact %v), not the log's", key, n.id, m.Offset, id, ok)
				return
			}
		}
		from = msgs[len(msgs)-1].Offset + 1
	}
	if next < have {
		c.event("n%d reopen %v: %d appended messages not durable", n.id, key, have-next)
	}
}

// Remove implements partition.Store: only a dead incarnation, or one
// whose group no longer counts this node (a replica that moved away:
// SettleReplicas applied), as this node's metadata sees it, may lose its
// data here.
func (st *cstore) Remove(ns metadata.Namespace) error {
	n := st.n
	c := n.c
	if err := st.inner.Remove(ns); err != nil {
		c.event("n%d remove ns=%v err=%v", n.id, ns, err)
		return err
	}
	// member: this node's metadata commits the incarnation rev and names
	// the node one of its group's members.
	info, committed := n.meta.Partition(ns)
	rev, member := info.CreatedRevision, committed && info.Holds(n.id)
	for _, k := range slices.SortedFunc(maps.Keys(c.oracle), incKey.compare) {
		if k.ns != ns {
			continue
		}
		rl := c.oracle[k]
		incDamage := c.liedTo(n, k) && c.lies.touched(k, "incarnation")
		if member && k.epoch == rev && incDamage {
			c.raftStateLost = true
			c.event("n%d removes its copy of %v, raft state included (known limit: its incarnation file was damaged)", n.id, k)
		}
		if member && k.epoch == rev && rl.lens[n.id] > 0 {
			known := ""
			if incDamage {
				known = knownReplicaIncarnationDamage
			}
			c.failKnown(known, 3, "n%d removed the committed incarnation %v with %d messages, whose replicas %v (leaving %v) it is one of",
				n.id, k, rl.lens[n.id], info.Replicas, info.Leaving)
		}
		delete(rl.lens, n.id)
	}
	c.event("n%d remove ns=%v", n.id, ns)
	return nil
}

// List implements partition.Store.
func (st *cstore) List() ([]partition.Stored, error) { return st.inner.List() }

// SetAside passes the reconciler's repair of a damaged replica on to the
// file store (partition.FileStore.SetAside): the simulated node repairs
// as the engine does. The copy's next build is checked as a reopen: an
// empty log is a prefix of what it held.
func (st *cstore) SetAside(ns metadata.Namespace, keep ...string) (string, error) {
	aside, err := st.files().SetAside(ns, keep...)
	st.n.c.event("n%d set aside ns=%v to %q err=%v", st.n.id, ns, aside, err)
	return aside, err
}

// Reincarnate passes on partition.FileStore.Reincarnate, as SetAside.
func (st *cstore) Reincarnate(ns metadata.Namespace, epoch uint64, keep ...string) (string, error) {
	aside, err := st.files().Reincarnate(ns, epoch, keep...)
	st.n.c.event("n%d reincarnate ns=%v epoch=%d to %q err=%v", st.n.id, ns, epoch, aside, err)
	return aside, err
}

// files is the file store under st: every cluster node keeps its data
// in a directory of its simulated disk.
func (st *cstore) files() *partition.FileStore { return st.inner.(*partition.FileStore) }

// Location passes on partition.FileStore.Location.
func (st *cstore) Location(ns metadata.Namespace) (vfs.FS, string) {
	return st.files().Location(ns)
}

// ctap observes one replica of one partition incarnation.
type ctap struct {
	partition.Partition
	n   *node
	key incKey
}

// serving records that the replica serves a client request, and checks
// the incarnation fence against the node's own metadata (behaviour 10).
func (t *ctap) serving(what string) {
	n := t.n
	if n.inj.dead {
		return
	}
	n.lastServe[t.key.ns] = t.key.epoch
	if rev, ok := n.meta.CreatedRevision(t.key.ns); !ok || rev != t.key.epoch {
		n.c.fail(2, "%s served on n%d's %v while its committed incarnation is %d (committed: %v)", what, n.id, t.key, rev, ok)
	}
}

// Location implements partition.Located when the partition does: a
// replicated partition keeps its raft log in its directory.
func (t *ctap) Location() (vfs.FS, string) {
	if loc, ok := t.Partition.(partition.Located); ok {
		return loc.Location()
	}
	return nil, ""
}

// Lodge implements partition.Lodger when the partition does (a
// replicated partition's raft log goes in its directory), and Location
// otherwise, made durable with durable as shard's replicate would.
func (t *ctap) Lodge(durable bool) (vfs.FS, string, error) {
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
func (t *ctap) Deferred() bool {
	d, ok := t.Partition.(partition.Deferred)
	return ok && d.Deferred()
}

// Damage implements partition.Damaged when the partition does: the
// reconciler repairs a replica whose build found damage (a damaged last
// segment, a sealed one cut short). Hidden behind the tap, it never did
// in the simulator: the liar's copy with a byte flipped in its last
// segment stayed short of the log until a write reached it, or for good
// (cluster lying seed 150).
func (t *ctap) Damage() error {
	if d, ok := t.Partition.(partition.Damaged); ok {
		return d.Damage()
	}
	return nil
}

// WritesRefused implements partition.WriteFenced when the partition
// does: a leader asks before it proposes a write its own copy would
// refuse (package shard, damage.go).
func (t *ctap) WritesRefused() error {
	if w, ok := t.Partition.(partition.WriteFenced); ok {
		return w.WritesRefused()
	}
	return nil
}

// SkipTo implements partition.Partition. A replica skips offsets only
// when its peers removed them (truncation, purge, retention), none of
// which the workload does: skipping would lose messages.
func (t *ctap) SkipTo(offset uint64) error {
	if !t.n.inj.dead {
		t.n.c.fail(3, "n%d skipped %v to offset %d, though nothing was ever removed", t.n.id, t.key, offset)
	}
	return t.Partition.SkipTo(offset)
}

// Append implements partition.Partition. Appends come from raft applying
// committed entries, on every replica, and from a replica catching up
// from a peer's log.
func (t *ctap) Append(msgs []partition.Message) (uint64, error) {
	if t.n.inj.dead {
		return t.Partition.Append(msgs) // a crashed node's shutdown: no one sees it
	}
	first, err := t.Partition.Append(msgs)
	if err == nil {
		t.n.c.onReplicaAppend(t.n, t.key, first, msgs)
	} else {
		t.n.c.applyFailed[buildKey{t.n.id, t.key}] = true
		t.n.c.event("n%d append %v err=%v", t.n.id, t.key, err)
	}
	return first, err
}

// Read implements partition.Partition: a client's poll, or a peer's
// catch-up fetch (n.fetching), whose data must be the log's all the same.
func (t *ctap) Read(from uint64, max int) ([]partition.Message, error) {
	if !t.n.fetching {
		t.serving("read")
	}
	msgs, err := t.Partition.Read(from, max)
	if err != nil && BreakSwallowDamage.Load() && isDamageError(err) && !t.n.fetching {
		t.n.c.event("n%d read of %v from %d: damage swallowed (broken): %v", t.n.id, t.key, from, err)
		msgs, err = nil, nil
	}
	if err == nil && !t.n.inj.dead {
		if rl := t.n.c.oracle[t.key]; BreakAppendTimeOrder.Load() && rl != nil {
			msgs = rawAppendTimes(msgs, rl.raw)
		}
		t.n.c.onReplicaRead(t.n, t.key, from, msgs, !t.n.fetching)
	}
	return msgs, err
}

// StoreConsumerOffset implements partition.Partition. A consumer offset
// is a replicated write: it is stored when its raft entry is applied (or
// a snapshot installed), on every replica, whatever the node's metadata
// says meanwhile; on the leader that answers it, it is served here.
func (t *ctap) StoreConsumerOffset(consumer string, offset uint64) error {
	err := t.Partition.StoreConsumerOffset(consumer, offset)
	if !t.n.inj.dead {
		if err != nil && !errors.Is(err, partition.ErrOffsetOutOfRange) {
			t.n.c.storeFailed[buildKey{t.n.id, t.key}] = true
			t.n.c.event("n%d store offset %v %s=%d err=%v", t.n.id, t.key, consumer, offset, err)
		}
		sk := storeKey{t.key, consumer, offset}
		t.n.c.storeOutcomes[sk] |= storeOutcome(err)
		t.n.lastServe[t.key.ns] = t.key.epoch
		t.n.stored = append(t.n.stored, storeRecord{ns: t.key.ns, consumer: consumer, offset: offset, epoch: t.key.epoch, err: err})
	}
	return err
}

// storeKey is one consumer offset write to one incarnation.
type storeKey struct {
	key      incKey
	consumer string
	offset   uint64
}

// Outcomes of applying a consumer offset write, as a bit set over every
// replica and every application.
const (
	storedOK         = 1
	storedOutOfRange = 2
	storedFailed     = 4
)

func storeOutcome(err error) uint8 {
	switch {
	case err == nil:
		return storedOK
	case errors.Is(err, partition.ErrOffsetOutOfRange):
		return storedOutOfRange
	}
	return storedFailed
}

// storeRecord is a consumer offset a node stored in a partition.
type storeRecord struct {
	ns       metadata.Namespace
	consumer string
	offset   uint64
	epoch    uint64
	err      error
}

// ConsumerOffset implements partition.Partition.
func (t *ctap) ConsumerOffset(consumer string) (uint64, bool, error) {
	t.serving("get offset")
	return t.Partition.ConsumerOffset(consumer)
}

// onReplicaAppend checks one replica's append against the log (invariants
// 2, 3 and 5): dense on the replica, the same message at each offset on
// every replica, each message in the log once, and into the incarnation
// its frame was stamped with.
func (c *csim) onReplicaAppend(n *node, key incKey, first uint64, msgs []partition.Message) {
	rl := c.oracle[key]
	if rl == nil {
		c.fail(0, "append to %v on n%d, which the simulator never saw built", key, n.id)
		return
	}
	if have := rl.lens[n.id]; first != have {
		c.fail(3, "n%d appended to %v at offset %d, but its copy holds %d messages: offsets not dense", n.id, key, first, have)
		return
	}
	var aid uint64
	for i, m := range msgs {
		off := first + uint64(i)
		id, ok := decodePayload(m.Payload)
		info := c.msgs[id]
		if !ok || info == nil {
			c.fail(3, "n%d appended to %v a message that is not one the clients sent intact (offset %d)", n.id, key, off)
			return
		}
		a := info.a
		aid = a.id
		if off < uint64(len(rl.ids)) {
			if rl.ids[off] != id {
				c.fail(3, "replicas disagree on %v at offset %d: n%d appended message %d, another replica holds %d",
					key, off, n.id, id, rl.ids[off])
				return
			}
			continue
		}
		if !c.tapAppend(info, id, key, off) {
			return
		}
		rl.ids = append(rl.ids, id)
		rl.acked = append(rl.acked, false)
		rl.raw = append(rl.raw, m.AppendTime)
	}
	rl.lens[n.id] = first + uint64(len(msgs))
	c.event("n%d append %v first=%d n=%d a=%d", n.id, key, first, len(msgs), aid)
}

// onReplicaRead checks that a replica's read returns what its copy holds
// at each offset (invariants 2 and 3) and counts reads that miss an
// acknowledged message (a follower's stale copy).
func (c *csim) onReplicaRead(n *node, key incKey, from uint64, msgs []partition.Message, client bool) {
	rl := c.oracle[key]
	if rl == nil {
		c.fail(0, "read of %v on n%d, which the simulator never saw built", key, n.id)
		return
	}
	have := rl.lens[n.id]
	if len(msgs) == 0 && from < have {
		// A partition's read below its end returns a message or an
		// error: nothing at all is a silent loss.
		c.fail(3, "read of %v on n%d from %d returned nothing without an error, below the %d messages its copy holds", key, n.id, from, have)
		return
	}
	for i, m := range msgs {
		want := from + uint64(i)
		if m.Offset != want {
			c.fail(3, "read of %v on n%d from %d returned offset %d at position %d: offsets not dense", key, n.id, from, m.Offset, i)
			return
		}
		id, ok := decodePayload(m.Payload)
		if !ok {
			c.fail(3, "read of %v on n%d returned a corrupt message at offset %d", key, n.id, m.Offset)
			return
		}
		if m.Offset >= have || rl.ids[m.Offset] != id {
			c.fail(2, "read of %v on n%d returned message %d at offset %d, which is not what its copy holds there", key, n.id, id, m.Offset)
			return
		}
		if bad := rl.ats.check(m.Offset, m.AppendTime); bad != "" {
			c.fail(3, "read of %v on n%d: %s", key, n.id, bad)
			return
		}
	}
	if client && have < rl.ackedEnd && !c.quiescing {
		c.ops.StaleReads++
	}
}
