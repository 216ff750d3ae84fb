package parkway_test

import (
	"context"
	"testing"

	"github.com/parkway-io/parkway"
)

// benchNode opens a 2-shard in-memory node with one topic of two
// partitions, materialised (a first produce to each waits it out).
func benchNode(b *testing.B, dir string) (*parkway.Node, uint32, uint32) {
	b.Helper()
	n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Close() })
	ctx := context.Background()
	s, err := n.CreateStream(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	t, err := n.CreateTopic(ctx, s, "t", 2)
	if err != nil {
		b.Fatal(err)
	}
	for p := range uint32(2) {
		if _, err := n.Produce(ctx, s, t, parkway.PartitionID(p), parkway.Message{Payload: []byte("warm")}); err != nil {
			b.Fatal(err)
		}
	}
	return n, s, t
}

// BenchmarkProduce measures produce of 100-byte messages through a Node
// with 2 shards: one message per call, and batches of 100. The msgs/s
// metric is per message in both cases.
func BenchmarkProduce(b *testing.B) {
	payload := make([]byte, 100)
	for _, tc := range []struct {
		name  string
		batch int
		dir   bool
	}{{"single/mem", 1, false}, {"batch100/mem", 100, false}, {"single/file", 1, true}, {"batch100/file", 100, true}} {
		b.Run(tc.name, func(b *testing.B) {
			dir := ""
			if tc.dir {
				dir = b.TempDir()
			}
			n, s, t := benchNode(b, dir)
			msgs := make([]parkway.Message, tc.batch)
			for i := range msgs {
				msgs[i].Payload = payload
			}
			ctx := context.Background()
			b.SetBytes(int64(100 * tc.batch))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := n.Produce(ctx, s, t, parkway.PartitionID(0), msgs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*tc.batch)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkPoll measures polling 100 messages of 100 bytes per call from a
// partition holding 10,000.
func BenchmarkPoll(b *testing.B) {
	n, s, t := benchNode(b, "")
	ctx := context.Background()
	msgs := make([]parkway.Message, 100)
	for i := range msgs {
		msgs[i].Payload = make([]byte, 100)
	}
	for range 100 {
		if _, err := n.Produce(ctx, s, t, parkway.PartitionID(0), msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(100 * 100)
	b.ReportAllocs()
	var off uint64
	for b.Loop() {
		batch, err := n.Poll(ctx, s, t, 0, parkway.AtOffset(off), 100)
		if err != nil || len(batch.Messages) != 100 {
			b.Fatalf("poll at %d: %d messages, %v", off, len(batch.Messages), err)
		}
		off = batch.Next % 9_900
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
}
