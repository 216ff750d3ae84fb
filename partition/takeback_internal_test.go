package partition

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// logOf reads a partition whole and returns its payloads.
func logOf(t *testing.T, p Partition) []string {
	t.Helper()
	msgs, err := p.Read(p.StartOffset(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return payloadsOf(msgs)
}

// reopenedLog opens a store on fsys (replaying its journal) and returns
// the log of journalNS 0.
func reopenedLog(t *testing.T, fsys vfs.FS) []string {
	t.Helper()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: fsys, MaxOpenFiles: 16, SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(journalNS(t, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	return logOf(t, p)
}

// A Commit whose journal write fails on a full disk takes the
// partition's appends since its last commit back out of its log, durably,
// and says so (ErrRolledBack, with the ENOSPC): they are not read, not
// found after a reopen or a power loss, and their offsets go to the next
// appends. Small records are held behind, unwritten; a large one reached
// the partition's file before the journal refused it (on a real full
// tmpfs the segment's pages were there already), which is how a produce
// answered ErrNoSpace came back after the rebuild that followed. (The
// largest size keeps the three appends within maxStash: a batch past it
// leaves the journal and is synced directly.)
func TestJournalFailedCommitTakesAppendsBack(t *testing.T) {
	for _, size := range []int{10, 8 << 10, maxStash/3 - 100} {
		for _, prealloc := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/prealloc=%v", size, prealloc), func(t *testing.T) {
				testFailedCommitTakesAppendsBack(t, size, prealloc)
			})
		}
	}
}

func testFailedCommitTakesAppendsBack(t *testing.T, size int, prealloc bool) {
	mem := vfs.NewMem()
	full := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool {
		switch op.Kind {
		case errorfs.OpWrite, errorfs.OpWriteAt, errorfs.OpPreallocate, errorfs.OpOpen:
			return strings.Contains(op.Path, "/journal/")
		}
		return false
	})
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: errorfs.New(mem, full), MaxOpenFiles: 16, SerialSyncs: true,
		Preallocate: prealloc, SegmentSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	ps := journalPartitions(t, s, 1)
	p := ps[0]
	commitRound(t, j, ps, 0) // direct: the partition joins
	commitRound(t, j, ps, 1) // journaled

	full.Set(true)
	refused := append([]byte("refused"), bytes.Repeat([]byte{'.'}, size)...)
	for range 3 {
		if _, err := p.Append([]Message{{Payload: refused}}); err != nil {
			t.Fatal(err)
		}
	}
	errs := j.Commit(ps)
	if !errors.Is(errs[0], ErrRolledBack) || !errors.Is(errs[0], syscall.ENOSPC) {
		t.Fatalf("commit with the journal's writes refused: %v, want ErrRolledBack and ENOSPC", errs[0])
	}
	if next := p.NextOffset(); next != 2 {
		t.Fatalf("after the failed commit the log ends at %d, want 2 (its appends taken back)", next)
	}
	want := []string{"0/0", "0/1"}
	if got := logOf(t, p); !equalStrings(got, want) {
		t.Fatalf("after the failed commit the log holds %q, want %q", got, want)
	}
	full.Set(false)
	// The next append gets the offsets taken back, and commits.
	if first, err := p.Append([]Message{{Payload: []byte("0/2")}}); err != nil || first != 2 {
		t.Fatalf("append after the failed commit: offset %d, %v; want 2", first, err)
	}
	for _, err := range j.Commit(ps) {
		if err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, "0/2")
	crashed := mem.Crash() // power loss: only what was synced
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if got := reopenedLog(t, crashed); !equalStrings(got, want) {
		t.Fatalf("after a power loss the log holds %q, want %q", got, want)
	}
	if got := reopenedLog(t, mem); !equalStrings(got, want) {
		t.Fatalf("after a reopen the log holds %q, want %q", got, want)
	}
}

