package partition_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// ownerLog is the file a lodging owner keeps in the partition's
// directory in these tests (a replicated partition's is its raft log):
// its first line names the incarnation.
const ownerLog = "owner.log"

// lodgedConfig is memConfig with an owner whose log names its
// incarnation, as a cluster's raft log does.
func lodgedConfig(fsys vfs.FS) partition.FileConfig {
	cfg := memConfig(fsys)
	cfg.OwnerIncarnation = func(fsys vfs.FS, dir string) (uint64, error) {
		b, err := vfs.ReadFile(fsys, filepath.Join(dir, ownerLog))
		if err != nil {
			return 0, nil
		}
		line, _, _ := strings.Cut(string(b), "\n")
		return strconv.ParseUint(line, 10, 64)
	}
	return cfg
}

// lodge builds crashNS deferred at epoch, lodges its owner's log (synced)
// and returns the partition.
func lodge(t *testing.T, s *partition.FileStore, fsys vfs.FS, epoch uint64) partition.Partition {
	t.Helper()
	p, err := s.BuildDeferred(crashNS, epoch)
	if err != nil {
		t.Fatal(err)
	}
	_, dir, err := p.(partition.Lodger).Lodge(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(fsys, filepath.Join(dir, ownerLog), []byte(fmt.Sprintln(epoch))); err != nil {
		t.Fatal(err)
	}
	return p
}

func names(t *testing.T, fsys vfs.FS, dir string) []string {
	t.Helper()
	n, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(n)
	return n
}

// A partition built deferred and lodged (partition.Lodger) has a
// directory holding its owner's files only, and keeps what it appends
// behind while it fits; the store lists it at the incarnation its
// owner's log names, a build of that incarnation keeps the owner's files
// (removing what a materialisation cut short left), and a build of
// another incarnation discards the directory as a dead incarnation's.
func TestLodgedDeferredPartition(t *testing.T) {
	partition.AllowSmallSegments(t, smallSegment)
	mem := vfs.NewMem()
	s, err := partition.NewFileStore(lodgedConfig(mem))
	if err != nil {
		t.Fatal(err)
	}
	dir := partDir("/data", crashNS)
	p := lodge(t, s, mem, 7)
	if _, err := p.Append(batch(0, 2, 100)); err != nil {
		t.Fatal(err)
	}
	if got := names(t, mem, dir); !slices.Equal(got, []string{ownerLog}) {
		t.Fatalf("a lodged partition holding two messages behind has %q in its directory, want only its owner's log", got)
	}
	if ms, err := p.Read(0, 10); err != nil || len(ms) != 2 {
		t.Fatalf("read behind: %d messages, %v", len(ms), err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Its close left the records to its owner's log: no file of its
	// own. A materialisation cut short leaves files without an
	// incarnation file.
	if got := names(t, mem, dir); !slices.Equal(got, []string{ownerLog}) {
		t.Fatalf("closed holding two messages, the partition has %q in its directory, want only its owner's log", got)
	}
	for _, f := range []string{"00000000000000000000.log", "00000000000000000000.index", ".incarnation.tmp"} {
		if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, f), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := mem.MkdirAll(filepath.Join(dir, "offsets", "consumers"), 0o755); err != nil {
		t.Fatal(err)
	}
	stored, err := s.List()
	if err != nil || len(stored) != 1 || stored[0].Epoch != 7 {
		t.Fatalf("List: %+v, %v; want the partition at the incarnation its owner's log names, 7", stored, err)
	}
	p, err = s.BuildDeferred(crashNS, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(t, mem, dir); !slices.Equal(got, []string{ownerLog}) {
		t.Fatalf("rebuilt at its incarnation: %q in the directory, want only the owner's log", got)
	}
	if p.NextOffset() != 0 {
		t.Fatalf("rebuilt empty partition at offset %d", p.NextOffset())
	}
	// Past the write-behind buffer its files are created beside the
	// owner's, and its first Sync makes them durable.
	if _, err := p.Append(batch(0, 3, 3000)); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	crashed := mem.Crash()
	if got := names(t, crashed, dir); !slices.Contains(got, ownerLog) || !slices.Contains(got, "incarnation") {
		t.Fatalf("after a power loss the directory holds %q: the materialised layout was not made durable beside the owner's log", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Build (not deferred) of a lodged directory keeps the owner's log
	// too, and creates the partition's files beside it.
	if err := s.Remove(crashNS); err != nil {
		t.Fatal(err)
	}
	lodge(t, s, mem, 7).Close()
	p, err = s.Build(crashNS, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(t, mem, dir); !slices.Contains(got, ownerLog) || !slices.Contains(got, "incarnation") {
		t.Fatalf("Build of a lodged directory at its incarnation left %q, want the owner's log beside the partition's files", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Another incarnation's directory without an incarnation file:
	// discarded by the build, owner's log included.
	s2, err := partition.NewFileStore(lodgedConfig(mem))
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Remove(crashNS); err != nil {
		t.Fatal(err)
	}
	lodge(t, s2, mem, 7).Close()
	p, err = s2.BuildDeferred(crashNS, 9)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := mem.ReadDir(dir); err == nil && slices.Contains(got, ownerLog) {
		t.Fatalf("a build of incarnation 9 kept the log of incarnation 7: %q", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// Lodging under FsyncAlways (durable) fails with the directory's fsync;
// the partition refuses to lodge again (broken, as after a failed layout
// sync), and a new build of the same incarnation lodges afresh.
func TestLodgeFailedDirectorySync(t *testing.T) {
	partition.AllowSmallSegments(t, smallSegment)
	mem := vfs.NewMem()
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpSyncDir {
			return syscall.EIO
		}
		return nil
	})
	s, err := partition.NewFileStore(lodgedConfig(errorfs.New(mem, inj)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.BuildDeferred(crashNS, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.(partition.Lodger).Lodge(true); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Lodge with failing directory fsyncs: %v, want EIO", err)
	}
	if _, _, err := p.(partition.Lodger).Lodge(true); err == nil {
		t.Fatal("a partition whose lodging failed to sync lodged again")
	}
	_ = p.Close()
}

// A lodged partition's Close leaves the records it holds behind to its
// owner's log (which re-applies them to the next build) and creates no
// file of its own, but makes the directories it lodged in durable, as a
// clean shutdown makes a partition's layout: lodged without an fsync
// (an owner under interval fsync), its Close syncs the partition's
// directory and the new ones above it, where the owner's log lives. The
// partition reopens empty beside the owner's log.
func TestLodgedPartitionCloseLeavesRecordsToOwner(t *testing.T) {
	partition.AllowSmallSegments(t, smallSegment)
	mem := vfs.NewMem()
	// The close syncs directories from more than one goroutine, and the
	// store's background work may touch the file system while closing
	// changes: all three are read and written under mu.
	var mu sync.Mutex
	var closing bool
	var synced, created []string
	setClosing := func(v bool) {
		mu.Lock()
		closing = v
		mu.Unlock()
	}
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !closing:
		case op.Kind == errorfs.OpSyncDir:
			synced = append(synced, filepath.ToSlash(op.Path))
		case op.Kind == errorfs.OpOpen && op.Flag&os.O_CREATE != 0, op.Kind == errorfs.OpMkdirAll:
			created = append(created, op.Path)
		}
		return nil
	})
	s, err := partition.NewFileStore(lodgedConfig(errorfs.New(mem, inj)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.BuildDeferred(crashNS, 7)
	if err != nil {
		t.Fatal(err)
	}
	_, dir, err := p.(partition.Lodger).Lodge(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, ownerLog), []byte("7\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Append(batch(0, 2, 100)); err != nil {
		t.Fatal(err)
	}
	setClosing(true)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	setClosing(false)
	mu.Lock()
	synced, created = slices.Clone(synced), slices.Clone(created)
	mu.Unlock()
	if len(created) > 0 {
		t.Fatalf("the close created %q", created)
	}
	if !slices.Contains(synced, filepath.ToSlash(dir)) || !slices.Contains(synced, filepath.ToSlash(filepath.Dir(dir))) {
		t.Fatalf("the close synced %q: want the partition's directory and its parent, new at the lodging", synced)
	}
	if got := names(t, mem, dir); !slices.Equal(got, []string{ownerLog}) {
		t.Fatalf("closed holding two messages: %q in the directory, want the owner's log alone", got)
	}
	p, err = s.BuildDeferred(crashNS, 7)
	if err != nil {
		t.Fatal(err)
	}
	if p.NextOffset() != 0 {
		t.Fatalf("reopened at offset %d, want 0 (the owner re-applies its records)", p.NextOffset())
	}
	if got := names(t, mem, dir); !slices.Equal(got, []string{ownerLog}) {
		t.Fatalf("reopened: %q in the directory, want only the owner's log", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// The owner's files are read through the store's descriptor budget when
// a build asks whose a lodged directory is (FileConfig.OwnerIncarnation):
// a node restarting with many replicas still lodged builds each, while
// the raft logs of those already built sit open in the budget as idle
// handles. The owner here reads like a raft log's: two files held at
// once (the log and its sync mark). Read through the raw filesystem, each
// such read took the store two descriptors past its budget instead of
// closing idle ones (a cluster's node held 9–11 with a budget of 8).
func TestLodgedOwnerReadWithinBudget(t *testing.T) {
	const budget, parts = partition.MinMaxOpenFiles, 12
	partition.AllowSmallSegments(t, smallSegment)
	mem := vfs.NewMem()
	s, err := partition.NewFileStore(lodgedConfig(mem))
	if err != nil {
		t.Fatal(err)
	}
	var nss []metadata.Namespace
	for i := range uint32(parts) {
		ns, err := metadata.NewNamespace(1, 2, i)
		if err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
		p, err := s.BuildDeferred(ns, 7)
		if err != nil {
			t.Fatal(err)
		}
		_, dir, err := p.(partition.Lodger).Lodge(true)
		if err != nil {
			t.Fatal(err)
		}
		if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, ownerLog), []byte("7\n")); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}

	cfs := newCountingFS(mem)
	cfg := lodgedConfig(cfs)
	cfg.MaxOpenFiles = budget
	read := cfg.OwnerIncarnation
	cfg.OwnerIncarnation = func(fsys vfs.FS, dir string) (uint64, error) {
		mark, err := fsys.OpenFile(filepath.Join(dir, ownerLog), os.O_RDONLY, 0)
		if err != nil {
			return 0, err
		}
		defer mark.Close()
		return read(fsys, dir)
	}
	s, err = partition.NewFileStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var open []vfs.File
	defer func() {
		for _, f := range open {
			_ = f.Close()
		}
	}()
	for _, ns := range nss {
		p, err := s.BuildDeferred(ns, 7)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		fsys, dir, err := p.(partition.Lodger).Lodge(false)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(t, mem, dir); !slices.Equal(got, []string{ownerLog}) {
			t.Fatalf("partition %v rebuilt with %q in its directory, want its owner's log only (lodged)", ns, got)
		}
		// The owner keeps its log open in the budget, as a raft log is.
		f, err := fsys.OpenFile(filepath.Join(dir, ownerLog), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, f)
		if _, err := f.ReadAt(make([]byte, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, most := cfs.state(); most > budget {
		t.Fatalf("rebuilding %d lodged partitions held %d descriptors at once, budget %d", parts, most, budget)
	}
}
