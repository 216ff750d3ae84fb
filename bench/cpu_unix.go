//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the whole process has used so far, user
// and system, over all its threads (getrusage RUSAGE_SELF). The cases run
// one system at a time in this process, so the difference over a timed
// section is that system's cost plus the driver's, whatever else the
// machine is running: on a loaded machine msgs/s falls but CPU per message
// does not, which tells a busy machine from a slower system.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
