package parkway_test

import (
	"context"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/clock"
)

// An idle node must not spin inside its host's process: with nothing
// parked and nothing pending, the only armed timers are the reconcilers'
// period timers, one per shard, and advancing time by one period runs one
// pass each and re-arms exactly those.
func TestIdleNodeArmsOnlyOnePeriodTimerPerShard(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	n, err := parkway.Open(parkway.Config{Shards: 3, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := n.Admin().CreateTopic(ctx, s, "t", 3)
	if err != nil {
		t.Fatal(err)
	}
	for p := range uint32(3) {
		if _, err := n.Produce(ctx, tp, parkway.PartitionID(p), parkway.Message{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	clk.WaitPending(3)
	for range 5 {
		clk.Advance(time.Second)
		clk.WaitPending(3)
		if got := clk.Pending(); got != 3 {
			t.Fatalf("%d timers armed on an idle 3-shard node, want 3", got)
		}
	}
}
