package sim_test

import (
	"errors"
	"flag"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/parkway-io/parkway/internal/sim"
)

var (
	flagLieKinds = flag.Uint("sim.liekinds", 0, "TestBehaviour28SimulationLyingDisk: only these lie kinds (sim.LieKind bits)")
	flagLieX     = flag.Float64("sim.liex", 1, "TestBehaviour28SimulationLyingDisk: multiply the lie rate")
	flagDisarmed = flag.Bool("sim.liesdisarmed", false, "TestBehaviour28SimulationLyingDisk, TestBehaviour28ClusterLyingDisk, TestClusterSimulation: every lie disarmed (same draws, disk intact), the control that tells a failure the lies caused")
)

// lyingSeeds is how many seeds TestBehaviour28SimulationLyingDisk runs by
// default.
const lyingSeeds = 60

// TestBehaviour28SimulationLyingDisk runs single-node seeds with the
// lying disk on (sim.DefaultConfig, whose faults include lies: bit flips, truncations and rollbacks
// while the node is down, misdirected writes, bad sectors and flips on
// read while it runs): every acknowledged message is read intact at its
// offset or its read reports the damage with a typed error; never a
// wrong payload, a reused offset or a silent loss (DESIGN behaviour 28,
// single node). -sim.seed, -sim.seeds and -sim.start select seeds as for
// TestSimulation.
func TestBehaviour28SimulationLyingDisk(t *testing.T) {
	n, lies, detected := runLying(t, lyingSeeds, sim.DefaultConfig, 40)
	t.Logf("%d seeds: lies %v, damage detected %d times", n, lies, detected)
}

// runLying runs the seeds (def by default) of a lying-disk test under
// cfg, its lie rate and kinds scaled by -sim.liex and -sim.liekinds, and
// judges them; it returns how many ran, the lies that fired and how often
// damage was detected.
func runLying(t *testing.T, def int, cfg func(uint64) sim.Config, shown int) (int, sim.LieCounts, int) {
	t.Helper()
	list := seeds(t, def)
	_, replay := replaySeed(t)
	runs := runSeeds(list, func(seed uint64) sim.Config {
		cfg := cfg(seed)
		cfg.Faults.Lie *= *flagLieX
		cfg.Faults.LieKinds = sim.LieKind(*flagLieKinds)
		cfg.Faults.LiesDisarmed = *flagDisarmed
		if *flagTrace && replay {
			cfg.Trace = os.Stdout
		}
		return cfg
	}, false)
	var lies sim.LieCounts
	detected := 0
	for _, r := range runs {
		for k, n := range r.res.Faults.Lies {
			lies[k] += n
		}
		detected += r.res.Faults.Detected
	}
	judge(t, list, runs, shown)
	return len(runs), lies, detected
}

// lieCaughtSeeds bounds the seeds each kind of
// TestBehaviour28LyingDiskCatchesSwallowedDamage runs.
const lieCaughtSeeds = 60

// lieCatchX multiplies the default lie rate in
// TestBehaviour28LyingDiskCatchesSwallowedDamage, by kind: ten times
// (about forty lies of one kind in a run: a rollback or a misdirected
// write, the rarest to meet a read, catches in one seed in three or
// four), but for truncations, twice: at ten times most seeds cut an
// incarnation file short, a known limit that loses the messages with or
// without the broken build, so the seed cannot tell it.
func lieCatchX(k sim.LieKind) float64 {
	if k == sim.LieTruncate {
		return 2
	}
	return 10
}

