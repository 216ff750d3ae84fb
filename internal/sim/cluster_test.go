package sim_test

import (
	"errors"
	"flag"
	"os"
	"testing"

	"github.com/parkway-io/parkway/internal/sim"
)

// defaultClusterSeeds is how many cluster seeds `go test` runs: sized so
// the whole package stays well under three minutes with -race on a
// 2-core machine. -sim.seeds N runs more.
const defaultClusterSeeds = 100

var (
	flagKnown      = flag.Bool("sim.known", false, "fail, rather than skip, cluster seeds that hit a known engine bug")
	flagMetaFaults = flag.Bool("sim.metafaults", true, "let cluster disk faults reach the metadata raft log (=false spares it)")
	flagRemoveX    = flag.Float64("sim.removex", 1, "multiply the cluster seeds' node removal rate")
	flagJoinX      = flag.Float64("sim.joinx", 1, "multiply the cluster seeds' node join rate")
	flagOneWayX    = flag.Float64("sim.onewayx", 1, "multiply the cluster seeds' one-way partition rate")
	flagClogX      = flag.Float64("sim.clogx", 1, "multiply the cluster seeds' link clog rate")
	flagTermsX     = flag.Float64("sim.termsx", 1, "multiply the cluster seeds' forged-term rate (a misbehaving member)")
	flagFloodX     = flag.Float64("sim.floodx", 1, "multiply the cluster seeds' forwarded-request flood rate (a misbehaving member)")
	flagStallX     = flag.Float64("sim.stallx", 1, "multiply the cluster seeds' stalled-frame rate (a misbehaving member)")
	flagSlowLink   = flag.Float64("sim.slowlink", sim.DefaultSlowLink, "the cluster seeds' slow-link rate (PeerFaultRates.SlowLink; 0 turns slow links off)")
	flagConnFlood  = flag.Float64("sim.connflood", sim.DefaultConnFlood, "the cluster seeds' connection-flood rate (PeerFaultRates.ConnFlood; 0 turns connection floods off)")
)

// clusterConfig is the cluster configuration the flags select.
func clusterConfig(seed uint64) sim.Config {
	cfg := sim.DefaultClusterConfig(seed)
	cfg.Faults.SpareMetadataLog = !*flagMetaFaults
	cfg.Faults.LiesDisarmed = *flagDisarmed
	cfg.Faults.Remove *= *flagRemoveX
	cfg.Faults.Join *= *flagJoinX
	cfg.Faults.Net.OneWay *= *flagOneWayX
	cfg.Faults.Net.Clog *= *flagClogX
	cfg.Faults.Peer.Terms *= *flagTermsX
	cfg.Faults.Peer.Flood *= *flagFloodX
	cfg.Faults.Peer.Stall *= *flagStallX
	cfg.Faults.Peer.SlowLink = *flagSlowLink
	cfg.Faults.Peer.ConnFlood = *flagConnFlood
	scaleClockFaults(&cfg)
	return cfg
}

// The default cluster range is run once and shared by the cluster tests.
var clusterRange sharedRange

func defaultClusterOutcomes() []outcome {
	return clusterRange.outcomes(defaultClusterSeeds, sim.DefaultClusterConfig)
}

// TestClusterSimulation runs the cluster seeds (three or five nodes; default
// 0..defaultClusterSeeds-1, -sim.seeds N and -sim.start S for more,
// -sim.seed S to replay one) under the default cluster faults and asserts
// every invariant on each.
func TestClusterSimulation(t *testing.T) {
	var runs []outcome
	list := seeds(t, defaultClusterSeeds)
	_, replay := replaySeed(t)
	defaultRange := isDefaultRange() && *flagMetaFaults && *flagRemoveX == 1 && *flagJoinX == 1 &&
		*flagOneWayX == 1 && *flagClogX == 1 && *flagTermsX == 1 && *flagFloodX == 1 && *flagStallX == 1 && *flagSlowLink == sim.DefaultSlowLink && *flagConnFlood == sim.DefaultConnFlood && !*flagDisarmed
	if defaultRange {
		runs = defaultClusterOutcomes()
	} else {
		runs = runSeeds(list, func(seed uint64) sim.Config {
			cfg := clusterConfig(seed)
			if *flagTrace && replay {
				cfg.Trace = os.Stdout
			}
			return cfg
		}, false)
	}
	var total sim.FaultCounts
	var ops sim.OpCounts
	for _, r := range runs {
		addFaults(&total, r.res.Faults)
		addOps(&ops, r.res.Ops)
	}
	judge(t, list, runs, 5)
	t.Logf("%d cluster seeds: faults %+v", len(runs), total)
	t.Logf("ops %+v", ops)
	if defaultRange {
		t.Logf("default cluster seeds took %v", clusterRange.took)
	}
}

