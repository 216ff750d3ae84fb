// Package dedupe is parkway's one deduplication table: a map from a
// request's key — a (producer, sequence) pair — to the result it got,
// bounded by a FIFO window so a stream of distinct keys costs a fixed
// amount of memory. The metadata group and every partition group use it to
// turn a re-proposed command (its proposer lost track of the first copy,
// which may still commit) into a no-op answering the first result.
//
// The table is replicated state: every replica applies the same log, so
// every replica's table holds the same keys in the same order, and a
// snapshot carries the keys oldest first (All) so that a restored table
// evicts in the same order as the others. How a window finds a key (its
// index, seeded per window) is not state: it changes no answer.
package dedupe

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// Key identifies one logical write across retries.
type Key struct{ Producer, Seq uint64 }

// DefaultSize is the window of a zero Window.
const DefaultSize = 1 << 16

// inlineKeys is how many keys a window holds without an index: a replica
// whose producers wrote a few times (the common idle partition) keeps its
// keys and values in two short slices, searched in order, instead of an
// index of a few hundred bytes. Past it the window builds its index once.
const inlineKeys = 8

// Window is a FIFO-bounded map from Key to V. The zero value is an empty
// window of DefaultSize keys.
//
// The keys are in order, a ring once full whose oldest entry is next, and
// vals[i] is the value of order[i]. While the window has held at most
// inlineKeys keys, idx is nil and a lookup searches order; from then on
// idx finds a key's place in the ring. Either way All walks the ring, so
// a snapshot of a full window reads two arrays in order.
type Window[V any] struct {
	// int32s, side by side: the window is a field of every replica's
	// state, and this keeps it at 64 bytes.
	size, next int32
	idx        *index
	vals       []V
	order      []Key
}

// New returns an empty window remembering at most size keys (size > 0).
func New[V any](size int) *Window[V] {
	return &Window[V]{size: int32(min(max(size, 1), math.MaxInt32))}
}

// find returns the place of k in the ring, or -1.
func (w *Window[V]) find(k Key) int {
	if w.idx != nil {
		return w.idx.lookup(k, w.order)
	}
	for i, o := range w.order {
		if o == k {
			return i
		}
	}
	return -1
}

// Get returns the value remembered for k.
func (w *Window[V]) Get(k Key) (V, bool) {
	if i := w.find(k); i >= 0 {
		return w.vals[i], true
	}
	var zero V
	return zero, false
}

// Put remembers v for k, evicting the oldest key when the window is full.
// Putting a key already present replaces its value and keeps its place.
func (w *Window[V]) Put(k Key, v V) {
	if w.size == 0 {
		w.size = DefaultSize
	}
	if i := w.find(k); i >= 0 {
		w.vals[i] = v
		return
	}
	if w.idx == nil && len(w.order) == inlineKeys && w.size > inlineKeys {
		w.idx = newIndex(int(w.size))
		for i, o := range w.order {
			w.idx.insert(o, i)
		}
	}
	pos := len(w.order)
	if pos < int(w.size) {
		w.order = append(w.order, k)
		w.vals = append(w.vals, v)
	} else {
		pos = int(w.next)
		if w.idx != nil {
			w.idx.remove(w.order[pos], pos)
		}
		w.order[pos], w.vals[pos] = k, v
		w.next = (w.next + 1) % w.size
	}
	if w.idx != nil {
		w.idx.insert(k, pos)
	}
}

// Len returns how many keys are remembered.
func (w *Window[V]) Len() int { return len(w.order) }

// All calls f for every remembered key, oldest first, until f returns
// false.
func (w *Window[V]) All(f func(Key, V) bool) {
	n := len(w.order)
	for i := range n {
		j := int(w.next) + i
		if j >= n {
			j -= n
		}
		if !f(w.order[j], w.vals[j]) {
			return
		}
	}
}

// Reset forgets every key.
func (w *Window[V]) Reset() {
	w.idx, w.vals, w.order, w.next = nil, nil, nil, 0
}

