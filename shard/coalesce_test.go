package shard

import (
	"errors"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// appendCounter counts Append calls and refuses batches holding a message
// whose payload is "bad" (bad input a partition rejects whole).
type appendCounter struct {
	partition.Partition
	calls int
}

var errBad = errors.New("bad message")

func (c *appendCounter) Append(msgs []partition.Message) (uint64, error) {
	c.calls++
	for _, m := range msgs {
		if string(m.Payload) == "bad" {
			return 0, errBad
		}
	}
	return c.Partition.Append(msgs)
}

// Produces queued together in the inbox are appended with one Append and
// each answered with its own first offset, in arrival order; a poll queued
// behind them sees them all.
func TestQueuedProducesShareOneAppend(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &appendCounter{Partition: h.build(ns, epoch)}
	h.insert(s, p)
	var calls []call
	for _, m := range []string{"a", "b", "c", "d"} {
		c := produce(ns, m)
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	poll := make(chan Response, 1)
	if err := s.TrySend(Frame{Req: &Request{Op: OpPoll, NS: ns, Count: 10}, Reply: poll}); err != nil {
		t.Fatal(err)
	}
	for len(s.inbox) > 0 {
		s.handleFrame(s.taken(<-s.inbox))
	}
	if p.calls != 1 {
		t.Fatalf("4 queued produces took %d appends, want 1", p.calls)
	}
	for i, c := range calls {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %d: %+v", i, r)
		}
	}
	r := <-poll
	if r.Err != nil || len(r.Messages) != 4 || string(r.Messages[3].Payload) != "d" {
		t.Fatalf("poll behind the produces: %+v", r)
	}
}

// A produce the partition rejects costs its neighbours nothing: the
// coalesced batch fails, each produce is appended alone, and only the bad
// one gets the error.
func TestCoalescedBadInputIsAnsweredAlone(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &appendCounter{Partition: h.build(ns, epoch)}
	h.insert(s, p)
	var calls []call
	for _, m := range []string{"a", "bad", "c"} {
		c := produce(ns, m)
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	for len(s.inbox) > 0 {
		s.handleFrame(s.taken(<-s.inbox))
	}
	if r := calls[0].answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("first produce: %+v", r)
	}
	if r := calls[1].answered(t); !errors.Is(r.Err, errBad) {
		t.Fatalf("bad produce: %+v", r)
	}
	if r := calls[2].answered(t); r.Err != nil || r.Offset != 1 {
		t.Fatalf("third produce: %+v", r)
	}
}

// TestBehaviour17EmptyProduceAmongQueuedOnesIsRefused: a produce with no
// messages queued between others would vanish inside their coalesced
// batch (it adds nothing to it) and be acknowledged with an offset it
// never got; it is answered ErrEmptyBatch instead, and its neighbours are
// appended in arrival order.
func TestBehaviour17EmptyProduceAmongQueuedOnesIsRefused(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &appendCounter{Partition: h.build(ns, epoch)}
	h.insert(s, p)
	calls := []call{produce(ns, "a"), request(ns, &Request{Op: OpProduce}), produce(ns, "c")}
	for _, c := range calls {
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
	}
	for len(s.inbox) > 0 {
		s.handleFrame(s.taken(<-s.inbox))
	}
	if r := calls[0].answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("first produce: %+v", r)
	}
	if r := calls[1].answered(t); !errors.Is(r.Err, partition.ErrEmptyBatch) {
		t.Fatalf("empty produce: %+v, want ErrEmptyBatch", r)
	}
	if r := calls[2].answered(t); r.Err != nil || r.Offset != 1 {
		t.Fatalf("third produce: %+v", r)
	}
	if got := payloads(t, p); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("partition holds %q, want [a c]", got)
	}
}

// Behaviour 10 holds for queued produces too: a produce admitted while its
// incarnation was live but appended after its deletion committed (later in
// the same drain of the inbox) is denied, never acknowledged into the dead
// incarnation.
func TestQueuedProduceDeniedAfterDeleteCommits(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &appendCounter{Partition: h.build(ns, epoch)}
	h.insert(s, p)
	first, second := produce(ns, "a"), produce(ns, "b")
	for _, c := range []call{first, second} {
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
	}
	s.handle(s.taken(<-s.inbox)) // admitted and queued: another frame waits
	first.pending(t)
	h.apply(metadata.DeleteTopic{Stream: ns.Stream(), Topic: ns.Topic()})
	s.handleFrame(s.taken(<-s.inbox))
	mustErr(t, first.answered(t), ErrRetry)
	mustErr(t, second.answered(t), ErrRetry)
	if p.calls != 0 {
		t.Fatalf("%d appends into a deleted incarnation", p.calls)
	}
}
