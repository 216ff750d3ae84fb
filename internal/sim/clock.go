package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/parkway-io/parkway/clock"
)

// nodeClock is one node's clock: what the engine's clock seam reads on
// that node (host.Config.Clock, and the shards' watchedClock views over
// it). Like a machine's clock it has two parts. Timers run on a
// monotonic clock (mono), which the simulator advances with the virtual
// clock at the node's rate: one but during a drift spell, when the node's
// time runs fast or slow, its raft ticks, liveness rounds, timeouts and
// Now alike. Now adds a wall offset to it, which jumps forward and back
// when the node's clock is set (timers armed before keep their due time,
// as a Go timer does across a wall clock step) and strobes — flips
// between two values every few milliseconds — during a strobe spell. A
// node's clock outlives its engine: a restarted node reads the same one.
type nodeClock struct {
	mono *clock.Manual
	// offset is the wall clock's lead over mono.
	offset time.Duration
	// rate is mono's speed in thousandths of the virtual clock's; carry
	// the rounding left over from the advances (in ns × 1/1000).
	rate  int64
	carry int64
	// A strobe adds delta to Now in every other period of mono time
	// counted from start, until the virtual time strobeEnd.
	strobe        bool
	delta, period time.Duration
	start         time.Time
	// strobeEnd and driftEnd are when the spells end, in virtual time.
	strobeEnd, driftEnd time.Time
}

func newNodeClock(offset time.Duration) *nodeClock {
	return &nodeClock{mono: clock.NewManual(epoch0), offset: offset, rate: 1000}
}

// Now implements clock.Clock: the node's wall time.
func (k *nodeClock) Now() time.Time {
	m := k.mono.Now()
	t := m.Add(k.offset)
	if k.strobe && (m.Sub(k.start)/k.period)%2 == 1 {
		t = t.Add(k.delta)
	}
	return t
}

// NewTimer implements clock.Clock: a timer on the monotonic clock.
func (k *nodeClock) NewTimer(d time.Duration) clock.Timer { return k.mono.NewTimer(d) }

// monoNow is the node's monotonic time, on which its timers (and the
// scheduler's view of its ticks and passes) run.
func (k *nodeClock) monoNow() time.Time { return k.mono.Now() }

// advance moves the node's clock by the virtual time d, at its rate.
func (k *nodeClock) advance(d time.Duration) {
	k.carry += int64(d) * k.rate
	step := k.carry / 1000
	k.carry -= step * 1000
	k.mono.Advance(time.Duration(step))
}

// virtualUntil is how much virtual time must pass for the node's
// monotonic clock to reach at (zero if it has).
func (k *nodeClock) virtualUntil(at time.Time) time.Duration {
	m := at.Sub(k.mono.Now())
	if m <= 0 {
		return 0
	}
	return time.Duration((int64(m)*1000 + k.rate - 1) / k.rate)
}

// settle ends a drift and a strobe: the clock runs at the virtual
// clock's rate again, its wall offset where it stands.
func (k *nodeClock) settle() {
	k.rate, k.strobe = 1000, false
}

func (k *nodeClock) String() string {
	s := fmt.Sprintf("offset %v rate %d‰", k.offset, k.rate)
	if k.strobe {
		s += fmt.Sprintf(" strobe %v every %v", k.delta, k.period)
	}
	return s
}

// watchedClock is a node's clock as one of its cluster shards sees it:
// it records when each timer the shard arms is due on the node's
// monotonic clock, so the scheduler knows exactly when the shard has a
// raft tick (or an interval fsync) to do — the shard's timers are
// otherwise internal to it.
type watchedClock struct {
	*nodeClock
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
	t := &watchedTimer{Timer: w.nodeClock.NewTimer(d), w: w, at: w.monoNow().Add(d), armed: true}
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
	t.at, t.armed = t.w.monoNow().Add(d), true
}

// due reports whether a timer has fired (or is firing now) that the shard
// may not have handled yet.
func (w *watchedClock) due() bool {
	now := w.monoNow()
	for _, t := range w.timers {
		if t.armed && !now.Before(t.at) {
			return true
		}
	}
	return false
}

// next is the earliest armed timer's due time on the node's monotonic
// clock (zero if none).
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
func (w *watchedClock) handled() {
	now := w.monoNow()
	for _, t := range w.timers {
		if t.armed && !now.Before(t.at) {
			t.armed = false
		}
	}
}

// Clock faults (both modes): each roll picks a node's clock.

// initialSkew is where a node's wall clock starts relative to the
// virtual clock: within ±1 s when clock faults are on, exact otherwise.
func (b *sim) initialSkew() time.Duration {
	f := b.cfg.Faults.Clock
	if f == (ClockFaultRates{}) {
		return 0
	}
	return time.Duration(b.rng.Int64N(int64(2*time.Second)+1)) - time.Second
}

// clockJump is a jump's size: 1 ms – 10 s, about as often in each
// decade, forward or back.
func (b *sim) clockJump() time.Duration {
	d := time.Duration(float64(time.Millisecond) * math.Pow(10, 4*b.rng.Float64()))
	if b.rng.IntN(2) == 0 {
		return -d
	}
	return d
}

// startClockFaults rolls each clock fault once; pick names a node's
// clock at random (nil: none to pick).
func (b *sim) startClockFaults(fc *FaultCounts, pick func() (*nodeClock, string)) {
	f := b.cfg.Faults.Clock
	now := b.clk.Now()
	if b.roll(f.Jump) {
		if k, name := pick(); k != nil {
			j := b.clockJump()
			k.offset += j
			fc.ClockJumps++
			b.event("%s clock jumps %v: %v", name, j, k)
		}
	}
	if b.roll(f.Strobe) {
		if k, name := pick(); k != nil && !k.strobe {
			k.strobe, k.delta, k.start = true, b.clockJump()/5, k.monoNow()
			k.period = time.Duration(1+b.rng.IntN(20)) * time.Millisecond
			k.strobeEnd = now.Add(time.Duration(100+b.rng.IntN(1901)) * time.Millisecond)
			fc.ClockStrobes++
			b.event("%s clock strobes until %v: %v", name, k.strobeEnd.Sub(epoch0), k)
		}
	}
	if b.roll(f.Drift) {
		if k, name := pick(); k != nil && k.rate == 1000 {
			// Half the time slow (0.5–1×), half fast (1–2×).
			if b.rng.IntN(2) == 0 {
				k.rate = 500 + b.rng.Int64N(500)
			} else {
				k.rate = 1001 + b.rng.Int64N(1000)
			}
			k.driftEnd = now.Add(time.Duration(100+b.rng.IntN(2901)) * time.Millisecond)
			fc.ClockDrifts++
			b.event("%s clock drifts until %v: %v", name, k.driftEnd.Sub(epoch0), k)
		}
	}
}

// expireClockFaults ends k's strobe and drift when their time is up.
func (b *sim) expireClockFaults(k *nodeClock, name string) {
	now := b.clk.Now()
	if k.strobe && !now.Before(k.strobeEnd) {
		k.strobe = false
		b.event("%s clock strobe ends: %v", name, k)
	}
	if k.rate != 1000 && !now.Before(k.driftEnd) {
		k.rate = 1000
		b.event("%s clock drift ends: %v", name, k)
	}
}
