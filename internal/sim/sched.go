package sim

import "time"

// The scheduler step, one for every run: faults start and end, then one
// action — a client acts, the clock moves, or one piece of engine work
// that is ready runs on one node — and the action's end (answers
// collected, messages sent, the per-action checks). What a node's engine
// kind changes about each is decided in the harness's method for it
// (harness.go).

// unit is one piece of engine work the scheduler may pick.
type unit struct {
	kind uint8
	n    *node
	i    int
}

const (
	unitDeliver uint8 = iota
	unitStep
	unitMetaTick
	unitPass
)

// tick is one scheduler step. The clock moves mostly when nothing is
// ready (a node's CPU is fast next to a raft tick or a reconcile period),
// and now and then regardless (a slow moment).
func (s *sim) tick() {
	if s.viol != nil {
		return
	}
	if s.stepFaults() {
		return
	}
	units := s.units()
	switch w := s.rng.IntN(100); {
	case w < 20:
		s.clientAct(s.clients[s.rng.IntN(len(s.clients))])
	case s.cfg.GroupMembers > 0 && w >= 90:
		// Group members act more often than the other clients: they
		// heartbeat on the clock (no case when there are none, so runs
		// without members draw as they did).
		s.membersAct()
	case len(units) == 0 || w < 22:
		// Up to the next due timer, at most a few milliseconds (network
		// delays are due at times the bus keeps to itself).
		d := time.Duration(1+s.rng.IntN(5000)) * time.Microsecond
		if next, ok := s.nextDue(); ok && next < d {
			d = max(next, time.Microsecond)
		}
		s.advance(d)
	default:
		s.runUnit(units[s.rng.IntN(len(units))])
	}
	s.afterAction()
}

// units lists the work that is ready, node by node: bus messages to
// receive, shards with queued frames or a due timer, a due metadata
// tick, due reconciler passes (each by its node's clock). A stopped or
// crashed node does nothing; a single node has no bus and no metadata
// group.
func (b *sim) units() []unit {
	var out []unit
	for _, n := range b.nodes {
		if n.stopped || n.down {
			continue
		}
		now := n.clk.monoNow()
		if n.replicated() && len(n.ep.Recv()) > 0 {
			out = append(out, unit{kind: unitDeliver, n: n})
		}
		for i := range n.shards {
			if len(n.shadow[i]) > 0 || n.clocks[i].due() {
				out = append(out, unit{kind: unitStep, n: n, i: i})
			}
		}
		if n.replicated() && !now.Before(n.metaTickAt) {
			out = append(out, unit{kind: unitMetaTick, n: n})
		}
		for i := range n.shards {
			if !n.busy[i] && (len(n.wakes[i]) > 0 || !now.Before(n.nextPass[i])) {
				out = append(out, unit{kind: unitPass, n: n, i: i})
			}
		}
	}
	return out
}

// runUnit runs u.
func (s *sim) runUnit(u unit) {
	switch u.kind {
	case unitDeliver:
		u.n.b.deliver(u.n, 1+s.rng.IntN(8))
	case unitStep:
		u.n.step(u.i)
	case unitMetaTick:
		u.n.b.metaTick(u.n)
	case unitPass:
		if u.n.passDue(u.i, u.n.clk.monoNow()) {
			s.reconcile(u.n, u.i)
		}
	}
}

// nextDue is how long until the earliest timer the scheduler knows of is
// due: a shard's, a metadata tick, a reconciler period (each on its
// node's clock), a restart, a resume, a client's retry.
func (b *sim) nextDue() (time.Duration, bool) {
	now := b.clk.Now()
	var next time.Duration
	found := false
	consider := func(d time.Duration) {
		if d > 0 && (!found || d < next) {
			next, found = d, true
		}
	}
	for _, n := range b.nodes {
		if n.down {
			consider(n.restartAt.Sub(now))
			continue
		}
		if n.stopped {
			consider(n.stopUntil.Sub(now))
			continue
		}
		node := func(t time.Time) {
			if !t.IsZero() {
				consider(n.clk.virtualUntil(t))
			}
		}
		node(n.metaTickAt)
		for i := range n.shards {
			node(n.clocks[i].next())
			node(n.nextPass[i])
		}
	}
	for _, cl := range b.clients {
		if o := cl.op; o != nil && o.waiting {
			consider(o.retryAt.Sub(now))
		}
	}
	return next, found
}
