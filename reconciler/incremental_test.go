package reconciler_test

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
)

// A pass after commits converges what they touched, and only that, without
// a full diff: builds, removals, durability changes and rows of other
// shards all happen in the incremental pass; a pass that cannot be
// incremental (nothing done yet, a failure pending) diffs everything.
func TestIncrementalPassConvergesWhatCommitsTouched(t *testing.T) {
	// Namespaces (0, t, 0): shard = t mod 2.
	h := newHarness(t, 2, func(ns metadata.Namespace, n int) int { return int(ns.Topic()) % n })
	a := h.topic("a") // topic 0: shard 0
	if rep := h.pass(0); rep.Incremental || rep.Built != 1 {
		t.Fatalf("first pass %+v: want a full pass building a", rep)
	}
	// The pass after one that did work runs (it is not skipped), and
	// examines nothing: nothing changed; the next one skips.
	if rep := h.pass(0); rep.Skipped || !rep.Incremental || rep.Examined != 0 || rep.DidWork() {
		t.Fatalf("second pass %+v: want an incremental pass with nothing to do", rep)
	}
	if rep := h.pass(0); !rep.Skipped {
		t.Fatalf("idle pass %+v: want skipped", rep)
	}

	b := h.topic("b") // topic 1: shard 1, a row on shard 0
	c := h.topic("c") // topic 2: shard 0
	rep := h.pass(0)
	if !rep.Incremental || rep.Built != 1 || rep.RowsWritten != 1 {
		t.Fatalf("pass after two creates %+v: want incremental, c built, b's row written", rep)
	}
	if row, ok := h.table.Get(b.NS); !ok || row != (router.Row{Owner: 1, Epoch: b.CreatedRevision}) {
		t.Fatalf("row of b = %+v, %v", row, ok)
	}
	r := h.send(0, c.NS, "x")
	if resp, ok := r.answer(t); !ok || resp.Err != nil {
		t.Fatalf("produce to c: %+v, %v: want served", resp, ok)
	}

	// A topic configuration change reconfigures the partitions held.
	h.apply(metadata.SetTopicConfig{Stream: 0, Topic: c.Topic, Config: metadata.TopicConfig{Fsync: metadata.FsyncInterval, FsyncInterval: time.Second}})
	if rep := h.pass(0); !rep.Incremental || rep.Reconfigured != 1 {
		t.Fatalf("pass after a config change %+v: want incremental, one reconfigured", rep)
	}

	// Delete and recreate in the same ids: the dead incarnation is torn
	// down and the new one built, in one incremental pass.
	h.apply(metadata.DeleteTopic{Stream: 0, Topic: a.Topic})
	a2 := h.topic("a2")
	if a2.NS != a.NS || a2.CreatedRevision == a.CreatedRevision {
		t.Fatalf("recreated %+v, want a's namespace at a new incarnation (a: %+v)", a2, a)
	}
	rep = h.pass(0)
	if !rep.Incremental || rep.Removed != 1 || rep.Built != 1 {
		t.Fatalf("pass after delete and recreate %+v: want incremental, one removed and one built", rep)
	}
	st, err := h.shards[0].Inspect(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[metadata.Namespace]uint64{a2.NS: a2.CreatedRevision, c.NS: c.CreatedRevision}
	if len(st.Owned) != len(want) || st.Owned[a2.NS] != want[a2.NS] || st.Owned[c.NS] != want[c.NS] {
		t.Fatalf("owned %v, want %v", st.Owned, want)
	}
	if st.Durability[c.NS].Fsync != metadata.FsyncInterval {
		t.Fatalf("durability of c %+v: want the interval policy", st.Durability[c.NS])
	}

	// Deleting the stream removes everything it held.
	h.apply(metadata.DeleteStream{Stream: 0})
	if rep := h.pass(0); !rep.Incremental || rep.Removed != 2 {
		t.Fatalf("pass after deleting the stream %+v: want incremental, two removed", rep)
	}

	// A failed build is retried, by incremental passes, until it succeeds.
	d := h.topic("d") // topic 0 again: shard 0
	h.store.setFail(d.NS, errDisk)
	if rep := h.pass(0); !rep.Incremental || rep.Failed != 1 {
		t.Fatalf("pass with a failing build %+v: want incremental, one failed", rep)
	}
	h.store.setFail(d.NS, nil)
	h.topic("e")
	h.clk.Advance(time.Minute)
	if rep := h.pass(0); !rep.Incremental || rep.Built != 1 || rep.Examined != 2 {
		t.Fatalf("pass with a failure pending %+v: want an incremental pass building d, examining d and e", rep)
	}
	if rep := h.pass(0); rep.DidWork() {
		t.Fatalf("pass after convergence %+v: want nothing to do", rep)
	}
}
