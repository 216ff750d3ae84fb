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
// evicts in the same order as the others.
package dedupe

import "math"

// Key identifies one logical write across retries.
type Key struct{ Producer, Seq uint64 }

// DefaultSize is the window of a zero Window.
const DefaultSize = 1 << 16

// inlineKeys is how many keys a window holds without a map: a replica
// whose producers wrote a few times (the common idle partition) keeps its
// keys and values in two short slices, searched in order, instead of a
// map of a few hundred bytes. Past it the window builds its map once.
const inlineKeys = 8

// Window is a FIFO-bounded map from Key to V. The zero value is an empty
// window of DefaultSize keys.
//
// The keys are in order, a ring once full whose oldest entry is next.
// While the window has held at most inlineKeys keys, seen is nil and
// vals[i] is the value of order[i]; from then on seen holds every value
// and vals is nil. The two forms evict and iterate alike: the order is
// the one ring either way.
type Window[V any] struct {
	// int32s, side by side: the window is a field of every replica's
	// state, and this keeps it at 64 bytes.
	size, next int32
	seen       map[Key]V
	vals       []V
	order      []Key
}

// New returns an empty window remembering at most size keys (size > 0).
func New[V any](size int) *Window[V] {
	return &Window[V]{size: int32(min(max(size, 1), math.MaxInt32))}
}

// find returns the place of k in the inline form's order, or -1.
func (w *Window[V]) find(k Key) int {
	for i, o := range w.order {
		if o == k {
			return i
		}
	}
	return -1
}

// Get returns the value remembered for k.
func (w *Window[V]) Get(k Key) (V, bool) {
	if w.seen != nil {
		v, ok := w.seen[k]
		return v, ok
	}
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
	if w.seen == nil {
		if i := w.find(k); i >= 0 {
			w.vals[i] = v
			return
		}
		if len(w.order) == inlineKeys && w.size > inlineKeys {
			w.seen = make(map[Key]V, 2*inlineKeys)
			for i, o := range w.order {
				w.seen[o] = w.vals[i]
			}
			w.vals = nil
		}
	} else if _, ok := w.seen[k]; ok {
		w.seen[k] = v
		return
	}
	if len(w.order) < int(w.size) {
		w.order = append(w.order, k)
		if w.seen == nil {
			w.vals = append(w.vals, v)
		}
	} else {
		if w.seen == nil {
			w.vals[w.next] = v
		} else {
			delete(w.seen, w.order[w.next])
		}
		w.order[w.next] = k
		w.next = (w.next + 1) % w.size
	}
	if w.seen != nil {
		w.seen[k] = v
	}
}

// Len returns how many keys are remembered.
func (w *Window[V]) Len() int { return len(w.order) }

// All calls f for every remembered key, oldest first, until f returns
// false.
func (w *Window[V]) All(f func(Key, V) bool) {
	for i := range w.order {
		j := (int(w.next) + i) % len(w.order)
		k := w.order[j]
		var v V
		if w.seen != nil {
			v = w.seen[k]
		} else {
			v = w.vals[j]
		}
		if !f(k, v) {
			return
		}
	}
}

// Reset forgets every key.
func (w *Window[V]) Reset() {
	w.seen, w.vals, w.order, w.next = nil, nil, nil, 0
}
