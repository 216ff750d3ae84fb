//go:build race

package parkway_test

// raceEnabled: the race detector slows every memory access several
// times, so tests that move many megabytes scale their sizes down.
const raceEnabled = true
