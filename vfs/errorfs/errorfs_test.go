package errorfs_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// workload does one of every operation and returns the first error.
func workload(fsys vfs.FS) error {
	steps := []func() error{
		func() error { return fsys.MkdirAll("/d", 0o755) },
		func() error {
			f, err := fsys.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			for _, step := range []func() error{
				func() error { _, err := f.Write([]byte("hello")); return err },
				func() error { _, err := f.WriteAt([]byte("J"), 0); return err },
				func() error { _, err := f.ReadAt(make([]byte, 2), 0); return err },
				func() error { // at the end: EOF is fine
					if _, err := f.Read(make([]byte, 2)); err != io.EOF {
						return err
					}
					return nil
				},
				func() error { _, err := f.Stat(); return err },
				f.Sync,
				func() error { return f.Truncate(4) },
				func() error { return f.Preallocate(0, 100) },
			} {
				if err := step(); err != nil {
					f.Close()
					return err
				}
			}
			return f.Close()
		},
		func() error { return fsys.SyncDir("/d") },
		func() error { return fsys.Rename("/d/f", "/d/g") },
		func() error { _, err := fsys.ReadDir("/d"); return err },
		func() error { _, err := fsys.Stat("/d/g"); return err },
		func() error { return fsys.Remove("/d/g") },
		func() error { return fsys.RemoveAll("/d") },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

func TestPassThroughAndLog(t *testing.T) {
	var log errorfs.Log
	if err := workload(errorfs.New(vfs.NewMem(), &log)); err != nil {
		t.Fatal(err)
	}
	var kinds []errorfs.OpKind
	for _, op := range log.Ops() {
		kinds = append(kinds, op.Kind)
	}
	want := []errorfs.OpKind{errorfs.OpMkdirAll, errorfs.OpOpen, errorfs.OpWrite, errorfs.OpWriteAt,
		errorfs.OpReadAt, errorfs.OpRead, errorfs.OpStat, errorfs.OpSync, errorfs.OpTruncate,
		errorfs.OpPreallocate, errorfs.OpClose, errorfs.OpSyncDir, errorfs.OpRename, errorfs.OpReadDir,
		errorfs.OpStat, errorfs.OpRemove, errorfs.OpRemoveAll}
	if len(kinds) != len(want) {
		t.Fatalf("ops %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("op %d is %v, want %v (all: %v)", i, kinds[i], want[i], kinds)
		}
	}
	if ops := log.Ops(); ops[2].Path != "/d/f" || ops[1].Flag&os.O_CREATE == 0 {
		t.Fatalf("op details: %+v", ops[:3])
	}
}

func TestOnIndexFailsEachOpOnce(t *testing.T) {
	count := errorfs.OnIndex(-1, nil, errorfs.OpOpen, errorfs.OpWrite, errorfs.OpWriteAt, errorfs.OpRead,
		errorfs.OpReadAt, errorfs.OpSync, errorfs.OpTruncate, errorfs.OpPreallocate, errorfs.OpRemove,
		errorfs.OpRemoveAll, errorfs.OpRename, errorfs.OpMkdirAll, errorfs.OpReadDir, errorfs.OpStat,
		errorfs.OpSyncDir, errorfs.OpClose)
	if err := workload(errorfs.New(vfs.NewMem(), count)); err != nil {
		t.Fatal(err)
	}
	n := count.Count()
	if n != 17 || count.Fired() {
		t.Fatalf("Count = %d, Fired = %v; want 17, false", n, count.Fired())
	}
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EIO, syscall.EPERM} {
		for i := range n {
			inj := errorfs.OnIndex(i, errno, errorfs.OpOpen, errorfs.OpWrite, errorfs.OpWriteAt, errorfs.OpRead,
				errorfs.OpReadAt, errorfs.OpSync, errorfs.OpTruncate, errorfs.OpPreallocate, errorfs.OpRemove,
				errorfs.OpRemoveAll, errorfs.OpRename, errorfs.OpMkdirAll, errorfs.OpReadDir, errorfs.OpStat,
				errorfs.OpSyncDir, errorfs.OpClose)
			err := workload(errorfs.New(vfs.NewMem(), inj))
			if !errors.Is(err, errno) || !inj.Fired() || inj.Count() < i+1 {
				t.Fatalf("op %d: err %v, fired %v, count %d", i, err, inj.Fired(), inj.Count())
			}
			var pe *os.PathError
			var le *os.LinkError
			if !errors.As(err, &pe) && !errors.As(err, &le) {
				t.Fatalf("op %d: %T is not a path error", i, err)
			}
			if pe != nil && pe.Path == "" {
				t.Fatalf("op %d: no path in %v", i, err)
			}
		}
	}
}

func TestOnIndexMutatingOnly(t *testing.T) {
	count := errorfs.OnIndex(-1, nil)
	if err := workload(errorfs.New(vfs.NewMem(), count)); err != nil {
		t.Fatal(err)
	}
	// mkdirall, open(O_CREATE), write, writeat, sync, truncate,
	// preallocate, syncdir, rename, remove, removeall.
	if count.Count() != 11 {
		t.Fatalf("%d mutating ops, want 11", count.Count())
	}
	// The failed op does not happen: a failed Rename leaves the old name.
	mem := vfs.NewMem()
	inj := errorfs.OnIndex(8, syscall.EIO)
	if err := workload(errorfs.New(mem, inj)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("workload: %v", err)
	}
	if _, err := mem.Stat("/d/f"); err != nil {
		t.Fatalf("failed rename moved the file: %v", err)
	}
	if (errorfs.Op{Kind: errorfs.OpOpen, Flag: os.O_RDONLY}).Mutating() {
		t.Fatal("a read-only open counts as mutating")
	}
}

// TestFromIndexFailsEveryOpFromI: FromIndex fails the i-th matching
// operation and each one after it, OnIndex only the i-th; operations of
// other kinds pass either way, and a negative index fails nothing.
func TestFromIndexFailsEveryOpFromI(t *testing.T) {
	write := errorfs.Op{Kind: errorfs.OpWrite}
	read := errorfs.Op{Kind: errorfs.OpRead}
	for _, c := range []struct {
		inj  *errorfs.Index
		want []bool
	}{
		{errorfs.FromIndex(2, syscall.EIO), []bool{false, false, true, true, true}},
		{errorfs.OnIndex(2, syscall.EIO), []bool{false, false, true, false, false}},
		{errorfs.FromIndex(-1, syscall.EIO), []bool{false, false, false, false, false}},
	} {
		for k, want := range c.want {
			if err := c.inj.MaybeError(read); err != nil {
				t.Fatalf("a read failed: %v", err)
			}
			if got := c.inj.MaybeError(write) != nil; got != want {
				t.Fatalf("write %d failed %v, want %v", k, got, want)
			}
		}
	}
}

func TestSwitch(t *testing.T) {
	mem := vfs.NewMem()
	sw := errorfs.NewSwitch(syscall.ENOSPC, errorfs.OpWrite, errorfs.OpMkdirAll)
	fsys := errorfs.New(mem, sw)
	if err := workload(fsys); err != nil {
		t.Fatalf("off: %v", err)
	}
	sw.Set(true)
	if !sw.On() {
		t.Fatal("On() = false after Set(true)")
	}
	err := workload(fsys)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("on: %v, want ENOSPC", err)
	}
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Path != "/d" || pe.Op != "mkdirall" {
		t.Fatalf("error %#v", err)
	}
	// Reads and unlisted kinds still work while on.
	if _, err := fsys.ReadDir("/"); err != nil {
		t.Fatal(err)
	}
	sw.Set(false)
	if err := workload(fsys); err != nil {
		t.Fatalf("off again: %v", err)
	}
}

