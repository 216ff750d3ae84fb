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
	n, tp := openTopic(t, parkway.Config{Shards: 3, Clock: clk}, 3)
	ctx := context.Background()
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
