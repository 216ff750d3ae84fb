package partition_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// countingFS counts the descriptors held through it, as the operating
// system would: a file from OpenFile until its Close, and one for the
// duration of ReadDir, SyncDir and RemoveAll (each opens the directory).
// It records the most held at once, the files open now by path, how often
// each path was opened and how often each directory was synced.
type countingFS struct {
	vfs.FS
	mu       sync.Mutex
	open     int
	max      int
	byPath   map[string]int
	opens    map[string]int
	syncDirs map[string]int
}

func newCountingFS(inner vfs.FS) *countingFS {
	return &countingFS{FS: inner, byPath: map[string]int{}, opens: map[string]int{}, syncDirs: map[string]int{}}
}

func (c *countingFS) hold(path string) {
	c.mu.Lock()
	c.open++
	c.max = max(c.max, c.open)
	if path != "" {
		c.byPath[path]++
		c.opens[path]++
	}
	c.mu.Unlock()
}

func (c *countingFS) drop(path string) {
	c.mu.Lock()
	c.open--
	if path != "" {
		c.byPath[path]--
	}
	c.mu.Unlock()
}

// state returns the descriptors held now and the most held at once.
func (c *countingFS) state() (now, most int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, c.max
}

func (c *countingFS) isOpen(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byPath[path] > 0
}

func (c *countingFS) openedTimes(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opens[path]
}

func (c *countingFS) syncedDir(dir string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.syncDirs[dir]
}

type countedFile struct {
	vfs.File
	c      *countingFS
	path   string
	closed bool
}

func (c *countingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	c.hold(name)
	return &countedFile{File: f, c: c, path: name}, nil
}

func (f *countedFile) Close() error {
	if !f.closed {
		f.closed = true
		f.c.drop(f.path)
	}
	return f.File.Close()
}

func (c *countingFS) ReadDir(dir string) ([]string, error) {
	c.hold("")
	defer c.drop("")
	return c.FS.ReadDir(dir)
}

func (c *countingFS) SyncDir(dir string) error {
	c.hold("")
	defer c.drop("")
	c.mu.Lock()
	c.syncDirs[dir]++
	c.mu.Unlock()
	return c.FS.SyncDir(dir)
}

func (c *countingFS) RemoveAll(name string) error {
	c.hold("")
	defer c.drop("")
	return c.FS.RemoveAll(name)
}

func logPath(dir string, ns metadata.Namespace, base uint64) string {
	return filepath.Join(partDir(dir, ns), segName(base, ".log"))
}