func TestTornWrite(t *testing.T) {
	for _, kind := range []errorfs.OpKind{errorfs.OpWrite, errorfs.OpWriteAt} {
		for _, n := range []int{0, 3, 10, 100} {
			mem := vfs.NewMem()
			mem.MkdirAll("/d", 0o755)
			inj := errorfs.OnIndex(0, &errorfs.TornWrite{N: n}, kind)
			fsys := errorfs.New(mem, inj)
			f, err := fsys.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			data := []byte("0123456789")
			var wrote int
			if kind == errorfs.OpWrite {
				wrote, err = f.Write(data)
			} else {
				wrote, err = f.WriteAt(data, 0)
			}
			want := min(n, len(data))
			var torn *errorfs.TornWrite
			if wrote != want || !errors.Is(err, syscall.EIO) || !errors.As(err, &torn) {
				t.Fatalf("%v torn at %d: wrote %d, %v; want %d and an EIO *TornWrite", kind, n, wrote, err, want)
			}
			f.Close()
			b, _ := vfs.ReadFile(mem, "/d/f")
			if string(b) != string(data[:want]) {
				t.Fatalf("%v torn at %d: file holds %q", kind, n, b)
			}
		}
	}
	// TornWrite for a non-write op is a plain EIO.
	inj := errorfs.OnIndex(0, &errorfs.TornWrite{N: 1}, errorfs.OpMkdirAll)
	if err := errorfs.New(vfs.NewMem(), inj).MkdirAll("/x", 0o755); !errors.Is(err, syscall.EIO) {
		t.Fatalf("MkdirAll: %v", err)
	}
}

func TestInjectorFuncAndClose(t *testing.T) {
	mem := vfs.NewMem()
	fsys := errorfs.New(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpClose {
			return syscall.EIO
		}
		return nil
	}))
	f, err := fsys.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close: %v", err)
	}
	// The inner file was closed anyway.
	if _, err := f.Stat(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("Stat after a failed Close: %v", err)
	}
	if errorfs.OpPreallocate.String() != "fallocate" || errorfs.OpKind(99).String() != "OpKind(99)" {
		t.Fatal("OpKind.String")
	}
}
