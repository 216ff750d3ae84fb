// Package clock is the seam through which time enters parkway. Production
// code uses Real; tests and the simulator use Manual, whose time moves only
// when told to, so nothing depends on the wall clock or on sleeping.
package clock

import (
	"sync"
	"time"

	"github.com/google/btree"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, d after now.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer, as time.Timer.
type Timer interface {
	// C delivers the time once when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was pending.
	Stop() bool
	// Reset re-arms the timer to fire d after now. Since Go 1.23 the
	// channel of a real timer is unbuffered-in-effect, so no drain is needed
	// before Reset; Manual follows the same contract.
	Reset(d time.Duration)
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// Manual is a clock that moves only through Advance. Timers fire in
// deadline order (ties in creation order), so a run is reproducible.
type Manual struct {
	mu     sync.Mutex
	armed  *sync.Cond // broadcast whenever a timer is armed
	now    time.Time
	seq    uint64
	timers *btree.BTreeG[*manualTimer]
}

// NewManual returns a Manual clock reading start.
func NewManual(start time.Time) *Manual {
	m := &Manual{now: start, timers: btree.NewG(8, func(a, b *manualTimer) bool {
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		return a.seq < b.seq
	})}
	m.armed = sync.NewCond(&m.mu)
	return m
}

// WaitPending blocks until at least n timers are armed: a test lets a
// goroutine re-arm its timer before advancing the clock past it, with no
// sleep and no spin.
func (m *Manual) WaitPending(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.timers.Len() < n {
		m.armed.Wait()
	}
}

// Now returns the manual time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// NewTimer returns a timer that fires when Advance passes now+d.
func (m *Manual) NewTimer(d time.Duration) Timer {
	t := &manualTimer{m: m, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Pending reports how many timers are armed: a test can wait for a
// goroutine to arm its timer before advancing the clock.
func (m *Manual) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.timers.Len()
}

// Advance moves the clock forward by d and fires every timer due by then.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	m.now = m.now.Add(d)
	now := m.now
	var due []*manualTimer
	for {
		t, ok := m.timers.Min()
		if !ok || t.at.After(now) {
			break
		}
		m.timers.DeleteMin()
		t.armed = false
		due = append(due, t)
	}
	m.mu.Unlock()
	for _, t := range due {
		select {
		case t.c <- now:
		default: // an unread earlier fire: time.Timer drops it too
		}
	}
}

type manualTimer struct {
	m     *Manual
	c     chan time.Time
	at    time.Time
	seq   uint64
	armed bool
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	was := t.armed
	if was {
		t.m.timers.Delete(t)
		t.armed = false
	}
	return was
}

func (t *manualTimer) Reset(d time.Duration) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.armed {
		t.m.timers.Delete(t)
	}
	// Drain a stale fire so Reset behaves like a Go 1.23+ time.Timer.
	select {
	case <-t.c:
	default:
	}
	t.m.seq++
	t.seq = t.m.seq
	t.at = t.m.now.Add(d)
	t.armed = true
	t.m.timers.ReplaceOrInsert(t)
	t.m.armed.Broadcast()
}
