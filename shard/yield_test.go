package shard

import "testing"

// The pump yields once before it waits for work after answering callers
// (yieldBeforeWait), and only when nothing is queued for it: the
// answered caller then runs before the pump parks, and a synchronous
// producer's next produce is found without a second goroutine wake.
func TestPumpYieldsOnceBeforeWaitingAfterAnswers(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	h.insert(s, h.build(ns, epoch))
	if s.yieldBeforeWait() {
		t.Fatal("the pump yields with nothing answered")
	}
	c := produce(ns, "a")
	s.handleFrame(c.f)
	if r := c.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	if !s.yieldBeforeWait() {
		t.Fatal("the pump does not yield after answering a produce with nothing queued")
	}
	if s.yieldBeforeWait() {
		t.Fatal("the pump yields twice for one answer")
	}

	// An answer with a frame queued behind it: the pump goes on to that
	// frame rather than yield, and the answer is not carried over.
	c = produce(ns, "b")
	s.handleFrame(c.f)
	c.answered(t)
	next := produce(ns, "c")
	if err := s.TrySend(next.f); err != nil {
		t.Fatal(err)
	}
	if s.yieldBeforeWait() {
		t.Fatal("the pump yields with a frame in its inbox")
	}
	s.handleFrame(s.taken(<-s.inbox))
	next.answered(t)
	if !s.yieldBeforeWait() {
		t.Fatal("the pump does not yield after answering the queued frame")
	}
}
