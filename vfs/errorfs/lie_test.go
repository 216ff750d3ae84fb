package errorfs_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// writeSynced creates name holding data, synced, with its directory.
func writeSynced(t *testing.T, fsys vfs.FS, name string, data []byte) {
	t.Helper()
	if err := fsys.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(filepath.Dir(name)); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, fsys vfs.FS, name string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(fsys, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var content = []byte("0123456789abcdefghijklmnopqrstuvwxyz")

// Both filesystems: the lies on stored bytes go through the seam.
func filesystems(t *testing.T) map[string]func() vfs.FS {
	return map[string]func() vfs.FS{
		"mem": func() vfs.FS { return vfs.NewMem() },
		"os": func() vfs.FS {
			return osAt{root: t.TempDir()}
		},
	}
}

// osAt is the operating system's FS below a test directory.
type osAt struct{ root string }

func (o osAt) p(n string) string { return filepath.Join(o.root, n) }
func (o osAt) OpenFile(n string, flag int, perm os.FileMode) (vfs.File, error) {
	return vfs.Default.OpenFile(o.p(n), flag, perm)
}
func (o osAt) Remove(n string) error                  { return vfs.Default.Remove(o.p(n)) }
func (o osAt) RemoveAll(n string) error               { return vfs.Default.RemoveAll(o.p(n)) }
func (o osAt) Rename(a, b string) error               { return vfs.Default.Rename(o.p(a), o.p(b)) }
func (o osAt) MkdirAll(n string, p os.FileMode) error { return vfs.Default.MkdirAll(o.p(n), p) }
func (o osAt) ReadDir(n string) ([]string, error)     { return vfs.Default.ReadDir(o.p(n)) }
func (o osAt) Stat(n string) (os.FileInfo, error)     { return vfs.Default.Stat(o.p(n)) }
func (o osAt) SyncDir(n string) error                 { return vfs.Default.SyncDir(o.p(n)) }
func (o osAt) Lock(n string) (io.Closer, error)       { return vfs.Default.Lock(o.p(n)) }

func TestFlipStored(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys := mk()
			writeSynced(t, fsys, "/d/f", content)
			if err := errorfs.FlipStored(fsys, "/d/f", 5, 0x10); err != nil {
				t.Fatal(err)
			}
			want := bytes.Clone(content)
			want[5] ^= 0x10
			if got := readAll(t, fsys, "/d/f"); !bytes.Equal(got, want) {
				t.Fatalf("after the flip: %q, want %q", got, want)
			}
			if err := errorfs.FlipStored(fsys, "/d/f", int64(len(content)), 1); err == nil {
				t.Fatal("a flip past the end succeeded")
			}
			if m, ok := fsys.(*vfs.MemFS); ok { // the flip is durable
				if got := readAll(t, m.Crash(), "/d/f"); !bytes.Equal(got, want) {
					t.Fatalf("after a crash: %q, want %q", got, want)
				}
			}
		})
	}
}

func TestTruncateStored(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys := mk()
			writeSynced(t, fsys, "/d/f", content)
			if err := errorfs.TruncateStored(fsys, "/d/f", 7); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, fsys, "/d/f"); !bytes.Equal(got, content[:7]) {
				t.Fatalf("after truncation: %q", got)
			}
			if m, ok := fsys.(*vfs.MemFS); ok {
				if got := readAll(t, m.Crash(), "/d/f"); !bytes.Equal(got, content[:7]) {
					t.Fatalf("after a crash: %q", got)
				}
			}
		})
	}
}

