// Package backoff is the one backoff of parkway: a delay that starts at a
// minimum and doubles after every failure, clamped at a maximum, with no
// jitter (a run is reproducible from its seed) and no clock of its own.
//
// Every retry loop uses it: the reconciler's build backoff, the reopen of
// a failed metadata member, the client's in-place retries and the engine's
// metadata apply-and-retry, membership resend, lease renewal and read
// barrier, the consumer's polls and the transport's dials. A loop that
// sleeps asks Next for the pause before its next attempt; an owner driven
// by ticks records a failure with Fail and asks Due on each tick.
package backoff

import "time"

// Backoff is a doubling delay in [Min, Max]. Its zero delay state is "no
// failure yet": the first Next is Min. A Max below Min is read as Min. The
// zero value never waits. It is not safe for concurrent use; its owner
// drives it, as it drives the attempts it paces.
type Backoff struct {
	Min, Max time.Duration

	delay time.Duration // the last delay handed out; 0 before the first
	due   time.Time     // when the next attempt may start (see Fail)
}

// New is a backoff between lo and hi.
func New(lo, hi time.Duration) Backoff { return Backoff{Min: lo, Max: hi} }

// Next returns the pause before the next attempt and doubles the one
// after it: Min, 2·Min, 4·Min, … clamped at Max.
func (b *Backoff) Next() time.Duration {
	hi := max(b.Max, b.Min)
	switch {
	case b.delay <= 0:
		b.delay = b.Min
	case b.delay > hi/2:
		b.delay = hi // doubling would pass the clamp, or overflow
	default:
		b.delay *= 2
	}
	b.delay = min(b.delay, hi)
	return b.delay
}

// Fail records a failed attempt at now: the next one is due Next() later.
// It returns that delay.
func (b *Backoff) Fail(now time.Time) time.Duration {
	d := b.Next()
	b.due = now.Add(d)
	return d
}

// Due reports whether the next attempt may start at now: always before
// the first failure and after Reset. A now earlier than the failure Fail
// recorded is a wall clock set back meanwhile (a time from a clock with a
// monotonic reading, as Go's time.Now, never is): the wait starts again
// from now, the same delay long, rather than lasting as long again as
// the clock went back.
func (b *Backoff) Due(now time.Time) bool {
	if b.delay > 0 && now.Before(b.due.Add(-b.delay)) {
		b.due = now.Add(b.delay)
	}
	return !now.Before(b.due)
}

// Failing reports whether a failure was recorded since the last Reset
// (or Next handed out a pause).
func (b *Backoff) Failing() bool { return b.delay > 0 }

// Delay is the last delay handed out (0 before the first).
func (b *Backoff) Delay() time.Duration { return b.delay }

// Reset forgets the failures after a success: the next pause is Min again.
func (b *Backoff) Reset() { b.delay, b.due = 0, time.Time{} }
