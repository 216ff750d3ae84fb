package partition

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// sharedRun is two handles (two shards) on one store, each with its own
// partitions, whose commits are written together: one frame and one
// fdatasync for both, as a leader writes the handles queued behind it.
type sharedRun struct {
	t    *testing.T
	s    *FileStore
	js   [2]*Journal
	ps   [2][]Partition
	acks map[metadata.Namespace]map[uint64]string // acknowledged payloads by offset
	// stage: handle 1 stages (Journal.Stage, FsyncInterval) instead of
	// committing; its acknowledgements, in soft, need survive a process
	// crash only.
	stage bool
	soft  map[metadata.Namespace]map[uint64]string
	// big: the rounds whose messages are larger than writeBehind, so
	// Append writes them to the partition's file at once.
	big map[int]bool
	// huge: the rounds whose messages are larger than maxStash.
	huge map[int]bool
}

// sharedPerHandle is how many partitions each handle of a sharedRun has.
const sharedPerHandle = 2

func newSharedRun(t *testing.T, fsys vfs.FS) *sharedRun { return newSharedRunOf(t, fsys, false) }

// newSharedRunOf is newSharedRun; with deferred, the first partition of
// each handle is built deferred and attached to its handle (a new
// partition of an FsyncAlways topic on a node with a journal).
func newSharedRunOf(t *testing.T, fsys vfs.FS, deferred bool) *sharedRun {
	t.Helper()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: fsys, SerialSyncs: true})
	if err != nil {
		return nil
	}
	r := &sharedRun{t: t, s: s, acks: map[metadata.Namespace]map[uint64]string{}, soft: map[metadata.Namespace]map[uint64]string{}}
	for h := range r.js {
		r.js[h] = s.NewJournal()
		for i := range sharedPerHandle {
			build := s.Build
			if deferred && i == 0 {
				build = s.BuildDeferred
			}
			p, err := build(journalNS(t, uint32(h*sharedPerHandle+i)), 1)
			if err != nil {
				continue // the disk failed: left out
			}
			if deferred && i == 0 && !r.js[h].Attach(p) {
				t.Fatal("a deferred partition did not attach")
			}
			r.ps[h] = append(r.ps[h], p)
		}
	}
	return r
}

// round appends one message to every partition and commits both handles
// together: each prepares its entries, the direct syncs run, and one
// write carries both handles' entries (what commit does for a leader and
// the handles queued behind it); then each finishes.
func (r *sharedRun) round(k int) { r.roundOf(k, 0, 1) }

// roundOf is round for the handles hs only.
func (r *sharedRun) roundOf(k int, hs ...int) {
	errs := [2][]error{}
	offs := [2][]uint64{}
	for _, h := range hs {
		j := r.js[h]
		errs[h] = make([]error, len(r.ps[h]))
		offs[h] = make([]uint64, len(r.ps[h]))
		for i, p := range r.ps[h] {
			offs[h][i], errs[h][i] = p.Append([]Message{{Payload: []byte(r.payload(p.Namespace(), k))}})
		}
		staged := r.stage && h == 1
		j.prepare(r.ps[h], errs[h], staged)
		j.w.staged = staged
		for _, i := range j.direct {
			errs[h][i] = r.ps[h][i].Sync()
		}
	}
	var batch []*journalWrite
	for _, h := range hs {
		if j := r.js[h]; len(j.w.fps) > 0 {
			batch = append(batch, &j.w)
		}
	}
	if len(batch) > 0 {
		r.s.journal().write(batch)
	}
	for _, h := range hs {
		j := r.js[h]
		j.finish(errs[h])
		j.w.staged = false
		for i, p := range r.ps[h] {
			if errs[h][i] == nil {
				acks := r.acks
				if r.stage && h == 1 {
					acks = r.soft
				}
				ns := p.Namespace()
				if acks[ns] == nil {
					acks[ns] = map[uint64]string{}
				}
				acks[ns][offs[h][i]] = r.payload(ns, k)
			}
		}
	}
}

// payload is round k's message to ns: "partition/round", padded past
// writeBehind in the big rounds.
func (r *sharedRun) payload(ns metadata.Namespace, k int) string {
	m := fmt.Sprintf("%d/%d", ns.Partition(), k)
	if r.big[k] {
		m += " " + strings.Repeat("x", writeBehind)
	}
	if r.huge[k] {
		m += hugePayload
	}
	return m
}

