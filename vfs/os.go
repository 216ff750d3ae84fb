package vfs

import (
	"os"
)

// Default is the operating system's filesystem.
var Default FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                 { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

// ReadDir returns the names os.ReadDir returns, which are sorted.
func (osFS) ReadDir(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name()
	}
	return names, nil
}

// SyncDir opens dir and fsyncs it.
func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Preallocate is fallocate(FALLOC_FL_KEEP_SIZE) on Linux (see
// prealloc_linux.go) and unsupported elsewhere.
func (f osFile) Preallocate(off, n int64) error { return preallocate(f.File, off, n) }

// WriteVectorAt is pwritev on Linux (see datasync_linux.go), a WriteAt
// per buffer elsewhere.
func (f osFile) WriteVectorAt(bufs [][]byte, off int64) (int, error) {
	return writeVector(f.File, bufs, off)
}

// Datasync is fdatasync on Linux (see datasync_linux.go), Sync elsewhere.
func (f osFile) Datasync() error { return datasync(f.File) }

// WriteBack is sync_file_range on Linux (see datasync_linux.go), fdatasync
// or fsync elsewhere.
func (f osFile) WriteBack() error { return writeBack(f.File) }

// StartWriteBack and WaitWriteBack are sync_file_range on Linux (see
// datasync_linux.go); elsewhere StartWriteBack is fdatasync or fsync, and
// there is nothing to wait for.
func (f osFile) StartWriteBack() error { return startWriteBack(f.File) }

// WaitWriteBack: see StartWriteBack.
func (f osFile) WaitWriteBack() error { return waitWriteBack(f.File) }
