package parkway_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// A keyed produce retried under the same key — through another node, as
// a Kafka client's retry reaches another listener after a leader change —
// is answered with the first copy's offset and appended once: the key is
// in the partition's replicated deduplication window.
func TestClusterProduceAsyncIdempotentAppliesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := threeNodes(t)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 1)
		key := parkway.ProducerSeq{Producer: 77, Seq: 1}
		msg := parkway.Message{Payload: []byte("once")}
		first, err := nodes[2].ProduceAsyncIdempotent(ctx, tp, parkway.PartitionID(0), key, msg).Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, via := range []transport.NodeID{3, 1, 2} {
			again, err := nodes[via].ProduceAsyncIdempotent(ctx, tp, parkway.PartitionID(0), key, msg).Wait(ctx)
			if err != nil || again.FirstOffset != first.FirstOffset {
				t.Fatalf("the retry through node %d: offset %d (%v), want the first copy's %d", via, again.FirstOffset, err, first.FirstOffset)
			}
		}
		next, err := nodes[3].ProduceAsyncIdempotent(ctx, tp, parkway.PartitionID(0), parkway.ProducerSeq{Producer: 77, Seq: 2},
			parkway.Message{Payload: []byte("next")}).Wait(ctx)
		if err != nil || next.FirstOffset != first.FirstOffset+1 {
			t.Fatalf("a new key: offset %d (%v), want %d", next.FirstOffset, err, first.FirstOffset+1)
		}
		for _, n := range nodes {
			waitFor(t, "convergence", func() bool { return len(readAll(t, n, tp, 0)) == 2 })
			expectLog(t, n, tp, 0, "once", "next")
		}
		if _, err := nodes[1].ProduceAsyncIdempotent(ctx, tp, parkway.PartitionID(0), parkway.ProducerSeq{}, msg).Wait(ctx); !errors.Is(err, parkway.ErrInvalidArgument) {
			t.Fatalf("producer 0: %v, want ErrInvalidArgument", err)
		}
	})
}
