//go:build !linux

package vfs

import "os"

// datasync is Sync where fdatasync is not available.
func datasync(f *os.File) error { return f.Sync() }
