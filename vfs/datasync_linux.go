//go:build linux

package vfs

import (
	"io"
	"os"
	"slices"

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

// maxIovecs is how many buffers one pwritev takes (IOV_MAX on Linux).
const maxIovecs = 1024

// writeVector is pwritev(2) of bufs at off, called again for what a short
// write left (at most maxIovecs buffers per call), until all of bufs is
// written or the call fails. It does not modify bufs.
func writeVector(f *os.File, bufs [][]byte, off int64) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	rest := slices.Clone(bufs) // trimmed as it is written; bufs stays as it was
	done := 0
	var werr error
	if err := rc.Control(func(fd uintptr) {
		for {
			for len(rest) > 0 && len(rest[0]) == 0 {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				return
			}
			n, e := unix.Pwritev(int(fd), rest[:min(len(rest), maxIovecs)], off+int64(done))
			switch {
			case e == unix.EINTR:
				continue
			case e != nil:
				werr = &os.PathError{Op: "pwritev", Path: f.Name(), Err: e}
				return
			case n == 0:
				werr = io.ErrShortWrite
				return
			}
			done += n
			for n > 0 {
				k := min(n, len(rest[0]))
				rest[0] = rest[0][k:]
				n -= k
				if len(rest[0]) == 0 {
					rest = rest[1:]
				}
			}
		}
	}); err != nil {
		return done, err
	}
	return done, werr
}
