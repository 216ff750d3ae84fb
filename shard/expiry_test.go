package shard

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metrics"
)

// Behaviour 8 without reconcile passes: the shard answers a parked frame
// on its own clock at the earlier of its request's deadline and MaxAge,
// counted as park_expired, and keeps no timer armed once nothing is
// parked. No Sweep runs here at all (a pass stuck in a build runs none).
func TestBehaviour08ParkedFramesExpireByDeadlineAndAge(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, manual, func(c *Config) {
		c.Clock = clk
		c.Park.MaxAge = 3 * time.Second
	})
	s := h.shards[0]
	ns, _ := h.topic("t")
	early, late := produce(ns, "early"), produce(ns, "late")
	early.f.Req.Deadline = clk.Now().Add(time.Second)
	for _, c := range []call{late, early} { // late first: expiry is not arrival order
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		s.Step()
	}
	if s.Parked() != 2 {
		t.Fatalf("parked = %d, want 2", s.Parked())
	}
	clk.Advance(999 * time.Millisecond)
	for s.Step() {
	}
	early.pending(t)
	clk.Advance(time.Millisecond)
	for s.Step() {
	}
	if r := early.answered(t); r.Err == nil {
		t.Fatal("the frame past its deadline was served")
	}
	late.pending(t)
	clk.Advance(2 * time.Second)
	for s.Step() {
	}
	if r := late.answered(t); r.Err == nil {
		t.Fatal("the frame past MaxAge was served")
	}
	if got := h.drops("0", "produce", metrics.ReasonParkExpired); got != 2 {
		t.Fatalf("park_expired = %v, want 2", got)
	}
	if s.Parked() != 0 || clk.Pending() != 0 {
		t.Fatalf("after expiry: %d parked, %d timers armed; want none", s.Parked(), clk.Pending())
	}
}
