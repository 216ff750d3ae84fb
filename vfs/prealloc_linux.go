//go:build linux

package vfs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves [off, off+n) for f without changing its size
// (FALLOC_FL_KEEP_SIZE). Filesystems that cannot (EOPNOTSUPP; ENOSYS on
// kernels or sandboxes without fallocate) yield an error matching
// errors.ErrUnsupported.
func preallocate(f *os.File, off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Fallocate(int(fd), unix.FALLOC_FL_KEEP_SIZE, off, n)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	switch {
	case ferr == nil:
		return nil
	case errors.Is(ferr, unix.EOPNOTSUPP), errors.Is(ferr, unix.ENOSYS):
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: fmt.Errorf("%w: %w", errors.ErrUnsupported, ferr)}
	default:
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: ferr}
	}
}
