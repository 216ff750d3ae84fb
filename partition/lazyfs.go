package partition

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/parkway-io/parkway/vfs"
)

// storeFS is the filesystem a FileStore hands out with a partition's
// location (Located): what other packages keep in a partition's
// directory, a replicated partition's raft log above all, comes under the
// store's descriptor budget with the partition's own files. Without it a
// node holding many replicated partitions keeps one descriptor per raft
// log open, outside the budget, and runs out of descriptors as it did
// before the budget.
//
// A file it opens is a handle of the store's cache, like a segment file:
// closed when idle and the budget needs the descriptor, opened again by
// path on its next use. The rules that keep that safe:
//
//   - A file written (WriteAt, Write, Truncate) is pinned open until a
//     Sync, Datasync or WriteBack through it succeeds, for the reason
//     tails are pinned (handles.go): after a failed writeback the error is
//     reported on the descriptors that were open when it happened, and an
//     fsync through a descriptor opened later could report success for
//     lost data. So an fsync always goes through the descriptor the writes
//     did, and a file with writes not yet fsynced is never closed.
//   - A reopen never creates or truncates: it uses the flags of the first
//     open without O_CREATE, O_EXCL and O_TRUNC.
//   - Renames and removals through this filesystem follow the files it
//     has open: a file renamed by path is reopened at its new path, and a
//     file whose path was removed, or replaced by a rename, is not
//     reopened at all (the path names another file now, or none): its
//     next use after an eviction is ErrReopen. An open file keeps working,
//     as a descriptor does. Only exact paths are followed: renaming or
//     removing a directory above an open file is not, so callers must not.
//
// Files opened with O_APPEND are not lazy (a reopened file would need
// its own notion of the end): they hold their descriptor, counted, until
// closed.
type storeFS struct {
	budgetFS
}

// errFileGone is why a file whose path was removed or replaced is not
// reopened.
var errFileGone = errors.New("removed or replaced since it was opened")

// OpenFile implements vfs.FS.
func (s storeFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if flag&os.O_APPEND != 0 {
		return s.budgetFS.OpenFile(name, flag, perm)
	}
	c := s.c
	c.reserve()
	f, err := c.fs.OpenFile(name, flag, perm)
	if err != nil {
		c.unreserve()
		return nil, err
	}
	h := c.newHandle(filepath.Clean(name), flag&^(os.O_CREATE|os.O_EXCL|os.O_TRUNC))
	c.mu.Lock()
	h.f, h.opened = f, true
	c.named[h.path] = append(c.named[h.path], h)
	c.makeIdle(h)
	c.evictLocked(0)
	c.mu.Unlock()
	return &lazyFile{h: h, name: name}, nil
}

