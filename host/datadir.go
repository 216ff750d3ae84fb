package host

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/parkway-io/parkway/vfs"
)

// lockFile is the data directory's lock file: held with vfs.FS.Lock
// (flock on the operating system) from New to Close, it holds the pid of
// the process that holds it.
const lockFile = "LOCK"

// ErrDataDirLocked reports a data directory held by another node: another
// process, or another engine in this one. A *LockedError carries it.
var ErrDataDirLocked = errors.New("parkway: data directory is in use by another node")

// LockedError reports a data directory another holder has locked. Dir is
// the directory; PID the process the lock file names (0 when it could
// not be read: the holder may be between taking the lock and writing its
// pid). It matches ErrDataDirLocked with errors.Is.
type LockedError struct {
	Dir string
	PID int
	Err error // the filesystem's refusal (matches vfs.ErrLocked)
}

func (e *LockedError) Error() string {
	holder := "a process whose pid is unknown"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%v: %s is locked by %s", ErrDataDirLocked, e.Dir, holder)
}

func (e *LockedError) Unwrap() []error { return []error{ErrDataDirLocked, e.Err} }

// lockDataDir takes the data directory's lock before anything in it is
// read or written: two nodes on one directory would each append under
// the same offsets and ids, and the next open would keep a mix of the
// two. The lock ends at Close or with the process.
func lockDataDir(fsys vfs.FS, dir string) (io.Closer, error) {
	name := filepath.Join(dir, lockFile)
	l, err := fsys.Lock(name)
	if errors.Is(err, vfs.ErrLocked) {
		return nil, &LockedError{Dir: dir, PID: vfs.LockHolder(fsys, name), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("parkway: lock data dir: %w", err)
	}
	// The pid is for the error above, in the next process that tries:
	// best effort, never a reason to fail.
	_ = vfs.RecordLockHolder(fsys, name)
	return l, nil
}
