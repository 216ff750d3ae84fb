//go:build unix

package partition

import (
	"syscall"
	"testing"
	"time"
)

// BenchmarkJournalCommit: one produce of one small message to one of 8
// journaled partitions, committed (the acknowledging path of a FsyncAlways
// partition in a group commit): a journal frame, its fdatasync, and the
// journal's synced-end mark written back before it. Reports CPU-µs per
// commit with the wall time.
func BenchmarkJournalCommit(b *testing.B) {
	s, err := NewFileStore(FileConfig{Dir: b.TempDir(), MaxOpenFiles: 64})
	if err != nil {
		b.Fatal(err)
	}
	j := s.NewJournal()
	ps := journalPartitions(b, s, 8)
	msg := []Message{{Payload: make([]byte, 100)}}
	commit := func(p Partition) {
		if _, err := p.Append(msg); err != nil {
			b.Fatal(err)
		}
		for _, err := range j.Commit([]Partition{p}) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, p := range ps {
		commit(p) // the first commit of each is a direct fsync
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	n := 0
	for ; b.Loop(); n++ {
		commit(ps[n%len(ps)])
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1e3/float64(max(n, 1)), "cpu-µs/commit")
	b.StopTimer()
	for _, p := range ps {
		_ = p.Close()
	}
	_ = j.Close()
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
