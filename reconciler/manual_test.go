package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

// manualRig is one Manual shard and its reconciler: Reconcile is one
// synchronous pass on the test goroutine, with no goroutine anywhere.
type manualRig struct {
	meta *metadata.Store
	s    *shard.Shard
	rec  *reconciler.Partitions
}

func newManualRig(t *testing.T) *manualRig {
	t.Helper()
	meta, err := metadata.NewStore(metadata.Config{Shards: 1, Assign: router.Assign})
	if err != nil {
		t.Fatal(err)
	}
	table := &router.Table{}
	rt, _ := router.New[shard.Frame](table, 1)
	s, err := shard.New(shard.Config{ID: 0, Manual: true}, meta, rt)
	if err != nil {
		t.Fatal(err)
	}
	rt.Register(0, s)
	s.Start()
	t.Cleanup(func() { _ = s.Close() })
	rec, err := reconciler.New(reconciler.Config{Shard: s, Meta: meta, Store: partition.NewMemStore(),
		Clock: clock.NewManual(time.Unix(0, 0))}, table)
	if err != nil {
		t.Fatal(err)
	}
	return &manualRig{meta: meta, s: s, rec: rec}
}

func (r *manualRig) pass(t *testing.T) reconciler.Report {
	t.Helper()
	rep, err := r.rec.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func (r *manualRig) send(t *testing.T, ns metadata.Namespace) chan shard.Response {
	t.Helper()
	ch := make(chan shard.Response, 1)
	f := shard.Frame{Req: &shard.Request{Op: shard.OpProduce, NS: ns,
		Messages: []partition.Message{{Payload: []byte("x")}}}, Reply: ch}
	if err := r.s.TrySend(f); err != nil {
		t.Fatal(err)
	}
	for r.s.Step() {
	}
	return ch
}

// A pass over a Manual shard applies its operations inline: the build,
// the InsertOwned and the re-dispatch of parked frames all happen inside
// Reconcile.
func TestManualShardPassIsSynchronous(t *testing.T) {
	r := newManualRig(t)
	if _, err := r.meta.Apply(metadata.CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	res, err := r.meta.Apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	reply := r.send(t, res.Created[0].NS)
	if r.s.Parked() != 1 {
		t.Fatalf("parked = %d, want 1", r.s.Parked())
	}
	if rep := r.pass(t); rep.Built != 1 || rep.Parked != 0 {
		t.Fatalf("pass: %+v", rep)
	}
	select {
	case resp := <-reply:
		if resp.Err != nil || resp.Offset != 0 {
			t.Fatalf("parked produce answered %+v", resp)
		}
	default:
		t.Fatal("parked produce not answered by the pass")
	}
}

// Behaviour 12: with frames parked and nothing else to do, no pass takes
// the fast-skip, so the frames age and are answered. (The simulator's
// BreakFastSkip self-test breaks exactly this, from outside.)
func TestFastSkipNotTakenWhileParked(t *testing.T) {
	r := newManualRig(t)
	r.pass(t)
	unknown, _ := metadata.NewNamespace(9, 9, 9)
	reply := r.send(t, unknown)
	for range 4 {
		if rep := r.pass(t); rep.Skipped {
			t.Fatalf("pass with a parked frame skipped: %+v", rep)
		}
	}
	select {
	case <-reply:
	default:
		t.Fatal("parked frame not aged out by the passes")
	}
}
