//go:build !unix

package main

import "time"

// processCPU is not measured where getrusage does not exist: the command
// then refuses to run.
func processCPU() (time.Duration, bool) { return 0, false }
