package partition

import (
	"errors"
	"slices"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

// TestBehaviour28ReplayDamageFencesDeferredPartition: a partition built
// deferred (BuildDeferred, attached to the journal: a new partition of an
// FsyncAlways topic on a single node, DESIGN behaviour 32) has no
// directory, and its acknowledged records are in the journal only. After
// a power loss, a byte of the journal's first frame flipped (a disk that
// lies, behaviour 28): no partition can be trusted to hold the damaged
// frame's records, and the replay fences every partition it lists — but
// the deferred one is not listed, having no directory. Its next build
// must not come back empty and hand out its acknowledged offsets again:
// it is fenced as the others are (or its build fails with the damage).
// A partition whose incarnation was committed after the open
// (FileConfig.CommittedRevision) is not.
// Found by the simulator offering a single node deferred builds
// (single-node seeds 66, 70, 97, 155 and 173 of 0-299: a journal lie
// before a power loss, then a committed incarnation reopened without its
// acknowledged messages).
func TestBehaviour28ReplayDamageFencesDeferredPartition(t *testing.T) {
	mem := vfs.NewMem()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem, MaxOpenFiles: 16, SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	direct, err := s.Build(journalNS(t, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	deferred, err := s.BuildDeferred(journalNS(t, 1), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !j.Attach(deferred) {
		t.Fatal("setup: the deferred partition did not attach")
	}
	ps := []Partition{direct, deferred}
	for k := range 3 {
		commitRound(t, j, ps, k)
	}
	if _, err := mem.Stat(partDirOf(s, journalNS(t, 1))); err == nil {
		t.Fatal("setup: the deferred partition has a directory: its records are not in the journal only")
	}
	crashed := mem.Crash()
	names, err := crashed.ReadDir(s.journalPath())
	names = journalFileNames(names, err)
	if err != nil || len(names) == 0 {
		t.Fatalf("setup: journal files %v (%v)", names, err)
	}
	path := s.journalPath() + "/" + names[0]
	b, err := vfs.ReadFile(crashed, path)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 0xff // in the first frame, valid frames after it
	if err := vfs.WriteFileAtomic(crashed, path, b); err != nil {
		t.Fatal(err)
	}

	for open := range 2 { // the second open finds the damage again
		s2, err := NewFileStore(FileConfig{Dir: "/data", FS: crashed, MaxOpenFiles: 16, SerialSyncs: true, CommittedRevision: 1})
		if err != nil {
			t.Fatalf("open %d: the store refused to open: %v", open, err)
		}
		// An incarnation committed after the open cannot be in the
		// damaged file: it starts clean.
		fresh, err := s2.BuildDeferred(journalNS(t, 2), 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fresh.Append([]Message{{Payload: []byte("y")}}); err != nil {
			t.Fatalf("open %d: append to a partition created after the open: %v", open, err)
		}
		if err := fresh.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s2.Remove(journalNS(t, 2)); err != nil {
			t.Fatal(err)
		}
		p, err := s2.BuildDeferred(journalNS(t, 1), 1)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open %d: build of the deferred partition: %v, want its damage (ErrCorrupt)", open, err)
			}
			continue
		}
		msgs, rerr := p.Read(0, 10)
		off, aerr := p.Append([]Message{{Payload: []byte("x")}})
		if !errors.Is(aerr, ErrCorrupt) {
			t.Fatalf("open %d: the deferred partition reopened with %v (read err %v), and an append took offset %d (err %v): "+
				"its acknowledged messages 1/0, 1/1, 1/2 are lost and their offsets handed out again; want the append refused with ErrCorrupt",
				open, payloadsOf(msgs), rerr, off, aerr)
		}
		var ce *CorruptError
		if d, ok := p.(Damaged); !ok || !errors.As(d.Damage(), &ce) {
			t.Fatalf("open %d: the fenced deferred partition does not report its damage (Damaged)", open)
		}
		if rerr == nil && !slices.Equal(payloadsOf(msgs), []string{"1/0", "1/1", "1/2"}[:len(msgs)]) {
			t.Fatalf("open %d: read %v, not a prefix of what was acknowledged", open, payloadsOf(msgs))
		}
		if err := p.Close(); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
	}
}
