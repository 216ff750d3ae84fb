package sim_test

import (
	"errors"
	"os"
	"testing"

	"github.com/parkway-io/parkway/internal/sim"
)

// lyingSeeds is how many seeds TestBehaviour28SimulationLyingDisk runs by
// default.
const lyingSeeds = 60

// TestBehaviour28SimulationLyingDisk runs single-node seeds with the
// lying disk on (sim.LyingConfig: bit flips, truncations and rollbacks
// while the node is down, misdirected writes, bad sectors and flips on
// read while it runs): every acknowledged message is read intact at its
// offset or its read reports the damage with a typed error; never a
// wrong payload, a reused offset or a silent loss (DESIGN behaviour 28,
// single node). -sim.seed, -sim.seeds and -sim.start select seeds as for
// TestSimulation.
func TestBehaviour28SimulationLyingDisk(t *testing.T) {
	list := seeds(t, lyingSeeds)
	_, replay := replaySeed(t)
	runs := runSeeds(list, func(seed uint64) sim.Config {
		cfg := sim.LyingConfig(seed)
		if *flagTrace && replay {
			cfg.Trace = os.Stdout
		}
		return cfg
	}, false)
	var lies sim.LieCounts
	detected, failures, known := 0, 0, map[string]int{}
	for i, r := range runs {
		for k, n := range r.res.Faults.Lies {
			lies[k] += n
		}
		detected += r.res.Faults.Detected
		var v *sim.Violation
		if errors.As(r.err, &v) && v.Known != "" && !*flagKnown {
			// A known engine limit (sim.Violation.Known, known.go);
			// -sim.known fails on it.
			known[v.Known]++
			t.Logf("seed %d: skipped, known: %s\n  replay: %s -run %s -sim.seed=%d", list[i], v.Known, v.Replay, t.Name(), list[i])
			continue
		}
		if r.err != nil {
			failures++
			if failures <= 40 {
				t.Errorf("seed %d: %v", list[i], r.err)
			}
		}
	}
	if failures > 5 {
		t.Errorf("... %d failing seeds in all", failures)
	}
	t.Logf("%d seeds: lies %v, damage detected %d times", len(runs), lies, detected)
	for k, n := range known {
		t.Logf("%d seeds skipped for the known limit: %s", n, k)
	}
}
