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

// Key identifies one logical write across retries.
type Key struct{ Producer, Seq uint64 }

// DefaultSize is the window of a zero Window.
const DefaultSize = 1 << 16

// Window is a FIFO-bounded map from Key to V. The zero value is an empty
// window of DefaultSize keys.
type Window[V any] struct {
	size  int
	seen  map[Key]V
	order []Key // a ring once full; next is its oldest entry
	next  int
}

// New returns an empty window remembering at most size keys (size > 0).
func New[V any](size int) *Window[V] {
	return &Window[V]{size: max(size, 1)}
}

// Get returns the value remembered for k.
func (w *Window[V]) Get(k Key) (V, bool) {
	v, ok := w.seen[k]
	return v, ok
}

// Put remembers v for k, evicting the oldest key when the window is full.
// Putting a key already present replaces its value and keeps its place.
func (w *Window[V]) Put(k Key, v V) {
	if w.seen == nil {
		w.seen = make(map[Key]V)
	}
	if _, ok := w.seen[k]; ok {
		w.seen[k] = v
		return
	}
	if w.size == 0 {
		w.size = DefaultSize
	}
	if len(w.order) < w.size {
		w.order = append(w.order, k)
	} else {
		delete(w.seen, w.order[w.next])
		w.order[w.next] = k
		w.next = (w.next + 1) % w.size
	}
	w.seen[k] = v
}

// Len returns how many keys are remembered.
func (w *Window[V]) Len() int { return len(w.order) }

// All calls f for every remembered key, oldest first, until f returns
// false.
func (w *Window[V]) All(f func(Key, V) bool) {
	for i := range w.order {
		k := w.order[(w.next+i)%len(w.order)]
		if !f(k, w.seen[k]) {
			return
		}
	}
}

// Reset forgets every key.
func (w *Window[V]) Reset() {
	w.seen, w.order, w.next = nil, nil, 0
}
