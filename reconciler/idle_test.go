package reconciler_test

import (
	"testing"

	"github.com/parkway-io/parkway/metadata"
)

// An idle node's periodic pass is skipped without reading the committed
// partitions: with thousands of them, the skipped pass allocates nothing
// (a pass that copied the store's partitions, as Snapshot does, would
// allocate their slice every period on every shard).
func TestIdlePassReadsNoPartitions(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.apply(metadata.CreateStream{Name: "s"})
	for i := range 5 {
		h.apply(metadata.CreateTopic{Stream: 0, Name: "t" + itoa(i), Partitions: 1000})
	}
	// The first pass builds, the second checks everything once more.
	if rep := h.pass(0); rep.Built != 5000 {
		t.Fatalf("first pass %+v: want 5,000 built", rep)
	}
	if rep := h.pass(0); rep.DidWork() || rep.Skipped {
		t.Fatalf("second pass %+v: want a full pass with nothing to do", rep)
	}
	if rep := h.pass(0); !rep.Skipped {
		t.Fatalf("idle pass %+v: want skipped", rep)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if rep := h.pass(0); !rep.Skipped {
			t.Fatalf("idle pass %+v: want skipped", rep)
		}
	})
	if allocs != 0 {
		t.Fatalf("a skipped pass allocates %.0f times: it reads the committed partitions", allocs)
	}

	// A commit still ends the skip.
	h.apply(metadata.CreateTopic{Stream: 0, Name: "late", Partitions: 1})
	if rep := h.pass(0); rep.Skipped || rep.Built != 1 {
		t.Fatalf("pass after a commit %+v: want the new partition built", rep)
	}
}
