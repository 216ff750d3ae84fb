package bench

import "time"

// ProcessCPU returns the CPU time, user and system, the process has used
// so far (ok is false where it cannot be read). Commands that time one
// phase of work report it beside the wall time: on a shared machine the
// wall time depends on the load, the CPU time much less.
func ProcessCPU() (cpu time.Duration, ok bool) { return processCPU() }
