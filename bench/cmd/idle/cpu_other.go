//go:build !unix

package main

import "time"

// processCPU is not measured where getrusage does not exist: the command
// then refuses to run.
func processCPU() (time.Duration, bool) { return 0, false }

// processSwitches is not measured where getrusage does not exist.
func processSwitches() (int64, bool) { return 0, false }