// A journal fdatasync that fails leaves the frame whole in the file (in
// the page cache at least), where the next open's replay would append
// its records although they were refused: the failed write truncates its
// frames off the journal file, synced, before the file is abandoned. If
// that fails too, the commit does not claim ErrRolledBack.
func TestJournalFailedSyncTakesFramesBack(t *testing.T) {
	for _, truncateFails := range []bool{false, true} {
		mem := vfs.NewMem()
		var failSyncs, failTruncate atomic.Bool
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if !strings.Contains(op.Path, "/journal/") {
				return nil
			}
			switch {
			case op.Kind == errorfs.OpSync && failSyncs.Load():
				failSyncs.Store(truncateFails) // once, unless the truncate fails too
				return syscall.EIO
			case op.Kind == errorfs.OpTruncate && failTruncate.Load():
				return syscall.EIO
			}
			return nil
		})
		s := faultyStore(t, mem, inj)
		j := s.NewJournal()
		ps := journalPartitions(t, s, 1)
		commitRound(t, j, ps, 0)
		commitRound(t, j, ps, 1)
		if _, err := ps[0].Append([]Message{{Payload: []byte("refused")}}); err != nil {
			t.Fatal(err)
		}
		failSyncs.Store(true)
		failTruncate.Store(truncateFails)
		err := j.Commit(ps)[0]
		failSyncs.Store(false)
		failTruncate.Store(false)
		if rolled := errors.Is(err, ErrRolledBack); rolled == truncateFails || !errors.Is(err, syscall.EIO) {
			t.Fatalf("truncate fails %v: commit with the journal's fdatasync failing: %v", truncateFails, err)
		}
		if truncateFails {
			continue // the outcome is unknown: nothing to check
		}
		// The process dies here (the page cache survives): the next open
		// replays the journal files as they are.
		if got, want := reopenedLog(t, mem), []string{"0/0", "0/1"}; !equalStrings(got, want) {
			t.Fatalf("after a process crash the log holds %q, want %q: the refused record came back from the journal", got, want)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A partition synced directly by a Commit (not in the journal) whose own
// fsync fails has the appends the Commit covered taken back too: the
// segment is truncated to the last commit point and synced again, and
// the rebuild that follows (the partition is broken) does not find them.
func TestCommitFailedOwnFsyncTakesAppendsBack(t *testing.T) {
	mem := vfs.NewMem()
	var failOnce atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpSync && strings.HasSuffix(op.Path, ".log") && failOnce.CompareAndSwap(true, false) {
			return syscall.ENOSPC // delayed allocation found no room at writeback
		}
		return nil
	})
	s := faultyStore(t, mem, inj)
	j := s.NewJournal()
	ps := journalPartitions(t, s, 1)
	p := ps[0]
	commitRound(t, j, ps, 0)
	if err := p.Sync(); err != nil { // out of the journal: the next Commit syncs it directly
		t.Fatal(err)
	}
	if _, err := p.Append([]Message{{Payload: []byte("refused")}}); err != nil {
		t.Fatal(err)
	}
	failOnce.Store(true)
	err := j.Commit(ps)[0]
	if !errors.Is(err, ErrRolledBack) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("commit whose fsync failed: %v, want ErrRolledBack and ENOSPC", err)
	}
	if next := p.NextOffset(); next != 1 {
		t.Fatalf("after the failed commit the log ends at %d, want 1", next)
	}
	crashed := mem.Crash()
	_ = p.Close() // broken: its owner closes it and builds it again
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	want := []string{"0/0"}
	if got := reopenedLog(t, mem); !equalStrings(got, want) {
		t.Fatalf("after the rebuild the log holds %q, want %q", got, want)
	}
	if got := reopenedLog(t, crashed); !equalStrings(got, want) {
		t.Fatalf("after a power loss the log holds %q, want %q", got, want)
	}
}

// Appends that a roll sealed (its fsync made them durable in the sealed
// segment) cannot be taken back: the failed Commit does not claim
// ErrRolledBack, so their owner answers them as of unknown outcome, and
// the partition is broken (its owner rebuilds it).
func TestTakeBackAcrossARollIsNotClaimed(t *testing.T) {
	mem := vfs.NewMem()
	full := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool {
		return (op.Kind == errorfs.OpWriteAt || op.Kind == errorfs.OpWrite) && strings.Contains(op.Path, "/journal/")
	})
	// Segments small enough for two appends within maxStash to roll one
	// (a batch past it would leave the journal).
	AllowSmallSegments(t, 64<<10)
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: errorfs.New(mem, full), MaxOpenFiles: 16, SerialSyncs: true, SegmentSize: maxStash / 2})
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	ps := journalPartitions(t, s, 1)
	commitRound(t, j, ps, 0)
	commitRound(t, j, ps, 1)
	full.Set(true)
	big := bytes.Repeat([]byte{'x'}, maxStash/2-(16<<10))
	for range 2 { // the second rolls the segment, sealing the first
		if _, err := ps[0].Append([]Message{{Payload: big}}); err != nil {
			t.Fatal(err)
		}
	}
	err = j.Commit(ps)[0]
	if err == nil || errors.Is(err, ErrRolledBack) || !errors.Is(err, ErrUnusable) {
		t.Fatalf("commit of appends across a roll, refused: %v; want ErrUnusable, not ErrRolledBack", err)
	}
	_ = ps[0].Close()
	_ = j.Close()
}

// faultyStore opens a store in /data on mem through inj's faults.
func faultyStore(t *testing.T, mem vfs.FS, inj errorfs.Injector) *FileStore {
	t.Helper()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: errorfs.New(mem, inj), MaxOpenFiles: 16, SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