// index finds a key's place in a window's ring: an open-addressed table
// with linear probing, at most half full, of the ring positions of the
// keys. A Go map from Key to V cost a replica four lookups of a 16-byte
// key per applied produce in a table of 65,536 (the window's lookup and
// the put's lookup, delete and insert); the index does the same work with
// one small slot array and no rehash once grown.
//
// Keys are hashed by blocks of blockKeys consecutive sequence numbers of a
// producer, and a key's home slot is its block's slot plus its place in
// the block: one producer's consecutive writes (one node writing a
// partition) land in neighbouring slots, so lookups, inserts and the
// evictions of the same keys later touch one cache line per block rather
// than one per key. The block's hash is seeded per index, so keys chosen
// to collide (every byte of a key may come from a client) cannot be
// chosen without the seed; within a block the keys have distinct homes.
type index struct {
	seed [4]uint64
	mask uint64
	// max is the slot count the window's size needs (load at most 1/2);
	// the table starts small and doubles up to it, so a window of a few
	// dozen keys holds a few hundred bytes.
	max   int
	count int
	// slots[i] is 0 (empty) or hash<<32 | (position+1): the key's
	// 32-bit hash (to skip other keys without reading the ring, and to
	// re-home keys on growth and removal without hashing them again) and
	// its place in the ring.
	slots []uint64
}

// blockBits is log2 of the consecutive sequence numbers that share a
// hashed block (blockKeys slots of 8 bytes: one cache line).
const (
	blockBits = 3
	blockKeys = 1 << blockBits
	minSlots  = 4 * inlineKeys
)

func newIndex(size int) *index {
	max := minSlots
	for max/2 < size {
		max *= 2
	}
	x := &index{max: max}
	for i := range x.seed {
		x.seed[i] = rand.Uint64()
	}
	x.resize(minSlots)
	return x
}

// hash returns k's 32-bit hash; its home slot is hash & mask. The block's
// hash plus the key's place in its block, so a block's keys have
// consecutive homes.
func (x *index) hash(k Key) uint64 {
	block := k.Seq >> blockBits
	hi, lo := bits.Mul64(k.Producer^x.seed[0], block^x.seed[1])
	hi, lo = bits.Mul64(hi^lo^x.seed[2], k.Producer^block^x.seed[3])
	return uint64(uint32(hi^lo) + uint32(k.Seq&(blockKeys-1)))
}

// lookup returns k's ring position, or -1.
func (x *index) lookup(k Key, order []Key) int {
	h := x.hash(k)
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s == 0 {
			return -1
		}
		if s>>32 == h {
			if p := int(uint32(s)) - 1; order[p] == k {
				return p
			}
		}
	}
}

// insert records k at ring position pos (k is not in the index).
func (x *index) insert(k Key, pos int) {
	if 2*(x.count+1) > len(x.slots) && len(x.slots) < x.max {
		x.resize(2 * len(x.slots))
	}
	x.place(x.hash(k)<<32 | uint64(pos+1))
	x.count++
}

// place puts slot value s in the first free slot from its home.
func (x *index) place(s uint64) {
	i := s >> 32 & x.mask
	for x.slots[i] != 0 {
		i = (i + 1) & x.mask
	}
	x.slots[i] = s
}

// resize moves the index to n slots (a power of two): each slot holds its
// key's hash, so the ring is not read.
func (x *index) resize(n int) {
	old := x.slots
	x.slots, x.mask = make([]uint64, n), uint64(n-1)
	for _, s := range old {
		if s != 0 {
			x.place(s)
		}
	}
}

// remove forgets k, at ring position pos, moving back the keys after it
// that its slot kept from their homes (linear probing's deletion: no
// tombstones, so a window that evicts forever never slows down).
func (x *index) remove(k Key, pos int) {
	want := x.hash(k)<<32 | uint64(pos+1)
	i := want >> 32 & x.mask
	for x.slots[i] != want {
		i = (i + 1) & x.mask
	}
	for j := i; ; {
		j = (j + 1) & x.mask
		s := x.slots[j]
		if s == 0 {
			break
		}
		// The key at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if h := s >> 32 & x.mask; (j-h)&x.mask >= (j-i)&x.mask {
			x.slots[i] = s
			i = j
		}
	}
	x.slots[i] = 0
	x.count--
}
