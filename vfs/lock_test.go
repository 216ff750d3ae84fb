package vfs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
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

// TestSharedLock: a shared lock never creates the file, is refused with
// ErrLocked while Lock holds it, coexists with another shared lock, and
// keeps Lock out while it is held; the file's bytes are not changed.
func TestSharedLock(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "LOCK")
	if _, err := vfs.SharedLock(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SharedLock of a missing file: %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SharedLock created the file: %v", err)
	}
	l, err := vfs.Default.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := vfs.RecordLockHolder(vfs.Default, name); err != nil {
		t.Fatal(err)
	}
	if s, err := vfs.SharedLock(name); !errors.Is(err, vfs.ErrLocked) {
		if s != nil {
			_ = s.Close()
		}
		t.Fatalf("SharedLock while held: %v, want ErrLocked", err)
	}
	if got := vfs.LockHolder(vfs.Default, name); got != os.Getpid() {
		t.Fatalf("LockHolder = %d, want this process %d", got, os.Getpid())
	}
	_ = l.Close()
	before, _ := os.ReadFile(name)
	s1, err := vfs.SharedLock(name)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := vfs.SharedLock(name)
	if err != nil {
		t.Fatalf("second SharedLock: %v", err)
	}
	if runtime.GOOS != "windows" && runtime.GOOS != "plan9" {
		if l, err := vfs.Default.Lock(name); !errors.Is(err, vfs.ErrLocked) {
			if l != nil {
				_ = l.Close()
			}
			t.Fatalf("Lock while shared: %v, want ErrLocked", err)
		}
	}
	_ = s1.Close()
	_ = s2.Close()
	if after, _ := os.ReadFile(name); string(after) != string(before) {
		t.Fatalf("the lock file changed: %q, was %q", after, before)
	}
	l, err = vfs.Default.Lock(name)
	if err != nil {
		t.Fatalf("Lock after the shared locks closed: %v", err)
	}
	_ = l.Close()
}

// TestLockHolder: the pid a lock file names, 0 for anything that is not
// one.
func TestLockHolder(t *testing.T) {
	m := vfs.NewMem()
	for content, want := range map[string]int{
		"":                         0,
		"1234":                     1234,
		" 77\n":                    77,
		"-5":                       0,
		"0":                        0,
		"pid":                      0,
		"123456789012345678901234": 0,
	} {
		f, err := m.OpenFile("/LOCK", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		if got := vfs.LockHolder(m, "/LOCK"); got != want {
			t.Errorf("LockHolder(%q) = %d, want %d", content, got, want)
		}
	}
	if got := vfs.LockHolder(m, "/missing"); got != 0 {
		t.Errorf("LockHolder of a missing file = %d", got)
	}
}
