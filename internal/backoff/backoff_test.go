package backoff

import (
	"math"
	"testing"
	"time"
)

func TestNextDoublesAndClamps(t *testing.T) {
	b := New(100*time.Microsecond, time.Millisecond)
	want := []time.Duration{100 * time.Microsecond, 200 * time.Microsecond, 400 * time.Microsecond,
		800 * time.Microsecond, time.Millisecond, time.Millisecond}
	for i, w := range want {
		if got := b.Next(); got != w {
			t.Fatalf("Next #%d = %v, want %v", i, got, w)
		}
	}
	b.Reset()
	if got := b.Next(); got != 100*time.Microsecond {
		t.Fatalf("after Reset Next = %v, want the minimum", got)
	}
}

func TestMaxBelowMinIsMin(t *testing.T) {
	b := New(time.Second, time.Millisecond)
	for i := range 3 {
		if got := b.Next(); got != time.Second {
			t.Fatalf("Next #%d = %v, want 1s", i, got)
		}
	}
}

func TestZeroValueNeverWaits(t *testing.T) {
	var b Backoff
	for range 3 {
		if got := b.Next(); got != 0 {
			t.Fatalf("zero Backoff Next = %v", got)
		}
	}
}

func TestNoOverflow(t *testing.T) {
	b := New(time.Duration(math.MaxInt64/3), time.Duration(math.MaxInt64))
	prev := time.Duration(0)
	for i := range 5 {
		d := b.Next()
		if d < prev || d <= 0 {
			t.Fatalf("Next #%d = %v after %v: overflowed", i, d, prev)
		}
		prev = d
	}
	if prev != time.Duration(math.MaxInt64) {
		t.Fatalf("clamped at %v, want the maximum", prev)
	}
}

// TestFailDue drives the tick-owned form on a manual clock: an attempt is
// due at once, then only after each failure's doubled delay has passed.
func TestFailDue(t *testing.T) {
	now := time.Unix(1000, 0)
	b := New(time.Second, 4*time.Second)
	if !b.Due(now) || b.Failing() {
		t.Fatal("a fresh backoff must be due and not failing")
	}
	for i, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if got := b.Fail(now); got != d {
			t.Fatalf("Fail #%d = %v, want %v", i, got, d)
		}
		if !b.Failing() || b.Delay() != d {
			t.Fatalf("after Fail #%d: failing %v, delay %v", i, b.Failing(), b.Delay())
		}
		if b.Due(now.Add(d - time.Nanosecond)) {
			t.Fatalf("due %v before the delay %v passed", d-time.Nanosecond, d)
		}
		now = now.Add(d)
		if !b.Due(now) {
			t.Fatalf("not due once the delay %v passed", d)
		}
	}
	b.Reset()
	if !b.Due(time.Time{}) || b.Failing() {
		t.Fatal("Reset must leave the backoff due and not failing")
	}
}

// A wall clock set back while a failure waits starts the wait again from
// the new time, the same delay long: it does not last as long again as
// the clock went back. A clock that moved forward is simply past due.
func TestDueAfterTheClockWasSetBack(t *testing.T) {
	now := time.Unix(1000, 0)
	b := New(time.Second, 4*time.Second)
	b.Fail(now)
	back := now.Add(-time.Hour)
	if b.Due(back) {
		t.Fatal("due at once after the clock was set back")
	}
	if b.Due(back.Add(time.Second - time.Nanosecond)) {
		t.Fatal("due before the delay passed on the clock set back")
	}
	if !b.Due(back.Add(time.Second)) {
		t.Fatal("not due a delay after the clock was set back: the wait lasts as long as the clock went back")
	}
	b.Fail(back.Add(time.Second))
	if !b.Due(back.Add(time.Hour)) {
		t.Fatal("not due after the clock jumped forward")
	}
}
