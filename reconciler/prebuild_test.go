package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/reconciler"
)

// builds counts the store's Build calls for ns.
func (f *faultyStore) builds(ns metadata.Namespace) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, l := range f.log {
		if l == "build "+ns.String() {
			n++
		}
	}
	return n
}

// stored reports whether the store holds ns, at which epoch.
func (h *harness) stored(ns metadata.Namespace) (uint64, bool) {
	h.t.Helper()
	list, err := h.store.List()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, st := range list {
		if st.NS == ns {
			return st.Epoch, true
		}
	}
	return 0, false
}

func (h *harness) prebuild(i int) {
	h.t.Helper()
	if err := h.recs[i].Prebuild(h.ctx); err != nil {
		h.t.Fatal(err)
	}
}

// The owner builds an announced partition before its command commits and
// hands it to its shard provisional; the pass after the commit confirms
// that partition without building it again, and the produce appended to
// it before the commit is answered then, not before.
func TestPrebuildBeforeTheCommitThenAdopt(t *testing.T) {
	// Namespaces (0, t, 0): shard = t mod 2.
	h := newHarness(t, 2, func(ns metadata.Namespace, n int) int { return int(ns.Topic()) % n })
	h.apply(metadata.CreateStream{Name: "s"})
	h.pass(0)
	h.pass(1)
	cmd := metadata.CreateTopic{Stream: 0, Name: "a", Partitions: 1}
	withdraw := h.meta.Announce(cmd)
	defer withdraw()
	ann := h.meta.Announced()
	if len(ann) != 1 || ann[0].Owner != 0 {
		t.Fatalf("announced %+v, want one partition on shard 0", ann)
	}
	ns, epoch := ann[0].NS, ann[0].CreatedRevision
	h.prebuild(1) // not the owner: builds nothing
	if n := h.store.builds(ns); n != 0 {
		t.Fatalf("shard 1's prebuild built the partition of shard 0 (%d builds)", n)
	}
	h.prebuild(0)
	if got, ok := h.stored(ns); !ok || got != epoch {
		t.Fatalf("after the prebuild the store holds %v at %d (%v), want epoch %d", ns, got, ok, epoch)
	}
	h.prebuild(0) // again: nothing more
	if n := h.store.builds(ns); n != 1 {
		t.Fatalf("%d builds after two prebuilds, want 1", n)
	}

	// On one node the prebuilt partition is the shard's at once,
	// provisional: a produce is appended, its answer held until the commit.
	r := h.send(0, ns, "first")
	if err := h.shards[0].Flush(h.ctx); err != nil {
		t.Fatal(err)
	}
	if resp, ok := r.answer(t); ok {
		t.Fatalf("a produce was answered (%+v) before its partition's command committed", resp)
	}
	res := h.apply(cmd)
	withdraw()
	if res.Created[0].NS != ns || res.Created[0].CreatedRevision != epoch {
		t.Fatalf("committed %+v, announced %v at %d", res.Created[0], ns, epoch)
	}
	rep := h.pass(0)
	if rep.Built != 1 {
		t.Fatalf("pass after the commit %+v: want the prebuilt partition handed over", rep)
	}
	if n := h.store.builds(ns); n != 1 {
		t.Fatalf("%d builds of %v, want 1: the pass built it again instead of adopting it", n, ns)
	}
	if resp, ok := r.answer(t); !ok || resp.Err != nil {
		t.Fatalf("held produce after the adopting pass: %+v, %v; want answered", resp, ok)
	}
}

