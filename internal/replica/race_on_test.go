//go:build race

package replica

// raceEnabled: the race detector's instrumentation moves values to the
// heap that escape analysis keeps on the stack without it, so counted
// allocations are checked only without it.
const raceEnabled = true
