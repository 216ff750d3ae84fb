package shard

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
)

func manual(c *Config) { c.Manual = true }

// A Manual shard starts no goroutine; Step handles one inbox frame per call
// and reports false once idle; control operations issued through the
// exported methods apply inline, before the method returns.
func TestManualStepAndInlineControl(t *testing.T) {
	before := runtime.NumGoroutine()
	h := newHarness(t, 1, nil, manual)
	s := h.shards[0]
	s.Start()
	if got := runtime.NumGoroutine(); got > before {
		t.Fatalf("manual Start left %d goroutines, had %d", got, before)
	}
	ctx := context.Background()
	ns, epoch := h.topic("t")
	a, b := produce(ns, "a"), produce(ns, "b")
	for _, c := range []call{a, b} {
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
	}
	if !s.Step() {
		t.Fatal("Step with two frames queued did nothing")
	}
	if s.Parked() != 1 || len(s.inbox) != 1 {
		t.Fatalf("after one Step: %d parked, %d queued; want 1 and 1", s.Parked(), len(s.inbox))
	}
	if !s.Step() || s.Step() {
		t.Fatal("Step did not handle exactly the two queued frames")
	}
	a.pending(t)
	b.pending(t)

	// Exported control operations run inline: the caller is the pump.
	if err := s.InsertOwned(ctx, h.build(ns, epoch), noSync); err != nil {
		t.Fatal(err)
	}
	for i, c := range []call{a, b} {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("parked frame %d: %+v, want served at %d", i, r, i)
		}
	}
	st, err := s.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Owned[ns] != epoch || st.ParkedFrames != 0 {
		t.Fatalf("Inspect = %+v", st)
	}
	if s.Step() {
		t.Fatal("idle shard reported work")
	}
}

// Step keeps the pump's order of precedence: a queued control operation
// runs before inbox frames, so re-dispatched frames stay ahead of newer
// ones (behaviour 5, as TestBehaviour05 pins for the goroutine pump).
func TestManualStepControlBeforeInbox(t *testing.T) {
	h := newHarness(t, 1, nil, manual)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	var calls []call
	for _, p := range []string{"p1", "p2"} {
		c := produce(ns, p)
		s.handle(c.f)
		calls = append(calls, c)
	}
	for _, p := range []string{"n1", "n2"} {
		c := produce(ns, p)
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	op := opInsertOwned(h.build(ns, epoch), noSync)
	if err := s.enqueue(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	steps := 0
	for s.Step() {
		steps++
	}
	if err := <-op.done; err != nil {
		t.Fatal(err)
	}
	if steps != 3 {
		t.Fatalf("%d steps, want 3 (one control operation, two frames)", steps)
	}
	var offsets []uint64
	for _, c := range calls {
		r := c.answered(t)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		offsets = append(offsets, r.Offset)
	}
	if want := []uint64{0, 1, 2, 3}; !slices.Equal(offsets, want) {
		t.Fatalf("offsets of p1 p2 n1 n2 = %v, want %v", offsets, want)
	}
}

// Under FsyncAlways a manual shard groups the acks of frames stepped while
// more wait in the inbox, exactly as the pump does, and an interval-policy
// timer on a manual clock is a unit of Step work once it is due.
func TestManualGroupCommitAndSyncTimer(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, manual, func(c *Config) { c.Clock = clk })
	s := h.shards[0]
	ctx := context.Background()
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	if err := s.InsertOwned(ctx, p, always); err != nil {
		t.Fatal(err)
	}
	var calls []call
	for _, m := range []string{"a", "b", "c"} {
		c := produce(ns, m)
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	s.Step()
	s.Step()
	calls[0].pending(t)
	if p.syncs != 0 {
		t.Fatalf("synced %d times with frames still queued", p.syncs)
	}
	s.Step() // the inbox drains: the group closes
	if p.syncs != 1 {
		t.Fatalf("group of 3 took %d fsyncs, want 1", p.syncs)
	}
	for i, c := range calls {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("ack %d: %+v", i, r)
		}
	}

	interval := Durability{Fsync: metadata.FsyncInterval, Interval: time.Second}
	if err := s.SetDurability(ctx, ns, interval); err != nil {
		t.Fatal(err)
	}
	d := produce(ns, "d")
	if err := s.TrySend(d.f); err != nil {
		t.Fatal(err)
	}
	s.Step()
	if r := d.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	syncs := p.syncs
	if s.Step() {
		t.Fatal("Step did work before the interval timer was due")
	}
	clk.Advance(time.Second)
	if !s.Step() || p.syncs != syncs+1 {
		t.Fatalf("due interval timer: synced %d times, want %d", p.syncs-syncs, 1)
	}
	if s.Step() {
		t.Fatal("idle shard reported work after the interval sync")
	}
}

// Flush on a manual shard steps the shard until its marker is handled;
// after Close, control operations and Step do nothing and frames are
// refused as disconnected.
func TestManualFlushAndClose(t *testing.T) {
	h := newHarness(t, 1, nil, manual, func(c *Config) { c.InboxSize = 1 })
	s := h.shards[0]
	ctx := context.Background()
	ns, _ := h.topic("t")
	a := produce(ns, "a")
	if err := s.TrySend(a.f); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil { // the inbox is full: Flush steps first
		t.Fatal(err)
	}
	if s.Parked() != 1 || len(s.inbox) != 0 {
		t.Fatalf("after Flush: %d parked, %d queued", s.Parked(), len(s.inbox))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustErr(t, a.answered(t), ErrClosed)
	if s.Step() {
		t.Fatal("closed shard stepped")
	}
	if _, err := s.Inspect(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Inspect after Close: %v, want ErrClosed", err)
	}
	if err := s.TrySend(produce(ns, "b").f); !errors.Is(err, router.ErrDisconnected) {
		t.Fatalf("TrySend after Close: %v, want ErrDisconnected", err)
	}
	if err := s.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v, want ErrClosed", err)
	}
}

// A goroutine-mode shard's Step does nothing: its pump owns the state.
func TestStepIsManualOnly(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, _ := h.topic("t")
	if err := s.TrySend(produce(ns, "a").f); err != nil {
		t.Fatal(err)
	}
	if s.Step() {
		t.Fatal("Step ran on a shard that is not Manual")
	}
}