// Two cluster runs of one seed produce the same event trace (its hash) and
// the same counts — elections included, whose timeouts raft draws from
// crypto/rand — and different seeds produce different traces. The seeds
// are ones whose runs acknowledge writes: seed 0 acknowledges none since
// a raft log whose sync mark a lie cut short is refused (its clients
// spend the run retrying metadata commands against a metadata member down
// for lack of space, and requests to partitions with no leader).
func TestClusterSameSeedSameTrace(t *testing.T) {
	hashes := map[uint64]uint64{}
	for _, seed := range []uint64{1, 2, 7} {
		a, errA := sim.Run(sim.DefaultClusterConfig(seed))
		b, errB := sim.Run(sim.DefaultClusterConfig(seed))
		if (errA == nil) != (errB == nil) || (errA != nil && errA.Error() != errB.Error()) {
			t.Fatalf("seed %d: errors differ: %v / %v", seed, errA, errB)
		}
		if a != b {
			t.Fatalf("seed %d: runs differ:\n%+v\n%+v", seed, a, b)
		}
		if a.Events < 5000 || a.Ops.Acked == 0 {
			t.Fatalf("seed %d: only %d events, %d acks", seed, a.Events, a.Ops.Acked)
		}
		if other, dup := hashes[a.TraceHash]; dup {
			t.Fatalf("seeds %d and %d have the same trace hash", other, seed)
		}
		hashes[a.TraceHash] = seed
	}
	// Seeds whose runs once varied, each run several times: a choice the
	// engine left to chance shows as a run that differs from the first
	// (19 and 78 gave four and five traces in six runs while a manual
	// engine's read barrier took its answer or its timer at random when
	// both were ready).
	runs := 4
	if raceEnabled {
		runs = 2
	}
	for _, seed := range []uint64{19, 78} {
		first, firstErr := sim.Run(sim.DefaultClusterConfig(seed))
		for i := 1; i < runs; i++ {
			r, err := sim.Run(sim.DefaultClusterConfig(seed))
			if r != first || (err == nil) != (firstErr == nil) {
				t.Fatalf("seed %d: run %d differs from the first:\n%+v\n%+v", seed, i, r, first)
			}
		}
	}
}

// Runs on parallel goroutines do not disturb each other's determinism:
// each draws raft's election timeouts from its own seeded source.
func TestClusterParallelRunsAgree(t *testing.T) {
	const seed = 3
	want, wantErr := sim.Run(sim.DefaultClusterConfig(seed))
	runs := runSeeds([]uint64{seed, seed, seed, seed}, sim.DefaultClusterConfig, false)
	for i, r := range runs {
		if r.res != want || (r.err == nil) != (wantErr == nil) {
			t.Fatalf("parallel run %d differs:\n%+v\n%+v", i, r.res, want)
		}
	}
}

