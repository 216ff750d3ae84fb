package sim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// base is the harness's state that every run has, of one node or many
// (what only a cluster uses is in sim, harness.go): the configuration,
// the one seeded RNG every scheduling choice comes from, the virtual
// clock, the trace, the first violation found, the run's nodes and the
// workload's history.
type base struct {
	cfg  Config
	rng  *rand.Rand
	clk  *clock.Manual
	tr   *trace
	viol *Violation
	grp  *groupCheck // invariant 6, created on first use

	// nodes are the run's nodes, each its current incarnation, down or
	// not: the one node of the single-node kind, or the cluster's
	// members in id order.
	nodes []*node

	// The workload's history, the same in both modes: the clients, every
	// operation and try, the tries in flight (in send order), and every
	// message id a produce carried.
	clients     []*client
	allOps      []*op
	metaOps     []*op // cluster mode: metadata operations (kindMeta)
	finalOps    []*op
	allAttempts []*attempt
	attempts    map[*shard.Request]*attempt
	inflight    []*attempt
	nextOp      uint64
	nextAttempt uint64
	nextMsg     uint64
	msgs        map[uint64]*msgInfo
	// oracle is each incarnation's log as the storage tap saw it appended.
	oracle map[incKey]*incLog

	faults FaultCounts
	ops    OpCounts
	// depth > 0 while a slow build runs nested scheduler steps;
	// quiescing once work and faults stop.
	depth     int
	quiescing bool
}

// newBase is the state both modes start from.
func newBase(cfg Config, rng *rand.Rand, clk *clock.Manual) base {
	b := base{cfg: cfg, rng: rng, clk: clk, tr: newTrace(cfg.Trace),
		attempts: make(map[*shard.Request]*attempt), msgs: make(map[uint64]*msgInfo),
		oracle: make(map[incKey]*incLog)}
	for i := range cfg.Clients {
		b.clients = append(b.clients, &client{id: i})
	}
	return b
}

// result describes the run so far (a cluster adds its network's and
// members' counts: sim.clusterCounts).
func (b *sim) result() Result {
	return Result{
		Seed:        b.cfg.Seed,
		Nodes:       max(1, b.cfg.Nodes),
		Shards:      b.cfg.Shards,
		TraceHash:   b.tr.sum(),
		Events:      b.tr.n,
		VirtualTime: b.clk.Now().Sub(epoch0),
		Faults:      b.faults,
		Ops:         b.ops,
	}
}

// checkGroups checks one node's committed consumer groups (invariant 6).
func (b *sim) checkGroups(node string, meta *metadata.Store) {
	if b.viol != nil || meta == nil {
		return
	}
	if b.grp == nil {
		b.grp = newGroupCheck()
	}
	if err := b.grp.observe(node, meta); err != nil {
		b.fail(6, "%v", err)
	}
}

// fail records the first violation; later ones are ignored.
func (b *sim) fail(inv int, format string, args ...any) {
	if b.viol != nil {
		return
	}
	detail := fmt.Sprintf(format, args...)
	b.event("VIOLATION invariant=%d %s", inv, detail)
	b.viol = &Violation{Seed: b.cfg.Seed, Cluster: b.cfg.cluster(), Invariant: inv, Detail: detail, Event: b.tr.n,
		Tail: b.tr.tail(), Replay: replayCommand(b.cfg)}
}

// guard runs f, turning a panic — the engine's or raft's, all on this
// goroutine — into a violation that carries the seed and the replay
// command, rather than a crashed test binary.
func (b *sim) guard(f func()) {
	defer func() {
		if r := recover(); r != nil {
			if b.viol != nil {
				b.event("panic after the violation: %v", r)
				return
			}
			stack := debug.Stack()
			b.fail(0, "panic: %v\n%s", r, stack)
			switch msg := fmt.Sprint(r); {
			case strings.Contains(msg, "state.commit") && strings.Contains(msg, "out of range") &&
				bytes.Contains(stack, []byte("replica.New(")):
			}
		}
	}()
	f()
}

// roll reports true with probability p.
func (b *sim) roll(p float64) bool {
	return p > 0 && b.rng.Float64() < p
}

// advanceClocks moves the virtual clock by d, and every node's clock
// with it.
func (b *sim) advanceClocks(d time.Duration) {
	b.clk.Advance(d)
	for _, n := range b.nodes {
		n.clk.advance(d)
	}
}

// now is the virtual time since the start, for trace lines.
func (b *sim) now() time.Duration { return b.clk.Now().Sub(epoch0) }

// slowBuild rolls the slow-build fault for a partition build about to
// start, and returns how many scheduler steps the build takes (0: none).
// The pass that called Build is blocked while the node (the cluster)
// goes on: the steps run nested inside Build, with that reconciler
// marked busy (reconcile does it). Not while nested already, nor at
// quiescence.
func (b *sim) slowBuild() int {
	if b.depth > 0 || b.quiescing || !b.roll(b.cfg.Faults.SlowBuild) {
		return 0
	}
	b.faults.SlowBuild++
	return 5 + b.rng.IntN(36)
}

// nested runs k scheduler steps inside the current one, stopping at a
// violation.
func (b *sim) nested(k int, tick func()) {
	b.depth++
	for range k {
		if b.viol != nil {
			break
		}
		tick()
	}
	b.depth--
}
