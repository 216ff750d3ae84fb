package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
)

// TestDeadlineOnTheEngineClock: the request deadline the engine adds (Engine.deadline)
// runs on the engine's clock, not the wall clock: on a Manual clock it
// ends exactly when the clock passes RequestTimeout, so a simulated or
// tested request times out in virtual time and never by the machine's.
func TestDeadlineOnTheEngineClock(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	clk := clock.NewManual(start)
	e, err := New(Config{Shards: 1, Manual: true, Clock: clk, RequestTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := e.deadline(context.Background())
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(time.Hour)) {
		t.Fatalf("deadline %v, %v; want the engine clock's now + RequestTimeout, %v", d, ok, start.Add(time.Hour))
	}
	clk.Advance(time.Hour - time.Nanosecond)
	if ctx.Err() != nil {
		t.Fatalf("ended before RequestTimeout passed on the engine clock: %v", ctx.Err())
	}
	clk.Advance(time.Nanosecond)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("RequestTimeout passed on the engine clock and the request's context did not end")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want DeadlineExceeded", ctx.Err())
	}
}
