package shard

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
)

// harness steps unstarted shards like state machines: frames go straight
// to handle and control operations straight to apply, on the test
// goroutine, so every test is deterministic without sleeps or barriers.
type harness struct {
	t      testing.TB
	meta   *metadata.Store
	store  *partition.MemStore
	rt     *router.Router[Frame]
	shards []*Shard
	m      *metrics.Metrics
}

type harnessOpt func(*Config)

func newHarness(t testing.TB, n int, assign func(metadata.Namespace, int) int, opts ...harnessOpt) *harness {
	t.Helper()
	return newClusterHarness(t, n, assign, nil, opts...)
}

// newClusterHarness is newHarness over a metadata store of a cluster of
// nodes (placement on).
func newClusterHarness(t testing.TB, n int, assign func(metadata.Namespace, int) int, nodes []uint64, opts ...harnessOpt) *harness {
	t.Helper()
	if assign == nil {
		assign = router.Assign
	}
	meta, err := metadata.NewStore(metadata.Config{Shards: n, Assign: assign, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := router.New[Frame](&router.Table{}, n)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, meta: meta, store: partition.NewMemStore(), rt: rt, m: metrics.New()}
	for i := range n {
		cfg := Config{ID: i, Metrics: h.m}
		for _, o := range opts {
			o(&cfg)
		}
		s, err := New(cfg, meta, rt)
		if err != nil {
			t.Fatal(err)
		}
		rt.Register(i, s)
		h.shards = append(h.shards, s)
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

// topic creates stream 0 (if needed) and a topic with one partition, and
// returns the partition's namespace and created_revision.
func (h *harness) topic(name string) (metadata.Namespace, uint64) {
	h.t.Helper()
	if _, ok := h.meta.Stream(0); !ok {
		h.apply(metadata.CreateStream{Name: "s"})
	}
	res := h.apply(metadata.CreateTopic{Stream: 0, Name: name, Partitions: 1})
	return res.Created[0].NS, res.Created[0].CreatedRevision
}

// recreate deletes and recreates the topic of ns under the same name and
// returns the new created_revision (the namespace is the same: slab ids).
func (h *harness) recreate(ns metadata.Namespace, name string) uint64 {
	h.t.Helper()
	h.apply(metadata.DeleteTopic{Stream: ns.Stream(), Topic: ns.Topic()})
	res := h.apply(metadata.CreateTopic{Stream: ns.Stream(), Name: name, Partitions: 1})
	if res.Created[0].NS != ns {
		h.t.Fatalf("recreate gave %v, want %v", res.Created[0].NS, ns)
	}
	return res.Created[0].CreatedRevision
}

func (h *harness) build(ns metadata.Namespace, epoch uint64) partition.Partition {
	h.t.Helper()
	p, err := h.store.Build(ns, epoch)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// step applies one control operation on s, as its pump would.
func (h *harness) step(s *Shard, c control) error {
	c.apply(s)
	return <-c.done
}

func (h *harness) insert(s *Shard, p partition.Partition) {
	h.t.Helper()
	if err := h.step(s, opInsertOwned(p, noSync)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) sweep(s *Shard, v map[metadata.Namespace]Verdict) SweepResult {
	h.t.Helper()
	var res SweepResult
	if err := h.step(s, opSweep(v, nil, &res)); err != nil {
		h.t.Fatal(err)
	}
	return res
}

func (h *harness) inspect(s *Shard) State {
	h.t.Helper()
	var st State
	if err := h.step(s, opInspect(&st)); err != nil {
		h.t.Fatal(err)
	}
	return st
}

// noSync is the durability of the barrier tests: acks are immediate, so
// stepping a frame answers it at once. Group commit is tested on its own.
var noSync = Durability{Fsync: metadata.FsyncNever}

// call is one client frame and its reply channel.
type call struct {
	f     Frame
	reply chan Response
}

func produce(ns metadata.Namespace, payload string) call {
	ch := make(chan Response, 1)
	req := &Request{Op: OpProduce, NS: ns, Messages: []partition.Message{{Payload: []byte(payload)}}}
	return call{Frame{Req: req, Reply: ch}, ch}
}

// request is a client call of any operation to ns.
func request(ns metadata.Namespace, r *Request) call {
	ch := make(chan Response, 1)
	r.NS = ns
	return call{Frame{Req: r, Reply: ch}, ch}
}

func sized(ns metadata.Namespace, n int) call {
	c := produce(ns, "")
	c.f.Req.Messages[0].Payload = make([]byte, n)
	return c
}

// answered returns the call's answer, failing if there is none yet or if
// there is more than one.
func (c call) answered(t *testing.T) Response {
	t.Helper()
	select {
	case r := <-c.reply:
		select {
		case r2 := <-c.reply:
			t.Fatalf("answered twice: %+v then %+v", r, r2)
		default:
		}
		return r
	default:
		t.Fatalf("%v %v not answered", c.f.Req.Op, c.f.Req.NS)
		return Response{}
	}
}

func (c call) pending(t *testing.T) {
	t.Helper()
	select {
	case r := <-c.reply:
		t.Fatalf("%v %v answered early: %+v", c.f.Req.Op, c.f.Req.NS, r)
	default:
	}
}

func mustErr(t *testing.T, r Response, want error) {
	t.Helper()
	if !errors.Is(r.Err, want) {
		t.Fatalf("answer error %v, want %v", r.Err, want)
	}
}

func payloads(t *testing.T, p partition.Partition) []string {
	t.Helper()
	msgs, err := p.Read(0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Payload))
	}
	return out
}

func (h *harness) drops(shard, variant, reason string) float64 {
	return testutil.ToFloat64(h.m.FrameDrops.WithLabelValues(shard, variant, reason))
}

func testutilStale(h *harness) float64 {
	return testutil.ToFloat64(h.m.StaleRejects.WithLabelValues("0"))
}

// evictStepped evicts ns from a shard whose pump does not run (Manual, or
// driven by the test): Evict is sent from a goroutine and its control
// operation run here, as the pump would.
func evictStepped(s *Shard, ns metadata.Namespace) error {
	evicted := make(chan error, 1)
	go func() {
		ok, err := s.Evict(context.Background(), ns)
		if err == nil && !ok {
			err = errors.New("not evicted")
		}
		evicted <- err
	}()
	s.runControl(<-s.ctrl)
	return <-evicted
}
