//go:build unix

package vfs

import (
	"errors"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Lock takes flock(2) LOCK_EX|LOCK_NB on name. A flock belongs to the
// open file description, so a second Lock in the same process conflicts
// as one from another process does, and the kernel releases it when the
// descriptor is closed — by Close, or by the death of the process.
func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return &osLock{f: f}, nil
}

// SharedLock takes flock(2) LOCK_SH|LOCK_NB on name, opened read-only:
// it conflicts with Lock's exclusive lock (so it fails with ErrLocked
// while a holder runs) but not with another SharedLock, and it never
// creates or writes the file.
func SharedLock(name string) (io.Closer, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	if err := flock(f, unix.LOCK_SH); err != nil {
		_ = f.Close()
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return &osLock{f: f}, nil
}

// flock takes a non-blocking flock of kind how (LOCK_EX or LOCK_SH) on
// f, retrying an interrupted call; a lock held elsewhere is ErrLocked.
func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if ferr = unix.Flock(int(fd), how|unix.LOCK_NB); ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if errors.Is(ferr, unix.EWOULDBLOCK) {
		return ErrLocked
	}
	return ferr
}

// osLock is a held flock: closing its descriptor releases it.
type osLock struct {
	once sync.Once
	f    *os.File
	err  error
}

func (l *osLock) Close() error {
	l.once.Do(func() { l.err = l.f.Close() })
	return l.err
}
