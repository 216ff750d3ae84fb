//go:build race

package sim_test

// raceEnabled: under the race detector a seed costs several times as
// much, so the default seed counts are cut (seeds); -sim.seeds N still
// runs exactly N.
const raceEnabled = true
