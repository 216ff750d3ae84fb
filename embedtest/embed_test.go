package embedtest_test

import (
	"context"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	shards = 2
	// partitions of the test topic: the hash assignment puts namespaces
	// (0, 0, 0..7) on both of two shards (checked by the tests).
	partitions = 8
)

// countingStore is a host's partition store: partition.MemStore, counting
// what it builds. Reconcilers of several shards call it concurrently.
type countingStore struct {
	inner  *partition.MemStore
	builds atomic.Int64
}

func newCountingStore() *countingStore { return &countingStore{inner: partition.NewMemStore()} }

func (s *countingStore) Build(ns metadata.Namespace, epoch uint64) (partition.Partition, error) {
	p, err := s.inner.Build(ns, epoch)
	if err == nil {
		s.builds.Add(1)
	}
	return p, err
}

func (s *countingStore) Remove(ns metadata.Namespace) error { return s.inner.Remove(ns) }
func (s *countingStore) List() ([]partition.Stored, error)  { return s.inner.List() }

// gatedReconciler is a host's reconciler: the default one behind a gate
// that holds every pass until the gate opens, and a count of what the
// passes built. The tests use the gate to make the park certain instead
// of a race with the build.
type gatedReconciler struct {
	inner reconciler.Reconciler
	gate  <-chan struct{}
	built atomic.Int64
	// passed, when set, hears of every pass that ended (a send that
	// never blocks), so a test can wait for the passes' own reports.
	passed chan<- struct{}
}

func (r *gatedReconciler) Reconcile(ctx context.Context) (reconciler.Report, error) {
	select {
	case <-r.gate:
	case <-ctx.Done():
		return reconciler.Report{}, ctx.Err()
	}
	rep, err := r.inner.Reconcile(ctx)
	r.built.Add(int64(rep.Built))
	select {
	case r.passed <- struct{}{}:
	default:
	}
	return rep, err
}

// handNode is a node wired by hand from the public packages.
type handNode struct {
	meta    *metadata.Store
	store   *countingStore
	table   *router.Table
	router  *router.Router[shard.Frame]
	metrics *metrics.Metrics
	shards  []*shard.Shard
	recs    []*gatedReconciler
	wakes   []<-chan struct{}
	passed  chan struct{} // every reconcile pass that ended
}

// wireByHand builds a node of two shards; manual shards run no goroutine.
// Cleanup closes the shards and the metadata subscriptions.
func wireByHand(t *testing.T, manual bool, gate <-chan struct{}) *handNode {
	t.Helper()
	n := &handNode{store: newCountingStore(), table: &router.Table{}, metrics: metrics.New(), passed: make(chan struct{}, 1)}
	var err error
	if n.meta, err = metadata.NewStore(metadata.Config{Shards: shards, Assign: router.Assign}); err != nil {
		t.Fatal(err)
	}
	if n.router, err = router.New[shard.Frame](n.table, shards); err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		s, err := shard.New(shard.Config{ID: i, Metrics: n.metrics, Manual: manual}, n.meta, n.router)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close shard %d: %v", i, err)
			}
		})
		n.router.Register(i, s)
		n.shards = append(n.shards, s)
	}
	for _, s := range n.shards {
		def, err := reconciler.New(reconciler.Config{Shard: s, Meta: n.meta, Store: n.store, Metrics: n.metrics}, n.table)
		if err != nil {
			t.Fatal(err)
		}
		wake, unsub := n.meta.Subscribe()
		t.Cleanup(unsub)
		n.recs = append(n.recs, &gatedReconciler{inner: def, gate: gate, passed: n.passed})
		n.wakes = append(n.wakes, wake)
	}
	return n
}