// TestFileBudgetManyPartitions writes and reads 100 partitions interleaved
// through a store with a budget of 8 descriptors, rolling segments on
// the way, and checks through the filesystem that the store never holds
// more than 8 at once, that it closed and reopened files to get there,
// and that everything reads back, also after a crash and a reopen of
// every partition (which holds no more than 8 either).
func TestFileBudgetManyPartitions(t *testing.T) {
	partition.AllowSmallSegments(t, smallSegment)
	const (
		budget = 8
		parts  = 100
		rounds = 8
		size   = 2000 // 3 messages a round: 8 rounds roll the 32 KiB segments
	)
	mem := vfs.NewMem()
	cfs := newCountingFS(mem)
	cfg := memConfig(cfs)
	cfg.MaxOpenFiles = budget
	s := newFileStore(t, cfg)
	checkBudget := func(what string) {
		t.Helper()
		if now, most := cfs.state(); most > budget {
			t.Fatalf("%s: the store held %d descriptors at once (now %d), budget %d", what, most, now, budget)
		}
	}
	nss := make([]metadata.Namespace, parts)
	ps := make([]partition.Partition, parts)
	for i := range parts {
		nss[i] = mustNS(t, 1, 1+uint32(i%3), uint32(i))
		ps[i] = mustBuild(t, s, nss[i], 1)
		checkBudget("build")
	}
	for r := range rounds {
		for i, p := range ps {
			mustAppend(t, p, batch(p.NextOffset(), 3, size))
			if err := p.Sync(); err != nil {
				t.Fatalf("round %d partition %d: Sync: %v", r, i, err)
			}
			// Read back this partition's newest batch and an older
			// partition's first messages: their files were closed
			// since.
			checkRead(t, p, p.NextOffset()-3, 10, 3, size)
			old := ps[(i+37)%parts]
			checkRead(t, old, 0, 2, min(2, int(old.NextOffset())), size)
			if _, err := old.OffsetForTime(1); err != nil {
				t.Fatalf("OffsetForTime: %v", err)
			}
			checkBudget("write and read")
		}
	}
	st := s.HandleStats()
	if st.Max != budget || st.Evictions == 0 || st.Reopens == 0 || st.OverBudget != 0 {
		t.Fatalf("HandleStats = %+v: want Max %d, evictions and reopens, nothing over budget", st, budget)
	}
	if st.Open > budget || st.Idle > st.Open {
		t.Fatalf("HandleStats = %+v: more open than the budget", st)
	}
	for _, p := range ps {
		mustClose(t, p)
	}
	if now, _ := cfs.state(); now != 0 {
		t.Fatalf("%d descriptors held after every partition was closed", now)
	}
	if st := s.HandleStats(); st.Open != 0 {
		t.Fatalf("HandleStats.Open = %d after every partition was closed", st.Open)
	}

	// Everything was synced: a crash keeps it all. Reopening every
	// partition recovers them within the budget too.
	cfs2 := newCountingFS(mem.Crash())
	cfg.FS = cfs2
	s2 := newFileStore(t, cfg)
	for i, ns := range nss {
		p := mustBuild(t, s2, ns, 1)
		ps[i] = p
		if p.NextOffset() != rounds*3 {
			t.Fatalf("partition %d reopened with NextOffset %d, want %d", i, p.NextOffset(), rounds*3)
		}
	}
	if _, most := cfs2.state(); most > budget {
		t.Fatalf("reopening %d partitions held %d descriptors at once, budget %d", parts, most, budget)
	}
	for _, p := range ps {
		checkRead(t, p, 0, rounds*3, rounds*3, size)
		if _, most := cfs2.state(); most > budget {
			t.Fatalf("reading back held %d descriptors at once, budget %d", most, budget)
		}
		mustClose(t, p)
	}
}

