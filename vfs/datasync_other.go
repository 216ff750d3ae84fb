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
