//go:build !linux

package vfs

import "os"

// datasync is Sync where fdatasync is not available.
func datasync(f *os.File) error { return f.Sync() }

// writeBack is datasync where the data cannot be handed to the device
// without a flush: it covers more than WriteBack promises.
func writeBack(f *os.File) error { return datasync(f) }

// startWriteBack is writeBack, which waits: nothing is left under way.
func startWriteBack(f *os.File) error { return writeBack(f) }

// waitWriteBack has nothing to wait for.
func waitWriteBack(*os.File) error { return nil }

// writeVector writes bufs one after the other where pwritev is not used.
func writeVector(f *os.File, bufs [][]byte, off int64) (int, error) {
	done := 0
	for _, b := range bufs {
		n, err := f.WriteAt(b, off+int64(done))
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}
