package sim

import (
	"time"

	"github.com/parkway-io/parkway/clock"
)

// watchedClock is the virtual clock as one cluster shard sees it: it
// records when each timer the shard arms is due, so the scheduler knows
// exactly when the shard has a raft tick (or an interval fsync) to do —
// the shard's timers are otherwise internal to it.
type watchedClock struct {
	*clock.Manual
	timers []*watchedTimer
}

type watchedTimer struct {
	clock.Timer
	w     *watchedClock
	at    time.Time
	armed bool
}

// NewTimer implements clock.Clock.
func (w *watchedClock) NewTimer(d time.Duration) clock.Timer {
	t := &watchedTimer{Timer: w.Manual.NewTimer(d), w: w, at: w.Now().Add(d), armed: true}
	w.timers = append(w.timers, t)
	return t
}

// Stop implements clock.Timer.
func (t *watchedTimer) Stop() bool {
	t.armed = false
	return t.Timer.Stop()
}

// Reset implements clock.Timer.
func (t *watchedTimer) Reset(d time.Duration) {
	t.Timer.Reset(d)
	t.at, t.armed = t.w.Now().Add(d), true
}

// due reports whether a timer has fired (or is firing now) that the shard
// may not have handled yet.
func (w *watchedClock) due(now time.Time) bool {
	for _, t := range w.timers {
		if t.armed && !now.Before(t.at) {
			return true
		}
	}
	return false
}

// next is the earliest armed timer's due time (zero if none).
func (w *watchedClock) next() time.Time {
	var at time.Time
	for _, t := range w.timers {
		if t.armed && (at.IsZero() || t.at.Before(at)) {
			at = t.at
		}
	}
	return at
}

// handled marks every fired timer as handled: the shard had nothing to
// do, so whatever fired was consumed already.
func (w *watchedClock) handled(now time.Time) {
	for _, t := range w.timers {
		if t.armed && !now.Before(t.at) {
			t.armed = false
		}
	}
}
