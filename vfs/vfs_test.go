package vfs_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

func mustWrite(t *testing.T, fsys vfs.FS, name string, data []byte, sync bool) {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readString(t *testing.T, fsys vfs.FS, name string) string {
	t.Helper()
	b, err := vfs.ReadFile(fsys, name)
	if err != nil {
		t.Fatalf("ReadFile(%s): %v", name, err)
	}
	return string(b)
}

func names(t *testing.T, fsys vfs.FS, dir string) []string {
	t.Helper()
	ns, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir(%s): %v", dir, err)
	}
	return ns
}

// TestFSBehaviour runs the same checks on the OS and on MemFS, so MemFS
// behaves like the real thing where tests rely on it.
func TestFSBehaviour(t *testing.T) {
	for _, c := range []struct {
		name string
		fs   vfs.FS
		root func(t *testing.T) string
	}{
		{"os", vfs.Default, func(t *testing.T) string { return t.TempDir() }},
		{"mem", vfs.NewMem(), func(*testing.T) string { return "/root" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsys, root := c.fs, c.root(t)
			p := func(parts ...string) string { return filepath.Join(append([]string{root}, parts...)...) }
			if err := fsys.MkdirAll(p("a", "b"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := fsys.MkdirAll(p("a", "b"), 0o755); err != nil {
				t.Fatalf("MkdirAll of an existing dir: %v", err)
			}
			mustWrite(t, fsys, p("a", "f"), []byte("hello"), true)
			mustWrite(t, fsys, p("a", "c"), nil, false)
			if got := names(t, fsys, p("a")); !slices.Equal(got, []string{"b", "c", "f"}) {
				t.Fatalf("ReadDir = %q", got)
			}
			if fi, err := fsys.Stat(p("a", "f")); err != nil || fi.Size() != 5 || fi.IsDir() || fi.Name() != "f" {
				t.Fatalf("Stat = %v, %v", fi, err)
			}
			if fi, err := fsys.Stat(p("a", "b")); err != nil || !fi.IsDir() {
				t.Fatalf("Stat(dir) = %v, %v", fi, err)
			}
			if _, err := fsys.Stat(p("nope")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Stat(missing) = %v", err)
			}
			if _, err := fsys.OpenFile(p("a", "f"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("O_EXCL on an existing file: %v", err)
			}
			if _, err := fsys.OpenFile(p("nope", "x"), os.O_RDWR|os.O_CREATE, 0o644); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("create in a missing dir: %v", err)
			}

			// Positional and sequential I/O, Truncate, Stat on the handle.
			f, err := fsys.OpenFile(p("a", "f"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("J"), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("!"), 7); err != nil { // leaves a zero-filled hole
				t.Fatal(err)
			}
			buf := make([]byte, 8)
			if n, err := f.ReadAt(buf, 0); n != 8 || err != nil || string(buf) != "Jello\x00\x00!" {
				t.Fatalf("ReadAt = %d %q %v", n, buf, err)
			}
			if n, err := f.ReadAt(buf, 4); n != 4 || err != io.EOF {
				t.Fatalf("ReadAt past the end = %d, %v; want 4, EOF", n, err)
			}
			if n, err := f.Read(buf[:3]); n != 3 || err != nil || string(buf[:3]) != "Jel" {
				t.Fatalf("Read = %d %q %v", n, buf[:3], err)
			}
			if err := f.Truncate(2); err != nil {
				t.Fatal(err)
			}
			if fi, err := f.Stat(); err != nil || fi.Size() != 2 {
				t.Fatalf("Stat after Truncate = %v, %v", fi, err)
			}
			if _, err := f.Read(buf); err != io.EOF {
				t.Fatalf("Read past the end: %v, want EOF", err)
			}
			if err := f.Truncate(4); err != nil {
				t.Fatal(err)
			}
			if err := f.Preallocate(0, 1<<20); err != nil && !vfs.IsUnsupported(err) {
				t.Fatalf("Preallocate: %v", err)
			}
			if fi, _ := f.Stat(); fi.Size() != 4 {
				t.Fatalf("Preallocate changed the size to %d", fi.Size())
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, fsys, p("a", "f")); got != "Je\x00\x00" {
				t.Fatalf("content %q", got)
			}

			// O_APPEND.
			f, err = fsys.OpenFile(p("a", "f"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("xy")); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Read(buf); err == nil {
				t.Fatal("Read on a write-only file succeeded")
			}
			f.Close()
			if got := readString(t, fsys, p("a", "f")); got != "Je\x00\x00xy" {
				t.Fatalf("content after append %q", got)
			}

			// Rename replaces; Remove; RemoveAll.
			mustWrite(t, fsys, p("a", "g"), []byte("new"), true)
			if err := fsys.Rename(p("a", "g"), p("a", "f")); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, fsys, p("a", "f")); got != "new" {
				t.Fatalf("after Rename %q", got)
			}
			if _, err := fsys.Stat(p("a", "g")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("old name after Rename: %v", err)
			}
			if err := fsys.Rename(p("a", "missing"), p("a", "x")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Rename of a missing file: %v", err)
			}
			if err := fsys.Remove(p("a")); err == nil {
				t.Fatal("Remove of a non-empty dir succeeded")
			}
			if err := fsys.Remove(p("a", "c")); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Remove(p("a", "c")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("second Remove: %v", err)
			}
			if err := fsys.Remove(p("a", "b")); err != nil {
				t.Fatalf("Remove of an empty dir: %v", err)
			}
			if err := fsys.SyncDir(p("a")); err != nil {
				t.Fatal(err)
			}
			if err := fsys.RemoveAll(p("a")); err != nil {
				t.Fatal(err)
			}
			if err := fsys.RemoveAll(p("a")); err != nil {
				t.Fatalf("RemoveAll of a missing path: %v", err)
			}
			if err := fsys.RemoveAll(p("a", "b", "c")); err != nil {
				t.Fatalf("RemoveAll below a missing path: %v", err)
			}
			if err := fsys.SyncDir(p("a")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("SyncDir of a missing dir: %v", err)
			}

			// Helpers.
			if err := fsys.MkdirAll(p("h"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, content := range []string{"one", "", "three"} {
				if err := vfs.WriteFileAtomic(fsys, p("h", "x"), []byte(content)); err != nil {
					t.Fatal(err)
				}
				if got := readString(t, fsys, p("h", "x")); got != content {
					t.Fatalf("WriteFileAtomic wrote %q, want %q", got, content)
				}
			}
			if got := names(t, fsys, p("h")); !slices.Equal(got, []string{"x"}) {
				t.Fatalf("WriteFileAtomic left %q", got)
			}
			big := bytes.Repeat([]byte("0123456789"), 10_000)
			mustWrite(t, fsys, p("h", "big"), big, false)
			if b, err := vfs.ReadFile(fsys, p("h", "big")); err != nil || !bytes.Equal(b, big) {
				t.Fatalf("ReadFile of %d bytes: %d, %v", len(big), len(b), err)
			}
			if _, err := vfs.ReadFile(fsys, p("h", "nope")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("ReadFile(missing) = %v", err)
			}
		})
	}
}

func TestMemCrashFileData(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("synced"))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("+lost"))
	f.WriteAt([]byte("S"), 0) // overwrite of synced bytes: copy-on-write
	if got := readString(t, m, "/d/f"); got != "Synced+lost" {
		t.Fatalf("volatile content %q", got)
	}
	c := m.Crash()
	if got := readString(t, c, "/d/f"); got != "synced" {
		t.Fatalf("after crash %q, want the synced content", got)
	}
	// The crashed FS is independent of the old one, both ways.
	g, err := c.OpenFile("/d/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.WriteAt([]byte("XX"), 0)
	g.Truncate(3)
	g.Close()
	f.Truncate(1)
	f.WriteAt([]byte("abc"), 1)
	f.Close()
	if got := readString(t, c, "/d/f"); got != "XXn" {
		t.Fatalf("crashed FS content %q", got)
	}
	if got := readString(t, m, "/d/f"); got != "Sabc" {
		t.Fatalf("old FS content %q", got)
	}
	if got := readString(t, m.Crash(), "/d/f"); got != "synced" {
		t.Fatalf("old FS durable content %q changed by writes to the crashed copy", got)
	}

	// Shrink, sync, regrow: the durable copy must not see the regrown bytes.
	h, _ := c.OpenFile("/d/f", os.O_RDWR, 0)
	h.Truncate(1)
	h.Sync()
	h.Truncate(3)
	h.WriteAt([]byte("q"), 1)
	if got := readString(t, c.Crash(), "/d/f"); got != "X" {
		t.Fatalf("durable content after shrink+sync+regrow %q, want %q", got, "X")
	}
	if got := readString(t, c, "/d/f"); got != "Xq\x00" {
		t.Fatalf("volatile content %q", got)
	}
}

// TestMemRewriteAfterSync rewrites a synced file from the start (O_TRUNC
// then write), which must copy away from the durable bytes.
func TestMemRewriteAfterSync(t *testing.T) {
	m := vfs.NewMem()
	mustWrite(t, m, "/f", []byte("durable content"), true)
	m.SyncDir("/")
	mustWrite(t, m, "/f", []byte("new"), false)
	mustWrite(t, m, "/g", []byte("x"), true)
	f, _ := m.OpenFile("/g", os.O_RDWR, 0)
	f.Truncate(0)
	f.WriteAt([]byte("yz"), 3)
	f.Close()
	m.SyncDir("/")
	if got := readString(t, m, "/f"); got != "new" {
		t.Fatalf("volatile %q", got)
	}
	if got := readString(t, m, "/g"); got != "\x00\x00\x00yz" {
		t.Fatalf("volatile %q", got)
	}
	c := m.Crash()
	if got := readString(t, c, "/f"); got != "durable content" {
		t.Fatalf("durable %q", got)
	}
	if got := readString(t, c, "/g"); got != "x" {
		t.Fatalf("durable %q", got)
	}
}

func TestMemCrashDirectoryEntries(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("/d/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, m, "/d/kept", []byte("k"), true)
	mustWrite(t, m, "/d/old", []byte("o"), true)
	mustWrite(t, m, "/d/gone", []byte("g"), true)
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	// Not followed by SyncDir: all of these are lost in a crash.
	mustWrite(t, m, "/d/new", []byte("n"), true) // synced data, unsynced entry
	if err := m.Rename("/d/old", "/d/renamed"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("/d/gone"); err != nil {
		t.Fatal(err)
	}
	if err := m.MkdirAll("/d/fresh/deep", 0o755); err != nil { // durable at once
		t.Fatal(err)
	}
	if got := names(t, m, "/d"); !slices.Equal(got, []string{"fresh", "kept", "new", "renamed", "sub"}) {
		t.Fatalf("volatile entries %q", got)
	}
	c := m.Crash()
	if got := names(t, c, "/d"); !slices.Equal(got, []string{"fresh", "gone", "kept", "old", "sub"}) {
		t.Fatalf("entries after crash %q", got)
	}
	if got := names(t, c, "/d/fresh"); !slices.Equal(got, []string{"deep"}) {
		t.Fatalf("MkdirAll'd dirs after crash %q", got)
	}
	if got := readString(t, c, "/d/gone"); got != "g" {
		t.Fatalf("removed-but-unsynced file reads %q", got)
	}

	// After SyncDir the same changes are durable.
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	c = m.Crash()
	if got := names(t, c, "/d"); !slices.Equal(got, []string{"fresh", "kept", "new", "renamed", "sub"}) {
		t.Fatalf("entries after SyncDir and crash %q", got)
	}
	if got := readString(t, c, "/d/renamed"); got != "o" {
		t.Fatalf("renamed file reads %q", got)
	}

	// RemoveAll of a directory is undone by a crash until the parent is
	// synced; the files inside keep their durable content.
	if err := m.RemoveAll("/d"); err != nil {
		t.Fatal(err)
	}
	if got := names(t, m.Crash(), "/d"); len(got) != 5 {
		t.Fatalf("unsynced RemoveAll lost %q", got)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Crash().Stat("/d"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("synced RemoveAll undone: %v", err)
	}

	// An unsynced file created in a synced directory comes back empty:
	// the entry is durable, the data is not.
	mustWrite(t, m, "/e", []byte("data"), false)
	m.SyncDir("/")
	if got := readString(t, m.Crash(), "/e"); got != "" {
		t.Fatalf("unsynced data survived: %q", got)
	}
}

func TestMemWriteFileAtomicCrash(t *testing.T) {
	m := vfs.NewMem()
	m.MkdirAll("/d", 0o755)
	if err := vfs.WriteFileAtomic(m, "/d/x", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, m.Crash(), "/d/x"); got != "v1" {
		t.Fatalf("after crash %q", got)
	}
	if err := vfs.WriteFileAtomic(m, "d/x", []byte("v2")); err != nil { // relative path, same file
		t.Fatal(err)
	}
	if got := readString(t, m.Crash(), "/d/x"); got != "v2" {
		t.Fatalf("after crash %q", got)
	}
}

func TestMemErrors(t *testing.T) {
	m := vfs.NewMem()
	mustWrite(t, m, "/f", []byte("x"), false)
	m.MkdirAll("/d/e", 0o755)
	check := func(what string, err error, want error) {
		t.Helper()
		var pe *os.PathError
		var le *os.LinkError
		if !errors.Is(err, want) || !(errors.As(err, &pe) || errors.As(err, &le)) {
			t.Errorf("%s: %v, want a path error matching %v", what, err, want)
		}
	}
	_, err := m.OpenFile("/f/x", os.O_RDONLY, 0)
	check("open below a file", err, syscall.ENOTDIR)
	check("mkdir below a file", m.MkdirAll("/f/x", 0o755), syscall.ENOTDIR)
	_, err = m.OpenFile("/d", os.O_RDWR, 0)
	check("open a dir for writing", err, syscall.EISDIR)
	check("remove a non-empty dir", m.Remove("/d"), syscall.ENOTEMPTY)
	check("rename a dir over a file", m.Rename("/d", "/f"), syscall.ENOTDIR)
	check("rename a dir below itself", m.Rename("/d", "/d/e/x"), syscall.EINVAL)
	_, err = m.ReadDir("/f")
	check("readdir of a file", err, syscall.ENOTDIR)
	f, _ := m.OpenFile("/f", os.O_RDONLY, 0)
	_, err = f.Write([]byte("y"))
	check("write to a read-only file", err, syscall.EBADF)
	f.Close()
	_, err = f.Read(make([]byte, 1))
	check("read after close", err, os.ErrClosed)
	check("second close", f.Close(), os.ErrClosed)
	if err := m.Rename("/d", "/d2"); err != nil {
		t.Fatalf("rename a dir: %v", err)
	}
	if got := names(t, m, "/d2"); !slices.Equal(got, []string{"e"}) {
		t.Fatalf("renamed dir holds %q", got)
	}
	// A file removed while open stays usable through the handle.
	g, _ := m.OpenFile("/f", os.O_RDWR, 0)
	m.Remove("/f")
	if _, err := g.WriteAt([]byte("z"), 0); err != nil {
		t.Fatalf("write to a removed open file: %v", err)
	}
	g.Close()
}

func TestMemConcurrent(t *testing.T) {
	m := vfs.NewMem()
	m.MkdirAll("/d", 0o755)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			name := filepath.Join("/d", string(rune('a'+g)))
			for i := range 50 {
				if err := vfs.WriteFileAtomic(m, name, []byte{byte(i)}); err != nil {
					t.Error(err)
					return
				}
				if _, err := vfs.ReadFile(m, name); err != nil {
					t.Error(err)
					return
				}
				_ = m.Crash()
			}
		})
	}
	wg.Wait()
	if got := names(t, m.Crash(), "/d"); len(got) != 8 {
		t.Fatalf("after concurrent writes: %q", got)
	}
}

// TestWriteVectorAt: the buffers land at the offset laid end to end, on
// the operating system's files (pwritev, more buffers than one call takes,
// empty ones among them) and on the memory filesystem (a WriteAt per
// buffer), and the caller's slice of buffers is left as it was.
func TestWriteVectorAt(t *testing.T) {
	for _, fsys := range []struct {
		name string
		fs   vfs.FS
		dir  string
	}{{"os", vfs.Default, t.TempDir()}, {"mem", vfs.NewMem(), "/d"}} {
		t.Run(fsys.name, func(t *testing.T) {
			if err := fsys.fs.MkdirAll(fsys.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := fsys.fs.OpenFile(filepath.Join(fsys.dir, "f"), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var bufs [][]byte
			var want []byte
			for i := range 2500 {
				b := bytes.Repeat([]byte{byte(i)}, i%7) // every seventh empty
				bufs = append(bufs, b)
				want = append(want, b...)
			}
			before := slices.Clone(bufs)
			const off = 5
			n, err := vfs.WriteVectorAt(f, bufs, off)
			if err != nil || n != len(want) {
				t.Fatalf("WriteVectorAt = %d, %v; want %d, nil", n, err, len(want))
			}
			for i := range bufs {
				if len(bufs[i]) != len(before[i]) || len(bufs[i]) > 0 && &bufs[i][0] != &before[i][0] {
					t.Fatalf("buffer %d of the caller's slice was changed", i)
				}
			}
			got := make([]byte, off+len(want))
			if _, err := f.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[off:], want) || !bytes.Equal(got[:off], make([]byte, off)) {
				t.Fatal("file content differs from the buffers laid end to end")
			}
		})
	}
}
