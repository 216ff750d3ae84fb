//go:build unix

package partition_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway/partition"
)

// BenchmarkAppendLarge appends coalesced batches of 16 messages of 64 KiB
// to a FileStore (no fsync), the partition's share of a pipelined 64 KiB
// produce. It reports allocation and CPU per message (process user+system
// time, which a loaded machine disturbs less than wall time) and the bytes
// the append path copies in user space per message: each record's head is
// encoded in the reused append buffer and its payload, 16 KiB or more, is
// written from the caller's slice with the heads in one vectored write, so
// only the 60-byte head is copied (the kernel's copy into the page cache
// is not counted).
func BenchmarkAppendLarge(b *testing.B) {
	const batch, size = 16, 64 << 10
	p := mustBuild(b, newFileStore(b, partition.FileConfig{Dir: b.TempDir(), SegmentSize: 64 << 20}), mustNS(b, 1, 1, 1), 1)
	defer mustClose(b, p)
	msgs := make([]partition.Message, batch)
	for i := range msgs {
		msgs[i].Payload = make([]byte, size)
	}
	b.SetBytes(batch * size)
	b.ReportAllocs()
	cpu0 := benchCPU(b)
	for b.Loop() {
		if _, err := p.Append(msgs); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N) * batch
	b.ReportMetric(float64((benchCPU(b)-cpu0).Nanoseconds())/1e3/n, "cpu-µs/msg")
	b.ReportMetric(float64(partition.AppendCopiedBytes(msgs))/batch, "copied-B/msg")
	b.ReportMetric(float64(b.N)*batch, "msgs")
}

// benchCPU is the process's user+system CPU time so far.
func benchCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
