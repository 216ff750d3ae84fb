package reconciler_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

// Behaviour 2: a non-owner's routing row is rewritten when its epoch
// differs from the committed one; presence alone is not enough.
func TestBehaviour02NonOwnerRowRewrittenOnEpochChange(t *testing.T) {
	h := newHarness(t, 2, nil)
	info := h.topic("t")
	other := 1 - info.Owner
	h.pass(other)
	if row, ok := h.table.Get(info.NS); !ok || row != (router.Row{Owner: info.Owner, Epoch: info.CreatedRevision}) {
		t.Fatalf("row after first pass = %+v %v", row, ok)
	}
	h.apply(metadata.DeleteTopic{Stream: 0, Topic: info.NS.Topic()})
	again := h.apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 1}).Created[0]
	if again.NS != info.NS || again.CreatedRevision == info.CreatedRevision {
		t.Fatalf("recreate: %+v vs %+v", again, info)
	}
	rep := h.pass(other)
	if row, _ := h.table.Get(info.NS); row.Epoch != again.CreatedRevision {
		t.Fatalf("row epoch %d after recreate, want %d (stale row kept because present)", row.Epoch, again.CreatedRevision)
	}
	if rep.RowsWritten != 1 {
		t.Fatalf("rows written = %d, want 1", rep.RowsWritten)
	}
	if rep := h.pass(other); rep.RowsWritten != 0 {
		t.Fatalf("an up-to-date row was rewritten: %+v", rep)
	}
}

// Behaviour 12: the fast-skip holds only when the revision is unchanged,
// the last pass did no work, no failure is pending and the park buffer is
// empty; each signal alone defeats it.
func TestBehaviour12FastSkipAndItsFourSignals(t *testing.T) {
	h := newHarness(t, 1, nil)
	if rep := h.pass(0); rep.Skipped {
		t.Fatal("first pass skipped")
	}
	if rep := h.pass(0); !rep.Skipped {
		t.Fatalf("idle pass not skipped: %+v", rep)
	}

	// 1. A new revision.
	info := h.topic("t")
	rep := h.pass(0)
	if rep.Skipped || rep.Built != 1 {
		t.Fatalf("pass after a commit: %+v", rep)
	}
	// 2. The last pass did work (it built): the next one runs.
	if rep := h.pass(0); rep.Skipped {
		t.Fatal("pass after a working pass skipped")
	}
	if rep := h.pass(0); !rep.Skipped {
		t.Fatal("converged pass not skipped")
	}

	// 3. A parked frame, with nothing committed for it: aging must go on.
	unknown, _ := metadata.NewNamespace(9, 9, 9)
	c := h.send(0, unknown, "x")
	if rep := h.pass(0); rep.Skipped || rep.Parked != 1 {
		t.Fatalf("pass with a parked frame: %+v", rep)
	}
	h.pass(0)
	h.pass(0) // third pass: the frame ages out (MaxPasses 3)
	if r, ok := c.answer(t); !ok || !errors.Is(r.Err, shard.ErrRetry) {
		t.Fatalf("parked frame not aged out by passes: %+v %v", r, ok)
	}
	h.pass(0) // observes the expiry work
	if rep := h.pass(0); !rep.Skipped {
		t.Fatalf("pass after the park buffer emptied not skipped: %+v", rep)
	}

	// 4. A pending failure: the retry must run with no new revision.
	h.store.setFail(info.NS, errDisk)
	h.apply(metadata.DeleteTopic{Stream: 0, Topic: info.NS.Topic()})
	if rep := h.pass(0); rep.Failed != 1 || rep.Pending != 1 {
		t.Fatalf("failing removal: %+v", rep)
	}
	h.pass(0) // did work (the failure counts as work)
	h.clk.Advance(time.Hour)
	h.store.setFail(info.NS, nil)
	if rep := h.pass(0); rep.Skipped || rep.Removed != 1 || rep.Pending != 0 {
		t.Fatalf("pass with a pending failure: %+v", rep)
	}
}

// countingReconciler reports each pass on a channel.
type countingReconciler struct{ passes chan struct{} }

func (c countingReconciler) Reconcile(ctx context.Context) (reconciler.Report, error) {
	select {
	case c.passes <- struct{}{}:
	case <-ctx.Done():
	}
	return reconciler.Report{}, nil
}

