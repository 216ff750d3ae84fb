package sim_test

import (
	"errors"
	"flag"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway/internal/sim"
)

// defaultMemberSeeds is how many seeds TestClusterGroupMembers runs.
const defaultMemberSeeds = 10

// memberConfig is the configuration of the member seeds (invariant 9):
// three nodes with a consumer group member on each, twice the default
// steps; the default cluster network faults, but partitions and stopped
// nodes — which cut a member's node off, so that its session lapses and
// its partitions move — five times as often; slow builds; and none of
// the faults that stall the metadata log every step of a member goes
// through (disk faults, lying disks, crashes, joins and removals: the
// default seeds have those).
func memberConfig(seed uint64) sim.Config {
	cfg := clusterConfig(seed)
	cfg.Nodes, cfg.GroupMembers, cfg.Steps = 3, 3, 24000
	f := &cfg.Faults
	f.DiskFull, f.DiskError, f.Crash, f.QuiescedCrash, f.Join, f.Remove, f.Lie = 0, 0, 0, 0, 0, 0, 0
	f.Net.Partition *= 5
	f.Net.Stop *= 5
	return cfg
}

// TestClusterGroupMembers runs cluster seeds with consumer group members
// (DESIGN behaviour 33, invariant 9): under the default cluster faults —
// partitions and stops cut members' nodes off, their sessions lapse,
// their partitions move, the others commit, the network heals — no
// member hands its application a message below the group's committed
// offset. -sim.seed S replays one, -sim.seeds N runs more.
func TestClusterGroupMembers(t *testing.T) {
	list := seeds(t, defaultMemberSeeds)
	_, replay := replaySeed(t)
	runs := runSeeds(list, func(seed uint64) sim.Config {
		cfg := memberConfig(seed)
		if *flagTrace && replay {
			cfg.Trace = os.Stdout
		}
		return cfg
	}, false)
	var ops sim.OpCounts
	var faults sim.FaultCounts
	for _, r := range runs {
		addOps(&ops, r.res.Ops)
		addFaults(&faults, r.res.Faults)
	}
	judge(t, list, runs, 5)
	if !replay && len(list) > 0 {
		// The members' runs are as deterministic as the others.
		again, _ := sim.Run(memberConfig(list[0]))
		if again.TraceHash != runs[0].res.TraceHash {
			t.Errorf("seed %d: trace hash %x, then %x", list[0], runs[0].res.TraceHash, again.TraceHash)
		}
	}
	if ops.MemberDelivered == 0 && !replay {
		t.Errorf("no member delivered anything: the scenario did not run")
	}
	t.Logf("%d seeds: members delivered %d messages, fenced %d answers, ran %d revocations, renewed %d leases, %d expired; faults %+v",
		len(runs), ops.MemberDelivered, ops.MemberFenced, ops.MemberRevokes, ops.MemberLeases, ops.MemberExpired, faults)
}

// unfencedConfig is memberConfig without the one-way, clog and clock
// faults, whose draws moved every seed's schedule when they were added,
// and with two ordinary clients: the unfenced delivery is a rare
// interleaving (a poll answered after its member's session lapsed and
// another member committed), these faults only thin out the cuts that
// make it, and the ordinary clients' random deletes of the members' topic
// end cut scenarios early (with leases at the metadata leader, seed 7
// caught it, none of 0-79 with the default clients; with the members
// stepping the Consumer's driver, seed 6; with their commit policies
// drawn from the seed, seed 14).
func unfencedConfig(seed uint64) sim.Config {
	cfg := memberConfig(seed)
	cfg.Faults.Net.OneWay, cfg.Faults.Net.Clog = 0, 0
	cfg.Faults.Clock = sim.ClockFaultRates{}
	// Stalled frames are judged by invariant 13 on the default seeds; off
	// here so the seeds that prove invariant 9 keep the schedules they
	// were chosen on.
	cfg.Faults.Peer.Stall = 0
	cfg.Clients = 2
	return cfg
}

// consumerConfig is unfencedConfig with the members on a topic of their
// own of eight partitions: each holds several, so a batch of one waits
// for the application while another's is committed, and rebalances
// revoke some while batches of theirs wait — the Consumer's decisions
// (host.ConsumerDriver) that invariant 12 judges.
func consumerConfig(seed uint64) sim.Config {
	cfg := unfencedConfig(seed)
	cfg.MemberPartitions = 8
	return cfg
}

// TestClusterGroupConsumers runs the consumer seeds (consumerConfig):
// members that step a Consumer's driver over several partitions each
// hand out, commit and revoke without a message below a committed
// offset going undelivered (invariant 12) or one below it delivered
// (invariant 9).
func TestClusterGroupConsumers(t *testing.T) {
	list := seeds(t, defaultMemberSeeds)
	runs := runSeeds(list, consumerConfig, false)
	var ops sim.OpCounts
	for _, r := range runs {
		addOps(&ops, r.res.Ops)
	}
	judge(t, list, runs, 5)
	if ops.MemberDelivered == 0 || ops.MemberRevokes == 0 {
		t.Errorf("members delivered %d messages and ran %d revocations: the scenario did not run", ops.MemberDelivered, ops.MemberRevokes)
	}
	t.Logf("%d seeds: members delivered %d messages, fenced %d, ran %d revocations, %d joins", len(runs), ops.MemberDelivered, ops.MemberFenced, ops.MemberRevokes, ops.MemberJoins)
}

