package sim_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/parkway-io/parkway/internal/sim"
)

// clusterLyingSeeds is how many seeds TestBehaviour28ClusterLyingDisk runs
// by default.
const clusterLyingSeeds = 40

// TestBehaviour28ClusterLyingDisk runs cluster seeds with one node's disk
// lying (sim.LyingClusterConfig: one founder of three or five is the liar,
// with every lie kind of the single-node lying disk): every cluster
// invariant holds while a majority of each group's replicas is honest —
// no acknowledged message lost or changed, no offset reused, no read
// served damaged — and damage is reported only by the liar, for what a
// lie touched (DESIGN behaviour 28, cluster). A violation the engine
// cannot yet avoid (a damaged replica is not repaired from its peers) is
// a known limit (sim.Violation.Known), skipped unless -sim.known.
// -sim.seed, -sim.seeds, -sim.start, -sim.liekinds and -sim.liex select
// as for TestBehaviour28SimulationLyingDisk.
func TestBehaviour28ClusterLyingDisk(t *testing.T) {
	n, lies, detected := runLying(t, clusterLyingSeeds, sim.LyingClusterConfig, 10)
	t.Logf("%d cluster seeds: lies %v, damage detected %d times", n, lies, detected)
	if lies.Total() == 0 && n >= 10 {
		t.Errorf("no lie fired in %d seeds", n)
	}
}

// clusterLieCaughtSeeds bounds the seeds
// TestBehaviour28ClusterLyingDiskCatchesSwallowedDamage runs after the
// ones that caught it on the current tree (clusterLieCatching).
const clusterLieCaughtSeeds = 60

// clusterLieCatching are the seeds that caught the broken build on the
// current tree. They run first, so the catch costs a seed, and the range
// after them still runs when a change to the traces moves the catch (raft
// group commit moved it from seeds below 20 to seed 40: fewer, larger
// entries put fewer reads over a lie; the raft logs' sync marks, small
// files a lie may pick, moved it at five times the rate to seed 101, and
// the rate went up to thirty times, where seed 40 catches again; the sync
// mark written back with the log's flush and the misbehaving member in
// the default faults moved it to seeds 33, 36 and 98).
var clusterLieCatching = []uint64{33, 36, 98}

// TestBehaviour28ClusterLyingDiskCatchesSwallowedDamage proves the
// cluster's lies effective: with damage swallowed — the liar's reads that
// meet it answered "nothing here" (sim.BreakSwallowDamage), so it serves
// the damage to its clients as a silent loss — the simulator reports a loss or an answer that does not linearize
// (invariant 3 or 5) within clusterLieCaughtSeeds seeds of 4,000 steps,
// with bad sectors and flips on read at thirty times LyingClusterConfig's
// lie rate (a lie picks its file by size, and the small files — raft
// logs, their sync marks, incarnation files — are read only at open).
func TestBehaviour28ClusterLyingDiskCatchesSwallowedDamage(t *testing.T) {
	hookOf(t, "BreakSwallowDamage", 3, 5).Store(true)
	defer sim.BreakSwallowDamage.Store(false)
	list := seeds(t, clusterLieCaughtSeeds)
	if _, replay := replaySeed(t); !replay && *flagSeeds == 0 {
		rest := list
		list = slices.Clone(clusterLieCatching)
		for _, s := range rest {
			if !slices.Contains(list, s) {
				list = append(list, s)
			}
		}
	}
	runs := runSeeds(list, func(seed uint64) sim.Config {
		cfg := sim.LyingClusterConfig(seed)
		// The lies a running node's reads meet, often, in shorter runs:
		// the swallowed read is caught when it is served.
		cfg.Faults.Lie *= 30
		cfg.Faults.LieKinds = sim.LieReadError | sim.LieFlipOnRead
		cfg.Steps = 4000
		return cfg
	}, true)
	caught := 0
	for i, r := range runs {
		var v *sim.Violation
		if r.err == nil || !errors.As(r.err, &v) || v.Known != "" {
			continue
		}
		if v.Invariant != 3 && v.Invariant != 5 {
			t.Errorf("seed %d failed on invariant %d, want 3 or 5: %v", list[i], v.Invariant, r.err)
			continue
		}
		if caught++; caught == 1 {
			t.Logf("caught by seed %d: invariant %d: %s", list[i], v.Invariant, v.Detail)
		}
	}
	if caught == 0 {
		t.Fatalf("swallowed damage passed %d cluster seeds", len(list))
	}
}
