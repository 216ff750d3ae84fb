package sim_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/parkway-io/parkway/internal/sim"
	"github.com/parkway-io/parkway/internal/testhooks"
)

// brokenBuilds are the broken builds the catch tests set, by the names
// the invariant registry gives them; brokenbuild_test.go adds testhooks'
// switches in a build with the tag parkway_brokenbuild.
var brokenBuilds = map[string]interface{ Store(bool) }{
	"BreakFastSkip":        &sim.BreakFastSkip,
	"BreakRaftEpoch":       &sim.BreakRaftEpoch,
	"BreakPlacement":       &sim.BreakPlacement,
	"BreakLeaderTransfer":  &sim.BreakLeaderTransfer,
	"BreakZombieLiveness":  &sim.BreakZombieLiveness,
	"BreakEarlySettle":     &sim.BreakEarlySettle,
	"BreakSwallowDamage":   &sim.BreakSwallowDamage,
	"BreakRebuildOnDamage": &sim.BreakRebuildOnDamage,
	"BreakIdentityCheck":   &sim.BreakIdentityCheck,
	"BreakReplyPath":       &sim.BreakReplyPath,
	"BreakAppendTimeOrder": &sim.BreakAppendTimeOrder,
	"BreakLivenessReport":  &sim.BreakLivenessReport,
	"BreakNoProducerIDs":   &sim.BreakNoProducerIDs,
	"BreakMemberFence":     &sim.BreakMemberFence,
}

// hookOf is the broken build named name, after checking that every
// invariant the caller accepts a violation of names it in the registry.
//
// Under the race detector it skips the test: a catch proves what the
// simulator detects, which the detector does not change (a broken build
// flips a switch on the same code paths), and it runs seeds until one
// fails, up to a hundred cluster seeds of a kind at ten times a seed's
// cost — most of the race run's time. CI runs this package again
// without -race (.ci/run), where every catch runs.
func hookOf(t *testing.T, name string, invariants ...int) interface{ Store(bool) } {
	t.Helper()
	if raceEnabled {
		t.Skipf("broken build %s: catches run without -race (the race detector does not change what the simulator detects)", name)
	}
	hook, ok := brokenBuilds[name]
	if !ok {
		t.Fatalf("no broken build %q", name)
	}
	for _, id := range invariants {
		i := slices.IndexFunc(sim.Invariants(), func(inv sim.InvariantInfo) bool { return inv.ID == id })
		if i < 0 || !slices.Contains(sim.Invariants()[i].CaughtBy, name) {
			t.Fatalf("the test accepts a violation of invariant %d from %s, which the registry does not name among its broken builds", id, name)
		}
	}
	return hook
}

// Every registered invariant is checked somewhere and names the broken
// builds whose seeds fail on it, or why none does; every name is a broken
// build a catch test sets, and every broken build is named by an
// invariant.
func TestInvariantsHaveBrokenBuilds(t *testing.T) {
	named := map[string]bool{}
	for i, inv := range sim.Invariants() {
		t.Logf("invariant %d, %s (behaviour %s; checked %s): caught by %v %s", inv.ID, inv.Name, inv.Behaviour, inv.Checks, inv.CaughtBy, inv.Uncaught)
		if inv.ID != i {
			t.Errorf("invariant %d is registered at %d: the registry follows the numbering", inv.ID, i)
		}
		if inv.Name == "" || inv.Behaviour == "" || inv.Checks == "" {
			t.Errorf("invariant %d has no name, behaviour or check: %+v", inv.ID, inv)
		}
		if len(inv.CaughtBy) == 0 && inv.Uncaught == "" {
			t.Errorf("invariant %d (%s) names no broken build that it catches, nor why none", inv.ID, inv.Name)
		}
		for _, b := range inv.CaughtBy {
			named[b] = true
			if _, ok := brokenBuilds[b]; ok {
				continue
			}
			if strings.HasPrefix(b, "testhooks.") && !testhooks.Enabled {
				continue // a switch that exists only under the build tag
			}
			t.Errorf("invariant %d names %q, which no catch test sets", inv.ID, b)
		}
	}
	for b := range brokenBuilds {
		if !named[b] {
			t.Errorf("broken build %s is named by no invariant", b)
		}
	}
}
