package sim

import (
	"fmt"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/shard"
)

// An invariant is one property the harness checks on every run, a value
// registered in invariants, one file each (invariant_*.go): its number
// (what Violation.Invariant reports and the package doc lists), its
// name, the DESIGN behaviours it checks, where it is checked, and the
// broken builds (broken.go, and testhooks' switches under the build tag
// parkway_brokenbuild) whose seeds fail on it — the proof that the checks
// bite. Both modes check through the registry: adding an invariant is
// adding its file and its entry below.
type invariant struct {
	id        int
	name      string
	behaviour string
	// The checks over the harness's history and state, each nil when
	// the invariant has none at that point: step after every scheduler
	// action, settled once the run has settled (before the final reads),
	// final on the settled run after the final reads. A check reports
	// through the harness's fail, and returns at once after a violation.
	step, settled, final func(h *sim)
	// online says where the invariant is checked as the history is
	// recorded (the storage tap, the answers, the final reads), when it
	// is: those checks belong to the code that records what they check.
	online string
	// caughtBy names the broken builds whose seeds may fail on this
	// invariant (a sim.Break* variable, or testhooks.X); their tests
	// accept a violation of it (TestInvariantsHaveBrokenBuilds checks
	// both agree). uncaught says why no broken build does, when none.
	caughtBy []string
	uncaught string
}

// invariants is the registry, in the order the harness checks them.
var invariants = [...]*invariant{
	&invEngine,
	&invAnswers,
	&invIncarnations,
	&invDurability,
	&invDrops,
	&invLinearizable,
	&invGroups,
	&invPlacement,
	&invMembership,
	&invMemberFence,
	&invForwardBudget,
	&invReadBarrier,
	&invDelivered,
	&invInbound,
	&invConns,
}

// shardsNow lists the shards of every node of the run, named for a
// violation's text.
func shardsNow(h *sim) []namedShard {
	var out []namedShard
	for _, n := range h.nodesNow() {
		for i, sh := range n.shards {
			out = append(out, namedShard{fmt.Sprintf("%sshard %d", n.tag(), i), sh})
		}
	}
	return out
}

// metas lists the metadata of every running node (invariant 6).
func metas(h *sim) []namedMeta {
	var out []namedMeta
	for _, n := range h.nodesNow() {
		if n.eng != nil && !n.down {
			out = append(out, namedMeta{fmt.Sprintf("%s (open %d)", n.name(), n.gen), n.meta})
		}
	}
	return out
}

type namedShard struct {
	name string // "shard 0", "n2 shard 1"
	sh   *shard.Shard
}

type dropCounter struct {
	m *metrics.Metrics
	// who names the node incarnation in a violation ("node gen 2 ",
	// empty in a cluster); label in a trace event ("gen=2 ", or empty).
	who, label string
}

type namedMeta struct {
	name string
	meta *metadata.Store
}

// stepChecks runs every registered check due after a scheduler action.
func stepChecks(h *sim) {
	for _, inv := range invariants {
		if inv.step != nil {
			inv.step(h)
		}
	}
}

// settledChecks runs every registered check due once the run settled,
// stopping at the first violation.
func settledChecks(h *sim) {
	for _, inv := range invariants {
		if h.viol != nil {
			return
		}
		if inv.settled != nil {
			inv.settled(h)
		}
	}
}

// finalChecks runs every registered check of the settled run.
func finalChecks(h *sim) {
	for _, inv := range invariants {
		if inv.final != nil {
			inv.final(h)
		}
	}
}

// inCluster adapts a check of what only a cluster has (a network, a
// metadata group, forwarded requests, group members): it runs on a run
// with a network.
func inCluster(f func(c *sim)) func(*sim) {
	return func(s *sim) {
		if s.net != nil {
			f(s)
		}
	}
}

// nodesNow lists the current incarnation of every node of the run, down
// or not.
func (b *sim) nodesNow() []*node { return b.nodes }
