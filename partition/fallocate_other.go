//go:build !linux

package partition

import "os"

// preallocate is a no-op off Linux: FileConfig.Preallocate only takes
// effect where fallocate(FALLOC_FL_KEEP_SIZE) exists.
func preallocate(*os.File, int64) error { return nil }