func TestCopyRestoreRollsBack(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys := mk()
			writeSynced(t, fsys, "/d/f", content[:10])
			saved, err := errorfs.SaveCopy(fsys, "/d/f")
			if err != nil {
				t.Fatal(err)
			}
			writeSynced(t, fsys, "/d/f", content) // the file grew and was synced
			if err := saved.Restore(fsys); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, fsys, "/d/f"); !bytes.Equal(got, content[:10]) {
				t.Fatalf("after the rollback: %q", got)
			}
			// A removed file comes back, durably.
			if err := fsys.Remove("/d/f"); err != nil {
				t.Fatal(err)
			}
			if err := saved.Restore(fsys); err != nil {
				t.Fatal(err)
			}
			if m, ok := fsys.(*vfs.MemFS); ok {
				fsys = m.Crash()
			}
			if got := readAll(t, fsys, "/d/f"); !bytes.Equal(got, content[:10]) {
				t.Fatalf("restored after removal: %q", got)
			}
		})
	}
}

func TestFlipsOnRead(t *testing.T) {
	mem := vfs.NewMem()
	writeSynced(t, mem, "/d/f", content)
	flips := errorfs.FlipsOnRead("/d/f", 12, 0x01)
	fsys := errorfs.New(mem, flips)
	want := bytes.Clone(content)
	want[12] ^= 0x01

	// ReadAt over the address, twice (it stays flipped), and one that
	// misses it.
	f, err := fsys.OpenFile("/d/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 2 {
		b := make([]byte, 8)
		if _, err := f.ReadAt(b, 8); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want[8:16]) {
			t.Fatalf("ReadAt: %q, want %q", b, want[8:16])
		}
	}
	b := make([]byte, 4)
	if _, err := f.ReadAt(b, 0); err != nil || !bytes.Equal(b, content[:4]) {
		t.Fatalf("ReadAt away from the flip: %q %v", b, err)
	}
	// Sequential reads: the wrapper follows the position.
	if got := readAll(t, fsys, "/d/f"); !bytes.Equal(got, want) {
		t.Fatalf("ReadFile: %q, want %q", got, want)
	}
	// The stored bytes are intact.
	if got := readAll(t, mem, "/d/f"); !bytes.Equal(got, content) {
		t.Fatalf("stored: %q", got)
	}
	flips.Clear()
	if got := readAll(t, fsys, "/d/f"); !bytes.Equal(got, content) {
		t.Fatalf("after Clear: %q", got)
	}
}

func TestReadErrorAt(t *testing.T) {
	mem := vfs.NewMem()
	writeSynced(t, mem, "/d/f", content)
	writeSynced(t, mem, "/d/g", content)
	bad := errorfs.ReadErrorAt("/d/f", 16, 4) // [16, 20)
	fsys := errorfs.New(mem, bad)
	f, err := fsys.OpenFile("/d/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		off, n int64
		fail   bool
	}{{0, 16, false}, {20, 8, false}, {15, 2, true}, {19, 1, true}, {0, 36, true}, {16, 4, true}} {
		_, err := f.ReadAt(make([]byte, c.n), c.off)
		if got := errors.Is(err, syscall.EIO); got != c.fail {
			t.Errorf("ReadAt [%d, %d): EIO %v, want %v (err %v)", c.off, c.off+c.n, got, c.fail, err)
		}
	}
	var pe *os.PathError
	if _, err := f.ReadAt(make([]byte, 1), 17); !errors.As(err, &pe) || pe.Path != "/d/f" {
		t.Errorf("the error does not name the file: %v", err)
	}
	// Writes go through; another file reads fine; sequential reads hit it.
	if _, err := f.WriteAt([]byte("x"), 17); err != nil {
		t.Errorf("write over the bad range: %v", err)
	}
	if _, err := vfs.ReadFile(fsys, "/d/g"); err != nil {
		t.Errorf("another file: %v", err)
	}
	if _, err := vfs.ReadFile(fsys, "/d/f"); !errors.Is(err, syscall.EIO) {
		t.Errorf("ReadFile over the bad range: %v", err)
	}
	bad.Clear()
	if _, err := vfs.ReadFile(fsys, "/d/f"); err != nil {
		t.Errorf("after Clear: %v", err)
	}
}

