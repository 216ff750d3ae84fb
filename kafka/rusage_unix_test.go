//go:build unix

package kafka

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the process's user+system CPU time so far (the listener,
// its node and the benchmark's client alike: they share the process).
func processCPU(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
