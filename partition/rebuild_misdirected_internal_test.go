package partition

import (
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// TestBehaviour28RebuildAfterFailedFsyncReportsJournalCutBelowSynced: a
// partition in the journal (built deferred, as a new partition of an
// FsyncAlways topic on one node is, so its records are in the journal
// only) has a commit acknowledged whose journal frame the disk wrote
// elsewhere (a misdirected write that reported success: behaviour 28's
// lying disk), then a commit whose journal fdatasync fails. The caller
// closes the partition, on a full disk, so that it cannot create its
// files, and builds it again in the same process, which reads its
// records back from the journal (reapplyLost). The frame is
// zeros where it should be, which alone reads as a torn tail; but this
// process synced the file past it, so the journal lost acknowledged
// records: the rebuilt partition must report the damage (fenced at its
// log's end, appends refused with the *CorruptError), not come back
// without the acknowledged message and hand its offset out again.
// Found by the simulator (single-node seed 812 with one scheduler step
// for both harnesses: an acknowledged message lost with no crash).
func TestBehaviour28RebuildAfterFailedFsyncReportsJournalCutBelowSynced(t *testing.T) {
	mem := vfs.NewMem()
	var misdirect, failSync, diskFull atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if diskFull.Load() && (op.Kind == errorfs.OpMkdirAll || op.Kind == errorfs.OpOpen && op.Flag&os.O_CREATE != 0) {
			return syscall.ENOSPC
		}
		if !strings.HasSuffix(op.Path, journalExt) {
			return nil
		}
		switch {
		case op.Kind == errorfs.OpWriteAt && misdirect.CompareAndSwap(true, false):
			return &errorfs.MisdirectedWrite{Delta: 2047}
		case op.Kind == errorfs.OpSync && failSync.CompareAndSwap(true, false):
			return syscall.EIO
		}
		return nil
	})
	s := faultyStore(t, mem, inj)
	j := s.NewJournal()
	ns := journalNS(t, 0)
	p, err := s.BuildDeferred(ns, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !j.Attach(p) {
		t.Fatal("setup: the deferred partition did not attach")
	}
	ps := []Partition{p}
	commitRound(t, j, ps, 0) // the journal file is created and written with zeros ahead
	misdirect.Store(true)
	commitRound(t, j, ps, 1) // acknowledged: its frame landed 2047 bytes on
	if misdirect.Load() {
		t.Fatal("setup: the misdirected write did not fire")
	}
	if _, err := p.Append([]Message{{Payload: []byte("refused")}}); err != nil {
		t.Fatal(err)
	}
	failSync.Store(true)
	if err := j.Commit(ps)[0]; !errors.Is(err, syscall.EIO) {
		t.Fatalf("setup: commit with the journal's fdatasync failing: %v", err)
	}
	if _, err := mem.Stat(partDirOf(s, ns)); err == nil {
		t.Fatal("setup: the deferred partition has a directory: its records are not in the journal only")
	}
	// The caller fences a partition whose commit failed, closes it and
	// builds it again from disk (the reconciler's rebuild). The disk is
	// full at the close: the partition cannot create its files, and what
	// it acknowledged stays in the journal only (Journal.lost).
	diskFull.Store(true)
	if err := p.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("setup: close on a full disk: %v, want ENOSPC", err)
	}
	diskFull.Store(false)
	for build := range 2 { // every rebuild in the process finds it again
		q, err := s.BuildDeferred(ns, 1)
		if errors.Is(err, ErrCorrupt) {
			continue // reported: the build fails with the damage
		}
		if err != nil {
			t.Fatalf("build %d: %v", build, err)
		}
		got := logOf(t, q)
		if len(got) > 0 && got[0] != "0/0" {
			t.Fatalf("build %d: the rebuilt log holds %q, want the acknowledged 0/0 first", build, got)
		}
		if len(got) < 2 {
			// The acknowledged 0/1 is gone: its loss must be reported,
			// and its offset never given to another message.
			_, aerr := q.Append([]Message{{Payload: []byte("new")}})
			var ce *CorruptError
			if !errors.As(aerr, &ce) {
				t.Fatalf("build %d: rebuilt with %q, the acknowledged 0/1 lost without an error: an append at its offset got %v, want the *CorruptError", build, got, aerr)
			}
			if ce.Path == "" || !strings.HasSuffix(ce.Path, journalExt) {
				t.Fatalf("build %d: the damage names %q, want the journal file", build, ce.Path)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
