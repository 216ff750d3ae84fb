//go:build !unix

package bench

import "time"

// processCPU is not measured where getrusage does not exist; the report
// shows "–" for CPU per message there.
func processCPU() (time.Duration, bool) { return 0, false }