// The proof that invariant 9 bites: members that fence a poll only when
// they make it (sim.BreakMemberFence), as the Consumer did before
// behaviour 33, hand their applications messages the group committed
// while they were cut off, on some of the member seeds.
func TestClusterGroupMembersCatchUnfencedDelivery(t *testing.T) {
	if testing.Short() {
		t.Skip("runs member seeds until one fails")
	}
	hookOf(t, "BreakMemberFence", 9).Store(true)
	defer sim.BreakMemberFence.Store(false)
	// The seeds that caught it on the current tree go first (the run
	// stops at the first catch); the rest of 0..999 stays behind them, as
	// any change to the traces moves which seeds catch it (after the
	// request-id and same-seed fixes none of 0..99 did; 133 does).
	list := []uint64{133}
	for i := range uint64(100 * defaultMemberSeeds) {
		if !slices.Contains(list, i) {
			list = append(list, i)
		}
	}
	for i, r := range runSeeds(list, unfencedConfig, true) {
		var v *sim.Violation
		if errors.As(r.err, &v) && v.Invariant == 9 {
			t.Logf("seed %d: %s", list[i], v.Detail)
			return
		}
	}
	t.Fatalf("no member seed of %v caught a delivery below the committed offset without the fence", list)
}

// The join storm's size: -sim.storm N members (up to 1,000, the most a
// group holds) over -sim.stormparts P partitions (0: as many as members).
var (
	flagStorm      = flag.Int("sim.storm", 24, "members in TestClusterGroupJoinStorm's join storm (at most 1000)")
	flagStormParts = flag.Int("sim.stormparts", 0, "partitions of the join storm's topic (0: as many as members)")
)

// stormFor bounds a storm's run in virtual time past its steps
// (Config.StormFor): a thousand members settle well within it.
const stormFor = 30 * time.Second

// defaultStormSeeds is how many seeds TestClusterGroupJoinStorm runs.
const defaultStormSeeds = 4

// stormConfig is memberConfig with -sim.storm members on a topic of
// their own (-sim.stormparts partitions), and the default rates of
// partitions and stops (the member seeds' five-fold rates keep a storm
// from ever settling).
func stormConfig(seed uint64) sim.Config {
	cfg := memberConfig(seed)
	cfg.GroupMembers = *flagStorm
	cfg.MemberPartitions = *flagStormParts
	if cfg.MemberPartitions == 0 {
		cfg.MemberPartitions = cfg.GroupMembers
	}
	cfg.Faults.Net.Partition /= 20
	cfg.Faults.Net.Stop /= 20
	cfg.StormFor = stormFor
	return cfg
}

// TestClusterGroupJoinStorm runs a join storm (invariant 9): members homed
// on the three nodes in turn all join one group at once as soon as their
// topic exists (the random workload leaves that topic alone), and go on
// heartbeating, polling, committing and, once the group has settled,
// being cut off under the member seeds' faults; every join starts a
// generation and moves partitions from live members in two steps. Every
// seed settles (every member in the group, every partition held, none
// moving) and delivers after it, and no member hands its application a
// message below the group's committed offset. 24 members by
// default; -sim.storm 1000 runs the thousand (about 20 s a
// seed: its run goes on in virtual time until it settles and delivers,
// Config.StormFor), -sim.seed S replays one.
func TestClusterGroupJoinStorm(t *testing.T) {
	if *flagStorm < 1 || *flagStorm > 1000 {
		t.Fatalf("-sim.storm %d: want 1 to 1000 members", *flagStorm)
	}
	list := seeds(t, defaultStormSeeds)
	_, replay := replaySeed(t)
	runs := runSeeds(list, func(seed uint64) sim.Config {
		cfg := stormConfig(seed)
		if *flagTrace && replay {
			cfg.Trace = os.Stdout
		}
		return cfg
	}, false)
	var ops sim.OpCounts
	var faults sim.FaultCounts
	for i, r := range runs {
		addOps(&ops, r.res.Ops)
		addFaults(&faults, r.res.Faults)
		t.Logf("seed %d: settled %v after the first join (%d messages delivered by then, %d after), %v of virtual time",
			list[i], r.res.StormSettled, r.res.StormSettledDelivered, r.res.StormDelivered, r.res.VirtualTime)
		if r.err == nil {
			// A storm must settle (every member in the group, every
			// partition held, none moving) and deliver after it.
			if r.res.StormSettled == 0 || r.res.StormDelivered == 0 {
				t.Errorf("seed %d: the storm did not settle and deliver (settled %v, %d delivered after)", list[i], r.res.StormSettled, r.res.StormDelivered)
			}
			continue
		}
		var v *sim.Violation
		if errors.As(r.err, &v) && v.Known != "" && !*flagKnown {
			t.Logf("seed %d: skipped, known bug: %s\n  replay: %s", list[i], v.Known, v.Replay)
			continue
		}
		t.Errorf("seed %d: %v", list[i], r.err)
	}
	t.Logf("%d seeds of %d members: %d joins, delivered %d messages, fenced %d answers, renewed %d leases, %d expiries, %d member cuts, %d partitions",
		len(runs), *flagStorm, ops.MemberJoins, ops.MemberDelivered, ops.MemberFenced, ops.MemberLeases, ops.MemberExpired, faults.MemberCuts, faults.Partitions)
}
