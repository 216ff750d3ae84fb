package parkway_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
)

// PurgeTopic empties every partition without reusing offsets; a stored
// consumer offset keeps pointing past what was purged.
func TestPurgeTopic(t *testing.T) {
	for _, dir := range []string{"", "/data"} {
		synctest.Test(t, func(t *testing.T) {
			n := open(t, parkway.Config{DataDir: dir, FS: vfs.NewMem(), Shards: 2})
			s := mustStream(t, n, "s")
			tp := mustTopic(t, n, s, "t", 2)
			mustProduce(t, n, tp, parkway.PartitionID(0), "a", "b")
			mustProduce(t, n, tp, parkway.PartitionID(1), "c")
			if err := n.Admin().PurgeTopic(ctxFor(t), tp); err != nil {
				t.Fatal(err)
			}
			for p := range uint32(2) {
				if got := readAllFrom(t, n, tp, p, 0); len(got) != 0 {
					t.Fatalf("partition %d after purge: %v", p, payloads(got))
				}
			}
			ack := mustProduce(t, n, tp, parkway.PartitionID(0), "d")
			if ack.FirstOffset != 2 {
				t.Fatalf("offset after purge %d, want 2 (never reused)", ack.FirstOffset)
			}
			if _, err := n.Poll(ctxFor(t), tp, 0, parkway.AtOffset(0), 10); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
				t.Fatalf("poll below the purge point: %v", err)
			}
			b, err := n.Poll(ctxFor(t), tp, 0, parkway.AtConsumer("fresh"), 10)
			if err != nil || len(b.Messages) != 1 || string(b.Messages[0].Payload) != "d" {
				t.Fatalf("poll at a new consumer after purge: %+v %v", b, err)
			}
			if err := n.Admin().PurgeTopic(ctxFor(t), parkway.Topic{Stream: s, ID: 99, Revision: 99}); !errors.Is(err, parkway.ErrTopicNotFound) {
				t.Fatalf("purge unknown topic: %v", err)
			}
		})
	}
}

// readAllFrom polls a partition from an offset to its end.
func readAllFrom(t *testing.T, n *parkway.Node, tp parkway.Topic, p uint32, from uint64) []parkway.Message {
	t.Helper()
	b, err := n.Poll(ctxFor(t), tp, p, parkway.AtOffset(from), 1000)
	if errors.Is(err, parkway.ErrOffsetOutOfRange) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Messages
}

func TestTruncatePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{DataDir: "/data", FS: vfs.NewMem(), Shards: 1})
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1)
		mustProduce(t, n, tp, parkway.PartitionID(0), "a", "b", "c")
		if err := n.Admin().TruncatePartition(ctxFor(t), tp, 0, 2); err != nil {
			t.Fatal(err)
		}
		got := readAllFrom(t, n, tp, 0, 2)
		if len(got) != 1 || string(got[0].Payload) != "c" {
			t.Fatalf("after truncate: %v", payloads(got))
		}
		if err := n.Admin().TruncatePartition(ctxFor(t), tp, 0, 99); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("truncate past the end: %v", err)
		}
	})
}

// Retention by size deletes whole old segments on the reconciler's
// retention tick; SetTopicConfig reaches existing partitions.
func TestRetentionBySize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{DataDir: "/data", FS: vfs.NewMem(), Shards: 1,
			SegmentSize: parkway.MinSegmentSize, RetentionInterval: time.Second})
		s := mustStream(t, n, "s")
		tp, err := n.Admin().CreateTopic(ctxFor(t), s, "t", 1, parkway.WithFsync(parkway.FsyncNever, 0))
		if err != nil {
			t.Fatal(err)
		}
		big := make([]parkway.Message, 64)
		for i := range big {
			big[i].Payload = make([]byte, 64<<10) // 4 MiB per batch: several segments
		}
		for range 4 {
			if _, err := n.Produce(ctxFor(t), tp, parkway.PartitionID(0), big...); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.Admin().SetTopicConfig(ctxFor(t), tp, parkway.TopicConfig{Fsync: parkway.FsyncNever, RetentionBytes: 2 << 20}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // virtual: a few retention ticks
		synctest.Wait()
		if _, err := n.Poll(ctxFor(t), tp, 0, parkway.AtOffset(0), 1); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("oldest messages still readable after size retention: %v", err)
		}
		b, err := n.Poll(ctxFor(t), tp, 0, parkway.AtOffset(255), 1)
		if err != nil || len(b.Messages) != 1 {
			t.Fatalf("newest message lost to retention: %+v %v", b, err)
		}
	})
}

func TestTopicOptionsValidated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{})
		s := mustStream(t, n, "s")
		if _, err := n.Admin().CreateTopic(ctxFor(t), s, "t", 1, parkway.WithRetention(-time.Second, 0)); err == nil {
			t.Fatal("negative retention accepted")
		}
		if _, err := n.Topic(ctxFor(t), s, "t"); err == nil {
			t.Fatal("invalid topic created")
		}
	})
}