// TestBehaviour28LyingDiskCatchesSwallowedDamage proves each kind of lie
// effective: with damage ignored — reads that meet it answered "nothing
// here" (sim.BreakSwallowDamage, a node that skips what fails its
// checksum) and builds that meet it starting the partition over
// (sim.BreakRebuildOnDamage) — the simulator reports a silent loss or an
// answer that does not linearize, for every lie kind alone, within
// lieCaughtSeeds seeds. Each kind proves itself (caughtByLie): the
// catching seed holds a lie of that kind, and the same seed with its
// lies disarmed passes. The lies hit only the partitions' files
// (sim.FaultRates.LiePartitionsOnly): damage in the journal is classified
// as a known limit whatever it hides (knownJournalDamage), so a lie there
// cannot tell a broken build. The runs leave out the other fault that
// damages reads (DiskError: a torn write's or a failed fsync's EIO,
// which the broken builds swallow as well) and the clock faults.
// -sim.liex scales the lie rate (0: no lie, and every kind fails).
func TestBehaviour28LyingDiskCatchesSwallowedDamage(t *testing.T) {
	for _, k := range sim.LieKindList {
		t.Run(k.Name, func(t *testing.T) {
			hookOf(t, "BreakSwallowDamage", 3, 5).Store(true)
			hookOf(t, "BreakRebuildOnDamage", 3, 5).Store(true)
			defer sim.BreakSwallowDamage.Store(false)
			defer sim.BreakRebuildOnDamage.Store(false)
			list := make([]uint64, lieCaughtSeeds)
			for i := range list {
				list[i] = uint64(i)
			}
			cfg := func(seed uint64) sim.Config {
				cfg := sim.DefaultConfig(seed)
				cfg.Faults.Lie *= lieCatchX(k.Kind) * *flagLieX
				cfg.Faults.LieKinds = k.Kind
				cfg.Faults.LiePartitionsOnly = true
				cfg.Faults.DiskError = 0
				cfg.Faults.Clock = sim.ClockFaultRates{}
				return cfg
			}
			// In chunks, in seed order, stopping after the chunk that
			// catches: the verdict and the catching seed are those of
			// running every seed, at a fraction of the cost (under -race
			// the whole range was most of the package's run).
			chunk := 2 * runtime.GOMAXPROCS(0)
			for from := 0; from < len(list); from += chunk {
				part := list[from:min(from+chunk, len(list))]
				for i, r := range runSeeds(part, cfg, false) {
					if caughtByLie(t, part[i], cfg, r, k.Kind, &sim.BreakSwallowDamage, &sim.BreakRebuildOnDamage) {
						return
					}
				}
			}
			t.Fatalf("swallowed damage passed %d seeds with only %s lies", len(list), k.Name)
		})
	}
}

// caughtByLie reports whether run r of seed, under cfg with the broken
// builds set, caught them through a lie of kind: it failed on invariant
// 3 or 5 (any other invariant fails the test), not on a known limit; a
// lie of kind took effect in it; the same seed with its lies disarmed
// (sim.FaultRates.LiesDisarmed: the same draws, the disk left intact)
// passes, so the violation follows from the lie; and the same seed
// without the broken builds passes, so it follows from them too. It logs
// the failing seeds it does not count, and why. The controls run after
// runSeeds returned: nothing else runs while they clear the builds.
func caughtByLie(t *testing.T, seed uint64, cfg func(uint64) sim.Config, r outcome, kind sim.LieKind, broken ...interface{ Store(bool) }) bool {
	t.Helper()
	var v *sim.Violation
	if r.err == nil || !errors.As(r.err, &v) || v.Known != "" {
		return false
	}
	if v.Invariant != 3 && v.Invariant != 5 {
		t.Errorf("seed %d failed on invariant %d, want 3 or 5: %v", seed, v.Invariant, r.err)
		return false
	}
	if r.res.Faults.Lies.Of(kind) == 0 {
		t.Logf("seed %d not counted: invariant %d without a lie of its kind (lies %v): %s", seed, v.Invariant, r.res.Faults.Lies, firstLine(v.Detail))
		return false
	}
	disarmed := cfg(seed)
	disarmed.Faults.LiesDisarmed = true
	if _, err := sim.Run(disarmed); err != nil {
		t.Logf("seed %d not counted: invariant %d, but it fails with its lies disarmed too: %v", seed, v.Invariant, firstLine(err.Error()))
		return false
	}
	for _, b := range broken {
		b.Store(false)
	}
	_, err := sim.Run(cfg(seed))
	for _, b := range broken {
		b.Store(true)
	}
	if err != nil {
		t.Logf("seed %d not counted: invariant %d, but it fails without the broken build too (under these lies): %v", seed, v.Invariant, firstLine(err.Error()))
		return false
	}
	t.Logf("caught by seed %d (lies %v; it passes with them disarmed, and without the broken build): invariant %d: %s", seed, r.res.Faults.Lies, v.Invariant, v.Detail)
	return true
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