// close closes the partitions, then the handles.
func (r *sharedRun) close() {
	for h, j := range r.js {
		for _, p := range r.ps[h] {
			_ = p.Close()
		}
		_ = j.Close()
	}
}

// check reopens the store on fsys (replaying the journal) and checks
// every partition: what was acknowledged at its offset, and nothing but
// whole messages of the partition, in order.
func (r *sharedRun) check(fsys vfs.FS, what string) {
	r.t.Helper()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: fsys})
	if err != nil {
		r.t.Fatalf("%s: reopening: %v", what, err)
	}
	for h := range r.js {
		for i := range sharedPerHandle {
			ns := journalNS(r.t, uint32(h*sharedPerHandle+i))
			acked := r.acks[ns]
			if !strings.HasPrefix(what, "power loss") && len(r.soft[ns]) > 0 {
				acked = r.soft[ns] // a process crash keeps what was staged
			}
			p, err := s.Build(ns, 1)
			if err != nil {
				if len(acked) == 0 {
					continue // never durably built, nothing acknowledged
				}
				r.t.Fatalf("%s: rebuilding %v: %v", what, ns, err)
			}
			msgs, err := p.Read(0, 1000)
			if err != nil {
				r.t.Fatalf("%s: reading %v: %v", what, ns, err)
			}
			last := -1
			for n, m := range msgs {
				var gi, k int
				if c, err := fmt.Sscanf(string(m.Payload), "%d/%d", &gi, &k); err != nil || c != 2 || gi != int(ns.Partition()) || k <= last || m.Offset != uint64(n) {
					r.t.Fatalf("%s: %v offset %d holds %q: not a message of it, in order", what, ns, m.Offset, m.Payload)
				}
				last = k
			}
			for off, want := range acked {
				if off >= uint64(len(msgs)) || string(msgs[off].Payload) != want {
					r.t.Fatalf("%s: acknowledged %q at %v offset %d lost (%d messages)", what, want, ns, off, len(msgs))
				}
			}
			if err := p.Close(); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// The handles of two shards commit together: their entries go into one
// frame of the store's one journal file, made durable by one fdatasync,
// and after a power loss the replay restores the records of both shards'
// partitions.
func TestJournalHandlesShareOneWrite(t *testing.T) {
	mem := vfs.NewMem()
	var journalSyncs atomic.Int64
	count := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpSync && strings.HasSuffix(op.Path, journalExt) {
			journalSyncs.Add(1)
		}
		return nil
	})
	r := newSharedRun(t, errorfs.New(mem, count))
	const rounds = 4
	for k := range rounds {
		r.round(k)
	}
	// Round 0 synced the new partitions directly; rounds 1.. went to the
	// journal, one write of both handles each.
	if n := journalSyncs.Load(); n != rounds-1 {
		t.Fatalf("%d fdatasyncs of the journal for %d rounds of two handles, want one per round", n, rounds-1)
	}
	names, err := mem.ReadDir("/data/journal")
	names = journalFileNames(names, err)
	if err != nil || len(names) != 1 {
		t.Fatalf("journal files %v (%v), want one for the store", names, err)
	}
	path := "/data/journal/" + names[0]
	b, err := vfs.ReadFile(mem, path)
	if err != nil {
		t.Fatal(err)
	}
	// The frames overwrite zeros written ahead of them, so their
	// fdatasyncs need not commit a change of the file's size.
	if len(b) != journalZeroChunk {
		t.Fatalf("the journal file is %d bytes, want %d: frames were appended, not written over zeros", len(b), journalZeroChunk)
	}
	entries, err := decodeJournal(b, path)
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	for pos := 0; pos+journalFrameHeader <= len(b) && !allZero(b[pos:pos+journalFrameHeader]); frames++ {
		pos += journalFrameHeader + int(le.Uint32(b[pos+4:]))
	}
	if frames != rounds-1 || len(entries) != (rounds-1)*2*sharedPerHandle {
		t.Fatalf("the journal holds %d frames and %d entries, want %d frames of %d entries (both handles' in each)", frames, len(entries), rounds-1, 2*sharedPerHandle)
	}
	crashed := mem.Crash()
	for ns := range r.acks {
		dir := partDirOf(r.s, ns)
		seg, err := vfs.ReadFile(crashed, dir+"/00000000000000000000.log")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(seg), fmt.Sprintf("/%d", rounds-1)) {
			t.Fatalf("%v: the last round reached the partition's own file: the journal is not exercised", ns)
		}
	}
	r.check(crashed, "power loss")
}

