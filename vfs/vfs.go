// Package vfs is the filesystem seam: every file parkway touches goes
// through an FS, so tests can swap the operating system for an in-memory
// filesystem that loses un-synced data on a simulated crash, or for one
// that fails chosen operations (in the spirit of pebble's vfs and errorfs).
//
// Three implementations exist: Default (the operating system), MemFS
// (in memory, with crash semantics; see NewMem) and errorfs.New (a
// wrapper around any FS that injects errors and torn writes).
//
// Durability contract, which every caller must follow to be crash-correct
// on a real disk (MemFS enforces it): a file's data survives a crash only
// up to its last File.Sync; a directory entry created, renamed into or
// removed from a directory survives a crash only after SyncDir of that
// directory; data a file handed to the device with WriteBack survives a
// crash once a Sync, Datasync or SyncDir of any file on the same FS
// followed it (the device's cache flush that makes it durable is not
// per file).
package vfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// File is an open file.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Closer
	// Name is the path the file was opened with.
	Name() string
	// Stat describes the file.
	Stat() (os.FileInfo, error)
	// Sync makes the file's written data durable.
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Preallocate reserves [off, off+n) on disk without changing the
	// file's size (fallocate with FALLOC_FL_KEEP_SIZE). Filesystems that
	// cannot do it return an error matching errors.ErrUnsupported; callers
	// treat that as a no-op.
	Preallocate(off, n int64) error
}

// FS is a filesystem. Paths are slash- or OS-separated as for package os.
type FS interface {
	// OpenFile opens a file as os.OpenFile does.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a path and everything below it; a missing path is
	// not an error.
	RemoveAll(name string) error
	// Rename renames a file, replacing the target atomically.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir lists a directory's entry names, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat describes a path.
	Stat(name string) (os.FileInfo, error)
	// SyncDir makes a directory's entries durable: files created, renamed
	// into or removed from it survive a crash only after SyncDir.
	SyncDir(dir string) error
	// Lock creates the named file if it is missing and takes an exclusive
	// lock on it, held until the returned Closer is closed or the process
	// holding it dies, whichever comes first. A lock held elsewhere fails
	// at once (it never waits) with an error matching ErrLocked. Closing
	// the Closer again does nothing. The file is never removed: removing a
	// lock file would let a second locker lock a new file while the first
	// still holds the old one.
	Lock(name string) (io.Closer, error)
}

// ErrLocked reports an FS.Lock of a file locked by another holder: another
// process, or another Lock in this one.
var ErrLocked = errors.New("vfs: file is locked")

// DataSyncer is implemented by files that can make their data durable
// without the metadata a read does not need (fdatasync): cheaper than
// Sync for a file that only grows by appends, whose size it still
// covers. The operating system's files implement it on Linux.
type DataSyncer interface {
	Datasync() error
}

// Datasync makes f's written data durable, with its size: through
// DataSyncer if f implements it, else with Sync (which covers more). The
// durability contract is Sync's: a crash keeps what Datasync returned
// for.
func Datasync(f File) error {
	if d, ok := f.(DataSyncer); ok {
		return d.Datasync()
	}
	return f.Sync()
}

// WriteBacker is implemented by files that can hand their written data
// to the device without a cache flush: the write completes, so the data
// has left the page cache, but it may sit in the device's volatile cache
// until the device's next flush — which every Sync, Datasync or SyncDir
// of any file on the same filesystem issues (and the filesystem's own
// periodic commit). On Linux it is sync_file_range(2) with WAIT_BEFORE,
// WRITE and WAIT_AFTER, which also reports a failed writeback as fsync
// does.
//
// What it is for: a small side file made durable by another file's
// fsync. Written and handed to the device after the other file's fsync,
// it is durable with that file's next one, for the price of a write of
// one block rather than of a flush; its user must accept that the side
// file lags one fsync behind (package syncmark). It holds where overwriting a block a file already holds needs no
// metadata to be read back (ext4, xfs); on a filesystem that copies on
// write (btrfs, zfs) the new block is reachable only after the
// filesystem's next commit, so the data lags further. Callers must use it
// only where data durable later than planned is harmless.
type WriteBacker interface {
	WriteBack() error
}

