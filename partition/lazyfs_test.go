package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// located builds n partitions in a store with the given budget over cfs
// and returns them with their Location filesystems and directories.
func located(t *testing.T, cfs vfs.FS, budget, n int) (*partition.FileStore, []partition.Partition, vfs.FS, []string) {
	t.Helper()
	cfg := partition.FileConfig{Dir: "/data", FS: cfs, MaxOpenFiles: budget}
	s := newFileStore(t, cfg)
	var ps []partition.Partition
	var dirs []string
	var fsys vfs.FS
	for i := range n {
		p := mustBuild(t, s, mustNS(t, 1, 1, uint32(i)), 1)
		t.Cleanup(func() { _ = p.Close() })
		loc := p.(partition.Located)
		var dir string
		fsys, dir = loc.Location()
		ps = append(ps, p)
		dirs = append(dirs, dir)
	}
	return s, ps, fsys, dirs
}

func readWhole(t *testing.T, f vfs.File) []byte {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return b
}

// TestLocatedFilesShareTheBudget: files opened through partitions'
// Location (where a replicated partition keeps its raft log) count in the
// store's budget. With twelve of them open over a budget of 4, written
// and synced in turn, the store never holds more than 4 descriptors, it
// closes idle ones and reopens them by path, and every file reads back
// what was written through it.
func TestLocatedFilesShareTheBudget(t *testing.T) {
	const budget, n, rounds = 4, 12, 3
	cfs := newCountingFS(vfs.NewMem())
	s, _, fsys, dirs := located(t, cfs, budget, n)
	files := make([]vfs.File, n)
	want := make([][]byte, n)
	for i := range n {
		f, err := fsys.OpenFile(filepath.Join(dirs[i], "raft.log"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		files[i] = f
	}
	for r := range rounds {
		for i, f := range files {
			rec := fmt.Appendf(nil, "file %d round %d;", i, r)
			if _, err := f.WriteAt(rec, int64(len(want[i]))); err != nil {
				t.Fatal(err)
			}
			want[i] = append(want[i], rec...)
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			old := files[(i+5)%n]
			if got := readWhole(t, old); !bytes.Equal(got, want[(i+5)%n]) {
				t.Fatalf("round %d: file %d reads %q, want %q", r, (i+5)%n, got, want[(i+5)%n])
			}
		}
	}
	if _, most := cfs.state(); most > budget {
		t.Fatalf("the store held %d descriptors at once, budget %d", most, budget)
	}
	st := s.HandleStats()
	if st.Evictions == 0 || st.Reopens == 0 || st.OverBudget != 0 {
		t.Fatalf("HandleStats = %+v: want evictions and reopens, nothing over budget", st)
	}
	for i, f := range files {
		if got := readWhole(t, f); !bytes.Equal(got, want[i]) {
			t.Fatalf("file %d reads %q, want %q", i, got, want[i])
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, os.ErrClosed) {
			t.Fatalf("ReadAt after Close: %v, want os.ErrClosed", err)
		}
	}
	for i, dir := range dirs {
		if cfs.isOpen(filepath.Join(dir, "raft.log")) {
			t.Fatalf("file %d still open after Close", i)
		}
	}
}

// TestLocatedFilePinnedUntilSync: a file written through a Location is
// not closed, whatever the budget needs, until an fsync through the same
// descriptor succeeds (after a failed writeback an fsync through a
// descriptor opened later could report success for lost data); once
// synced it is closed like any idle file.
func TestLocatedFilePinnedUntilSync(t *testing.T) {
	const budget, n = 4, 8
	cfs := newCountingFS(vfs.NewMem())
	s, _, fsys, dirs := located(t, cfs, budget, n)
	path := filepath.Join(dirs[0], "raft.log")
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("unsynced"), 0); err != nil {
		t.Fatal(err)
	}
	// pressure holds budget other files open at once, so the store
	// must close every idle file it can, then closes them.
	pressure := func() {
		t.Helper()
		var held []vfs.File
		for i := 1; i <= budget; i++ {
			g, err := fsys.OpenFile(filepath.Join(dirs[i], "other"), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, g)
		}
		for _, g := range held {
			_ = g.Close()
		}
	}
	pressure()
	if !cfs.isOpen(path) || cfs.openedTimes(path) != 1 {
		t.Fatalf("a written, unsynced file was closed (open %v, opened %d times)", cfs.isOpen(path), cfs.openedTimes(path))
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(4); err != nil { // a truncation pins too
		t.Fatal(err)
	}
	pressure()
	if !cfs.isOpen(path) || cfs.openedTimes(path) != 1 {
		t.Fatalf("a truncated, unsynced file was closed (open %v, opened %d times)", cfs.isOpen(path), cfs.openedTimes(path))
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	pressure()
	if cfs.isOpen(path) {
		t.Fatal("a synced, idle file was never closed")
	}
	if got := readWhole(t, f); string(got) != "unsy" {
		t.Fatalf("reopened file reads %q", got)
	}
	if st := s.HandleStats(); st.Reopens == 0 {
		t.Fatalf("HandleStats = %+v: no reopen", st)
	}
}

// TestLocatedRenameAndRemove: a rename through a Location's filesystem
// follows the open file (the compaction of a raft log writes a temporary
// file and renames it over the log): once evicted, it is reopened at its
// new path. The file it replaced, and a file removed, are never reopened
// by path, which now names another file or none.
func TestLocatedRenameAndRemove(t *testing.T) {
	const budget, n = 4, 6
	cfs := newCountingFS(vfs.NewMem())
	_, _, fsys, dirs := located(t, cfs, budget, n)
	dir := dirs[0]
	create := func(name, data string) vfs.File {
		t.Helper()
		f, err := fsys.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(data), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		return f
	}
	oldLog := create("raft.log", "old")
	gone := create("gone", "gone")
	tmp := create(".raft.log.tmp", "new")
	if err := fsys.Rename(filepath.Join(dir, ".raft.log.tmp"), filepath.Join(dir, "raft.log")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Remove(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	evictAll := func() { // holds budget other files open at once
		t.Helper()
		var held []vfs.File
		for i := 1; i <= budget; i++ {
			g, err := fsys.OpenFile(filepath.Join(dirs[i], "x"), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, g)
		}
		for _, g := range held {
			_ = g.Close()
		}
	}
	evictAll()
	if got := readWhole(t, tmp); string(got) != "new" {
		t.Fatalf("the renamed file reads %q after a reopen", got)
	}
	if _, err := tmp.WriteAt([]byte("er"), 3); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Sync(); err != nil {
		t.Fatal(err)
	}
	b, err := vfs.ReadFile(fsys, filepath.Join(dir, "raft.log"))
	if err != nil || string(b) != "newer" {
		t.Fatalf("raft.log holds %q (%v): writes went elsewhere", b, err)
	}
	evictAll()
	for _, f := range []vfs.File{oldLog, gone} {
		if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, partition.ErrReopen) {
			t.Fatalf("%s: use after its path was replaced or removed: %v, want ErrReopen", f.Name(), err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if cfs.isOpen(filepath.Join(dir, "raft.log")) {
		t.Fatal("the renamed file is open after Close")
	}
}

// Reading and writing sequentially (Read, Write) keeps its own offset
// across evictions, as an *os.File does.
func TestLocatedSequentialIO(t *testing.T) {
	cfs := newCountingFS(vfs.NewMem())
	_, _, fsys, dirs := located(t, cfs, 4, 6)
	name := filepath.Join(dirs[0], "seq")
	if err := vfs.WriteFileAtomic(fsys, name, []byte("hello, world")); err != nil {
		t.Fatal(err)
	}
	b, err := vfs.ReadFile(fsys, name)
	if err != nil || string(b) != "hello, world" {
		t.Fatalf("ReadFile: %q, %v", b, err)
	}
	if now, _ := cfs.state(); now > 4 {
		t.Fatalf("%d descriptors open", now)
	}
}
