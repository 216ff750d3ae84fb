//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the whole process has used so far, user
// and system, over all its threads (getrusage RUSAGE_SELF).
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// processSwitches returns the context switches of the whole process so
// far, voluntary and involuntary, over all its threads (getrusage
// RUSAGE_SELF): how many times a thread of it was put on a CPU again,
// the count an idle process's wakes come to.
func processSwitches() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return int64(ru.Nvcsw + ru.Nivcsw), true
}
