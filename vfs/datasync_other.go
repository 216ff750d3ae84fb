//go:build !linux

package vfs

import "os"

// datasync is Sync where fdatasync is not available.
func datasync(f *os.File) error { return f.Sync() }

// writeBack is datasync where the data cannot be handed to the device
// without a flush (it covers more than WriteBack promises); without wait
// it does nothing.
func writeBack(f *os.File, wait bool) error {
	if !wait {
		return nil
	}
	return datasync(f)
}