// Every cluster fault kind fires within the default cluster seeds.
func TestClusterFaultsFire(t *testing.T) {
	if raceEnabled {
		// The race run holds a tenth of the default seeds (defaultCount),
		// too few for the rarest faults; CI's run without -race checks
		// this at the full count.
		t.Skip("fault coverage is checked at the full default count, without -race")
	}
	var total sim.FaultCounts
	for _, r := range defaultClusterOutcomes() {
		addFaults(&total, r.res.Faults)
	}
	t.Logf("faults over %d default cluster seeds: %+v", defaultClusterSeeds, total)
	for _, c := range []struct {
		name string
		n    int
	}{
		{"message dropped", total.MsgDropped},
		{"message duplicated", total.MsgDuplicated},
		{"message reordered", total.MsgReordered},
		{"message delayed", total.MsgDelayed},
		{"message lost to a cut link", total.MsgCut},
		{"network partition", total.Partitions},
		{"one-way partition", total.OneWays},
		{"link clogged", total.Clogs},
		{"message held by a clog", total.MsgClogged},
		{"calm after a leader went deaf", total.DeafCalms},
		{"clock jump", total.ClockJumps},
		{"clock strobe", total.ClockStrobes},
		{"clock drift", total.ClockDrifts},
		{"node stopped", total.Stops},
		{"node crash (power loss)", total.Crash},
		{"node crash (process)", total.ProcessCrash},
		{"node crash while leading quiesced groups", total.QuiescedCrash},
		{"disk full (ENOSPC)", total.DiskFull},
		{"disk error (EIO, torn write)", total.DiskError},
		{"slow build", total.SlowBuild},
		{"metadata member reopened after a raft log failure", total.MetaReopens},
		{"node joined mid-run", total.Joined},
		{"node removed mid-run (drained, then taken out of the metadata group)", total.Removed},
		{"replica moved off a node (move settled)", total.MovesSettled},
		{"calm after a quiesced leader's crash", total.CalmCrashes},
		{"start on another node's data directory (refused)", total.WrongDisks},
		{"spell of forged raft terms (a misbehaving member)", total.TermSpells},
		{"raft message sent with an extreme forged term", total.ForgedExtreme},
		{"raft message sent with a forged jump of its term", total.ForgedTerms - total.ForgedExtreme},
		{"raft message refused for its term", total.TermsRefused},
		{"spell of forwarded-request floods (a misbehaving member)", total.FloodSpells},
		{"flooded forwarded request", total.FloodRequests},
		{"probe for a flooded request", total.FloodProbes},
		{"flooded request refused over a forward budget", total.FloodRefused},
		{"spell of stalled frames (a misbehaving member)", total.StallSpells},
		{"stalled frame closed at its read deadline", total.StallTimeouts},
		{"spell of a slow link", total.SlowLinkSpells},
		{"slow frame read whole", total.SlowWhole},
		{"slow frame's connection closed at a read deadline", total.SlowTimeouts},
		{"frame queued behind a slow one", total.SlowQueued},
		{"frame lost behind a closed connection", total.SlowLost},
		{"spell of a connection flood", total.ConnFloodSpells},
		{"flood connection refused at accept", total.FloodConnsRefused},
		{"flood connection closed at its handshake deadline", total.HandshakeTimeouts},
		{"member's connection closed past MaxPeerConns", total.ConnsEvicted},
		{"honest redial admitted during a connection flood", total.HonestRedials},
		{"group led by a survivor after its quiesced leader crashed", total.Failovers},
	} {
		if c.n == 0 {
			t.Errorf("fault %q never fired in %d default cluster seeds", c.name, defaultClusterSeeds)
		}
	}
}

// Raft messages that do not carry their incarnation (the reference
// design's hole, behaviour 20) let a dead incarnation's group talk to its
// replacement: caught as raft panicking on a log it does not have
// (invariant 0 reports panics), messages crossing incarnations, or
// replicas disagreeing. Under the faults it was written for: with the
// asymmetric network and clock faults on, the first seed to catch it does
// so only at the drain bound, minutes in; so it does with the lying disk
// on (seed 7, 384 s, where seed 1 catches in seconds without it).
func TestClusterCatchesRaftWithoutEpoch(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.Net.OneWay, cfg.Faults.Net.Clog, cfg.Faults.Clock = 0, 0, sim.ClockFaultRates{}
		cfg.Faults.Lie = 0
		// Stalled frames too: with them the first seed to catch it did so
		// at the drain bound, past the race run's 30 minutes.
		cfg.Faults.Peer.Stall = 0
		return cfg
	}, "BreakRaftEpoch", 0, 2, 3, 5)
}

// Produces without a (producer, sequence) pair are applied twice when a
// produce whose outcome was unknown is retried.
func TestClusterCatchesNoProducerIDs(t *testing.T) {
	expectClusterCaught(t, sim.DefaultClusterConfig, "BreakNoProducerIDs", 5)
}

// A fast-skip that ignores the park buffer strands parked frames on a
// cluster node as on a single one. Disk faults, lies and crashes are off: a
// backed-off build or a restart keeps passes from being skipped, or
// answers what was parked, and would hide it. The skipped passes also
// leave a deleted incarnation's replica in place, still taking its
// group's raft traffic (seed 19 since forwarded requests went over the
// bus: an offset read on a replica whose incarnation its node no longer
// holds committed), which invariant 2 reports.
func TestClusterCatchesFastSkipIgnoringParked(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.DiskFull, cfg.Faults.DiskError, cfg.Faults.Crash, cfg.Faults.Lie = 0, 0, 0, 0
		return cfg
	}, "BreakFastSkip", 4, 1, 2)
}

// A node that materialises a partition its placement leaves out (its
// reconciler ignoring reconciler.Config.Node) is caught at the build.
func TestClusterCatchesReplicaOffPlacement(t *testing.T) {
	expectClusterCaught(t, sim.DefaultClusterConfig, "BreakPlacement", 7)
}

// Without leadership transfer (every MsgTimeoutNow lost on the bus),
// leadership that a failure moved off a group's preferred leader never
// comes back: caught at quiescence, when every node is up again. A
// leader whose replica is being moved off its node hands leadership to a
// staying replica before it removes itself: without transfers that move,
// and the removal of the node waiting for it, never completes (8).
func TestClusterCatchesNoLeaderTransfer(t *testing.T) {
	expectClusterCaught(t, sim.DefaultClusterConfig, "BreakLeaderTransfer", 7, 8)
}