// A partition prebuilt for a command that never commits (its log write
// failed) is closed and removed from the store once the announcement is
// withdrawn; a later command creating the same namespace builds it afresh.
func TestPrebuildOfAWithdrawnAnnouncementIsRemoved(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.apply(metadata.CreateStream{Name: "s"})
	h.pass(0)
	cmd := metadata.CreateTopic{Stream: 0, Name: "a", Partitions: 1}
	withdraw := h.meta.Announce(cmd)
	ns := h.meta.Announced()[0].NS
	h.prebuild(0)
	if _, ok := h.stored(ns); !ok {
		t.Fatal("nothing prebuilt")
	}
	withdraw()
	h.prebuild(0) // the withdrawal's wake
	if epoch, ok := h.stored(ns); ok {
		t.Fatalf("the store still holds %v at %d after its announcement was withdrawn uncommitted", ns, epoch)
	}

	// The same again, cleaned up by a pass instead of a prebuild.
	withdraw = h.meta.Announce(cmd)
	h.prebuild(0)
	withdraw()
	h.pass(0)
	if epoch, ok := h.stored(ns); ok {
		t.Fatalf("the store still holds %v at %d after a pass", ns, epoch)
	}

	res := h.apply(cmd)
	if rep := h.pass(0); rep.Built != 1 {
		t.Fatalf("pass after the real commit %+v: want it built", rep)
	}
	if epoch, ok := h.stored(ns); !ok || epoch != res.Created[0].CreatedRevision {
		t.Fatalf("store holds %v at %d (%v), want %d", ns, epoch, ok, res.Created[0].CreatedRevision)
	}
}

// A namespace whose previous incarnation this shard still holds (its
// deletion committed, its teardown not yet run) is not prebuilt: building
// over it would mix the two. The pass tears the old one down and builds
// the new one.
func TestPrebuildLeavesANamespaceStillHeld(t *testing.T) {
	h := newHarness(t, 1, nil)
	a := h.topic("a")
	h.pass(0)
	h.apply(metadata.DeleteTopic{Stream: 0, Topic: a.Topic})
	withdraw := h.meta.Announce(metadata.CreateTopic{Stream: 0, Name: "b", Partitions: 1})
	defer withdraw()
	if ann := h.meta.Announced(); len(ann) != 1 || ann[0].NS != a.NS {
		t.Fatalf("announced %+v, want a's namespace again", ann)
	}
	before := h.store.builds(a.NS)
	h.prebuild(0)
	if n := h.store.builds(a.NS); n != before {
		t.Fatalf("prebuild tried to build %v while its old incarnation is held", a.NS)
	}
	b := h.apply(metadata.CreateTopic{Stream: 0, Name: "b", Partitions: 1}).Created[0]
	withdraw()
	if rep := h.pass(0); rep.Removed != 1 || rep.Built != 1 {
		t.Fatalf("pass %+v: want a removed and b built", rep)
	}
	if epoch, ok := h.stored(a.NS); !ok || epoch != b.CreatedRevision {
		t.Fatalf("store holds %v at %d (%v), want b's incarnation %d", a.NS, epoch, ok, b.CreatedRevision)
	}
}

// countingPrebuilder counts passes and prebuilds.
type countingPrebuilder struct {
	passes, prebuilds, released chan struct{}
}

func (c *countingPrebuilder) Reconcile(context.Context) (reconciler.Report, error) {
	c.passes <- struct{}{}
	return reconciler.Report{}, nil
}

func (c *countingPrebuilder) Prebuild(context.Context) error {
	c.prebuilds <- struct{}{}
	return nil
}

func (c *countingPrebuilder) Release() { close(c.released) }

// RunPrebuilding prebuilds on an announcement wake without running a pass
// (a pass there would be a full one: nothing committed), passes on a
// commit wake, and releases what was prebuilt when it stops. The manual
// clock never moves: nothing here waits for the pass period. Every channel
// is unbuffered, so each step is seen where the loop takes it.
func TestRunPrebuildsOnAnnouncementsWithoutAPass(t *testing.T) {
	c := &countingPrebuilder{passes: make(chan struct{}), prebuilds: make(chan struct{}), released: make(chan struct{})}
	wake, announced := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reconciler.RunPrebuilding(ctx, c, wake, announced, clock.NewManual(time.Unix(0, 0)), time.Hour, nil)
	}()
	<-c.passes // the pass at start
	announced <- struct{}{}
	<-c.prebuilds
	// The loop is back in its select, not in a pass.
	select {
	case announced <- struct{}{}:
	case <-c.passes:
		t.Fatal("a pass ran after a prebuild, with nothing committed")
	}
	<-c.prebuilds
	wake <- struct{}{}
	<-c.passes
	cancel()
	<-done
	<-c.released
}
