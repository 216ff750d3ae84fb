//go:build !linux

package vfs

import (
	"errors"
	"os"
)

// preallocate is unsupported off Linux: fallocate(FALLOC_FL_KEEP_SIZE)
// only exists there.
func preallocate(f *os.File, _, _ int64) error {
	return &os.PathError{Op: "fallocate", Path: f.Name(), Err: errors.ErrUnsupported}
}
