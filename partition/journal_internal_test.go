package partition

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// journalNS is namespace i of the journal tests.
func journalNS(t testing.TB, i uint32) metadata.Namespace {
	t.Helper()
	ns, err := metadata.NewNamespace(1, 2, i)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// sampleJournal encodes two frames: one with an entry of two partitions,
// one with a single entry.
func sampleJournal(t testing.TB) (b []byte, frameEnds []int) {
	t.Helper()
	msgs := sampleMessages()
	enc := func(first uint64, ms []Message) []byte {
		var recs []byte
		for i := range ms {
			recs = appendRecord(recs, &ms[i], first+uint64(i), int64(100+i))
		}
		return recs
	}
	var start int
	b, start = beginJournalFrame(nil)
	b = appendJournalEntry(b, journalNS(t, 0), 7, 0, 2, enc(0, msgs[:2]))
	b = appendJournalEntry(b, journalNS(t, 1), 8, 5, 1, enc(5, msgs[2:3]))
	sealJournalFrame(b, start)
	frameEnds = append(frameEnds, len(b))
	b, start = beginJournalFrame(b)
	b = appendJournalEntry(b, journalNS(t, 0), 7, 2, 1, enc(2, msgs[:1]))
	sealJournalFrame(b, start)
	return b, append(frameEnds, len(b))
}

// A journal read back after a crash may end anywhere inside its last
// frame: every cut decodes, without error, to the entries of the whole
// frames before it, and the zeros of a file extended past its data are
// its end too.
func TestJournalTornTail(t *testing.T) {
	b, ends := sampleJournal(t)
	for cut := 0; cut <= len(b); cut++ {
		want := 0
		switch {
		case cut >= ends[1]:
			want = 3
		case cut >= ends[0]:
			want = 2
		}
		for _, tail := range [][]byte{nil, make([]byte, 40)} {
			in := append(append([]byte(nil), b[:cut]...), tail...)
			got, err := decodeJournal(in, "j")
			if err != nil || len(got) != want {
				t.Fatalf("cut at %d of %d (+%d zeros): %d entries, %v; want %d and no error", cut, len(b), len(tail), len(got), err, want)
			}
		}
	}
}

// The last frame, with nothing after it, of its whole length, with a byte
// flipped (not cut short, no unwritten sector, not ending in zeros; or
// one bit of its length, whole with the bit flipped back) was written
// whole and damaged since: a *CorruptError at its position, not a
// torn tail (package tail's rule, every log's) — its records were
// acknowledged. The same frame with a sector of it unwritten (zeros) is a
// torn tail.
func TestJournalFinalFrameWrittenWholeIsDamage(t *testing.T) {
	b, ends := sampleJournal(t)
	for pos := ends[0]; pos < ends[1]; pos++ {
		// The length too: made longer, the frame runs past the end, but
		// it checks whole with the bit flipped back.
		bad := bytes.Clone(b)
		bad[pos] ^= 0x10
		_, err := decodeJournal(bad, "j")
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Offset != int64(ends[0]) {
			t.Fatalf("byte %d of the last frame flipped: %v, want a *CorruptError at byte %d", pos, err, ends[0])
		}
	}
	// Its sectors: the frame starts at ends[0]; the part of it in the
	// next sector (or in its own, if it has no other) reads as zeros.
	torn := bytes.Clone(b)
	from := max(int64(ends[0]), int64(len(b)-1)/512*512)
	clear(torn[from:])
	if got, err := decodeJournal(torn, "j"); err != nil || len(got) != 2 {
		t.Fatalf("the last frame with an unwritten sector: %d entries, %v; want the first frame's 2", len(got), err)
	}
}

// Damage that a crash cannot cause is reported, typed, with where it is:
// a frame that fails its checksum with data after it, and a frame whose
// checksum holds over contents that do not decode.
func TestJournalDamageIsCorruption(t *testing.T) {
	b, ends := sampleJournal(t)
	for pos := range ends[0] {
		bad := bytes.Clone(b)
		bad[pos] ^= 0x10
		_, err := decodeJournal(bad, "j")
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Path != "j" {
			t.Fatalf("byte %d of the first frame flipped: %v, want a *CorruptError naming the file", pos, err)
		}
	}
	// A well-checksummed frame claiming more records than its bytes hold.
	var recs []byte
	m := sampleMessages()[0]
	recs = appendRecord(recs, &m, 0, 1)
	frame, start := beginJournalFrame(nil)
	frame = appendJournalEntry(frame, journalNS(t, 0), 1, 0, 1000, recs)
	sealJournalFrame(frame, start)
	if _, err := decodeJournal(frame, "j"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an entry claiming 1000 records in %d bytes: %v, want ErrCorrupt", len(recs), err)
	}
}

// FuzzDecodeJournal feeds arbitrary bytes to the journal decoder: it must
// never panic, must report any failure as a *CorruptError, and everything
// it accepts must be consistent: offsets dense from each entry's first,
// and no more messages than the bytes could hold.
func FuzzDecodeJournal(f *testing.F) {
	b, ends := sampleJournal(f)
	f.Add(b)
	f.Add(b[:ends[0]])
	f.Add(b[:ends[0]+5])
	// Frames of several partitions (two shards' entries share a frame)
	// followed by the zeros a journal file is written with ahead of its
	// frames, and a torn frame before those zeros.
	f.Add(append(bytes.Clone(b), make([]byte, 256)...))
	f.Add(append(bytes.Clone(b[:ends[1]-3]), make([]byte, 256)...))
	f.Add([]byte{})
	f.Add(make([]byte, 64))
	bad := bytes.Clone(b)
	bad[20] ^= 1
	f.Add(bad)
	// A frame of synced-end marks (entries with no records) after them.
	marks, start := beginJournalFrame(bytes.Clone(b))
	marks = appendJournalEntryFresh(marks, journalNS(f, 2), 9, 40, 0, false, nil)
	marks = appendJournalEntryFresh(marks, journalNS(f, 3), 9, 7, 0, false, nil)
	sealJournalFrame(marks, start)
	f.Add(marks)
	f.Fuzz(func(t *testing.T, in []byte) {
		entries, err := decodeJournal(in, "f")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		total := 0
		for _, e := range entries {
			if len(e.msgs) == 0 && e.fresh {
				t.Fatal("a fresh entry with no messages (only a synced-end mark holds none, and it is never fresh)")
			}
			for i, m := range e.msgs {
				if m.Offset != e.first+uint64(i) {
					t.Fatalf("entry at %d: message %d has offset %d, first is %d", e.pos, i, m.Offset, e.first)
				}
			}
			total += len(e.msgs)
		}
		if total*recordHeaderSizeV1 > len(in) {
			t.Fatalf("%d messages from %d bytes", total, len(in))
		}
	})
}

// journalPartitions builds n partitions of s and inserts one message in
// each, synced: ready to join a journal.
func journalPartitions(t testing.TB, s *FileStore, n int) []Partition {
	t.Helper()
	var ps []Partition
	for i := range n {
		p, err := s.Build(journalNS(t, uint32(i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// commitRound appends one message to each partition and commits them.
func commitRound(t *testing.T, j *Journal, ps []Partition, k int) {
	t.Helper()
	for i, p := range ps {
		if _, err := p.Append([]Message{{Payload: fmt.Appendf(nil, "%d/%d", i, k)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, err := range j.Commit(ps) {
		if err != nil {
			t.Fatalf("commit of partition %d, round %d: %v", i, k, err)
		}
	}
}

// The journal is checkpointed when it holds records of too many
// partitions whose own files hold unsynced writes: their files are synced, its
// old files removed, so the journal stays small; and a clean close of the
// partitions and the journal leaves no journal file behind. Everything
// committed survives a power loss at any point.
func TestJournalCheckpointAndClose(t *testing.T) {
	mem := vfs.NewMem()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem, MaxOpenFiles: 16, SerialSyncs: true}) // two partitions per journal
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	if j.maxParts != 2 {
		t.Fatalf("maxParts %d, want 2", j.maxParts)
	}
	ps := journalPartitions(t, s, 3)
	const rounds = 6
	maxFiles := 0
	for k := range rounds {
		commitRound(t, j, ps, k)
		if k >= 2 {
			// Three members with two allowed: the commit checkpointed
			// first, syncing the previous rounds into the partitions'
			// own files.
			for i, p := range ps {
				if fp := p.(*filePartition); fp.synced < uint64(k) {
					t.Fatalf("round %d: partition %d synced to %d, want at least %d: never checkpointed", k, i, fp.synced, k)
				}
			}
		}
		for _, p := range ps {
			// A read writes what the partition holds behind: its tail
			// holds unsynced writes, pinned, as after a large append.
			if _, err := p.Read(0, 1); err != nil {
				t.Fatal(err)
			}
		}
		names := journalFileNames(mem.ReadDir("/data/journal"))
		maxFiles = max(maxFiles, len(names))
		// Every committed message survives a power loss now.
		crashed := mem.Crash()
		s2, err := NewFileStore(FileConfig{Dir: "/data", FS: crashed})
		if err != nil {
			t.Fatalf("round %d: reopening after a power loss: %v", k, err)
		}
		for i := range ps {
			p, err := s2.Build(journalNS(t, uint32(i)), 1)
			if err != nil {
				t.Fatal(err)
			}
			if n := p.NextOffset(); n != uint64(k+1) {
				t.Fatalf("round %d: partition %d holds %d messages after a power loss, want %d", k, i, n, k+1)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if maxFiles > 2 {
		t.Fatalf("the journal kept up to %d files: checkpoints do not remove them", maxFiles)
	}
	for _, p := range ps {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if names := journalFileNames(mem.ReadDir("/data/journal")); len(names) != 0 {
		t.Fatalf("journal files %v left after a clean close", names)
	}
}

// A journal record that starts past the end of its partition's log means
// acknowledged messages before it were lost: the store opens, and the
// partition's Build fences it, the gap a hole answering the
// *CorruptError naming the journal, rather than leave a gap or hand its
// offsets out again.
func TestJournalReplayGapIsCorruption(t *testing.T) {
	mem := vfs.NewMem()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	ns := journalNS(t, 0)
	p, err := s.Build(ns, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(); err != nil { // the layout
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	m := sampleMessages()[0]
	recs := appendRecord(nil, &m, 4, 1)
	frame, start := beginJournalFrame(nil)
	frame = appendJournalEntry(frame, ns, 3, 4, 1, recs)
	sealJournalFrame(frame, start)
	if err := mem.MkdirAll("/data/journal", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(mem, "/data/journal/"+journalFileName(1), frame); err != nil {
		t.Fatal(err)
	}
	s2, err := NewFileStore(FileConfig{Dir: "/data", FS: mem})
	if err != nil {
		t.Fatalf("opening with a journal record at offset 4 of an empty log: %v", err)
	}
	p, err = s2.Build(ns, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var ce *CorruptError
	if _, err := p.Read(0, 10); !errors.As(err, &ce) || ce.Path != "/data/journal/"+journalFileName(1) {
		t.Fatalf("read below a journal record at offset 4 of an empty log: %v, want a *CorruptError naming the journal", err)
	}
	if next := p.NextOffset(); next != 5 {
		t.Fatalf("NextOffset %d, want 5 (past the journal's record)", next)
	}
	if _, err := p.Append([]Message{m}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("append past the gap: %v, want ErrCorrupt", err)
	}
}

// A checkpoint whose fsync of a partition fails leaves acknowledged
// records in the journal only, and after a failed fsync the kernel may
// drop the written pages: the partition, closed and built again in the
// same process (as the reconciler does with a fenced partition), gets
// them back from the journal instead of handing their offsets to new
// messages. A consumer offset stored past what its files hold, into the
// records the journal gives back, is kept: it is clamped to the log's end
// only once the log is whole again (the simulator found it clamped to
// the files' end, an acknowledged store going backwards).
func TestJournalReappliesAfterAFailedCheckpointSync(t *testing.T) {
	mem := vfs.NewMem()
	var failLog atomic.Pointer[string]
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if path := failLog.Load(); op.Kind == errorfs.OpSync && path != nil && op.Path == *path {
			return syscall.EIO
		}
		return nil
	})
	s := faultyStore(t, mem, inj)
	j := s.NewJournal()
	ps := journalPartitions(t, s, 3)
	commitRound(t, j, ps, 0) // direct: the partitions join
	commitRound(t, j, ps, 1) // journaled: three members
	for _, p := range ps {
		// A read writes the records held behind: each member now pins
		// its tail, and two pinned members are allowed.
		if _, err := p.Read(0, 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := ps[0].StoreConsumerOffset("c", 2); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(partDirOf(s, journalNS(t, 0)), fmt.Sprintf("%020d.log", 0))
	failLog.Store(&seg)
	for i, p := range ps {
		if _, err := p.Append([]Message{{Payload: fmt.Appendf(nil, "%d/%d", i, 2)}}); err != nil {
			t.Fatal(err)
		}
	}
	errs := j.Commit(ps)
	if !errors.Is(errs[0], ErrUnusable) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("commit with the checkpoint's fsync of partition 0 failing: %v", errs)
	}
	failLog.Store(nil)
	if err := ps[0].Close(); err != nil {
		t.Fatal(err)
	}
	// The kernel dropped partition 0's unsynced pages: its file is what
	// the disk holds.
	durable, err := vfs.ReadFile(mem.Crash(), seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(mem, seg, durable); err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(journalNS(t, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := p.Read(0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 2 || string(msgs[0].Payload) != "0/0" || string(msgs[1].Payload) != "0/1" {
		t.Fatalf("rebuilt partition holds %d messages (%q...), want the acknowledged 0/0 and 0/1", len(msgs), payloadsOf(msgs))
	}
	if off, ok, err := p.ConsumerOffset("c"); err != nil || !ok || off != 2 {
		t.Fatalf("consumer offset after the rebuild: %d (found %v, %v), want the stored 2", off, ok, err)
	}
	// What was re-applied is durable in the partition's own files.
	crashed := mem.Crash()
	b, err := vfs.ReadFile(crashed, seg)
	if err != nil || !bytes.Contains(b, []byte("0/1")) {
		t.Fatalf("the re-applied record is not durable in the segment (%v)", err)
	}
}

// partDirOf is the directory of ns in s.
func partDirOf(s *FileStore, ns metadata.Namespace) string { return s.partitionDir(ns) }

func payloadsOf(msgs []Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Payload))
	}
	return out
}

// Commits whose direct syncs, journal write and checkpoint syncs run
// concurrently (no SerialSyncs), with partitions joining as they go:
// everything committed survives a power loss (run it with -race too).
func TestJournalConcurrentCommits(t *testing.T) {
	mem := vfs.NewMem()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem, MaxOpenFiles: 64}) // eight members
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	ps := journalPartitions(t, s, 16)
	const rounds = 5
	for k := range rounds {
		// Partitions join a round apart, so every commit mixes direct
		// syncs with journal entries.
		commitRound(t, j, ps[:min(len(ps), 4*(k+1))], k)
	}
	crashed := mem.Crash()
	s2, err := NewFileStore(FileConfig{Dir: "/data", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	for i := range ps {
		p, err := s2.Build(journalNS(t, uint32(i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := p.Read(0, 100)
		if err != nil {
			t.Fatal(err)
		}
		first := i / 4 // the round partition i joined in
		if len(msgs) != rounds-first {
			t.Fatalf("partition %d holds %d messages after a power loss, want %d", i, len(msgs), rounds-first)
		}
		for n, m := range msgs {
			if want := fmt.Sprintf("%d/%d", i, first+n); string(m.Payload) != want {
				t.Fatalf("partition %d offset %d holds %q, want %q", i, n, m.Payload, want)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A consumer offset stored over messages acknowledged through the journal
// survives a rebuild in the same process after a failed fsync (the
// reconciler's rebuild of a fenced partition): the offsets are clamped to
// the log's end once the journal's records are applied again, not to the
// shorter log the files hold before (simulator seed 61696: a store of 2
// answered ok, then "get" answered 1 after the rebuild).
func TestJournalRebuildKeepsConsumerOffsetsOverJournaledMessages(t *testing.T) {
	mem := vfs.NewMem()
	var failLog atomic.Pointer[string]
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if path := failLog.Load(); op.Kind == errorfs.OpSync && path != nil && op.Path == *path {
			return syscall.ENOSPC
		}
		return nil
	})
	s := faultyStore(t, mem, inj)
	j := s.NewJournal()
	ps := journalPartitions(t, s, 1)
	commitRound(t, j, ps, 0) // direct: the partition joins
	commitRound(t, j, ps, 1) // journaled: "0/1" is durable in the journal only
	if err := ps[0].StoreConsumerOffset("c", 2); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(partDirOf(s, journalNS(t, 0)), fmt.Sprintf("%020d.log", 0))
	failLog.Store(&seg)
	if err := ps[0].Close(); err == nil {
		t.Fatal("close with the segment's fsync failing: no error")
	}
	failLog.Store(nil)
	// The kernel dropped the unsynced pages: the file is what the disk
	// holds, without "0/1".
	durable, err := vfs.ReadFile(mem.Crash(), seg)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(durable, []byte("0/1")) {
		t.Fatal("setup: the journaled record reached the segment durably")
	}
	if err := vfs.WriteFileAtomic(mem, seg, durable); err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(journalNS(t, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	if next := p.NextOffset(); next != 2 {
		t.Fatalf("rebuilt partition ends at %d, want 2 (the journaled record applied again)", next)
	}
	if off, ok, err := p.ConsumerOffset("c"); err != nil || !ok || off != 2 {
		t.Fatalf("consumer offset after the rebuild: %d %v %v, want 2 (stored, acknowledged)", off, ok, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// A partition in a journal does not fsync its tail at each commit, so a
// power loss can leave the tail with a stretch the disk never got before
// records it did (pages written back out of order): damage by the
// segment's rule, but the journal holds every record from the stretch
// on. The replay truncates the tail there and appends them again: nothing
// is fenced, nothing lost. A stretch the journal does not cover stays
// damage, reported.
func TestJournalRepairsTailDamageItCovers(t *testing.T) {
	for _, c := range []struct {
		name    string
		zero    int // the record zeroed (records are 63 bytes: 60 + "i/k")
		covered bool
	}{
		{"in the journal", 2, true},
		{"before it", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			cfg := FileConfig{Dir: "/data", FS: mem, MaxOpenFiles: 16, SerialSyncs: true}
			s, err := NewFileStore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			j := s.NewJournal()
			ps := journalPartitions(t, s, 1)
			for k := range 6 {
				commitRound(t, j, ps, k) // round 0 direct (the partition joins), 1-5 in the journal
			}
			if _, err := ps[0].Read(0, 10); err != nil { // writes the write-behind records to the file
				t.Fatal(err)
			}
			seg := filepath.Join(partDirOf(s, journalNS(t, 0)), fmt.Sprintf("%020d.log", 0))
			full, err := vfs.ReadFile(mem, seg)
			if err != nil || len(full) != 6*63 {
				t.Fatalf("tail of %d bytes (%v), want 6 records of 63", len(full), err)
			}
			crashed := mem.Crash()
			damaged := bytes.Clone(full)
			clear(damaged[c.zero*63 : (c.zero+1)*63])
			if err := vfs.WriteFileAtomic(crashed, seg, damaged); err != nil {
				t.Fatal(err)
			}
			cfg.FS = crashed
			s2, err := NewFileStore(cfg)
			if err != nil {
				t.Fatalf("replay over a tail damaged where the journal has the records: %v", err)
			}
			p, err := s2.Build(journalNS(t, 0), 1)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.NextOffset() != 6 {
				t.Fatalf("NextOffset %d, want 6", p.NextOffset())
			}
			if !c.covered {
				if _, err := p.Read(0, 10); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("read of a damaged record the journal does not hold: %v, want ErrCorrupt", err)
				}
				if _, err := p.Append([]Message{{Payload: []byte("x")}}); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("append after damage the journal does not cover: %v, want ErrCorrupt", err)
				}
				return
			}
			msgs, err := p.Read(0, 10)
			want := []string{"0/0", "0/1", "0/2", "0/3", "0/4", "0/5"}
			if err != nil || !slices.Equal(payloadsOf(msgs), want) {
				t.Fatalf("after the replay: %v, %v; want %v", payloadsOf(msgs), err, want)
			}
			if _, err := p.Append([]Message{{Payload: []byte("x")}}); err != nil {
				t.Fatalf("append after the repair: %v", err)
			}
		})
	}
}

// An entry marked fresh (the partition's directory was not durable when
// it was written, see BuildDeferred) decodes with the mark and the same
// records; the mark does not change what the count field counts, nor
// what the frame scan after damage accepts.
func TestJournalFreshEntryRoundTrips(t *testing.T) {
	msgs := sampleMessages()[:2]
	var recs []byte
	for i := range msgs {
		recs = appendRecord(recs, &msgs[i], uint64(i), int64(100+i))
	}
	b, start := beginJournalFrame(nil)
	b = appendJournalEntryFresh(b, journalNS(t, 3), 9, 0, len(msgs), true, recs)
	b = appendJournalEntry(b, journalNS(t, 4), 9, 0, len(msgs), recs)
	sealJournalFrame(b, start)
	entries, err := decodeJournal(b, "j")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || !entries[0].fresh || entries[1].fresh {
		t.Fatalf("decoded %d entries, fresh marks %v", len(entries), []bool{entries[0].fresh, len(entries) > 1 && entries[1].fresh})
	}
	for _, e := range entries {
		if len(e.msgs) != len(msgs) || e.msgs[1].Offset != 1 || e.epoch != 9 {
			t.Fatalf("entry %+v", e)
		}
	}
	if q, ok := nextJournalFrame(b, 0); !ok || q != 0 {
		t.Fatalf("the frame scan does not find a frame with a fresh entry: %d %v", q, ok)
	}
}

// A staged frame (written without an fdatasync, see Journal.Stage) is
// uncertain, and so is a frame written after one before an fdatasync
// covered it: a power loss may keep a later one and tear an earlier one.
// A damaged frame followed only by uncertain valid frames is a torn tail
// (the file ends before it); followed by a certain one, it is damage.
func TestJournalDamageBeforeUncertainFramesIsATornTail(t *testing.T) {
	msgs := sampleMessages()[:1]

	frame := func(b []byte, first uint64, uncertain bool) []byte {
		r := appendRecord(nil, &msgs[0], first, 100)
		b, start := beginJournalFrame(b)
		b = appendJournalEntry(b, journalNS(t, 0), 1, first, 1, r)
		sealJournalFrameAs(b, start, uncertain)
		return b
	}
	good := frame(nil, 0, false)
	damagedAt := len(good)
	b := frame(good, 1, true)
	b[damagedAt+journalFrameHeader+3] ^= 0xff // the staged frame is damaged
	withUncertain := frame(b, 2, true)
	entries, err := decodeJournal(withUncertain, "j")
	if err != nil || len(entries) != 1 || entries[0].first != 0 {
		t.Fatalf("damage followed by an uncertain frame: %d entries, %v; want the first frame's entry, no error", len(entries), err)
	}
	withCertain := frame(b, 2, false)
	if _, err := decodeJournal(withCertain, "j"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damage followed by a certain frame: %v, want ErrCorrupt", err)
	}
	entries, err = decodeJournal(frame(good, 1, true), "j")
	if err != nil || len(entries) != 2 || !entries[1].uncertain || entries[0].uncertain {
		t.Fatalf("an uncertain frame decodes to %d entries (%v), uncertain marks wrong", len(entries), err)
	}
}

// TestJournalSyncedEndMarks: an entry with no records is a synced-end
// mark; it decodes with its partition, incarnation and offset, counts as
// a whole frame for the torn-or-damaged judgement, and a fresh one (or
// one claiming records in no bytes) is refused.
func TestJournalSyncedEndMarks(t *testing.T) {
	b, ends := sampleJournal(t)
	marks, start := beginJournalFrame(bytes.Clone(b))
	marks = appendJournalEntryFresh(marks, journalNS(t, 2), 9, 40, 0, false, nil)
	sealJournalFrame(marks, start)
	entries, err := decodeJournal(marks, "f")
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-1]
	if last.ns != journalNS(t, 2) || last.epoch != 9 || last.first != 40 || len(last.msgs) != 0 {
		t.Fatalf("mark decoded as %+v", last)
	}
	if q, ok := nextJournalFrame(marks, ends[1]); !ok || q != ends[1] {
		t.Fatalf("nextJournalFrame = %d, %v: a frame of marks is a whole frame", q, ok)
	}
	for _, c := range []struct {
		name  string
		count int
		fresh bool
	}{{"fresh", 0, true}, {"records in no bytes", 1, false}} {
		bad, start := beginJournalFrame(nil)
		bad = appendJournalEntryFresh(bad, journalNS(t, 2), 9, 40, c.count, c.fresh, nil)
		sealJournalFrame(bad, start)
		if _, err := decodeJournal(bad, "f"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", c.name, err)
		}
	}
}

// journalFileNames keeps the journal files of a journal directory's
// names (not its synced-end mark).
func journalFileNames(names []string, _ error) []string {
	var out []string
	for _, n := range names {
		if _, ok := parseJournalName(n); ok {
			out = append(out, n)
		}
	}
	return out
}