// Pebble style, for a write that carries two handles' entries: every
// mutating filesystem operation of the workload is failed in turn, once
// and from then on; after each, a power loss and a process crash keep
// every acknowledged record of both shards' partitions, and nothing
// unacknowledged shows up torn or out of order.
func TestJournalSharedWriteCrashAtEveryWritePoint(t *testing.T) {
	workload := func(fsys vfs.FS) *sharedRun {
		r := newSharedRun(t, fsys)
		if r == nil {
			return nil
		}
		for k := range 4 {
			r.round(k)
		}
		r.close()
		return r
	}
	count := errorfs.OnIndex(-1, nil)
	workload(errorfs.New(vfs.NewMem(), count))
	failEveryWritePoint(t, count.Count(), workload)
}

// TestJournalSharedWriteCrashAtEveryWritePoint with deferred partitions
// (FileStore.BuildDeferred, Journal.Attach): their records are in the
// journal only until handle 0's checkpoint creates its deferred
// partition's files, and handle 1's until Close. After every failure,
// a power loss and a process crash keep every acknowledged record of
// every partition: a replay recreates a deferred partition from the
// journal's fresh entries.
func TestJournalDeferredPartitionsCrashAtEveryWritePoint(t *testing.T) {
	workload := func(fsys vfs.FS) *sharedRun {
		r := newSharedRunOf(t, fsys, true)
		if r == nil {
			return nil
		}
		for k := range 4 {
			r.round(k)
			if k == 1 {
				_ = r.js[0].checkpoint()
			}
		}
		r.close()
		return r
	}
	clean := vfs.NewMem()
	r := newSharedRunOf(t, clean, true)
	r.round(0)
	for h := range r.js {
		if _, err := clean.Stat(partDirOf(r.s, journalNS(t, uint32(h*sharedPerHandle)))); err == nil {
			t.Fatalf("handle %d: a deferred partition has a directory after its first commit", h)
		}
	}
	r.check(clean.Crash(), "power loss with deferred partitions in the journal only")
	count := errorfs.OnIndex(-1, nil)
	workload(errorfs.New(vfs.NewMem(), count))
	failEveryWritePoint(t, count.Count(), workload)
}

// Handle 1 stages its partitions' records (Journal.Stage: FsyncInterval,
// written to the journal without an fdatasync) while handle 0 commits
// (FsyncAlways), in shared writes and in writes of handle 1 alone; the
// first partition of each is deferred. Every mutating operation failed
// in turn, once and from then on: a process crash keeps every
// acknowledged record of both handles, a power loss every committed one,
// and neither leaves anything torn or out of order, nor refuses to open
// (staged frames are uncertain: a torn one before them is no damage).
func TestJournalStagedPartitionsCrashAtEveryWritePoint(t *testing.T) {
	workload := func(fsys vfs.FS) *sharedRun {
		r := newSharedRunOf(t, fsys, true)
		if r == nil {
			return nil
		}
		r.stage = true
		// Round 3 writes handle 1's staged partitions' records to their
		// files at once (larger than writeBehind): the partitions stop
		// stashing, and what they append after it is in their files
		// only. Round 5 is large for both handles.
		r.big = map[int]bool{3: true, 5: true}
		r.round(0)
		r.roundOf(1, 1)
		r.round(2)
		r.roundOf(3, 1)
		_ = r.js[1].checkpoint()
		r.roundOf(4, 1)
		r.round(5)
		r.close()
		return r
	}
	// A process crash with the partitions open (nothing closed, nothing
	// synced by a Close): the staged records of the deferred partitions
	// are in the journal file's page cache only, and come back.
	live := vfs.NewMem()
	r := newSharedRunOf(t, live, true)
	r.stage = true
	r.round(0)
	r.roundOf(1, 1)
	if _, err := live.Stat(partDirOf(r.s, journalNS(t, uint32(sharedPerHandle)))); err == nil {
		t.Fatal("a deferred staged partition has a directory")
	}
	r.check(live, "process crash with staged deferred partitions open")

	count := errorfs.OnIndex(-1, nil)
	clean := workload(errorfs.New(vfs.NewMem(), count))
	if len(clean.soft) == 0 || len(clean.acks) == 0 {
		t.Fatal("the clean run staged or committed nothing")
	}
	failEveryWritePoint(t, count.Count(), workload)
}

