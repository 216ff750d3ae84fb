package transport

import (
	"sync"
	"sync/atomic"
)

// budget is a count of bytes in flight with a ceiling: reserve refuses
// rather than exceed it, so the bytes held never pass max.
type budget struct {
	max  int64
	used atomic.Int64
	peak atomic.Int64
}

// reserve charges n bytes; false (and nothing charged) if that would pass
// max. Concurrent reservations may refuse spuriously while another one is
// being undone; they never jointly exceed max.
func (b *budget) reserve(n int64) bool {
	v := b.used.Add(n)
	if v > b.max {
		b.used.Add(-n)
		return false
	}
	for p := b.peak.Load(); v > p && !b.peak.CompareAndSwap(p, v); p = b.peak.Load() {
	}
	return true
}

func (b *budget) release(n int64) { b.used.Add(-n) }

// inItem is a received message waiting for the consumer, with the bytes it
// holds on its connection's budget (nil for a self-send, which is not
// network input).
type inItem struct {
	m    Message
	conn *budget
	n    int64
}

// inbox is the bounded FIFO between the connection readers and the pump
// that hands messages to Recv's consumer. Unlike a buffered channel it
// lets the bus know when a message has left (to release its bytes).
type inbox struct {
	mu     sync.Mutex
	ring   []inItem
	head   int
	n      int
	closed bool
	ready  chan struct{} // signalled (capacity 1) on push
}

func newInbox(size int) *inbox {
	return &inbox{ring: make([]inItem, size), ready: make(chan struct{}, 1)}
}

// push appends it; false when the inbox is full or closed.
func (q *inbox) push(it inItem) bool {
	q.mu.Lock()
	if q.closed || q.n == len(q.ring) {
		q.mu.Unlock()
		return false
	}
	q.ring[(q.head+q.n)%len(q.ring)] = it
	q.n++
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// peek returns the oldest item without removing it; false when empty. The
// pump removes it with advance only once the consumer has it, so a message
// being handed over still takes its place in the bound.
func (q *inbox) peek() (inItem, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return inItem{}, false
	}
	return q.ring[q.head], true
}

// advance removes the oldest item (the one peek returned: only the pump
// removes items, and close runs after the pump has stopped).
func (q *inbox) advance() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return
	}
	q.ring[q.head] = inItem{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
}

// close refuses further pushes and returns what was still queued.
func (q *inbox) close() []inItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	var rest []inItem
	for ; q.n > 0; q.n-- {
		rest = append(rest, q.ring[q.head])
		q.ring[q.head] = inItem{}
		q.head = (q.head + 1) % len(q.ring)
	}
	return rest
}
