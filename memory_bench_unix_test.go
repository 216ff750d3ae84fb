//go:build unix

package parkway_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/parkway-io/parkway"
)

// BenchmarkMemoryCPU measures produce and poll on an in-memory node (2
// shards) with the process's CPU time per message (getrusage, user +
// system: the caller's and the shards' goroutines together). produce:
// Produce calls of batch messages of size bytes each to one partition.
// poll: Poll calls of up to count messages from a partition of 100,000
// 100-byte messages, each from the previous poll's Next (wrapping at the
// end), so an in-memory read that stops at a chunk's end is read on.
func BenchmarkMemoryCPU(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct{ batch, size int }{{1, 100}, {100, 100}, {100, 1024}} {
		b.Run(fmt.Sprintf("produce/batch=%d/size=%d", tc.batch, tc.size), func(b *testing.B) {
			n, t := benchNode(b, "")
			msgs := make([]parkway.Message, tc.batch)
			for i := range msgs {
				msgs[i].Payload = make([]byte, tc.size)
			}
			b.SetBytes(int64(tc.size * tc.batch))
			b.ReportAllocs()
			cpu := processCPU(b)
			for b.Loop() {
				if _, err := n.Produce(ctx, t, parkway.PartitionID(0), msgs...); err != nil {
					b.Fatal(err)
				}
			}
			msgsDone := float64(b.N * tc.batch)
			b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/1e3/msgsDone, "cpu-µs/msg")
			b.ReportMetric(msgsDone/b.Elapsed().Seconds(), "msgs/s")
		})
	}
	for _, count := range []int{100, 1000} {
		b.Run(fmt.Sprintf("poll/count=%d", count), func(b *testing.B) {
			n, t := benchNode(b, "")
			msgs := make([]parkway.Message, 1000)
			for i := range msgs {
				msgs[i].Payload = make([]byte, 100)
			}
			for range 100 {
				if _, err := n.Produce(ctx, t, parkway.PartitionID(0), msgs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			read := 0
			var off uint64
			cpu := processCPU(b)
			for b.Loop() {
				batch, err := n.Poll(ctx, t, 0, parkway.AtOffset(off), count)
				if err != nil || len(batch.Messages) == 0 {
					b.Fatalf("poll at %d: %d messages, %v", off, len(batch.Messages), err)
				}
				read += len(batch.Messages)
				if off = batch.Next; off >= batch.End {
					off = 0
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/1e3/float64(read), "cpu-µs/msg")
			b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(read)/float64(b.N), "msgs/poll")
		})
	}
}
