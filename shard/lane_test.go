package shard

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway/router"
)

// Synchronous produces queued in the waited lane while the pump is busy
// cost it one wake, and it handles them as one run: one append for all
// of them on a partition that is not replicated (the first, which found
// nothing queued and took the inbox, included), each answered with its
// own offset in the order they were queued.
func TestLaneRunOneWakeOneAppend(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &appendCounter{Partition: h.build(ns, epoch)}
	h.insert(s, p)
	var calls []call
	for _, m := range []string{"a", "b", "c", "d", "e"} {
		c := produce(ns, m)
		if err := s.SendWaited(c.f); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	// The first found the lane and the inbox empty and took the inbox;
	// the other four share one wake.
	if len(s.inbox) != 1 || len(s.lane.frames) != 4 || len(s.lane.wake) != 1 {
		t.Fatalf("5 frames: %d in the inbox, %d in the lane, %d wake tokens; want 1, 4 and 1",
			len(s.inbox), len(s.lane.frames), len(s.lane.wake))
	}
	<-s.lane.wake // what the pump's select takes
	s.handleLane()
	if p.calls != 1 || s.laneRuns != 1 {
		t.Fatalf("5 frames took %d appends in %d runs, want 1 and 1", p.calls, s.laneRuns)
	}
	for i, c := range calls {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %d: %+v", i, r)
		}
	}
	if got := payloads(t, p); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("log %q", got)
	}
}

// A caller's frames keep their order across the inbox and the lane: a
// produce it queued in the inbox (an async one) is appended before the
// synchronous one it queued in the lane after it, even when the pump
// takes the lane first.
func TestLaneAfterInboxKeepsCallerOrder(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := h.build(ns, epoch)
	h.insert(s, p)
	async, sync := produce(ns, "first"), produce(ns, "second")
	if err := s.TrySend(async.f); err != nil {
		t.Fatal(err)
	}
	if err := s.SendWaited(sync.f); err != nil {
		t.Fatal(err)
	}
	s.handleLane() // the pump's select picked the lane's wake
	if r := async.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("inbox produce: %+v, want offset 0", r)
	}
	if r := sync.answered(t); r.Err != nil || r.Offset != 1 {
		t.Fatalf("lane produce: %+v, want offset 1", r)
	}
	if got := payloads(t, p); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("log %q", got)
	}
}

// Group commit for raft across a lane run: synchronous produces queued
// while the leader's pump is busy are proposed as one raft entry, sent
// in one append per follower, even with no entry in flight when the run
// starts (handled one by one, the first would be proposed alone).
func TestLaneRunIsOneRaftEntry(t *testing.T) {
	n, ns, lead, parts, appends := groupCommitNet(t)
	s := n.shard(lead)
	o := s.owned[ns]
	applied := o.rep.grp.Applied()
	var calls []call
	var want []string
	for i := range 8 {
		c := produce(ns, string(rune('a'+i)))
		if err := s.SendWaited(c.f); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
		want = append(want, string(rune('a'+i)))
	}
	<-s.lane.wake
	s.handleLane()
	n.settle()
	for i, c := range calls {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %d: %+v", i, r)
		}
	}
	if got := o.rep.grp.Applied() - applied; got != 1 {
		t.Errorf("8 produces in one lane run took %d raft entries, want 1", got)
	}
	if *appends != 2 { // one entry, one append to each of two followers
		t.Errorf("the leader sent %d appends carrying entries, want 2", *appends)
	}
	n.tick(2)
	for id, p := range parts {
		if got := payloads(t, p); !slices.Equal(got, want) {
			t.Fatalf("node %d log %q, want %q", id, got, want)
		}
	}
}

// Close answers the frames still in the lane and refuses new ones: no
// caller waits on a shard that is gone.
func TestLaneClosedAnswersAndRefuses(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	h.insert(s, h.build(ns, epoch))
	c := produce(ns, "x")
	if err := s.SendWaited(c.f); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustErr(t, c.answered(t), ErrClosed)
	if err := s.SendWaited(produce(ns, "y").f); !errors.Is(err, router.ErrDisconnected) {
		t.Fatalf("SendWaited after Close: %v, want ErrDisconnected", err)
	}
}

// A full lane is backpressure, as a full inbox is: SendWaited refuses
// with ErrFull, SendWaitedBefore waits for room, gets in once the pump
// takes the lane's frames, and gives up with ErrFull when its expiry
// delivers first, or ErrDisconnected when the shard closes.
func TestLaneFullWaitsForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, 1, nil, func(c *Config) { c.InboxSize = 1 })
		s := h.shards[0]
		ns, epoch := h.topic("t")
		h.insert(s, h.build(ns, epoch))
		a, b, c := produce(ns, "a"), produce(ns, "b"), produce(ns, "c")
		if err := s.SendWaited(a.f); err != nil { // into the empty inbox
			t.Fatal(err)
		}
		var fill []call // the lane's WaitedLaneFactor × 1 frames
		for range WaitedLaneFactor {
			f := produce(ns, "f")
			if err := s.SendWaited(f.f); err != nil {
				t.Fatal(err)
			}
			fill = append(fill, f)
		}
		if err := s.SendWaited(b.f); !errors.Is(err, router.ErrFull) {
			t.Fatalf("SendWaited to a full lane: %v, want ErrFull", err)
		}
		expired := make(chan time.Time, 1)
		expired <- time.Time{}
		if err := s.SendWaitedBefore(context.Background(), b.f, expired); !errors.Is(err, router.ErrFull) {
			t.Fatalf("SendWaitedBefore expired: %v, want ErrFull", err)
		}
		queued := make(chan error, 1)
		go func() { queued <- s.SendWaitedBefore(context.Background(), b.f, nil) }()
		synctest.Wait() // the waiter waits for room
		select {
		case err := <-queued:
			t.Fatalf("SendWaitedBefore returned %v on a full lane", err)
		default:
		}
		<-s.lane.wake
		s.handleLane()
		if err := <-queued; err != nil {
			t.Fatalf("SendWaitedBefore after the pump took the lane: %v", err)
		}
		if r := a.answered(t); r.Err != nil || r.Offset != 0 {
			t.Fatalf("a: %+v", r)
		}
		for _, f := range fill {
			if r := f.answered(t); r.Err != nil {
				t.Fatalf("fill: %+v", r)
			}
		}
		<-s.lane.wake
		s.handleLane()
		if r := b.answered(t); r.Err != nil || r.Offset != 1+WaitedLaneFactor {
			t.Fatalf("b: %+v", r)
		}
		if err := s.SendWaited(c.f); err != nil { // into the empty inbox
			t.Fatal(err)
		}
		for range WaitedLaneFactor {
			if err := s.SendWaited(produce(ns, "f").f); err != nil {
				t.Fatal(err)
			}
		}
		closed := make(chan error, 1)
		go func() { closed <- s.SendWaitedBefore(context.Background(), produce(ns, "d").f, nil) }()
		synctest.Wait() // the waiter waits for room
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-closed; !errors.Is(err, router.ErrDisconnected) {
			t.Fatalf("SendWaitedBefore across Close: %v, want ErrDisconnected", err)
		}
		mustErr(t, c.answered(t), ErrClosed)
	})
}
