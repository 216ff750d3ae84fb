package transport

import (
	"sync"

	"github.com/parkway-io/parkway/internal/inbound"
)

// inbox is the buffered channel behind Recv together with, in the same
// order, the charge of every message sent into it. A channel does not say
// when a message leaves it, but its length does: of the charges recorded,
// all but the last len(ch) belong to messages the consumer has taken, and
// reclaim releases those. Reclaiming lazily (when a reservation fails, a
// full ring needs room, or Stats is read) only ever over-counts, so the
// budgets still bound what is held.
type inbox struct {
	// release gives charges back to the bus's inbound budget (in
	// batches: it takes the budget's lock).
	release func(...inbound.Charge)
	// taken collects the charges a reclaim releases, reused.
	taken []inbound.Charge

	mu     sync.Mutex
	ch     chan Message
	ring   []inbound.Charge // len(ch)+1: one more than the channel can hold
	head   int
	n      int
	closed bool
}

func newInbox(size int, release func(...inbound.Charge)) *inbox {
	return &inbox{release: release, ch: make(chan Message, size), ring: make([]inbound.Charge, size+1)}
}

// push sends m into the channel without blocking and records its charge;
// false (nothing recorded) when the channel is full or the inbox closed.
func (q *inbox) push(m Message, c inbound.Charge) bool {
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
	q.releaseOldest(q.n - len(q.ch))
}

// releaseOldest releases the k oldest charges, under one lock of the
// budget.
func (q *inbox) releaseOldest(k int) {
	q.taken = q.taken[:0]
	for ; k > 0; k-- {
		q.taken = append(q.taken, q.ring[q.head])
		q.ring[q.head] = inbound.Charge{}
		q.head = (q.head + 1) % len(q.ring)
		q.n--
	}
	if len(q.taken) > 0 {
		q.release(q.taken...)
		clear(q.taken)
	}
}

// close refuses further pushes, releases every charge (what is still
// queued stays readable but is no longer the bus's to bound) and closes
// the channel.
func (q *inbox) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.releaseOldest(q.n)
	close(q.ch)
}
