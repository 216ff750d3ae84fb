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