// A failed fdatasync of a shared write fails every journaled partition
// of it, whichever handle's: none of them may be acknowledged.
func TestJournalSharedWriteFailureFailsEveryHandle(t *testing.T) {
	mem := vfs.NewMem()
	var fail atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail.Load() && op.Kind == errorfs.OpSync && strings.HasSuffix(op.Path, journalExt) {
			return syscall.EIO
		}
		return nil
	})
	r := newSharedRun(t, errorfs.New(mem, inj))
	r.round(0) // direct
	r.round(1) // journaled
	fail.Store(true)
	before := map[metadata.Namespace]int{}
	for ns, a := range r.acks {
		before[ns] = len(a)
	}
	r.round(2)
	for ns, a := range r.acks {
		if len(a) != before[ns] {
			t.Fatalf("%v: round 2 acknowledged although the journal's fdatasync failed", ns)
		}
	}
	fail.Store(false)
	r.check(mem.Crash(), "power loss after a failed shared write")
}

// A file is removed only when no handle needs it: after a shared write,
// one handle's checkpoint keeps the file the other handle's records are
// in (a power loss then still finds them); the other handle's next
// commit, finding its records in a file that is no longer the current
// one, checkpoints first, and then the file goes.
func TestJournalPruneKeepsFilesOfEveryHandle(t *testing.T) {
	mem := vfs.NewMem()
	r := newSharedRun(t, mem)
	r.round(0) // direct
	r.round(1) // both handles' entries in file 1
	r.s.journal().fileSize = 1
	// A write of the first handle alone starts file 2.
	for i, p := range r.ps[0] {
		if _, err := p.Append([]Message{{Payload: fmt.Appendf(nil, "%d/%d", p.Namespace().Partition(), 2)}}); err != nil {
			t.Fatal(err)
		}
		r.acks[p.Namespace()][2] = fmt.Sprintf("%d/%d", r.ps[0][i].Namespace().Partition(), 2)
	}
	for i, err := range r.js[0].Commit(r.ps[0]) {
		if err != nil {
			t.Fatalf("partition %d: %v", i, err)
		}
	}
	if err := r.js[0].Checkpoint(); err != nil {
		t.Fatal(err)
	}
	exists := func(seq uint64) bool {
		_, err := mem.Stat("/data/journal/" + journalFileName(seq))
		return err == nil
	}
	if !exists(1) {
		t.Fatal("journal file 1 removed while the second handle's records are only there")
	}
	r.check(mem.Crash(), "power loss after the first handle's checkpoint")
	r.round(3) // the second handle checkpoints before its entries
	for _, p := range r.ps[1] {
		if fp := p.(*filePartition); fp.synced < 2 {
			t.Fatalf("%v synced to %d: the commit did not checkpoint records of a file that is no longer current", fp.ns, fp.synced)
		}
	}
	if exists(1) {
		t.Fatal("journal file 1 kept after every handle synced its records")
	}
	r.check(mem.Crash(), "power loss at the end")
}

