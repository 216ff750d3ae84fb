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

// Behaviour 25 with a parked request: a produce parks behind its
// partition's hung build; while it is parked, its topic is deleted and
// recreated with the same ids. Once the disk answers, the produce is
// refused as a stale handle — it never lands in the new topic, which holds
// only what was produced to it.
func TestBehaviour25ParkedRequestRefusedAfterRecreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		block := &blockBuild{topic: "/topics/0/", release: make(chan struct{})}
		n := open(t, parkway.Config{DataDir: "/data", FS: errorfs.New(vfs.NewMem(), block), Shards: 1})
		ctx := ctxFor(t)
		s := mustStream(t, n, "s")
		old := mustTopic(t, n, s, "t", 1)
		pending := n.ProduceAsync(ctx, old, parkway.PartitionID(0), parkway.Message{Payload: []byte("stale")})
		synctest.Wait() // parked at the shard behind the hung build
		if err := n.Admin().DeleteTopic(ctx, old); err != nil {
			t.Fatalf("DeleteTopic: %v", err)
		}
		fresh := mustTopic(t, n, s, "t", 1)
		if fresh.ID != old.ID {
			t.Fatalf("recreated topic id %d, want %d", fresh.ID, old.ID)
		}
		close(block.release)
		_, err := pending.Wait(ctx)
		if !errors.Is(err, parkway.ErrTopicNotFound) || !errors.Is(err, parkway.ErrStaleHandle) {
			t.Fatalf("parked produce after delete + recreate: %v, want ErrTopicNotFound and ErrStaleHandle", err)
		}
		mustProduce(t, n, fresh, parkway.PartitionID(0), "new")
		expectLog(t, n, fresh, 0, "new")
	})
}