func TestMisdirectedWrite(t *testing.T) {
	mem := vfs.NewMem()
	writeSynced(t, mem, "/d/f", content[:16])
	// The second WriteAt is misdirected 8 bytes back.
	fsys := errorfs.New(mem, errorfs.OnIndex(1, &errorfs.MisdirectedWrite{Delta: -8}, errorfs.OpWriteAt))
	f, err := fsys.OpenFile("/d/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := f.WriteAt([]byte("AAAA"), 16); n != 4 || err != nil {
		t.Fatalf("first write: %d %v", n, err)
	}
	if n, err := f.WriteAt([]byte("BBBB"), 20); n != 4 || err != nil {
		t.Fatalf("the misdirected write must report success: %d %v", n, err)
	}
	// BBBB landed at 12, over older data; [20, 24) was never written.
	if got, want := readAll(t, mem, "/d/f"), []byte("0123456789abBBBBAAAA"); !bytes.Equal(got, want) {
		t.Fatalf("file: %q, want %q", got, want)
	}

	// Forward, past the end: the file grows with a hole where the write
	// belonged.
	mem2 := vfs.NewMem()
	writeSynced(t, mem2, "/d/f", content[:4])
	fsys2 := errorfs.New(mem2, errorfs.OnIndex(0, &errorfs.MisdirectedWrite{Delta: 4}, errorfs.OpWriteAt))
	f2, err := fsys2.OpenFile("/d/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if _, err := f2.WriteAt([]byte("CC"), 4); err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, mem2, "/d/f"), []byte("0123\x00\x00\x00\x00CC"); !bytes.Equal(got, want) {
		t.Fatalf("file: %q, want %q", got, want)
	}

	// Below 0, or a sequential Write: an ordinary error.
	for _, c := range []struct {
		name string
		do   func(vfs.File) error
	}{
		{"below zero", func(f vfs.File) error { _, err := f.WriteAt([]byte("x"), 2); return err }},
		{"Write", func(f vfs.File) error { _, err := f.Write([]byte("x")); return err }},
	} {
		fs3 := errorfs.New(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpWrite || op.Kind == errorfs.OpWriteAt {
				return &errorfs.MisdirectedWrite{Delta: -100}
			}
			return nil
		}))
		f3, err := fs3.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		var mis *errorfs.MisdirectedWrite
		if err := c.do(f3); !errors.As(err, &mis) {
			t.Errorf("%s: %v, want the injected error", c.name, err)
		}
		f3.Close()
	}
}

func TestOpRanges(t *testing.T) {
	log := &errorfs.Log{}
	fsys := errorfs.New(vfs.NewMem(), log)
	f, err := fsys.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("abcd"))
	f.WriteAt([]byte("xy"), 10)
	f.ReadAt(make([]byte, 3), 1)
	f.Read(make([]byte, 5)) // at position 4
	f.Close()
	a, err := fsys.OpenFile("/f", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.Write([]byte("z"))
	a.Close()
	type r struct {
		k   errorfs.OpKind
		off int64
		n   int
	}
	var got []r
	for _, op := range log.Ops() {
		switch op.Kind {
		case errorfs.OpRead, errorfs.OpReadAt, errorfs.OpWrite, errorfs.OpWriteAt:
			got = append(got, r{op.Kind, op.Off, op.Len})
		}
	}
	want := []r{{errorfs.OpWrite, 0, 4}, {errorfs.OpWriteAt, 10, 2}, {errorfs.OpReadAt, 1, 3}, {errorfs.OpRead, 4, 5}, {errorfs.OpWrite, -1, 1}}
	if len(got) != len(want) {
		t.Fatalf("ops %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("op %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestChain(t *testing.T) {
	mem := vfs.NewMem()
	writeSynced(t, mem, "/f", content)
	fsys := errorfs.New(mem, errorfs.Chain(nil, errorfs.ReadErrorAt("/f", 0, 1), errorfs.FlipsOnRead("/f", 4, 0xff)))
	f, err := fsys.OpenFile("/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(make([]byte, 2), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("first injector: %v", err)
	}
	b := make([]byte, 2)
	if _, err := f.ReadAt(b, 4); err != nil || b[0] != content[4]^0xff {
		t.Errorf("second injector: %q %v", b, err)
	}
}