// When a crashed node's liveness heartbeats keep arriving, nothing tells
// the survivors that it died, and the groups it led while quiesced, which
// send nothing, never elect a new leader: caught when the failover after
// a quiesced leader's crash is checked.
// Quiesced leaders crash ten times as often as by default, so that an
// early seed checks a failover.
func TestClusterCatchesZombieLiveness(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.QuiescedCrash *= 10
		return cfg
	}, "BreakZombieLiveness", 8)
}

// A move settled as soon as it is planned — the leaving replica dropped
// before the new one holds the log — loses what only the leaving
// replica held (a partition of one replica) and leaves the newcomer of
// any group without a source: caught as replicas that disagree or lose
// acknowledged writes, a move that never completes, or a request to a
// partition so left that is never answered (invariant 1, which the
// checker reports first of what kept the cluster from settling: seed 2
// since the misbehaving member and starts on another node's directory
// joined the default faults, a read of 1/0/1 sent just after its leaving
// replica's early settle; the seed passes without the broken build).
// Removals run five times as often as by default, so that early seeds
// move replicas.
func TestClusterCatchesEarlySettle(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.Remove *= 5
		return cfg
	}, "BreakEarlySettle", 1, 3, 4, 7, 8)
}

// TestBehaviour27ClusterWrongDiskRefused: every crashed node is first
// started on a copy of another member's data directory
// (FaultRates.WrongDisk 1), which must be refused with
// host.ErrWrongDataDir; then it starts on its own and the run's every
// invariant holds.
func TestBehaviour27ClusterWrongDiskRefused(t *testing.T) {
	list := seeds(t, 6)
	runs := runSeeds(list, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.WrongDisk = 1
		cfg.Faults.Crash *= 4
		return cfg
	}, false)
	refused := 0
	for i, r := range runs {
		var v *sim.Violation
		if errors.As(r.err, &v) && v.Known != "" && !*flagKnown {
			t.Logf("seed %d: skipped, known bug: %s", list[i], v.Known)
			continue
		}
		if r.err != nil {
			t.Errorf("seed %d: %v", list[i], r.err)
		}
		refused += r.res.Faults.WrongDisks
	}
	if refused == 0 {
		t.Fatalf("no node was started on another's data directory in %d seeds", len(list))
	}
	t.Logf("%d starts on another node's data directory, each refused", refused)
}

// A node that keeps no identity (sim.BreakIdentityCheck hides its
// IDENTITY file) starts on another member's data directory: caught at
// that start.
func TestClusterCatchesWrongDiskAccepted(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.WrongDisk = 1
		cfg.Faults.Crash *= 4
		return cfg
	}, "BreakIdentityCheck", 8, 0)
}

// A transport that sends a message whose own direction is cut or clogged
// over the reverse one (an answer riding back on the connection its
// request came in on) lets a leader that cannot hear its followers, or
// whose messages to them stall, commit all the same: caught as an
// acknowledged write whose replicas were never a majority linked both
// ways to a leader. Every other cut is symmetric, so only the one-way
// partition and the clog expose it: each is run alone, at eight times
// its default rate. A one-way cut can also be caught by the failover
// check (invariant 8): a leader gone deaf whose followers' answers still
// reach it over the reverse path keeps leading, so no survivor takes
// over (seed 0 since raft group commit; the same seeds pass without the
// broken build).
func TestClusterCatchesReplyPathOneWay(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.Net.OneWay *= 8
		cfg.Faults.Net.Clog = 0
		return cfg
	}, "BreakReplyPath", 3, 8)
}

func TestClusterCatchesReplyPathClog(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.Net.Clog *= 8
		cfg.Faults.Net.OneWay = 0
		return cfg
	}, "BreakReplyPath", 3)
}

// The same broken partition in a cluster: each leader stamps append times
// from its own clock before proposing, and a leader whose clock is behind
// its predecessor's (skew, a step back, a strobe) stamps later messages
// earlier. Only the clock faults expose it.
func TestClusterCatchesAppendTimeOrder(t *testing.T) {
	expectClusterCaught(t, sim.DefaultClusterConfig, "BreakAppendTimeOrder", 3)
}

// Node liveness that does not report whom a node hears lets a node that
// can send but not hear pass for alive: the quiesced groups it led never
// elect another leader. Caught by the failover check after a leader went
// deaf, which only a one-way partition sets up; one-way partitions run at
// fifty times their default rate here.
func TestClusterCatchesLivenessWithoutReport(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.Net.OneWay *= 50
		return cfg
	}, "BreakLivenessReport", 8)
}
