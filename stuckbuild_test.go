package parkway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// blockBuild holds every filesystem operation under one topic's directory
// until released: a partition build stuck on a slow or hung disk.
type blockBuild struct {
	topic   string
	release chan struct{}
}

func (b *blockBuild) MaybeError(op errorfs.Op) error {
	if strings.Contains(op.Path, b.topic) {
		<-b.release
	}
	return nil
}

// Behaviour 17 with a build that hangs: a produce parked behind it is
// answered by its deadline (RequestTimeout here, the context having none)
// although the reconciler pass that would age it is stuck inside the
// build; the shard expires it on its own clock. Once the disk answers, the
// partition materialises and takes writes.
func TestBehaviour17ParkedAnsweredByDeadlineWhileBuildHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		block := &blockBuild{topic: "/topics/0/", release: make(chan struct{})}
		n := open(t, parkway.Config{DataDir: "/data", FS: errorfs.New(vfs.NewMem(), block), Shards: 1,
			RequestTimeout: 4 * time.Second})
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1)
		start := time.Now()
		_, err := n.Produce(context.Background(), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("x")})
		waited := time.Since(start)
		if err == nil || !errors.Is(err, parkway.ErrRetry) {
			t.Fatalf("produce behind a hung build: %v, want a retriable error at the deadline", err)
		}
		if waited > 4*time.Second+100*time.Millisecond {
			t.Fatalf("answered after %v, past the 4 s request deadline", waited)
		}
		close(block.release)
		time.Sleep(2 * time.Second) // the stuck pass ends, the partition lands
		mustProduce(t, n, tp, parkway.PartitionID(0), "after")
		expectLog(t, n, tp, 0, "after")
	})
}
