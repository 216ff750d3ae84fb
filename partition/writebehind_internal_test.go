package partition

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// A partition in a journal writes its records to its file behind the
// journal: after journaled commits its log file has not grown, a read
// sees every record (and writes them), and a process crash (the page
// cache kept, the partition's unwritten records gone with the process)
// or a power loss (only fsynced bytes kept) loses nothing committed: the
// next open's replay appends the records from the journal.
func TestJournalWriteBehind(t *testing.T) {
	mem := vfs.NewMem()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem, SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	ps := journalPartitions(t, s, 2)
	commitRound(t, j, ps, 0) // direct: the partitions join the journal
	seg := filepath.Join(partDirOf(s, journalNS(t, 0)), fmt.Sprintf("%020d.log", 0))
	size := func() int64 {
		t.Helper()
		fi, err := mem.Stat(seg)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	joined := size()
	const rounds = 6
	for k := 1; k < rounds; k++ {
		commitRound(t, j, ps, k)
	}
	if got := size(); got != joined {
		t.Fatalf("the log grew from %d to %d bytes over journaled commits of small records: not written behind", joined, got)
	}

	msgs, err := ps[0].Read(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != rounds {
		t.Fatalf("read %d messages (%q), want %d", len(msgs), payloadsOf(msgs), rounds)
	}
	for k, m := range msgs {
		if want := fmt.Sprintf("0/%d", k); string(m.Payload) != want || m.Offset != uint64(k) {
			t.Fatalf("message %d: offset %d payload %q, want %d %q", k, m.Offset, m.Payload, k, want)
		}
	}
	if size() == joined {
		t.Fatal("a read left the records unwritten")
	}

	// More committed records, unwritten when the process dies.
	for k := rounds; k < 2*rounds; k++ {
		commitRound(t, j, ps, k)
	}
	// The power loss first: it reads a copy, while the process crash's
	// reopen replays into mem itself.
	for _, c := range []struct {
		name string
		fsys *vfs.MemFS
	}{{"power loss", mem.Crash()}, {"process crash", mem}} {
		name := c.name
		s2, err := NewFileStore(FileConfig{Dir: "/data", FS: c.fsys})
		if err != nil {
			t.Fatalf("%s: reopening: %v", name, err)
		}
		for i := range ps {
			p, err := s2.Build(journalNS(t, uint32(i)), 1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Read(0, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2*rounds {
				t.Fatalf("%s: partition %d holds %d messages, want the %d committed", name, i, len(got), 2*rounds)
			}
			for k, m := range got {
				if want := fmt.Sprintf("%d/%d", i, k); string(m.Payload) != want {
					t.Fatalf("%s: partition %d message %d is %q, want %q", name, i, k, m.Payload, want)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Write-behind is bounded: a partition appended to without a read or a
// sync writes its records once they fill writeBehind, and a checkpoint
// writes and syncs them, so a power loss after it needs no journal.
func TestJournalWriteBehindBounded(t *testing.T) {
	mem := vfs.NewMem()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem, SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	ps := journalPartitions(t, s, 1)
	commitRound(t, j, ps, 0)
	payload := make([]byte, 1000)
	n := 2 * writeBehind / len(payload)
	for range n {
		if _, err := ps[0].Append([]Message{{Payload: payload}}); err != nil {
			t.Fatal(err)
		}
	}
	fp := ps[0].(*filePartition)
	if len(fp.wpend) > writeBehind {
		t.Fatalf("%d bytes unwritten, bound %d", len(fp.wpend), writeBehind)
	}
	fi, err := mem.Stat(filepath.Join(partDirOf(s, journalNS(t, 0)), fmt.Sprintf("%020d.log", 0)))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < writeBehind {
		t.Fatalf("log file of %d bytes after %d appends of %d bytes: written behind without a bound", fi.Size(), n, len(payload))
	}
	if errs := j.Commit(ps); errs[0] != nil {
		t.Fatal(errs[0])
	}
	j.checkpoint()
	if len(fp.wpend) != 0 || fp.synced != fp.next {
		t.Fatalf("after a checkpoint: %d bytes unwritten, synced %d of %d", len(fp.wpend), fp.synced, fp.next)
	}
	// The partition's own files hold everything through a power loss,
	// without the journal (the current journal file stays for later
	// frames: the test drops it).
	crashed := mem.Crash()
	names, _ := crashed.ReadDir("/data/journal")
	for _, n := range names {
		if err := crashed.Remove(filepath.Join("/data/journal", n)); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := NewFileStore(FileConfig{Dir: "/data", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s2.Build(journalNS(t, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.NextOffset(), uint64(n+1); got != want {
		t.Fatalf("after a power loss the partition holds %d messages, want %d", got, want)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// A clean close writes and syncs what a partition holds unwritten, so the
// journal's files can go: after the close of the partitions and the
// journal, and a power loss, every committed record is in the
// partitions' own files.
func TestJournalWriteBehindClose(t *testing.T) {
	mem := vfs.NewMem()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem, SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	ps := journalPartitions(t, s, 2)
	const rounds = 4
	for k := range rounds {
		commitRound(t, j, ps, k)
	}
	for _, p := range ps {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := mem.ReadDir("/data/journal")
	names = journalFileNames(names, err)
	if err != nil || len(names) != 0 {
		t.Fatalf("journal files %v left after a clean close (%v)", names, err)
	}
	// A power loss may bring removed journal files back (their removal
	// is not made durable: a replay skips what partitions hold), so the
	// crashed copy loses them as well: only the partitions' own files
	// count.
	crashed := mem.Crash()
	if err := crashed.RemoveAll("/data/journal"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		fsys *vfs.MemFS
	}{{"restart", mem}, {"power loss", crashed}} {
		s2, err := NewFileStore(FileConfig{Dir: "/data", FS: c.fsys})
		if err != nil {
			t.Fatal(err)
		}
		for i := range ps {
			p, err := s2.Build(journalNS(t, uint32(i)), 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.NextOffset(); got != rounds {
				t.Fatalf("%s: partition %d holds %d messages after a clean close, want %d", c.name, i, got, rounds)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Members of a journal whose records are all written behind pin no
// descriptor, so they do not count towards the pinned members a
// checkpoint waits for (maxParts) but only towards all members
// (maxMembers): with produces spread over more partitions than maxParts,
// a partition's checkpoint fsync covers many of its appends instead of
// one.
func TestJournalCheckpointCountsPinnedMembers(t *testing.T) {
	mem := vfs.NewMem()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem, MaxOpenFiles: 16, SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	if j.maxParts != 2 {
		t.Fatalf("maxParts %d, want 2", j.maxParts)
	}
	j.maxMembers = 4
	ps := journalPartitions(t, s, 3)
	commitRound(t, j, ps, 0) // direct: the partitions join
	for k := 1; k <= 3; k++ {
		commitRound(t, j, ps, k)
	}
	if j.log.cur.Load() != 1 || j.pinned != 0 || len(j.parts) != 3 {
		t.Fatalf("three members written behind, two pinned allowed: file %d, %d pinned, %d members; want file 1 (no checkpoint), 0, 3",
			j.log.cur.Load(), j.pinned, len(j.parts))
	}
	// A fourth member reaches maxMembers: the next commit checkpoints.
	p3, err := s.Build(journalNS(t, 3), 1)
	if err != nil {
		t.Fatal(err)
	}
	ps = append(ps, p3)
	commitRound(t, j, ps, 4) // the new partition joins (direct)
	commitRound(t, j, ps, 5)
	if len(j.parts) != 4 {
		t.Fatalf("%d members, want 4", len(j.parts))
	}
	commitRound(t, j, ps, 6)
	if len(j.parts) != 0 {
		t.Fatalf("four members with maxMembers 4: not checkpointed (%d members left)", len(j.parts))
	}
	// Two members whose writes are in their files (a read wrote them)
	// reach maxParts: the next commit checkpoints again.
	j.maxMembers = 100
	commitRound(t, j, ps, 7)
	for _, p := range ps[:2] {
		if _, err := p.Read(0, 1); err != nil {
			t.Fatal(err)
		}
	}
	if j.pinned != 2 {
		t.Fatalf("%d pinned members after two reads, want 2", j.pinned)
	}
	// A member whose tail is synced outside a checkpoint (a roll syncs
	// the tail it seals) pins nothing any more.
	if err := ps[0].(*filePartition).syncTail(); err != nil {
		t.Fatal(err)
	}
	if j.pinned != 1 {
		t.Fatalf("%d pinned members after one synced its tail, want 1", j.pinned)
	}
	if _, err := ps[2].Read(0, 1); err != nil {
		t.Fatal(err)
	}
	commitRound(t, j, ps, 8)
	if len(j.parts) != 0 || j.pinned != 0 {
		t.Fatalf("two pinned members with maxParts 2: not checkpointed (%d members, %d pinned left)", len(j.parts), j.pinned)
	}
	for _, p := range ps {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if j.pinned != 0 || len(j.parts) != 0 {
		t.Fatalf("after closing every partition: %d pinned, %d members", j.pinned, len(j.parts))
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// A write-behind that fails on a full disk is rolled back and kept: the
// records, acknowledged through the journal, stay behind; a read and a
// larger append get the error, and the partition is not broken, so once
// space returns the read sees everything and the records reach the file.
func TestJournalWriteBehindFullDisk(t *testing.T) {
	mem := vfs.NewMem()
	full := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool {
		return op.Kind == errorfs.OpWriteAt && strings.HasSuffix(op.Path, ".log")
	})
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: errorfs.New(mem, full), SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	j := s.NewJournal()
	ps := journalPartitions(t, s, 1)
	commitRound(t, j, ps, 0)
	full.Set(true)
	commitRound(t, j, ps, 1) // behind: the journal holds it
	if _, err := ps[0].Read(0, 10); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("read with the records behind and the disk full: %v, want ENOSPC", err)
	}
	if _, err := ps[0].Append([]Message{{Payload: make([]byte, writeBehind)}}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append larger than the write-behind buffer on a full disk: %v, want ENOSPC", err)
	}
	full.Set(false)
	msgs, err := ps[0].Read(0, 10)
	if err != nil {
		t.Fatalf("read once space returned: %v", err)
	}
	if got := payloadsOf(msgs); len(got) != 2 || got[0] != "0/0" || got[1] != "0/1" {
		t.Fatalf("read %q once space returned, want [0/0 0/1]", got)
	}
	if err := ps[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := NewFileStore(FileConfig{Dir: "/data", FS: mem.Crash()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s2.Build(journalNS(t, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.NextOffset(); got != 2 {
		t.Fatalf("after a power loss the partition holds %d messages, want 2", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
