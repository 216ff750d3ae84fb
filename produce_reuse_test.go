package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// Produce reuses its request and reply channel only after a call that
// took its one answer. A Produce given up while its request is parked at
// the shard (behind a partition build that hangs) leaves both to the
// collector: the shard still holds the request and answers it once the
// build finishes. Reused, the next Produce would rewrite the parked
// request, and a later one would read that late answer from the channel
// as its own. Each acknowledged produce must name the offset holding its
// own message, and every message must be appended once.
func TestProduceGivenUpLeavesNoLateAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		block := &blockBuild{topic: "/topics/1/", release: make(chan struct{})}
		n := open(t, parkway.Config{DataDir: "/data", FS: errorfs.New(vfs.NewMem(), block), Shards: 1,
			RequestTimeout: time.Hour})
		s := mustStream(t, n, "s")
		other := mustTopic(t, n, s, "other", 1) // topic 0: built
		p0 := parkway.PartitionID(0)
		var want []string
		produce := func(payload string) {
			t.Helper()
			ack, err := n.Produce(context.Background(), other, p0, parkway.Message{Payload: []byte(payload)})
			if err != nil {
				t.Fatalf("Produce(%q): %v", payload, err)
			}
			if ack.FirstOffset != uint64(len(want)) {
				t.Fatalf("Produce(%q) acknowledged at offset %d, want %d", payload, ack.FirstOffset, len(want))
			}
			want = append(want, payload)
		}
		produce("o-first")
		stuck := mustTopic(t, n, s, "stuck", 1) // topic 1: its build hangs
		const rounds = 16
		for i := range rounds {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Second, cancel) // the request is parked by then
			_, err := n.Produce(ctx, stuck, p0, parkway.Message{Payload: fmt.Appendf(nil, "stuck-%d", i)})
			cancel()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Produce behind a hung build, given up: %v, want context.Canceled", err)
			}
			produce(fmt.Sprintf("o-%d", i))
		}
		close(block.release)
		time.Sleep(2 * time.Second) // the build lands; the parked requests are answered
		synctest.Wait()
		for i := range rounds {
			produce(fmt.Sprintf("o-after-%d", i))
		}
		expectLog(t, n, other, 0, want...)
		if got := readAll(t, n, stuck, 0); len(got) > rounds {
			t.Fatalf("the stuck partition holds %d messages, more than the %d produced", len(got), rounds)
		}
	})
}

// Produce's pool is its Node's: a reply channel made by a caller in one
// synctest bubble must never reach a Node in another (a package-wide pool
// handed the first bubble's channels to the second, and the runtime
// stopped the program: a select on a channel of another bubble).
func TestProducePoolStaysInItsBubble(t *testing.T) {
	for i := range 3 {
		synctest.Test(t, func(t *testing.T) {
			n := open(t, parkway.Config{Shards: 1})
			tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 1)
			for j := range 8 {
				mustProduce(t, n, tp, parkway.PartitionID(0), fmt.Sprintf("m-%d-%d", i, j))
			}
		})
	}
}
