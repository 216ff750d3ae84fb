package parkway_test

import (
	"context"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
)

// TestProduceAllocations pins the allocations of a one-message produce
// and its wait on an in-memory node, so that one more per message shows
// as a failure rather than as noise in a benchmark. In particular a
// variadic batch the node only reads must stay on the caller's stack: a
// lent batch and a given one (ProduceAsyncGive keeps its slice) share one
// path, and when one parameter carried both, the caller's slice escaped
// on every produce (7 and 6 allocations here, against 6 and 5). Produce
// takes its request, message copy and reply channel from a pool (5
// allocations before it did).
func TestProduceAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	n, tp := openTopic(t, parkway.Config{Shards: 1}, 1)
	ctx := context.Background()
	payload := make([]byte, 100)
	p0 := parkway.PartitionID(0)
	if _, err := n.Produce(ctx, tp, p0, parkway.Message{Payload: payload}); err != nil {
		t.Fatal(err) // the partition is built before counting
	}
	for _, c := range []struct {
		name string
		max  float64
		do   func() error
	}{
		{"ProduceAsync", 6, func() error {
			_, err := n.ProduceAsync(ctx, tp, p0, parkway.Message{Payload: payload}).Wait(ctx)
			return err
		}},
		{"Produce", 2, func() error {
			_, err := n.Produce(ctx, tp, p0, parkway.Message{Payload: payload})
			return err
		}},
	} {
		var failed error
		got := testing.AllocsPerRun(200, func() {
			if err := c.do(); err != nil {
				failed = err
			}
		})
		if failed != nil {
			t.Fatalf("%s: %v", c.name, failed)
		}
		if got > c.max {
			t.Errorf("%s allocates %.1f times per one-message produce and wait, want at most %.0f", c.name, got, c.max)
		}
	}
}

// openTopic opens a node of cfg, closed when the test ends, with a
// stream "s" holding a topic "t" of the given partitions and options.
func openTopic(t *testing.T, cfg parkway.Config, partitions int, opts ...parkway.TopicOption) (*parkway.Node, parkway.Topic) {
	t.Helper()
	n, err := parkway.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	ctx := context.Background()
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := n.Admin().CreateTopic(ctx, s, "t", partitions, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return n, tp
}

// TestProduceAllocationsJournaledInterval pins a one-message produce
// and its wait on a node with a data directory, to a partition under
// FsyncInterval in its first interval: built deferred, its first
// records staged in the shard's journal, its later ones (once they
// outgrow what it holds behind) written to its own file. Those are in
// the page cache when the append returns, so their acks do not wait
// for the shard's commit group; they did, and each produce cost the
// group's journal calls (two allocations) and a yield of the pump.
func TestProduceAllocationsJournaledInterval(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	// An interval no test outlasts: the partition stays in its first.
	n, tp := openTopic(t, parkway.Config{DataDir: t.TempDir(), Shards: 1}, 1, parkway.WithFsync(parkway.FsyncInterval, time.Hour))
	ctx := context.Background()
	payload := make([]byte, 100)
	p0 := parkway.PartitionID(0)
	for range 100 { // past the 4 KiB a deferred partition holds behind
		if _, err := n.Produce(ctx, tp, p0, parkway.Message{Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	var failed error
	got := testing.AllocsPerRun(200, func() {
		if _, err := n.Produce(ctx, tp, p0, parkway.Message{Payload: payload}); err != nil {
			failed = err
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if got > 0 {
		t.Errorf("Produce to a journaled FsyncInterval partition allocates %.1f times per one-message produce and wait, want none", got)
	}
}
