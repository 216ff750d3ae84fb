package reconciler_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faultyStore wraps a MemStore, failing Build or Remove of chosen
// namespaces and logging the order of calls.
type faultyStore struct {
	inner *partition.MemStore
	mu    sync.Mutex
	fail  map[metadata.Namespace]error
	log   []string
}

var errDisk = errors.New("disk full")

func (f *faultyStore) Build(ns metadata.Namespace, epoch uint64) (partition.Partition, error) {
	f.mu.Lock()
	err := f.fail[ns]
	f.log = append(f.log, "build "+ns.String())
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.inner.Build(ns, epoch)
}

func (f *faultyStore) Remove(ns metadata.Namespace) error {
	f.mu.Lock()
	err := f.fail[ns]
	f.log = append(f.log, "remove "+ns.String())
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.inner.Remove(ns)
}

func (f *faultyStore) List() ([]partition.Stored, error) { return f.inner.List() }

func (f *faultyStore) setFail(ns metadata.Namespace, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[ns] = err
}

type harness struct {
	t      testing.TB
	ctx    context.Context
	meta   *metadata.Store
	store  *faultyStore
	table  *router.Table
	rt     *router.Router[shard.Frame]
	shards []*shard.Shard
	recs   []*reconciler.Partitions
	clk    *clock.Manual
	// wall is the clock the reconcilers read: clk, minus back (a wall
	// clock set back, as NTP or an operator may).
	wall *setBackClock
	m    *metrics.Metrics
}

// setBackClock reads a manual clock minus a chosen amount, so a test can
// set the time back, which a Manual clock never goes.
type setBackClock struct {
	*clock.Manual
	back time.Duration
}

func (c *setBackClock) Now() time.Time { return c.Manual.Now().Add(-c.back) }

func newHarness(t testing.TB, n int, assign func(metadata.Namespace, int) int) *harness {
	t.Helper()
	if assign == nil {
		assign = router.Assign
	}
	meta, err := metadata.NewStore(metadata.Config{Shards: n, Assign: assign})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t: t, ctx: context.Background(), meta: meta,
		store: &faultyStore{inner: partition.NewMemStore(), fail: map[metadata.Namespace]error{}},
		table: &router.Table{}, clk: clock.NewManual(time.Unix(0, 0)), m: metrics.New(),
	}
	h.wall = &setBackClock{Manual: h.clk}
	h.rt, _ = router.New[shard.Frame](h.table, n)
	for i := range n {
		s, err := shard.New(shard.Config{ID: i, Metrics: h.m}, meta, h.rt)
		if err != nil {
			t.Fatal(err)
		}
		h.rt.Register(i, s)
		s.Start()
		h.shards = append(h.shards, s)
		rec, err := reconciler.New(reconciler.Config{Shard: s, Meta: meta, Store: h.store, Clock: h.wall, Metrics: h.m}, h.table)
		if err != nil {
			t.Fatal(err)
		}
		h.recs = append(h.recs, rec)
	}
	t.Cleanup(func() {
		for _, s := range h.shards {
			_ = s.Close()
		}
	})
	return h
}

func (h *harness) apply(cmd metadata.Command) metadata.Result {
	h.t.Helper()
	res, err := h.meta.Apply(cmd)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

func (h *harness) topic(name string) metadata.PartitionInfo {
	h.t.Helper()
	if _, ok := h.meta.Stream(0); !ok {
		h.apply(metadata.CreateStream{Name: "s"})
	}
	return h.apply(metadata.CreateTopic{Stream: 0, Name: name, Partitions: 1}).Created[0]
}

func (h *harness) pass(i int) reconciler.Report {
	h.t.Helper()
	rep, err := h.recs[i].Reconcile(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return rep
}

type call struct {
	reply chan shard.Response
}

// send hands a produce to shard i and waits until the shard has handled it
// (served, parked or answered) with a Flush barrier.
func (h *harness) send(i int, ns metadata.Namespace, payload string) call {
	h.t.Helper()
	ch := make(chan shard.Response, 1)
	f := shard.Frame{Req: &shard.Request{Op: shard.OpProduce, NS: ns,
		Messages: []partition.Message{{Payload: []byte(payload)}}}, Reply: ch}
	if err := h.shards[i].TrySend(f); err != nil {
		h.t.Fatal(err)
	}
	if err := h.shards[i].Flush(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	return call{ch}
}

func (c call) answer(t *testing.T) (shard.Response, bool) {
	t.Helper()
	select {
	case r := <-c.reply:
		return r, true
	default:
		return shard.Response{}, false
	}
}

func (h *harness) materialised(i int) float64 {
	return testutil.ToFloat64(h.m.Materialised.WithLabelValues(itoa(i)))
}

func itoa(i int) string { return strconv.Itoa(i) }
