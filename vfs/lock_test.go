package vfs_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

// TestLock: on the operating system's filesystem and on a MemFS, a
// second Lock of a held file fails at once with ErrLocked, a closed lock
// can be taken again, and closing twice is harmless. The OS case runs on
// a real directory: flock conflicts between two descriptors of one
// process, as it does between processes.
func TestLock(t *testing.T) {
	for _, c := range []struct {
		name string
		fs   vfs.FS
		dir  string
	}{
		{"os", vfs.Default, t.TempDir()},
		{"mem", vfs.NewMem(), "/d"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.fs.MkdirAll(c.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			name := filepath.Join(c.dir, "LOCK")
			l, err := c.fs.Lock(name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.fs.Stat(name); err != nil {
				t.Errorf("lock file not created: %v", err)
			}
			if l2, err := c.fs.Lock(name); !errors.Is(err, vfs.ErrLocked) {
				if l2 != nil {
					_ = l2.Close()
				}
				t.Fatalf("second Lock: %v, want ErrLocked", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			_ = l.Close()
			l3, err := c.fs.Lock(name)
			if err != nil {
				t.Fatalf("Lock after Close: %v", err)
			}
			_ = l3.Close()
		})
	}
}

// TestMemReleaseLocks: a process crash (ReleaseLocks) frees a MemFS's
// locks, and the dead holder's late Close does not free the next
// holder's lock; a power loss (Crash) leaves the new MemFS unlocked.
func TestMemReleaseLocks(t *testing.T) {
	m := vfs.NewMem()
	dead, err := m.Lock("/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Crash().Lock("/LOCK"); err != nil {
		t.Fatalf("Lock after a power loss: %v", err)
	}
	m.ReleaseLocks()
	next, err := m.Lock("/LOCK")
	if err != nil {
		t.Fatalf("Lock after ReleaseLocks: %v", err)
	}
	_ = dead.Close()
	if _, err := m.Lock("/LOCK"); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("the dead holder's Close freed the next holder's lock: %v", err)
	}
	_ = next.Close()
}