// The journal starts a new file once the current one is full and tells
// every handle (Due). A handle that commits nothing more checkpoints on
// that signal: its partitions sync their own files and the old file, no
// longer needed by anyone, is removed; until then it is kept.
func TestJournalNewFileCheckpointsIdleHandles(t *testing.T) {
	mem := vfs.NewMem()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem, SerialSyncs: true, JournalFileSize: 1}) // every write starts a new file
	if err != nil {
		t.Fatal(err)
	}
	idle, busy := s.NewJournal(), s.NewJournal()
	ip := journalPartitions(t, s, 1)
	bp := []Partition{}
	for i := 1; i <= 2; i++ {
		p, err := s.Build(journalNS(t, uint32(i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		bp = append(bp, p)
	}
	commitRound(t, idle, ip, 0) // direct: its synced-end mark is journal file 1
	commitRound(t, idle, ip, 1) // journal file 2
	drain := func(j *Journal) bool {
		select {
		case <-j.Due():
			return true
		default:
			return false
		}
	}
	drain(idle)
	for k := range 3 {
		commitRound(t, busy, bp, k) // journal files 3 (round 0's marks), 4, 5
	}
	if !drain(idle) {
		t.Fatal("the journal started new files without telling the idle handle")
	}
	exists := func(seq uint64) bool {
		_, err := mem.Stat("/data/journal/" + journalFileName(seq))
		return err == nil
	}
	if err := busy.Checkpoint(); err != nil { // syncs its own, prunes
		t.Fatal(err)
	}
	if !exists(2) {
		t.Fatal("journal file 2, holding the idle handle's unsynced records, was removed")
	}
	if err := idle.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if exists(2) {
		t.Fatal("journal file 2 kept after the idle handle checkpointed")
	}
	if fp := ip[0].(*filePartition); fp.synced != 2 {
		t.Fatalf("the idle partition is synced to %d after its checkpoint, want 2", fp.synced)
	}
	crashed := mem.Crash()
	s2, err := NewFileStore(FileConfig{Dir: "/data", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{2, 3, 3} {
		p, err := s2.Build(journalNS(t, uint32(i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		if n := p.NextOffset(); n != want {
			t.Fatalf("partition %d holds %d messages after a power loss, want %d", i, n, want)
		}
		_ = p.Close()
	}
}

// Handles on their own goroutines, as shards are, commit concurrently
// through the leader and the queue (run it with -race): every write
// carries whatever was queued, and everything acknowledged survives a
// power loss. The journal never needs more fdatasyncs than commits.
func TestJournalConcurrentHandles(t *testing.T) {
	mem := vfs.NewMem()
	var journalSyncs atomic.Int64
	count := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpSync && strings.HasSuffix(op.Path, journalExt) {
			journalSyncs.Add(1)
		}
		return nil
	})
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: errorfs.New(mem, count), MaxOpenFiles: 256})
	if err != nil {
		t.Fatal(err)
	}
	const handles, perHandle, rounds = 4, 3, 20
	s.journal().lastSync.Store(int64(1e6)) // let leaders linger
	var wg sync.WaitGroup
	var commits atomic.Int64
	errs := make(chan error, handles)
	for h := range handles {
		j := s.NewJournal()
		var ps []Partition
		for i := range perHandle {
			p, err := s.Build(journalNS(t, uint32(h*perHandle+i)), 1)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		wg.Go(func() {
			for k := range rounds {
				for i, p := range ps {
					if _, err := p.Append([]Message{{Payload: fmt.Appendf(nil, "%d/%d", i, k)}}); err != nil {
						errs <- err
						return
					}
				}
				for _, err := range j.Commit(ps) {
					if err != nil {
						errs <- err
						return
					}
				}
				commits.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, c := journalSyncs.Load(), commits.Load(); n > c {
		t.Fatalf("%d journal fdatasyncs for %d commits", n, c)
	}
	crashed := mem.Crash()
	s2, err := NewFileStore(FileConfig{Dir: "/data", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	for i := range handles * perHandle {
		p, err := s2.Build(journalNS(t, uint32(i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := p.Read(0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != rounds {
			t.Fatalf("partition %d holds %d messages after a power loss, want %d", i, len(msgs), rounds)
		}
		for n, m := range msgs {
			if want := fmt.Sprintf("%d/%d", i%perHandle, n); string(m.Payload) != want {
				t.Fatalf("partition %d offset %d holds %q, want %q", i, n, m.Payload, want)
			}
		}
		_ = p.Close()
	}
}

// A staged partition (Journal.Stage, FsyncInterval) whose Append writes
// its records to its own file at once (a batch larger than writeBehind)
// keeps no copy of them for the journal: the next Stage writes nothing
// for it, so every byte reaches the disk once, and a process crash with
// the partition open still finds every acknowledged record.
func TestJournalStagedLargeAppendIsWrittenOnce(t *testing.T) {
	live := vfs.NewMem()
	var journalBytes atomic.Int64
	count := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpWriteAt && strings.Contains(op.Path, journalDir) {
			journalBytes.Add(int64(op.Len))
		}
		return nil
	})
	r := newSharedRunOf(t, errorfs.New(live, count), true)
	r.stage = true
	r.big = map[int]bool{1: true, 2: true}
	r.roundOf(0, 1) // small: held behind, staged through the journal
	// The handle's first partition is deferred and attached (the other
	// is not in the journal: a Stage never joins one).
	fp := r.ps[1][0].(*filePartition)
	if !fp.staging || !fp.stash {
		t.Fatalf("%v: not staging after a Stage", fp.ns)
	}
	before := journalBytes.Load()
	r.roundOf(1, 1)
	r.roundOf(2, 1)
	if fp.stash || len(fp.jpend) > 0 {
		t.Fatalf("%v: still stashing (%d bytes) after appends written to its file", fp.ns, len(fp.jpend))
	}
	if n := journalBytes.Load() - before; n >= writeBehind {
		t.Fatalf("the stages of two large rounds wrote %d bytes to the journal", n)
	}
	r.roundOf(3, 1) // small again: to the file, acknowledged after it
	r.check(live, "process crash with staged partitions open")
}

// failEveryWritePoint runs workload n times more on a fresh MemFS, its
// i-th mutating operation failing with EIO once and, in a second run,
// from then on, for every i below n (the operations a clean run counted);
// after each run that opened, a power loss and a process crash keep what
// the run's check demands.
func failEveryWritePoint(t *testing.T, n int64, workload func(vfs.FS) *sharedRun) {
	t.Helper()
	t.Logf("%d write points", n)
	for i := range n {
		for _, mode := range []string{"once", "from then on"} {
			mem := vfs.NewMem()
			inj := errorfs.OnIndex(i, syscall.EIO)
			if mode == "from then on" {
				inj = errorfs.FromIndex(i, syscall.EIO)
			}
			r := workload(errorfs.New(mem, inj))
			if !inj.Fired() {
				t.Fatalf("op %d never happened", i)
			}
			if r == nil {
				continue
			}
			what := fmt.Sprintf("op %d failing %s", i, mode)
			r.check(mem.Crash(), "power loss: "+what)
			r.check(mem, "process crash: "+what)
		}
	}
}

// hugePayload pads a huge round's message past maxStash.
var hugePayload = " " + strings.Repeat("x", maxStash)

// A journaled partition (Commit, FsyncAlways) whose append would take its
// stash past maxStash stops stashing before the batch is copied: the
// journal carries none of those bytes, the payload is written from the
// caller's slice (lent, not copied into the encode buffer), the next
// Commit syncs the partition directly, and after it the partition joins
// the journal again. A power loss keeps every acknowledged record.
func TestJournalLargeAppendLeavesTheJournalBeforeTheCopy(t *testing.T) {
	mem := vfs.NewMem()
	var journalBytes, lent atomic.Int64
	count := errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch {
		case op.Kind != errorfs.OpWriteAt:
		case strings.Contains(op.Path, journalDir):
			journalBytes.Add(int64(op.Len))
		case op.Len > len(hugePayload) && op.Len < len(hugePayload)+16 && strings.HasSuffix(op.Path, ".log"):
			lent.Add(1) // a payload without its record head: the caller's slice
		}
		return nil
	})
	r := newSharedRun(t, errorfs.New(mem, count))
	r.huge = map[int]bool{2: true, 3: true}
	r.round(0) // new partitions: synced directly, then in the journal
	r.round(1)
	fp := r.ps[0][0].(*filePartition)
	if !fp.stash {
		t.Fatalf("%v: not in the journal after two commits", fp.ns)
	}
	before := journalBytes.Load()
	r.round(2)
	r.round(3)
	if n := journalBytes.Load() - before; n >= maxStash {
		t.Fatalf("two rounds of records larger than maxStash wrote %d bytes to the journal", n)
	}
	if n, want := lent.Load(), int64(2*2*sharedPerHandle); n != want {
		t.Fatalf("%d payloads larger than maxStash written from the caller's slice, want %d (every one)", n, want)
	}
	r.round(4)
	r.round(5)
	if !fp.stash {
		t.Fatalf("%v: not in the journal again after small rounds", fp.ns)
	}
	r.check(mem.Crash(), "power loss")
}
