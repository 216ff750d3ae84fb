package vfs_test

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

// TestReadOnly: reads pass, every change is refused before it reaches the
// filesystem underneath.
func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	name := dir + "/f"
	if err := os.WriteFile(name, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	ro := vfs.ReadOnly(vfs.Default)
	b, err := vfs.ReadFile(ro, name)
	if err != nil || string(b) != "data" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !vfs.IsReadOnly(err) || !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s: %v, want the read-only refusal", what, err)
		}
	}
	_, err = ro.OpenFile(name, os.O_RDWR, 0)
	refused("open for writing", err)
	_, err = ro.OpenFile(dir+"/new", os.O_RDONLY|os.O_CREATE, 0o644)
	refused("create", err)
	f, err := ro.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte("x"), 0)
	refused("WriteAt", err)
	_, err = f.Write([]byte("x"))
	refused("Write", err)
	refused("Truncate", f.Truncate(0))
	refused("Sync", f.Sync())
	refused("Preallocate", f.Preallocate(0, 10))
	f.Close()
	refused("Remove", ro.Remove(name))
	refused("RemoveAll", ro.RemoveAll(dir))
	refused("Rename", ro.Rename(name, dir+"/g"))
	refused("SyncDir", ro.SyncDir(dir))
	refused("MkdirAll of a new directory", ro.MkdirAll(dir+"/sub", 0o755))
	if err := ro.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("MkdirAll of an existing directory: %v", err)
	}
	if b, _ := os.ReadFile(name); string(b) != "data" {
		t.Fatalf("the file holds %q", b)
	}
	if _, err := os.Stat(dir + "/new"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a refused create created the file")
	}
}
