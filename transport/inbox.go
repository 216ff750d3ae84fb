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

// charge is what one received message holds: n bytes on its connection's
// budget, its authenticated peer's (peer nil without TLS) and the bus's
// total (conn nil for a self-send, which is not network input and holds
// nothing).
type charge struct {
	conn, peer *budget
	n          int64
}

// release returns c's bytes to its budgets, total the bus's.
func (c charge) release(total *budget) {
	if c.conn == nil {
		return
	}
	c.conn.release(c.n)
	if c.peer != nil {
		c.peer.release(c.n)
	}
	total.release(c.n)
}

// inbox is the buffered channel behind Recv together with, in the same
// order, the charge of every message sent into it. A channel does not say
// when a message leaves it, but its length does: of the charges recorded,
// all but the last len(ch) belong to messages the consumer has taken, and
// reclaim releases those. Reclaiming lazily (when a reservation fails, a
// full ring needs room, or Stats is read) only ever over-counts, so the
// budgets still bound what is held.
type inbox struct {
	total *budget

	mu     sync.Mutex
	ch     chan Message
	ring   []charge // len(ch)+1: one more than the channel can hold
	head   int
	n      int
	closed bool
}

func newInbox(size int, total *budget) *inbox {
	return &inbox{total: total, ch: make(chan Message, size), ring: make([]charge, size+1)}
}

// push sends m into the channel without blocking and records its charge;
// false (nothing recorded) when the channel is full or the inbox closed.
func (q *inbox) push(m Message, c charge) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	if q.n == len(q.ring) {
		// Leaves at most len(ch) ≤ cap(ch) charges: room for one more.
		q.reclaimLocked()
	}
	select {
	case q.ch <- m:
	default:
		return false
	}
	q.ring[(q.head+q.n)%len(q.ring)] = c
	q.n++
	return true
}

// reclaim releases the charges of the messages the consumer has taken.
func (q *inbox) reclaim() {
	q.mu.Lock()
	q.reclaimLocked()
	q.mu.Unlock()
}

func (q *inbox) reclaimLocked() {
	// Only push (under mu) adds to ch, so len(ch) can only shrink
	// meanwhile: at least this many of the oldest charges are gone.
	for taken := q.n - len(q.ch); taken > 0; taken-- {
		q.releaseHead()
	}
}

func (q *inbox) releaseHead() {
	c := q.ring[q.head]
	q.ring[q.head] = charge{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	c.release(q.total)
}

// close refuses further pushes, releases every charge (what is still
// queued stays readable but is no longer the bus's to bound) and closes
// the channel.
func (q *inbox) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for q.n > 0 {
		q.releaseHead()
	}
	close(q.ch)
}
