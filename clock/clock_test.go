package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
)

func fired(t clock.Timer) bool {
	select {
	case <-t.C():
		return true
	default:
		return false
	}
}

func TestManualFiresInDeadlineOrderOnlyWhenAdvanced(t *testing.T) {
	start := time.Unix(100, 0)
	m := clock.NewManual(start)
	a := m.NewTimer(2 * time.Second)
	b := m.NewTimer(time.Second)
	if m.Pending() != 2 || fired(a) || fired(b) {
		t.Fatal("timers fired without time passing")
	}
	m.Advance(time.Second)
	if !fired(b) || fired(a) {
		t.Fatal("only the 1 s timer should have fired")
	}
	if !a.Stop() || a.Stop() {
		t.Fatal("Stop should report pending once")
	}
	m.Advance(time.Hour)
	if fired(a) {
		t.Fatal("stopped timer fired")
	}
	a.Reset(time.Second)
	m.Advance(time.Second)
	if !fired(a) {
		t.Fatal("reset timer did not fire")
	}
	if got := m.Now(); !got.Equal(start.Add(time.Hour + 2*time.Second)) {
		t.Fatalf("Now = %v", got)
	}
	m.WaitPending(0)
}

func TestRealClock(t *testing.T) {
	var c clock.Clock = clock.Real{}
	tm := c.NewTimer(time.Hour)
	if !tm.Stop() {
		t.Fatal("real timer not pending")
	}
	if c.Now().IsZero() {
		t.Fatal("zero time")
	}
}

// TestWithTimeout: a context from WithTimeout on a Manual clock ends only
// when the clock moves past its deadline, with DeadlineExceeded; cancel
// ends it with Canceled; a parent's end reaches it.
func TestWithTimeout(t *testing.T) {
	start := time.Unix(1000, 0)
	m := clock.NewManual(start)
	ctx, cancel := clock.WithTimeout(context.Background(), m, time.Second)
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(time.Second)) {
		t.Fatalf("Deadline = %v, %v; want %v", d, ok, start.Add(time.Second))
	}
	m.WaitPending(1)
	m.Advance(999 * time.Millisecond)
	select {
	case <-ctx.Done():
		t.Fatal("ended before the clock reached the deadline")
	default:
	}
	m.Advance(time.Millisecond)
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want DeadlineExceeded", ctx.Err())
	}

	ctx2, cancel2 := clock.WithTimeout(context.Background(), m, time.Second)
	cancel2()
	<-ctx2.Done()
	if !errors.Is(ctx2.Err(), context.Canceled) {
		t.Fatalf("Err after cancel = %v, want Canceled", ctx2.Err())
	}

	parent, pcancel := context.WithCancel(context.Background())
	ctx3, cancel3 := clock.WithTimeout(parent, m, time.Hour)
	defer cancel3()
	pcancel()
	<-ctx3.Done()
	if !errors.Is(ctx3.Err(), context.Canceled) {
		t.Fatalf("Err after the parent's cancel = %v, want Canceled", ctx3.Err())
	}
}

// A parent whose deadline comes no later than WithTimeout's keeps it, and
// no timer is made for a deadline that cannot end the context first.
func TestWithTimeoutKeepsAnEarlierParentDeadline(t *testing.T) {
	start := time.Unix(1000, 0)
	m := clock.NewManual(start)
	parent, pcancel := clock.WithTimeout(context.Background(), m, time.Second)
	defer pcancel()
	m.WaitPending(1)
	ctx, cancel := clock.WithTimeout(parent, m, time.Hour)
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(time.Second)) {
		t.Fatalf("Deadline = %v, %v; want the parent's, %v", d, ok, start.Add(time.Second))
	}
	if n := m.Pending(); n != 1 {
		t.Fatalf("%d timers pending, want the parent's alone", n)
	}
	m.Advance(time.Second)
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want the parent's DeadlineExceeded", ctx.Err())
	}
}

// Sleep returns once the clock moved d, or with ctx's error when ctx ends
// first.
func TestSleep(t *testing.T) {
	m := clock.NewManual(time.Unix(1000, 0))
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(context.Background(), m, time.Second) }()
	m.WaitPending(1)
	m.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := clock.Sleep(ctx, m, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with an ended ctx = %v, want Canceled", err)
	}
}