// Rename implements vfs.FS, following the open files it renames.
func (s storeFS) Rename(oldname, newname string) error {
	if err := s.budgetFS.Rename(oldname, newname); err != nil {
		return err
	}
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	if oldname == newname {
		return nil
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetNamedLocked(newname)
	moved := c.named[oldname]
	delete(c.named, oldname)
	for _, h := range moved {
		h.path = newname
	}
	if len(moved) > 0 {
		c.named[newname] = moved
	}
	return nil
}

// Remove implements vfs.FS: an open file at name is no longer reopened.
func (s storeFS) Remove(name string) error {
	if err := s.budgetFS.Remove(name); err != nil {
		return err
	}
	c := s.c
	c.mu.Lock()
	c.forgetNamedLocked(filepath.Clean(name))
	c.mu.Unlock()
	return nil
}

// forgetNamedLocked marks the open files at path as gone: the path no
// longer names them.
func (c *handleCache) forgetNamedLocked(path string) {
	for _, h := range c.named[path] {
		h.gone = true
	}
	delete(c.named, path)
}

// unnameLocked drops h from the open files followed by path.
func (c *handleCache) unnameLocked(h *handle) {
	hs := c.named[h.path]
	if i := slices.Index(hs, h); i >= 0 {
		hs = slices.Delete(hs, i, i+1)
		if len(hs) == 0 {
			delete(c.named, h.path)
		} else {
			c.named[h.path] = hs
		}
	}
}

// lazyFile is a file opened through storeFS. Like an *os.File, it is for
// one goroutine at a time.
type lazyFile struct {
	h      *handle
	name   string
	off    int64 // of Read and Write
	closed bool
}

// use acquires the file for one operation; dirty pins it until the next
// successful fsync (before the operation, so a write that fails half-way
// keeps the descriptor it may have dirtied pages through).
func (f *lazyFile) use(op string, dirty bool) (vfs.File, error) {
	if f.closed {
		return nil, &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	}
	file, err := f.h.acquire()
	if err != nil {
		return nil, err
	}
	if dirty {
		c := f.h.c
		c.mu.Lock()
		f.h.pinned = true
		c.mu.Unlock()
	}
	return file, nil
}

// synced ends a use begun for an fsync; a successful one unpins the file.
func (f *lazyFile) synced(err error) error {
	if err == nil {
		c := f.h.c
		c.mu.Lock()
		f.h.pinned = false
		c.mu.Unlock()
	}
	f.h.release()
	return err
}

func (f *lazyFile) Name() string { return f.name }

func (f *lazyFile) ReadAt(b []byte, off int64) (int, error) {
	file, err := f.use("read", false)
	if err != nil {
		return 0, err
	}
	defer f.h.release()
	return file.ReadAt(b, off)
}

func (f *lazyFile) Read(b []byte) (int, error) {
	n, err := f.ReadAt(b, f.off)
	f.off += int64(n)
	if n > 0 && err == io.EOF {
		err = nil // as *os.File: the end is reported by the next Read
	}
	return n, err
}

func (f *lazyFile) WriteAt(b []byte, off int64) (int, error) {
	file, err := f.use("write", true)
	if err != nil {
		return 0, err
	}
	defer f.h.release()
	return file.WriteAt(b, off)
}

// WriteVectorAt passes vfs.WriteVectorAt through to the file.
func (f *lazyFile) WriteVectorAt(bufs [][]byte, off int64) (int, error) {
	file, err := f.use("write", true)
	if err != nil {
		return 0, err
	}
	defer f.h.release()
	return vfs.WriteVectorAt(file, bufs, off)
}

func (f *lazyFile) Write(b []byte) (int, error) {
	n, err := f.WriteAt(b, f.off)
	f.off += int64(n)
	return n, err
}

func (f *lazyFile) Truncate(size int64) error {
	file, err := f.use("truncate", true)
	if err != nil {
		return err
	}
	defer f.h.release()
	return file.Truncate(size)
}

func (f *lazyFile) Sync() error {
	file, err := f.use("sync", false)
	if err != nil {
		return err
	}
	return f.synced(file.Sync())
}

// Datasync passes vfs.Datasync through to the file.
func (f *lazyFile) Datasync() error {
	file, err := f.use("sync", false)
	if err != nil {
		return err
	}
	return f.synced(vfs.Datasync(file))
}

// WriteBack passes vfs.WriteBack through to the file. It unpins the file
// as a sync does: the writeback's errors are reported through the
// descriptor the writes went through (sync_file_range waits for them as
// fsync does), and what is left, the device's cache flush, is not per
// descriptor.
func (f *lazyFile) WriteBack() error {
	file, err := f.use("sync", false)
	if err != nil {
		return err
	}
	return f.synced(vfs.WriteBack(file))
}

func (f *lazyFile) Stat() (os.FileInfo, error) {
	file, err := f.use("stat", false)
	if err != nil {
		return nil, err
	}
	defer f.h.release()
	return file.Stat()
}

func (f *lazyFile) Preallocate(off, n int64) error {
	file, err := f.use("fallocate", false)
	if err != nil {
		return err
	}
	defer f.h.release()
	return file.Preallocate(off, n)
}

// Close closes the descriptor if it is open and forgets the file. It
// does not sync: writes not yet fsynced may be lost in a crash, as with
// an *os.File.
func (f *lazyFile) Close() error {
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	c := f.h.c
	c.mu.Lock()
	c.unnameLocked(f.h)
	c.mu.Unlock()
	return f.h.close()
}
