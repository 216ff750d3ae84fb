package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// ErrReadOnly is what a ReadOnly filesystem answers to anything that would
// change a file or a directory. It matches fs.ErrPermission, as the
// operating system's EROFS would.
var ErrReadOnly = &readOnlyError{}

type readOnlyError struct{}

func (*readOnlyError) Error() string        { return "vfs: read-only filesystem" }
func (*readOnlyError) Is(target error) bool { return target == fs.ErrPermission }

// ReadOnly wraps fsys so that nothing can change through it: files open
// for reading only, and every write, truncation, sync, creation, removal
// or rename fails with ErrReadOnly before it reaches fsys. MkdirAll of a
// directory that exists succeeds (it changes nothing). The offline tools
// (verify, inspect, dump) read a data directory through it, so a code
// path that would repair what it finds reports an error instead of
// changing a byte.
func ReadOnly(fsys FS) FS { return readOnlyFS{fsys} }

type readOnlyFS struct{ fs FS }

type readOnlyFile struct{ File }

func (r readOnlyFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND|os.O_EXCL) != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrReadOnly}
	}
	f, err := r.fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	return readOnlyFile{f}, nil
}

func (r readOnlyFS) Remove(name string) error {
	return &fs.PathError{Op: "remove", Path: name, Err: ErrReadOnly}
}

func (r readOnlyFS) RemoveAll(name string) error {
	return &fs.PathError{Op: "removeall", Path: name, Err: ErrReadOnly}
}

func (r readOnlyFS) Rename(oldname, newname string) error {
	return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: ErrReadOnly}
}

func (r readOnlyFS) MkdirAll(dir string, perm os.FileMode) error {
	if fi, err := r.fs.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	return &fs.PathError{Op: "mkdir", Path: dir, Err: ErrReadOnly}
}

// Lock is refused too: taking a data directory's lock records its holder
// in the lock file.
func (r readOnlyFS) Lock(name string) (io.Closer, error) {
	return nil, &fs.PathError{Op: "lock", Path: name, Err: ErrReadOnly}
}

func (r readOnlyFS) ReadDir(dir string) ([]string, error) { return r.fs.ReadDir(dir) }

func (r readOnlyFS) Stat(name string) (os.FileInfo, error) { return r.fs.Stat(name) }

// SyncDir changes nothing a reader could see, but a read-only tool has
// nothing to make durable either: it is refused like every other write,
// so a path that would sync after a change is caught even if the change
// itself was skipped.
func (r readOnlyFS) SyncDir(dir string) error {
	return &fs.PathError{Op: "syncdir", Path: dir, Err: ErrReadOnly}
}

func (f readOnlyFile) Write([]byte) (int, error) { return 0, f.refuse("write") }

func (f readOnlyFile) WriteAt([]byte, int64) (int, error) { return 0, f.refuse("write") }

func (f readOnlyFile) Sync() error { return f.refuse("sync") }

func (f readOnlyFile) Truncate(int64) error { return f.refuse("truncate") }

func (f readOnlyFile) Preallocate(int64, int64) error { return f.refuse("fallocate") }

func (f readOnlyFile) refuse(op string) error {
	return &fs.PathError{Op: op, Path: f.Name(), Err: ErrReadOnly}
}

// IsReadOnly reports whether err is a ReadOnly filesystem's refusal.
func IsReadOnly(err error) bool { return errors.Is(err, ErrReadOnly) }