// createTopic creates a stream and a topic of the given partitions and
// returns the partitions' namespaces.
func createTopic(t *testing.T, apply func(metadata.Command) (metadata.Result, error), parts int) []metadata.Namespace {
	t.Helper()
	res, err := apply(metadata.CreateStream{Name: "embed"})
	if err != nil {
		t.Fatal(err)
	}
	stream := res.Stream
	if res, err = apply(metadata.CreateTopic{Stream: stream, Name: "events", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	var nss []metadata.Namespace
	for p := range parts {
		ns, err := metadata.NewNamespace(stream, res.Topic, uint32(p))
		if err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	return nss
}

func produceReq(ns metadata.Namespace) *shard.Request {
	return &shard.Request{Op: shard.OpProduce, NS: ns, Messages: []partition.Message{{
		Timestamp: time.Now().UnixMicro(), Payload: []byte("hello " + ns.String())}}}
}

// produceAll sends a produce to every namespace through the router,
// checking that with no row in the shards table the router picks the
// hash owner (the owner the metadata records), and that the owners cover
// every shard.
func (n *handNode) produceAll(t *testing.T, nss []metadata.Namespace) []chan shard.Response {
	t.Helper()
	replies := make([]chan shard.Response, len(nss))
	owners := map[int]bool{}
	for i, ns := range nss {
		if row, ok := n.table.Get(ns); ok {
			t.Fatalf("%v: shards table row %+v before the partition exists", ns, row)
		}
		info, ok := n.meta.Partition(ns)
		if !ok {
			t.Fatalf("%v: not in committed metadata", ns)
		}
		replies[i] = make(chan shard.Response, 1)
		owner, err := n.router.Send(ns, shard.Frame{Req: produceReq(ns), Reply: replies[i]})
		if err != nil {
			t.Fatalf("send %v: %v", ns, err)
		}
		if owner != router.Assign(ns, shards) || owner != info.Owner {
			t.Fatalf("%v: routed to shard %d; hash owner %d, committed owner %d", ns, owner, router.Assign(ns, shards), info.Owner)
		}
		owners[owner] = true
	}
	if len(owners) != shards {
		t.Fatalf("namespaces landed on %d shard(s), want %d: the test does not cover every shard", len(owners), shards)
	}
	return replies
}

// checkServed checks every reply acked offset 0, the shards table holds
// each namespace's row at its committed incarnation, nothing is parked
// and the custom store and reconcilers built every partition once.
func (n *handNode) checkServed(t *testing.T, nss []metadata.Namespace, got []shard.Response) {
	t.Helper()
	for i, ns := range nss {
		if got[i].Err != nil || got[i].Offset != 0 {
			t.Errorf("produce to %v: offset %d, err %v; want offset 0", ns, got[i].Offset, got[i].Err)
		}
		rev, _ := n.meta.CreatedRevision(ns)
		if row, ok := n.table.Get(ns); !ok || row.Epoch != rev || row.Owner != router.Assign(ns, shards) {
			t.Errorf("%v: row %+v (present %v), want owner %d at epoch %d", ns, row, ok, router.Assign(ns, shards), rev)
		}
	}
	for _, s := range n.shards {
		if s.Parked() != 0 {
			t.Errorf("shard %d still parks %d frame(s)", s.ID(), s.Parked())
		}
	}
	built := int64(n.reportedBuilds())
	if b := n.store.builds.Load(); b != int64(len(nss)) || built != b {
		t.Errorf("custom store built %d partitions, reconcilers reported %d; want %d", b, built, len(nss))
	}
}

// reportedBuilds sums the builds the reconcile passes reported.
func (n *handNode) reportedBuilds() int {
	var built int64
	for _, r := range n.recs {
		built += r.built.Load()
	}
	return int(built)
}

// materialised sums parkway_partitions_materialised_total as a host
// registry gathers it, so the test also checks that a hand-wired node's
// metrics register on a host's own registry.
func materialised(t *testing.T, m *metrics.Metrics) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "parkway_partitions_materialised_total" {
			continue
		}
		found = true
		for _, s := range mf.GetMetric() {
			sum += s.GetCounter().GetValue()
		}
	}
	if !found {
		t.Fatal("no materialisation counter gathered")
	}
	return sum
}

// TestEmbedParkAndServe wires a node by hand and drives it as a host
// would, with goroutines: the shards' pumps and one reconciler.Run loop
// per shard (nil clock, zero period: the defaults). A request produced to
// a fresh topic parks at its owner and is served once the partition is
// built.
func TestEmbedParkAndServe(t *testing.T) {
	gate := make(chan struct{})
	n := wireByHand(t, false, gate)
	for _, s := range n.shards {
		s.Start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for i, rec := range n.recs {
		wg.Go(func() { reconciler.Run(runCtx, rec, n.wakes[i], nil, 0, nil) })
	}

	nss := createTopic(t, n.meta.Apply, partitions)
	replies := n.produceAll(t, nss)
	// Flush is a barrier through each inbox; the gate holds every pass,
	// so once it returns every request has parked.
	parked := 0
	for _, s := range n.shards {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		parked += s.Parked()
	}
	if parked != partitions {
		t.Fatalf("%d frames parked, want %d", parked, partitions)
	}
	for i, ns := range nss {
		select {
		case r := <-replies[i]:
			t.Fatalf("%v answered before its partition was built: %+v", ns, r)
		default:
		}
	}

	close(gate)
	got := make([]shard.Response, len(nss))
	for i, ns := range nss {
		select {
		case got[i] = <-replies[i]:
		case <-ctx.Done():
			t.Fatalf("produce to %v: no answer", ns)
		}
	}
	// A shard answers parked frames on its pump before the pass that
	// built their partition returns: wait for the passes to report every
	// build (stopping the loops sooner cancels a pass whose InsertOwned
	// has landed but not yet returned, and its build goes uncounted),
	// then stop the loops and flush the pumps before reading what the
	// passes and the park buffers report.
	for n.reportedBuilds() < partitions {
		select {
		case <-n.passed:
		case <-ctx.Done():
			t.Fatalf("reconcilers reported %d builds, want %d", n.reportedBuilds(), partitions)
		}
	}
	stop()
	wg.Wait()
	for _, s := range n.shards {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n.checkServed(t, nss, got)
	if m := materialised(t, n.metrics); m != partitions {
		t.Errorf("materialised counter %v, want %d", m, partitions)
	}
}

// TestEmbedManual wires the same node with manual shards and drives it by
// hand on the test goroutine: no goroutine runs, and every step is
// deterministic.
func TestEmbedManual(t *testing.T) {
	open := make(chan struct{})
	close(open)
	n := wireByHand(t, true, open)
	ctx := context.Background()

	nss := createTopic(t, n.meta.Apply, partitions)
	replies := n.produceAll(t, nss)
	for _, s := range n.shards {
		for s.Step() {
		}
	}
	parked := 0
	for _, s := range n.shards {
		parked += s.Parked()
	}
	if parked != partitions {
		t.Fatalf("%d frames parked after stepping, want %d", parked, partitions)
	}

	// One pass per shard builds its partitions; a manual shard applies
	// InsertOwned inline, serving the parked frames before it returns.
	for i, rec := range n.recs {
		rep, err := rec.Reconcile(ctx)
		if err != nil {
			t.Fatalf("shard %d pass: %v", i, err)
		}
		if rep.Parked != 0 {
			t.Errorf("shard %d pass left %d frame(s) parked", i, rep.Parked)
		}
	}
	got := make([]shard.Response, len(nss))
	for i, ns := range nss {
		select {
		case got[i] = <-replies[i]:
		default:
			t.Fatalf("produce to %v: not answered after the passes", ns)
		}
	}
	n.checkServed(t, nss, got)

	// A poll through the router now follows the table's row.
	reply := make(chan shard.Response, 1)
	if _, err := n.router.Send(nss[0], shard.Frame{Req: &shard.Request{Op: shard.OpPoll, NS: nss[0], Count: 10}, Reply: reply}); err != nil {
		t.Fatal(err)
	}
	for _, s := range n.shards {
		for s.Step() {
		}
	}
	select {
	case r := <-reply:
		if r.Err != nil || len(r.Messages) != 1 || string(r.Messages[0].Payload) != "hello "+nss[0].String() {
			t.Errorf("poll %v: %d message(s), err %v", nss[0], len(r.Messages), r.Err)
		}
	default:
		t.Fatal("poll not answered after stepping")
	}
}

// TestEmbedEngine builds the node engine from outside the module's
// internal tree with a host's partition store (Config.WrapStore) and a
// host's reconciler per shard (Config.NewReconciler), and checks that a
// request to a fresh topic parks and is served through them.
func TestEmbedEngine(t *testing.T) {
	gate := make(chan struct{})
	store := newCountingStore()
	var (
		mu   sync.Mutex
		recs []*gatedReconciler
	)
	eng, err := host.New(host.Config{
		Shards:    shards,
		WrapStore: func(partition.Store, *metadata.Store) partition.Store { return store },
		NewReconciler: func(cfg reconciler.Config, table *router.Table) (reconciler.Reconciler, error) {
			def, err := reconciler.New(cfg, table)
			if err != nil {
				return nil, err
			}
			r := &gatedReconciler{inner: def, gate: gate}
			mu.Lock()
			defer mu.Unlock()
			recs = append(recs, r)
			return r, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := eng.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if len(recs) != shards {
		t.Fatalf("NewReconciler called %d times, want %d", len(recs), shards)
	}
	if err := eng.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	apply := func(cmd metadata.Command) (metadata.Result, error) { return eng.ApplyMetadata(ctx, cmd) }
	nss := createTopic(t, apply, 1)
	ns := nss[0]

	answer := make(chan shard.Response, 1)
	go func() { answer <- eng.Once(ctx, produceReq(ns)) }()
	owner := eng.Shards()[eng.Router().Owner(ns)]
	// Once sends before it waits; flush until the frame has reached the
	// owner and parked (the gate holds every reconcile pass).
	for owner.Parked() == 0 {
		if err := owner.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-answer:
			t.Fatalf("answered before the partition was built: %+v", r)
		default:
		}
	}
	close(gate)
	select {
	case r := <-answer:
		if r.Err != nil || r.Offset != 0 {
			t.Fatalf("produce: offset %d, err %v", r.Offset, r.Err)
		}
	case <-ctx.Done():
		t.Fatal("produce: no answer")
	}
	if b := store.builds.Load(); b != 1 {
		t.Errorf("custom store built %d partitions, want 1", b)
	}
	if eng.Store() != partition.Store(store) {
		t.Error("the engine does not use the host's store")
	}
}

// TestNoInternalImports checks that this package and the embed example
// import nothing from an internal package: the module's internal rule
// lets them, an outside host could not.
func TestNoInternalImports(t *testing.T) {
	root, _ := moduleRoot(t)
	var files []string
	for _, pattern := range []string{"embedtest/*.go", "examples/embed/*.go"} {
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		if err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 {
			t.Fatalf("no files match %s", pattern)
		}
		files = append(files, m...)
	}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if isInternal(p) {
				pos := fset.Position(imp.Pos())
				if rel, err := filepath.Rel(root, pos.Filename); err == nil {
					pos.Filename = filepath.ToSlash(rel)
				}
				t.Errorf("%s imports %s", pos, p)
			}
		}
	}
}
