package vfs

import (
	"bytes"
	"io"
	"os"
	"strconv"
)

// A lock file's content is the decimal pid of the process that holds it,
// for the message of the next process that finds it locked. The pid is a
// hint: it is written after the lock is taken (a reader may find the file
// empty) and never synced (it means nothing once the holder is gone).

// RecordLockHolder writes this process's pid into the lock file name,
// which the caller holds with Lock. It is best effort: an error is
// returned for the caller to ignore, never a reason to give up the lock.
func RecordLockHolder(fsys FS, name string) error {
	f, err := fsys.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(strconv.AppendInt(nil, int64(os.Getpid()), 10))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// LockHolder reads the pid a lock file names: 0 if it names none (no
// file, empty, or not a positive number of at most 20 bytes).
func LockHolder(fsys FS, name string) int {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	// A longer file is not a pid: read one byte past the longest one
	// rather than whatever the file holds.
	b, err := io.ReadAll(io.LimitReader(f, 21))
	if err != nil || len(b) > 20 {
		return 0
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