// Behaviour 12: passes run at start, on a commit wake and on the periodic
// tick — and on nothing else, so an idle node does not spin.
func TestBehaviour12PassesRunOnWakeAndTick(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	rec := countingReconciler{passes: make(chan struct{})}
	wake := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reconciler.Run(ctx, rec, wake, clk, time.Second, nil)
	}()
	<-rec.passes // the pass at start
	wake <- struct{}{}
	<-rec.passes // the wake
	clk.WaitPending(1)
	clk.Advance(999 * time.Millisecond)
	select {
	case <-rec.passes:
		t.Fatal("pass before the period elapsed")
	default:
	}
	clk.Advance(time.Millisecond)
	<-rec.passes // the tick
	clk.WaitPending(1)
	if clk.Pending() != 1 {
		t.Fatalf("%d timers armed, want exactly the one period timer", clk.Pending())
	}
	cancel()
	<-done
}

// Behaviour 13: the owner builds the partition and hands it over; parked
// frames are served once it lands.
func TestBehaviour13AdditionsMaterialiseAndServeParked(t *testing.T) {
	h := newHarness(t, 2, nil)
	info := h.topic("t")
	c := h.send(info.Owner, info.NS, "hello")
	if _, ok := c.answer(t); ok {
		t.Fatal("answered before materialisation")
	}
	rep := h.pass(info.Owner)
	if rep.Built != 1 {
		t.Fatalf("pass: %+v", rep)
	}
	r, ok := c.answer(t)
	if !ok || r.Err != nil || r.Offset != 0 {
		t.Fatalf("parked produce after materialisation: %+v %v", r, ok)
	}
	if got := h.materialised(info.Owner); got != 1 {
		t.Fatalf("materialised counter = %v", got)
	}
	if row, _ := h.table.Get(info.NS); row != (router.Row{Owner: info.Owner, Epoch: info.CreatedRevision}) {
		t.Fatalf("owner row = %+v", row)
	}
	// The non-owner builds nothing.
	if rep := h.pass(1 - info.Owner); rep.Built != 0 {
		t.Fatalf("non-owner built: %+v", rep)
	}
}

// removalProbe records the shard's state while the store deletes, to pin
// the two-phase order: tombstone, delete from disk, confirm.
type removalProbe struct {
	*faultyStore
	s       *shard.Shard
	duringT []bool
}

func (p *removalProbe) Remove(ns metadata.Namespace) error {
	st, err := p.s.Inspect(context.Background())
	if err != nil {
		return err
	}
	_, owned := st.Owned[ns]
	_, tomb := st.Tombstoned[ns]
	p.duringT = append(p.duringT, tomb && !owned)
	return p.faultyStore.Remove(ns)
}

// Behaviour 14: removals are two-phase, and a recreated namespace is torn
// down before its new incarnation is built.
func TestBehaviour14TwoPhaseRemoval(t *testing.T) {
	h := newHarness(t, 1, nil)
	probe := &removalProbe{faultyStore: h.store, s: h.shards[0]}
	rec, err := reconciler.New(reconciler.Config{Shard: h.shards[0], Meta: h.meta, Store: probe, Clock: h.clk, Metrics: h.m}, h.table)
	if err != nil {
		t.Fatal(err)
	}
	info := h.topic("t")
	if _, err := rec.Reconcile(h.ctx); err != nil {
		t.Fatal(err)
	}
	c := h.send(0, info.NS, "old")
	if r, _ := c.answer(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.apply(metadata.DeleteTopic{Stream: 0, Topic: info.NS.Topic()})
	again := h.apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 1}).Created[0]
	rep, err := rec.Reconcile(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Removed != 1 || rep.Built != 1 {
		t.Fatalf("pass: %+v", rep)
	}
	if !slices.Equal(probe.duringT, []bool{true}) {
		t.Fatalf("state during delete = %v, want tombstoned and not owned", probe.duringT)
	}
	want := []string{"build " + info.NS.String(), "remove " + info.NS.String(), "build " + info.NS.String()}
	if !slices.Equal(h.store.log, want) {
		t.Fatalf("store calls %q, want %q", h.store.log, want)
	}
	st, _ := h.shards[0].Inspect(h.ctx)
	if len(st.Tombstoned) != 0 || st.Owned[info.NS] != again.CreatedRevision {
		t.Fatalf("after removal: %+v", st)
	}
	if got := testutil.ToFloat64(h.m.Removed.WithLabelValues("0")); got != 1 {
		t.Fatalf("removed counter = %v", got)
	}
	// Only the new incarnation's (empty) log is served.
	ch := make(chan shard.Response, 1)
	if err := h.shards[0].TrySend(shard.Frame{Req: &shard.Request{Op: shard.OpPoll, NS: info.NS, Count: 10}, Reply: ch}); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.Err != nil || len(r.Messages) != 0 {
		t.Fatalf("poll of the new incarnation: %+v", r)
	}
}

