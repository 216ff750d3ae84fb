package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/parkway-io/parkway/metadata"
)

// The passes a busy node runs between commits — after a pass that built
// something, with frames parked, with a build backed off — examine what
// changed and what is due for a retry, not every committed partition: at
// 2,000 partitions held, each examines at most the few that changed. And
// what the full pass guaranteed still holds in them: parked frames age
// out, a backed-off build is retried when due, a moot backoff is dropped.
func TestPassesBetweenCommitsExamineWhatChanged(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.apply(metadata.CreateStream{Name: "s"})
	for i := range 2 {
		h.apply(metadata.CreateTopic{Stream: 0, Name: "big" + itoa(i), Partitions: 1000})
	}
	if rep := h.pass(0); rep.Incremental || rep.Built != 2000 || rep.Examined != 2000 {
		t.Fatalf("first pass %+v: want a full pass building 2,000", rep)
	}
	// Commits unrelated to the 2,000: a pass examines the new ones only.
	for i := range 50 {
		h.topic("t" + itoa(i))
	}
	if rep := h.pass(0); !rep.Incremental || rep.Built != 50 || rep.Examined != 50 {
		t.Fatalf("pass after 50 creates %+v: want incremental, 50 built, 50 examined", rep)
	}
	// The pass after one that did work: not skipped, examines nothing.
	if rep := h.pass(0); rep.Skipped || !rep.Incremental || rep.Examined != 0 || rep.DidWork() {
		t.Fatalf("pass after one that built %+v: want incremental, nothing examined", rep)
	}

	// A frame parked for a namespace not committed (a lagging replica's
	// view looks the same) ages out over three passes, each examining
	// nothing.
	ghost, _ := metadata.NewNamespace(0, 999, 0)
	r := h.send(0, ghost, "x")
	for i := 1; i <= 3; i++ {
		rep := h.pass(0)
		if rep.Skipped || !rep.Incremental || rep.Examined != 0 {
			t.Fatalf("pass %d with a frame parked %+v: want incremental, nothing examined", i, rep)
		}
		if want := i == 3; (rep.Expired == 1) != want {
			t.Fatalf("pass %d with a frame parked %+v: expired only by the third", i, rep)
		}
	}
	if resp, ok := r.answer(t); !ok || resp.Err == nil {
		t.Fatalf("parked frame %+v, %v: want answered with an error once aged out", resp, ok)
	}
	h.pass(0) // the pass after one that did work
	if rep := h.pass(0); !rep.Skipped {
		t.Fatalf("pass after the sweep %+v: want skipped", rep)
	}

	// A failed build is retried when due, examining only itself.
	f := h.topic("f")
	h.store.setFail(f.NS, errDisk)
	if rep := h.pass(0); !rep.Incremental || rep.Failed != 1 || rep.Examined != 1 {
		t.Fatalf("pass with a failing build %+v: want incremental, one failed, one examined", rep)
	}
	if rep := h.pass(0); rep.Skipped || !rep.Incremental || rep.Built+rep.Failed != 0 || rep.Pending != 1 || rep.Examined > 1 {
		t.Fatalf("pass before the retry is due %+v: want incremental, nothing tried, one pending", rep)
	}
	h.store.setFail(f.NS, nil)
	h.clk.Advance(time.Minute)
	if rep := h.pass(0); !rep.Incremental || rep.Built != 1 || rep.Pending != 0 || rep.Examined != 1 {
		t.Fatalf("pass with the retry due %+v: want incremental, f built, one examined", rep)
	}

	// A backoff whose partition is deleted meanwhile is dropped.
	g := h.topic("g")
	h.store.setFail(g.NS, errDisk)
	if rep := h.pass(0); rep.Failed != 1 {
		t.Fatalf("pass with a failing build %+v: want one failed", rep)
	}
	h.apply(metadata.DeleteTopic{Stream: 0, Topic: g.Topic})
	if rep := h.pass(0); !rep.Incremental || rep.Pending != 0 || rep.Examined != 0 {
		t.Fatalf("pass after deleting the failed topic %+v: want incremental, the backoff dropped", rep)
	}
	h.pass(0)
	if rep := h.pass(0); !rep.Skipped {
		t.Fatalf("pass after convergence %+v: want skipped", rep)
	}
}

// A pass that fails midway leaves the reconciler's view of its shard
// unproven: the next pass is a full one, which reloads it from the shard.
func TestPassAfterAFailedPassIsFull(t *testing.T) {
	h := newHarness(t, 1, nil)
	a := h.topic("a")
	if rep := h.pass(0); rep.Built != 1 {
		t.Fatalf("first pass %+v: want a built", rep)
	}
	h.apply(metadata.DeleteTopic{Stream: 0, Topic: a.Topic})
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	if _, err := h.recs[0].Reconcile(ctx); err == nil {
		t.Fatal("pass with a cancelled context succeeded")
	}
	if rep := h.pass(0); rep.Incremental || rep.Removed != 1 {
		t.Fatalf("pass after a failed one %+v: want a full pass removing a", rep)
	}
}
