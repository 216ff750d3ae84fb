package groups_test

import (
	"errors"
	"testing"
	"time"

	"github.com/parkway-io/parkway/internal/groups"
)

// A failed group waits lo, then twice as long after each failed reopen,
// clamped at hi; Reopened starts the next failure's wait at lo again;
// zero bounds are the defaults.
func TestReopen(t *testing.T) {
	now := time.Unix(1000, 0)
	var r groups.Reopen
	if r.Down() != nil || !r.Due(now) {
		t.Fatal("the zero Reopen is down, or not due")
	}
	why := errors.New("log refused a write")
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		if d := r.Fail(now, time.Second, 3*time.Second, why); d != want {
			t.Fatalf("failure %d: wait %v, want %v", i+1, d, want)
		}
		if !errors.Is(r.Down(), why) {
			t.Fatalf("failure %d: Down = %v, want %v", i+1, r.Down(), why)
		}
		if r.Due(now.Add(want - time.Nanosecond)) {
			t.Fatalf("failure %d: due before its wait passed", i+1)
		}
		now = now.Add(want)
		if !r.Due(now) {
			t.Fatalf("failure %d: not due once its wait passed", i+1)
		}
	}
	r.Reopened()
	if r.Down() != nil {
		t.Fatal("down after Reopened")
	}
	if d := r.Fail(now, 0, 0, why); d != groups.DefaultReopenMin {
		t.Fatalf("first failure after a reopen, default bounds: wait %v, want %v", d, groups.DefaultReopenMin)
	}
}
