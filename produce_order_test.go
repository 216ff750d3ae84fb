package parkway_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/parkway-io/parkway"
)

// A producer's messages reach the partition in the order it sent them,
// whichever way each went: an async produce queued for the shard's pump,
// then a synchronous one that may run on the producer's own goroutine
// when the shard is idle (the inline run waits for the frames handed to
// the pump). Several producers at once, so each finds the shard idle,
// busy or just taking a frame.
func TestProduceOrderAcrossAsyncAndSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{DataDir: t.TempDir(), Shards: 1})
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1)
		const producers, rounds = 4, 300
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for g := range producers {
			wg.Go(func() {
				ctx := ctxFor(t)
				for i := range rounds {
					pa := n.ProduceAsync(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: fmt.Appendf(nil, "%d/%d/a", g, i)})
					if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: fmt.Appendf(nil, "%d/%d/s", g, i)}); err != nil {
						errs <- err
						return
					}
					if _, err := pa.Wait(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		next := make([]int, producers) // each producer's next message: 2i async, 2i+1 sync
		msgs := readAll(t, n, tp, 0)
		for _, m := range msgs {
			var g, i int
			var kind byte
			if _, err := fmt.Sscanf(string(m.Payload), "%d/%d/%c", &g, &i, &kind); err != nil {
				t.Fatalf("payload %q: %v", m.Payload, err)
			}
			want := 2*i + map[byte]int{'a': 0, 's': 1}[kind]
			if next[g] != want {
				t.Fatalf("producer %d: %q at offset %d, want its message %d next", g, m.Payload, m.Offset, next[g])
			}
			next[g]++
		}
		if len(msgs) != 2*producers*rounds {
			t.Fatalf("partition holds %d messages, want %d", len(msgs), 2*producers*rounds)
		}
	})
}
