//go:build linux

package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2): the data, and the metadata needed to read it
// back (the size), without the rest (modification times).
func datasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

// writeBack is sync_file_range(2) over the whole file: wait for writes
// already under way, start the rest, wait for them all. No cache flush:
// the data is durable with the device's next one (WriteBacker). Errors
// of the writeback are reported as fsync reports them.
func writeBack(f *os.File) error {
	return syncFileRange(f, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
}

// startWriteBack is sync_file_range(2) with WRITE only: start writing the
// file's dirty pages, without waiting for them (WriteBackStarter).
func startWriteBack(f *os.File) error {
	return syncFileRange(f, unix.SYNC_FILE_RANGE_WRITE)
}

// waitWriteBack is sync_file_range(2) with WAIT_BEFORE only: wait for the
// writes under way, reporting their errors as fsync does.
func waitWriteBack(f *os.File) error {
	return syncFileRange(f, unix.SYNC_FILE_RANGE_WAIT_BEFORE)
}

func syncFileRange(f *os.File, flags int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.SyncFileRange(int(fd), 0, 0, flags); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: serr}
	}
	return nil
}