// WriteBack hands f's written data to the device (WriteBacker): durable
// with the next Sync, Datasync or SyncDir of any file on the same FS. A
// file that cannot do that is Datasynced instead, which covers more.
func WriteBack(f File) error {
	if w, ok := f.(WriteBacker); ok {
		return w.WriteBack()
	}
	return Datasync(f)
}

// WriteBackStarter is implemented by files that can start handing their
// written data to the device without waiting for the write to complete
// (WriteBacker's write, without its wait). Started, the data is durable
// with the first device flush after the write completes, which is not
// known; WaitWriteBack waits for it (and reports its errors as fsync
// does), so it is durable at the latest with the first flush after the
// WaitWriteBack returns. On Linux they are sync_file_range(2) with WRITE,
// and with WAIT_BEFORE.
//
// What it is for: a small side file whose durability may lag the other
// file's fsyncs by one more than WriteBacker's (package syncmark); a
// caller rewriting a block it started must wait for that write first, or
// the write in flight may carry a mix of the old and new bytes.
type WriteBackStarter interface {
	StartWriteBack() error
	WaitWriteBack() error
}

// StartWriteBack starts handing f's written data to the device
// (WriteBackStarter). A file that cannot is written back (WriteBack),
// which waits, and covers more.
func StartWriteBack(f File) error {
	if s, ok := f.(WriteBackStarter); ok {
		return s.StartWriteBack()
	}
	return WriteBack(f)
}

// WaitWriteBack waits for the writes StartWriteBack started on f
// (WriteBackStarter); for a file that cannot start them, nothing is
// under way.
func WaitWriteBack(f File) error {
	if s, ok := f.(WriteBackStarter); ok {
		return s.WaitWriteBack()
	}
	return nil
}

// VectorWriter is implemented by files that can write several buffers
// at one offset in one call, as if they were one buffer laid end to end
// (pwritev(2) on Linux): the caller's buffers go to the file without
// first being copied into one. It returns how many bytes it wrote; fewer
// than all of them comes with an error, as WriteAt's.
type VectorWriter interface {
	WriteVectorAt(bufs [][]byte, off int64) (int, error)
}

// WriteVectorAt writes bufs, laid end to end, at off: in one call through
// VectorWriter if f implements it, else buffer by buffer with WriteAt.
// Either way all of them are written or an error is returned (a short
// write is io.ErrShortWrite), with how many bytes were written before it,
// the same as a WriteAt of the whole.
func WriteVectorAt(f File, bufs [][]byte, off int64) (int, error) {
	if v, ok := f.(VectorWriter); ok {
		return v.WriteVectorAt(bufs, off)
	}
	done := 0
	for _, b := range bufs {
		n, err := f.WriteAt(b, off+int64(done))
		done += n
		if err == nil && n < len(b) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// ReadFile returns the whole content of the named file.
func ReadFile(fs FS, name string) (_ []byte, err error) {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	buf := make([]byte, 0, size+1) // +1: see EOF without growing
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// WriteFileAtomic replaces name with data durably and atomically: after a
// crash the file holds the old content or data, never a mix, and once it
// returns nil the new content survives a crash. It writes a temporary file
// "."+base(name)+".tmp" in the same directory, fsyncs and closes it,
// renames it over name and fsyncs the directory. On failure the temporary
// file is removed (best effort); one left behind by a crash starts with
// "." so callers can recognise and remove it.
//
// Two concurrent WriteFileAtomic calls for the same name share the
// temporary file and must not happen.
func WriteFileAtomic(fs FS, name string, data []byte) (err error) {
	// Dir, not Split: the directory synced below is named as every
	// other caller names it (no trailing separator).
	dir, base := filepath.Dir(name), filepath.Base(name)
	tmp := filepath.Join(dir, "."+base+".tmp")
	f, err := fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = fs.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = fs.Rename(tmp, name); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}

// IsUnsupported reports whether err says the filesystem cannot do the
// operation (errors.ErrUnsupported), which callers of File.Preallocate
// treat as success.
func IsUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }
