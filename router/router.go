// Package router finds the shard that owns a namespace and hands it a
// frame without blocking.
//
// The shards table is a cache of namespace → (owner shard, epoch) rows
// written by the shards as they apply reconcile operations. A row is a
// hint, never a readiness proof: it may exist before its partition does.
// A miss falls back to the hash assignment, which is what the committed
// metadata uses too, so a frame for a freshly created topic still reaches
// the shard that will own it: a namespace is never "unroutable" for lack of
// a row.
//
// The router does not know the shard type; it sends through the Sender
// interface, with the frame type as a type parameter.
package router

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/parkway-io/parkway/metadata"
)

// Assign returns the owner shard of ns among shards: murmur3 x86_32 with
// seed 0 over the namespace's 8 little-endian bytes, shifted right by 16,
// modulo shards. It is the reference server's assignment, a pure function
// of (ns, shards), so every node and every shard derives the same owner.
// The shift discards the low bits, which murmur3's finaliser mixes less
// well for inputs that differ only in their low bytes.
func Assign(ns metadata.Namespace, shards int) int {
	if shards <= 0 {
		return 0
	}
	return int((hashNamespace(ns) >> 16) % uint32(shards))
}

// hashNamespace is murmur3 x86_32 (seed 0) of the namespace's 8
// little-endian bytes, unrolled for that fixed length. The murmur3 module's
// Sum32 walks its input with uintptr arithmetic that the race detector's
// checkptr instrumentation rejects, and its hasher allocates; this is the
// same function with neither problem. A test pins it against the module.
func hashNamespace(ns metadata.Namespace) uint32 {
	const (
		c1 = 0xcc9e2d51
		c2 = 0x1b873593
	)
	var h uint32
	for _, k := range [2]uint32{uint32(ns), uint32(ns >> 32)} {
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	h ^= 8 // length
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// Row is one entry of the shards table.
type Row struct {
	Owner int
	// Epoch is the committed created_revision the row was derived from.
	Epoch uint64
}

// Table is the shards table. It is read on every request and on every
// raft message a node receives, and written only when metadata changes.
// It is split into tableStripes maps, each behind its own read-write
// lock, chosen by the namespace: a read takes one stripe's read lock and
// one map lookup. It was a sync.Map, whose lookups walk a hash trie of
// boxed keys and rows: at 30,000 partitions on three nodes in one
// process, 8 % of a creation's CPU went to those lookups (cache misses
// down the trie), and every row cost a boxed key, a boxed row and its
// trie entry (issue 33). The zero value is an empty table.
type Table struct {
	stripes [tableStripes]tableStripe
}

// tableStripes is how many stripes a Table has: enough that the
// writers (the shards' pumps, one row at a time) and the readers rarely
// meet on one lock.
const tableStripes = 64

// tableStripe is one stripe of a Table, padded to its own cache line so
// that readers of neighbouring stripes do not share the line their
// lock's reader count is on.
type tableStripe struct {
	mu   sync.RWMutex
	rows map[metadata.Namespace]Row
	_    [64 - 24 - 8]byte
}

// stripe is ns's stripe: the namespace's bits mixed (Fibonacci hashing),
// its top six bits taken, so that a topic's consecutive partitions spread.
func (t *Table) stripe(ns metadata.Namespace) *tableStripe {
	return &t.stripes[(uint64(ns)*0x9e3779b97f4a7c15)>>58]
}

// Get returns the row of ns.
func (t *Table) Get(ns metadata.Namespace) (Row, bool) {
	st := t.stripe(ns)
	st.mu.RLock()
	row, ok := st.rows[ns]
	st.mu.RUnlock()
	return row, ok
}

// Set writes row for ns unless an identical row is there, and reports
// whether it wrote. Presence alone never suppresses the write: a delete and
// recreate keeps the namespace and changes the epoch, and the stale row
// must be rewritten.
func (t *Table) Set(ns metadata.Namespace, row Row) bool {
	st := t.stripe(ns)
	st.mu.Lock()
	defer st.mu.Unlock()
	if old, ok := st.rows[ns]; ok && old == row {
		return false
	}
	if st.rows == nil {
		st.rows = make(map[metadata.Namespace]Row)
	}
	st.rows[ns] = row
	return true
}

// Delete removes the row of ns if it still carries epoch, so a late
// teardown of a dead incarnation cannot erase its replacement's row.
func (t *Table) Delete(ns metadata.Namespace, epoch uint64) bool {
	st := t.stripe(ns)
	st.mu.Lock()
	defer st.mu.Unlock()
	if old, ok := st.rows[ns]; ok && old.Epoch == epoch {
		delete(st.rows, ns)
		return true
	}
	return false
}

// Len counts the rows (for tests and diagnostics).
func (t *Table) Len() int {
	n := 0
	for i := range t.stripes {
		st := &t.stripes[i]
		st.mu.RLock()
		n += len(st.rows)
		st.mu.RUnlock()
	}
	return n
}

var (
	// ErrFull reports an owner inbox at capacity. The frame was not taken;
	// the sender still owns it and must answer or retry it.
	ErrFull = errors.New("parkway: shard inbox full")
	// ErrDisconnected reports an owner that no longer takes frames (it is
	// closing or closed).
	ErrDisconnected = errors.New("parkway: shard disconnected")
	// ErrUnroutable reports an owner index with no shard behind it, which
	// only a corrupt row can produce.
	ErrUnroutable = errors.New("parkway: unroutable namespace")
)

// Sender is a shard inbox as the router sees it.
type Sender[F any] interface {
	// TrySend hands f to the shard without blocking, or returns ErrFull or
	// ErrDisconnected (then f was not taken).
	TrySend(f F) error
}

// Router routes frames of type F to the owning shard's inbox.
type Router[F any] struct {
	table  *Table
	shards []Sender[F]
}

// New returns a router over table for n shards. Register every shard
// before the first Send; the slice is not guarded afterwards.
func New[F any](table *Table, n int) (*Router[F], error) {
	if n <= 0 {
		return nil, fmt.Errorf("parkway: router needs at least one shard, got %d", n)
	}
	if table == nil {
		return nil, errors.New("parkway: router needs a table")
	}
	return &Router[F]{table: table, shards: make([]Sender[F], n)}, nil
}

// Register installs the inbox of shard i.
func (r *Router[F]) Register(i int, s Sender[F]) { r.shards[i] = s }

// Shards returns the shard count.
func (r *Router[F]) Shards() int { return len(r.shards) }

// Table returns the shards table.
func (r *Router[F]) Table() *Table { return r.table }

// Owner returns the owner of ns: the table row, or on a miss the hash
// assignment.
func (r *Router[F]) Owner(ns metadata.Namespace) int {
	if row, ok := r.table.Get(ns); ok {
		return row.Owner
	}
	return Assign(ns, len(r.shards))
}

// Send hands f to the owner of ns without blocking and returns the owner.
// On ErrFull, ErrDisconnected or ErrUnroutable the frame was not taken and
// the caller must answer it; the caller also counts the drop, since only it
// knows the frame's variant.
func (r *Router[F]) Send(ns metadata.Namespace, f F) (int, error) {
	return r.SendTo(r.Owner(ns), f)
}

// SendTo hands f to shard owner without blocking.
func (r *Router[F]) SendTo(owner int, f F) (int, error) {
	if owner < 0 || owner >= len(r.shards) || r.shards[owner] == nil {
		return owner, ErrUnroutable
	}
	return owner, r.shards[owner].TrySend(f)
}
