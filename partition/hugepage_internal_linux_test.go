package partition

import (
	"syscall"
	"testing"
	"unsafe"
)

// TestMemHugeChunksAligned: a chunk of two huge pages or more starts on a
// huge-page boundary and is exactly its size (the allocation's slack
// around it never carved), so the kernel can back all of it, not only its
// aligned middle, with huge pages; smaller chunks are allocations of
// their own size. Appends of lent batches reach the 8 MiB chunks through
// the doubling, each chunk checked as it starts.
func TestMemHugeChunksAligned(t *testing.T) {
	p := memArenaPartition(t)
	lent := make([]byte, 64<<10)
	seen := map[int]bool{}
	for p.log.arenaSize < memArenaMax || !seen[memArenaMax] {
		if _, err := p.AppendEncoded(&lentBatch{raw: lent}, 0); err != nil {
			t.Fatal(err)
		}
		if len(p.log.arena) != len(lent) { // a chunk just started
			continue
		}
		size := p.log.arenaSize
		seen[size] = true
		if cap(p.log.arena) != size {
			t.Fatalf("a chunk of %d bytes has capacity %d", size, cap(p.log.arena))
		}
		at := uintptr(unsafe.Pointer(unsafe.SliceData(p.log.arena)))
		if size >= 2*hugePage && at%hugePage != 0 {
			t.Fatalf("a chunk of %d bytes starts %d bytes past a huge-page boundary", size, at%hugePage)
		}
	}
	if !seen[2*hugePage] {
		t.Fatalf("no chunk of %d bytes among %v", 2*hugePage, seen)
	}
}

// BenchmarkMemCarveFresh copies 16 KiB lent batches into a partition that
// keeps everything, as a node in memory sent a Kafka producer's batches
// does: every chunk is memory the process never touched, so what a batch
// costs is mostly the page faults of its first write. Reports the minor
// faults per MiB kept (256 with 4 KiB pages, a handful with huge pages).
func BenchmarkMemCarveFresh(b *testing.B) {
	lent := make([]byte, 16<<10)
	var before, after syscall.Rusage
	var kept int64
	b.SetBytes(int64(len(lent)))
	p := memArenaPartition(b)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for range b.N {
		if _, err := p.AppendEncoded(&lentBatch{raw: lent}, 0); err != nil {
			b.Fatal(err)
		}
		kept += int64(len(lent))
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	b.ReportMetric(float64(after.Minflt-before.Minflt)/(float64(kept)/(1<<20)), "faults/MiB")
}
