//go:build !unix

package partition

// softFileLimit returns 0: the platform has no RLIMIT_NOFILE.
func softFileLimit() uint64 { return 0 }
