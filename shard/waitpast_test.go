package shard

import (
	"context"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
)

// A waiting poll from an offset past the end waits for that offset: it is
// answered with what a plain poll from there would read at the moment it
// is answered (the simulator's linearizability check found the poll
// clamped to the end when it registered, returning a message before the
// offset it asked for).
func TestBehaviour22WaitingPollPastTheEndWaitsForItsOffset(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, manual, func(c *Config) { c.Clock = clk })
	s := h.shards[0]
	ns, epoch := h.topic("t")
	if err := s.InsertOwned(context.Background(), h.build(ns, epoch), noSync); err != nil {
		t.Fatal(err)
	}
	poll := produce(ns, "")
	poll.f.Req.Op, poll.f.Req.Messages = OpPoll, nil
	poll.f.Req.Offset, poll.f.Req.Count, poll.f.Req.MaxWait = 2, 10, 10*time.Second
	if err := s.TrySend(poll.f); err != nil {
		t.Fatal(err)
	}
	for s.Step() {
	}
	for i, payload := range []string{"a", "b", "c"} {
		poll.pending(t)
		c := produce(ns, payload)
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		for s.Step() {
		}
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %s: %+v", payload, r)
		}
	}
	r := poll.answered(t)
	if r.Err != nil || len(r.Messages) != 1 || r.Messages[0].Offset != 2 || r.Offset != 3 {
		t.Fatalf("waiting poll from 2: %+v; want the message at offset 2 only, next 3", r)
	}
}
