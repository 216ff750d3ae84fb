//go:build !linux

package vfs

import "os"

// datasync is Sync where fdatasync is not available.
func datasync(f *os.File) error { return f.Sync() }

// writeBack is datasync where the data cannot be handed to the device
// without a flush: it covers more than WriteBack promises.
func writeBack(f *os.File) error { return datasync(f) }
