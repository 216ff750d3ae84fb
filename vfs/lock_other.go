//go:build !unix

package vfs

import (
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Lock, on systems without flock(2), is an in-process lock table only:
// a second Lock of the same path in this process fails with ErrLocked,
// but another process is not excluded. (An O_EXCL lock file would exclude
// it, but would outlive a crashed holder and refuse every restart until
// an operator removed it; parkway prefers the documented gap.) The file is
// still created, so the data directory looks the same on every system.
func (osFS) Lock(name string) (io.Closer, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	processLocks.mu.Lock()
	defer processLocks.mu.Unlock()
	if processLocks.held[abs] {
		return nil, &os.PathError{Op: "lock", Path: name, Err: ErrLocked}
	}
	processLocks.held[abs] = true
	return &tableLock{path: abs}, nil
}

var processLocks = struct {
	mu   sync.Mutex
	held map[string]bool
}{held: map[string]bool{}}

type tableLock struct {
	once sync.Once
	path string
}

func (l *tableLock) Close() error {
	l.once.Do(func() {
		processLocks.mu.Lock()
		delete(processLocks.held, l.path)
		processLocks.mu.Unlock()
	})
	return nil
}

// SharedLock, on systems without flock(2), sees only the in-process
// table: it fails with ErrLocked while a Lock of this process holds name,
// and cannot see another process's. It never creates or writes the file.
func SharedLock(name string) (io.Closer, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(name); err != nil {
		return nil, err
	}
	processLocks.mu.Lock()
	defer processLocks.mu.Unlock()
	if processLocks.held[abs] {
		return nil, &os.PathError{Op: "lock", Path: name, Err: ErrLocked}
	}
	return io.NopCloser(nil), nil
}
