//go:build linux

package partition

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves size bytes of disk for f without changing its size
// (FALLOC_FL_KEEP_SIZE), so appends do not fragment the segment or run out
// of space halfway through, while the file's size stays its logical end.
// Filesystems that cannot preallocate (EOPNOTSUPP; ENOSYS on kernels or
// sandboxes without fallocate) are not an error: preallocation is only an
// optimisation there.
func preallocate(f *os.File, size int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Fallocate(int(fd), unix.FALLOC_FL_KEEP_SIZE, 0, size)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if errors.Is(ferr, unix.EOPNOTSUPP) || errors.Is(ferr, unix.ENOSYS) {
		return nil
	}
	if ferr != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: ferr}
	}
	return nil
}