// TestFilePinnedTail checks that a tail holding appends not yet fsynced
// keeps its descriptor, however many other files the budget needs, until
// the Sync that covers them; that such pins may take the store past its
// budget (counted); and that once synced the store comes back within it.
func TestFilePinnedTail(t *testing.T) {
	const budget = 4
	cfs := newCountingFS(vfs.NewMem())
	cfg := partition.FileConfig{Dir: "/data", FS: cfs, MaxOpenFiles: budget}
	s := newFileStore(t, cfg)
	var ps []partition.Partition
	for i := range 12 {
		ps = append(ps, mustBuild(t, s, mustNS(t, 1, 1, uint32(i)), 1))
	}
	dirty := ps[0]
	dirtyLog := logPath("/data", dirty.Namespace(), 0)
	mustAppend(t, dirty, batch(0, 2, 100))
	opensBefore := cfs.openedTimes(dirtyLog)
	for _, p := range ps[1:] {
		mustAppend(t, p, batch(0, 2, 100))
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
		checkRead(t, p, 0, 2, 2, 100)
	}
	if !cfs.isOpen(dirtyLog) || cfs.openedTimes(dirtyLog) != opensBefore {
		t.Fatalf("the unsynced tail's file was closed (open %v, opened %d times, %d before)",
			cfs.isOpen(dirtyLog), cfs.openedTimes(dirtyLog), opensBefore)
	}
	if err := dirty.Sync(); err != nil {
		t.Fatal(err)
	}
	if cfs.openedTimes(dirtyLog) != opensBefore {
		t.Fatalf("Sync reopened the tail instead of syncing through the descriptor the write used")
	}
	// Synced, it is an ordinary idle file: the next uses of other
	// partitions close it.
	for _, p := range ps[1:] {
		checkRead(t, p, 0, 2, 2, 100)
	}
	if cfs.isOpen(dirtyLog) {
		t.Fatal("the synced tail's file is still open after the budget needed its descriptor")
	}

	// Every tail dirty at once: more pins than the budget.
	for _, p := range ps {
		mustAppend(t, p, batch(p.NextOffset(), 1, 100))
	}
	if now, _ := cfs.state(); now <= budget {
		t.Fatalf("%d descriptors held with %d unsynced tails, want more than the budget %d", now, len(ps), budget)
	}
	if st := s.HandleStats(); st.OverBudget == 0 || st.Open <= budget {
		t.Fatalf("HandleStats = %+v: want opens over the budget counted", st)
	}
	for _, p := range ps {
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if now, _ := cfs.state(); now > budget {
		t.Fatalf("%d descriptors held after every tail was synced, budget %d", now, budget)
	}
	for _, p := range ps {
		mustClose(t, p)
	}
}

// TestFileReopenFails fails the reopen of a segment file the budget
// closed: Read and Append report ErrReopen wrapping the filesystem's
// error and change nothing; once the filesystem recovers the partition
// carries on, and a crash then keeps every synced message.
func TestFileReopenFails(t *testing.T) {
	const budget = 4
	mem := vfs.NewMem()
	injected := syscall.EMFILE
	var target string
	sw := errorfs.NewSwitchFunc(injected, func(op errorfs.Op) bool {
		return op.Kind == errorfs.OpOpen && op.Path == target
	})
	cfs := newCountingFS(errorfs.New(mem, sw))
	s := newFileStore(t, partition.FileConfig{Dir: "/data", FS: cfs, MaxOpenFiles: budget})
	p := mustBuild(t, s, mustNS(t, 1, 1, 0), 1)
	target = logPath("/data", p.Namespace(), 0)
	mustAppend(t, p, batch(0, 3, 100))
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	// Other partitions take the descriptors: p's log is closed.
	var others []partition.Partition
	for i := 1; i <= 3; i++ {
		q := mustBuild(t, s, mustNS(t, 1, 1, uint32(i)), 1)
		mustAppend(t, q, batch(0, 1, 100))
		others = append(others, q)
	}
	if cfs.isOpen(target) {
		t.Fatal("the idle partition's log is still open: the test needs it closed")
	}

	sw.Set(true)
	if _, err := p.Read(0, 10); !errors.Is(err, partition.ErrReopen) || !errors.Is(err, injected) {
		t.Fatalf("Read with the reopen failing: %v, want ErrReopen wrapping %v", err, injected)
	}
	if _, err := p.Append(batch(3, 1, 100)); !errors.Is(err, partition.ErrReopen) || !errors.Is(err, injected) {
		t.Fatalf("Append with the reopen failing: %v, want ErrReopen wrapping %v", err, injected)
	}
	if p.NextOffset() != 3 {
		t.Fatalf("NextOffset = %d after a failed Append, want 3", p.NextOffset())
	}
	sw.Set(false)

	checkRead(t, p, 0, 10, 3, 100)
	mustAppend(t, p, batch(3, 2, 100))
	if err := p.Sync(); err != nil {
		t.Fatalf("Sync after the filesystem recovered: %v", err)
	}
	checkRead(t, p, 0, 10, 5, 100)
	for _, q := range others {
		if err := q.Sync(); err != nil {
			t.Fatal(err)
		}
	}

	s2 := newFileStore(t, partition.FileConfig{Dir: "/data", FS: mem.Crash(), MaxOpenFiles: budget})
	p2 := mustBuild(t, s2, p.Namespace(), 1)
	if p2.NextOffset() != 5 {
		t.Fatalf("after a crash NextOffset = %d, want the 5 synced messages", p2.NextOffset())
	}
	checkRead(t, p2, 0, 10, 5, 100)
	mustClose(t, p2)
}

// TestFileSharedDirSyncsBatched builds many partitions of one topic and
// syncs each: the directories they share are fsynced once for the batch,
// each partition's own directory once for it.
func TestFileSharedDirSyncsBatched(t *testing.T) {
	const parts = 50
	cfs := newCountingFS(vfs.NewMem())
	s := newFileStore(t, partition.FileConfig{Dir: "/data", FS: cfs})
	var ps []partition.Partition
	for i := range parts {
		ps = append(ps, mustBuild(t, s, mustNS(t, 1, 1, uint32(i)), 1))
	}
	for _, p := range ps {
		mustAppend(t, p, batch(0, 1, 10))
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	shared := filepath.Dir(partDir("/data", ps[0].Namespace()))
	for d := shared; d != "/"; d = filepath.Dir(d) {
		if n := cfs.syncedDir(d); n != 1 {
			t.Errorf("shared directory %s fsynced %d times for %d new partitions, want 1", d, n, parts)
		}
	}
	for _, p := range ps {
		if n := cfs.syncedDir(partDir("/data", p.Namespace())); n != 1 {
			t.Errorf("partition directory fsynced %d times, want 1", n)
		}
	}
	// A partition built after the batch was synced changes the shared
	// directory again: its Sync must fsync it again.
	late := mustBuild(t, s, mustNS(t, 1, 1, parts), 1)
	mustAppend(t, late, batch(0, 1, 10))
	if err := late.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := cfs.syncedDir(shared); n != 2 {
		t.Errorf("shared directory fsynced %d times after a later build's Sync, want 2", n)
	}
	for _, p := range append(ps, late) {
		mustClose(t, p)
	}

	// Reopened one at a time, each synced before the next is built (as
	// a node's start does): the shared directories are fsynced once, for
	// all of them.
	cfs2 := newCountingFS(cfs.FS)
	s2 := newFileStore(t, partition.FileConfig{Dir: "/data", FS: cfs2})
	for _, ns := range append(nsOf(ps), late.Namespace()) {
		p := mustBuild(t, s2, ns, 1)
		mustAppend(t, p, batch(p.NextOffset(), 1, 10))
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
		mustClose(t, p)
	}
	for d := shared; d != "/"; d = filepath.Dir(d) {
		if n := cfs2.syncedDir(d); n != 1 {
			t.Errorf("shared directory %s fsynced %d times for %d reopened partitions, want 1", d, n, parts+1)
		}
	}
}

func nsOf(ps []partition.Partition) []metadata.Namespace {
	out := make([]metadata.Namespace, len(ps))
	for i, p := range ps {
		out[i] = p.Namespace()
	}
	return out
}

func TestFileConfigMaxOpenFiles(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, true}, {partition.MinMaxOpenFiles, true}, {100000, true}, {partition.MinMaxOpenFiles - 1, false}, {-1, false}} {
		err := partition.FileConfig{Dir: "/d", MaxOpenFiles: tc.n}.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, partition.ErrInvalidConfig)) {
			t.Errorf("Validate with MaxOpenFiles %d: %v, want ok=%v", tc.n, err, tc.ok)
		}
	}
	s := newFileStore(t, partition.FileConfig{Dir: "/d", FS: vfs.NewMem()})
	if got, want := s.HandleStats().Max, partition.DefaultMaxOpenFiles(); got != want {
		t.Errorf("default budget %d, want DefaultMaxOpenFiles() = %d", got, want)
	}
	if d := partition.DefaultMaxOpenFiles(); d < partition.DefaultMaxOpenFilesFloor || d > partition.DefaultMaxOpenFilesCeiling {
		t.Errorf("DefaultMaxOpenFiles() = %d outside [%d, %d]", d, partition.DefaultMaxOpenFilesFloor, partition.DefaultMaxOpenFilesCeiling)
	}
}

