package clock_test

import (
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
