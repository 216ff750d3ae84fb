//go:build unix

package partition

import "syscall"

// softFileLimit returns the soft RLIMIT_NOFILE, 0 if unknown.
func softFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return uint64(r.Cur)
}
