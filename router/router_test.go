package router_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
)

func ns(t *testing.T, s, tp, p uint32) metadata.Namespace {
	t.Helper()
	n, err := metadata.NewNamespace(s, tp, p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Behaviour 1: the assignment is a pure function of (namespace, shard
// count), pinned against the reference server's owners for (0, t, 0),
// t in 0..8, on 2 shards.
func TestBehaviour01AssignmentPinned(t *testing.T) {
	want := []int{1, 1, 0, 0, 1, 0, 1, 0}
	for topic, w := range want {
		if got := router.Assign(ns(t, 0, uint32(topic), 0), 2); got != w {
			t.Errorf("Assign((0,%d,0), 2) = %d, want %d", topic, got, w)
		}
	}
	// No shards (a caller's misconfiguration) is owner 0, not a division
	// by zero.
	if got := router.Assign(ns(t, 0, 1, 0), 0); got != 0 {
		t.Errorf("Assign(ns, 0) = %d, want 0", got)
	}
	// Purity: the same inputs give the same owner, and every owner is in range.
	for s := uint32(0); s < 4; s++ {
		for p := uint32(0); p < 64; p++ {
			n := ns(t, s, 3, p)
			for shards := 1; shards <= 8; shards++ {
				a, b := router.Assign(n, shards), router.Assign(n, shards)
				if a != b || a < 0 || a >= shards {
					t.Fatalf("Assign(%v, %d) = %d then %d", n, shards, a, b)
				}
			}
		}
	}
}

type inbox struct {
	got  []int
	full bool
	gone bool
}

func (i *inbox) TrySend(f int) error {
	switch {
	case i.gone:
		return router.ErrDisconnected
	case i.full:
		return router.ErrFull
	}
	i.got = append(i.got, f)
	return nil
}

// Behaviour 1: a miss in the table falls back to the hash assignment, so a
// frame for a namespace no shard has a row for yet still reaches the shard
// that will own it.
func TestBehaviour01MissFallsBackToHash(t *testing.T) {
	r, err := router.New[int](&router.Table{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	boxes := []*inbox{{}, {}}
	r.Register(0, boxes[0])
	r.Register(1, boxes[1])
	for topic := uint32(0); topic < 8; topic++ {
		n := ns(t, 0, topic, 0)
		owner, err := r.Send(n, int(topic))
		if err != nil {
			t.Fatal(err)
		}
		if want := router.Assign(n, 2); owner != want {
			t.Fatalf("topic %d routed to %d, want hash owner %d", topic, owner, want)
		}
	}
	if len(boxes[0].got) == 0 || len(boxes[1].got) == 0 {
		t.Fatalf("frames did not straddle both shards: %v %v", boxes[0].got, boxes[1].got)
	}
	// A row overrides the hash.
	n := ns(t, 0, 0, 0) // hash owner 1
	r.Table().Set(n, router.Row{Owner: 0, Epoch: 5})
	if owner, _ := r.Send(n, 99); owner != 0 {
		t.Fatalf("row ignored: routed to %d", owner)
	}
}

// Behaviour 2: a row with the wrong epoch is rewritten; presence alone does
// not suppress the write.
func TestBehaviour02RowRewrittenOnEpochChange(t *testing.T) {
	var tb router.Table
	n := ns(t, 1, 2, 3)
	if !tb.Set(n, router.Row{Owner: 1, Epoch: 4}) {
		t.Fatal("first write not applied")
	}
	if tb.Set(n, router.Row{Owner: 1, Epoch: 4}) {
		t.Fatal("identical row rewritten")
	}
	if !tb.Set(n, router.Row{Owner: 1, Epoch: 9}) {
		t.Fatal("row with a new epoch was not rewritten")
	}
	if row, _ := tb.Get(n); row.Epoch != 9 {
		t.Fatalf("epoch = %d, want 9", row.Epoch)
	}
	// A teardown of the dead incarnation must not erase the new row.
	if tb.Delete(n, 4) {
		t.Fatal("delete with a dead epoch removed the live row")
	}
	if !tb.Delete(n, 9) || tb.Len() != 0 {
		t.Fatal("delete with the live epoch failed")
	}
}

func TestSendErrors(t *testing.T) {
	r, _ := router.New[int](&router.Table{}, 2)
	r.Register(0, &inbox{full: true})
	r.Register(1, &inbox{gone: true})
	if _, err := r.SendTo(0, 1); !errors.Is(err, router.ErrFull) {
		t.Fatalf("full inbox: %v", err)
	}
	if _, err := r.SendTo(1, 1); !errors.Is(err, router.ErrDisconnected) {
		t.Fatalf("closed inbox: %v", err)
	}
	// Every owner outside [0, shards) is unroutable, the first one past
	// the end included: never an index out of range.
	for _, owner := range []int{-1, 2, 7} {
		if _, err := r.SendTo(owner, 1); !errors.Is(err, router.ErrUnroutable) {
			t.Fatalf("owner %d of 2 shards: %v", owner, err)
		}
	}
	if _, err := router.New[int](&router.Table{}, 0); err == nil {
		t.Fatal("zero shards accepted")
	}
}

func BenchmarkRoute(b *testing.B) {
	r, _ := router.New[int](&router.Table{}, 2)
	r.Register(0, &inbox{})
	r.Register(1, &inbox{})
	n, _ := metadata.NewNamespace(1, 1, 1)
	r.Table().Set(n, router.Row{Owner: 1, Epoch: 1})
	for b.Loop() {
		_ = r.Owner(n)
	}
}

// BenchmarkTableGet reads rows of a table holding 100,000 namespaces
// (a node's routing rows at 100,000 partitions), from every P at once,
// as received messages are routed; B/row is the heap the rows hold.
func BenchmarkTableGet(b *testing.B) {
	const rows = 100_000
	nss := make([]metadata.Namespace, rows)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb := new(router.Table)
	for i := range nss {
		ns, err := metadata.NewNamespace(1, uint32(1+i/1000), uint32(i%1000))
		if err != nil {
			b.Fatal(err)
		}
		nss[i] = ns
		tb.Set(ns, router.Row{Owner: i % 2, Epoch: uint64(i)})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := tb.Get(nss[(i*7919)%rows]); !ok {
				b.Fatal("row missing")
			}
			i++
		}
	})
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/rows, "B/row")
}