// Behaviour 15: frames parked at a shard that committed metadata says is
// not the owner are answered at once; frames of a namespace absent from
// committed metadata only age.
func TestBehaviour15SweepAnswersNonOwnedAgesUnknown(t *testing.T) {
	h := newHarness(t, 2, func(metadata.Namespace, int) int { return 1 })
	ns, _ := metadata.NewNamespace(0, 0, 0)
	misplaced := h.send(0, ns, "x") // parks at shard 0: nothing committed yet
	unknown, _ := metadata.NewNamespace(5, 5, 5)
	lagging := h.send(0, unknown, "y")
	info := h.topic("t")
	if info.NS != ns {
		t.Fatal("unexpected namespace")
	}
	// Shard 1 already wrote the row, so shard 0's pass does not rewrite it
	// (and so does not forward): the sweep verdict must answer the frame.
	h.table.Set(ns, router.Row{Owner: 1, Epoch: info.CreatedRevision})
	rep := h.pass(0)
	if rep.Answered != 1 {
		t.Fatalf("pass: %+v", rep)
	}
	if r, ok := misplaced.answer(t); !ok || !errors.Is(r.Err, shard.ErrRetry) {
		t.Fatalf("non-owned frame: %+v %v", r, ok)
	}
	if _, ok := lagging.answer(t); ok {
		t.Fatal("frame of a namespace absent from metadata answered at once; it must age")
	}
}

// Behaviour 15/16: a failed build backs off exponentially (clamped),
// answers its parked frames at once, never wedges other namespaces, and
// succeeds once the fault clears.
func TestBehaviour16BuildBackoff(t *testing.T) {
	h := newHarness(t, 1, nil)
	bad := h.topic("bad")
	h.store.setFail(bad.NS, errDisk)
	c := h.send(0, bad.NS, "waiting")
	good := h.topic("good")
	rep := h.pass(0)
	if rep.Failed != 1 || rep.Built != 1 || rep.Pending != 1 {
		t.Fatalf("first pass: %+v", rep)
	}
	if r, ok := c.answer(t); !ok || !errors.Is(r.Err, shard.ErrRetry) {
		t.Fatalf("frame of a backed-off build: %+v %v", r, ok)
	}
	g := h.send(0, good.NS, "fine")
	if r, ok := g.answer(t); !ok || r.Err != nil {
		t.Fatalf("other namespace wedged: %+v %v", r, ok)
	}

	attempts := func() int {
		n := 0
		for _, l := range h.store.log {
			if l == "build "+bad.NS.String() {
				n++
			}
		}
		return n
	}
	var delays []time.Duration
	elapsed := time.Duration(0)
	for len(delays) < 8 {
		before := attempts()
		h.clk.Advance(500 * time.Millisecond)
		elapsed += 500 * time.Millisecond
		h.pass(0)
		if attempts() > before {
			delays = append(delays, elapsed)
			elapsed = 0
		}
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(delays, want) {
		t.Fatalf("retry delays %v, want %v", delays, want)
	}
	if got := testutil.ToFloat64(h.m.BuildFailures.WithLabelValues("0")); got != 9 {
		t.Fatalf("build failure counter = %v, want 9", got)
	}
	h.store.setFail(bad.NS, nil)
	h.clk.Advance(time.Minute)
	if rep := h.pass(0); rep.Built != 1 || rep.Pending != 0 {
		t.Fatalf("pass after the fault cleared: %+v", rep)
	}
}

// Behaviour 16 with a wall clock set back after a failure: the retry is
// due once the delay has passed on the clock as it now reads, not when the
// clock reaches the old schedule again (simulator seed 5474: a clock set
// back 19 s left a committed partition unbuilt past quiescence).
func TestBehaviour16BuildRetriedAfterTheClockWasSetBack(t *testing.T) {
	h := newHarness(t, 1, nil)
	bad := h.topic("bad")
	h.store.setFail(bad.NS, errDisk)
	if rep := h.pass(0); rep.Failed != 1 {
		t.Fatalf("first pass: %+v", rep)
	}
	h.store.setFail(bad.NS, nil)
	h.wall.back = time.Hour
	for step := range 8 { // 4 s, four times the first delay
		h.clk.Advance(500 * time.Millisecond)
		if rep := h.pass(0); rep.Built == 1 {
			if step < 1 {
				t.Fatalf("rebuilt %v after the set-back, before the delay of 1s", time.Duration(step+1)*500*time.Millisecond)
			}
			return
		}
	}
	t.Fatal("build not retried within 4s of a clock set back an hour: the retry waits for the old schedule")
}

func TestNewRejectsMissingDependencies(t *testing.T) {
	if _, err := reconciler.New(reconciler.Config{}, &router.Table{}); err == nil {
		t.Fatal("accepted a config with no shard")
	}
	var _ partition.Store = (*faultyStore)(nil)
}