// TestFileBudgetConcurrent shares a budget of 8 between 4 goroutines,
// each owning 25 partitions (as shards do), under the race detector in
// CI: every message reads back, and the store holds at most the budget
// plus what the goroutines use at the same instant.
func TestFileBudgetConcurrent(t *testing.T) {
	const budget, workers, each, rounds = 8, 4, 25, 5
	cfs := newCountingFS(vfs.NewMem())
	s := newFileStore(t, partition.FileConfig{Dir: "/data", FS: cfs, MaxOpenFiles: budget})
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var ps []partition.Partition
			defer func() {
				for _, p := range ps {
					_ = p.Close()
				}
			}()
			for i := range each {
				ns, _ := metadata.NewNamespace(1, uint32(1+w), uint32(i))
				p, err := s.Build(ns, 1)
				if err != nil {
					errs <- err
					return
				}
				ps = append(ps, p)
			}
			for range rounds {
				for _, p := range ps {
					if _, err := p.Append(batch(p.NextOffset(), 2, 500)); err != nil {
						errs <- err
						return
					}
					if err := p.Sync(); err != nil {
						errs <- err
						return
					}
					got, err := p.Read(0, 100)
					if err != nil || uint64(len(got)) != p.NextOffset() {
						errs <- fmt.Errorf("read %d messages (%v), want %d", len(got), err, p.NextOffset())
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// In use at one instant, per goroutine: the tail being written,
	// its index file and a transient file or directory.
	if _, most := cfs.state(); most > budget+3*workers {
		t.Fatalf("the store held %d descriptors at once, budget %d", most, budget)
	}
	if now, _ := cfs.state(); now != 0 {
		t.Fatalf("%d descriptors held after every partition was closed", now)
	}
}
