package vfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// Datasync keeps what it returned for across a crash, on every FS: the
// operating system's (fdatasync on Linux), MemFS (through Sync), and
// errorfs, which reports it to its injector as a sync and can fail it.
func TestDatasync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := vfs.Default.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(vfs.DataSyncer); ok != (runtime.GOOS == "linux") {
		t.Fatalf("the OS file implements DataSyncer: %v on %s", ok, runtime.GOOS)
	}
	if _, err := f.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := vfs.Datasync(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := vfs.Datasync(f); err == nil {
		t.Fatal("Datasync of a closed file succeeded")
	}

	mem := vfs.NewMem()
	var syncs int
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind != errorfs.OpSync {
			return nil
		}
		if syncs++; syncs == 2 {
			return syscall.EIO
		}
		return nil
	})
	efs := errorfs.New(mem, inj)
	g, err := efs.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := efs.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	if err := vfs.Datasync(g); err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("lost"), 4); err != nil {
		t.Fatal(err)
	}
	if err := vfs.Datasync(g); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the second Datasync through errorfs: %v, want the injected EIO", err)
	}
	b, err := vfs.ReadFile(mem.Crash(), "/f")
	if err != nil || string(b) != "kept" {
		t.Fatalf("after a crash the file holds %q (%v), want what the first Datasync covered", b, err)
	}
}

// WriteBack hands a file's data to the device without a flush: on MemFS
// it survives a power loss only once a Sync of any file, or a SyncDir,
// on the same FS followed it (the device's cache flush is not per file),
// with the content it had at the WriteBack; a Sync of the file itself
// keeps its newer content. errorfs reports it as OpWriteBack and can fail
// it; the operating system's files implement it (sync_file_range on
// Linux).
func TestWriteBack(t *testing.T) {
	f, err := vfs.Default.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(vfs.WriteBacker); !ok {
		t.Fatal("the OS file does not implement WriteBacker")
	}
	if _, err := f.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteBack(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteBack(f); err == nil {
		t.Fatal("WriteBack of a closed file succeeded")
	}

	mem := vfs.NewMem()
	var backs int
	efs := errorfs.New(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind != errorfs.OpWriteBack {
			return nil
		}
		if backs++; backs == 3 {
			return syscall.EIO
		}
		return nil
	}))
	open := func(name string) vfs.File {
		g, err := efs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g, other := open("/g"), open("/other")
	if err := efs.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	write := func(f vfs.File, s string) {
		t.Helper()
		if _, err := f.WriteAt([]byte(s), 0); err != nil {
			t.Fatal(err)
		}
	}
	content := func(fs *vfs.MemFS) string {
		t.Helper()
		b, err := vfs.ReadFile(fs.Crash(), "/g")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write(g, "one")
	if err := vfs.WriteBack(g); err != nil {
		t.Fatal(err)
	}
	write(g, "two")
	if got := content(mem); got != "" {
		t.Fatalf("written back, nothing flushed since, power loss: %q, want nothing", got)
	}
	if err := other.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := content(mem); got != "one" {
		t.Fatalf("written back, another file synced, power loss: %q, want what was written back", got)
	}
	if err := vfs.WriteBack(g); err != nil {
		t.Fatal(err)
	}
	if err := efs.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	if got := content(mem); got != "two" {
		t.Fatalf("written back, a directory synced, power loss: %q, want what was written back", got)
	}
	write(g, "six")
	if err := vfs.WriteBack(g); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the third WriteBack through errorfs: %v, want the injected EIO", err)
	}
	write(g, "ten")
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := content(mem); got != "ten" {
		t.Fatalf("synced after a write-back, power loss: %q, want what the Sync covered", got)
	}
}
