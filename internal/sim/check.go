package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/shard"
)

// timeline records, per namespace, when each incarnation was committed:
// the trace events of its creation and deletion.
type timeline struct {
	m map[metadata.Namespace][]span
}

type span struct {
	epoch    uint64
	from, to int64 // to < 0: still committed
}

func newTimeline() *timeline { return &timeline{m: make(map[metadata.Namespace][]span)} }

func (t *timeline) apply(res metadata.Result, ev int64) {
	for _, p := range res.Removed {
		spans := t.m[p.NS]
		for i := range spans {
			if spans[i].epoch == p.CreatedRevision && spans[i].to < 0 {
				spans[i].to = ev
			}
		}
	}
	for _, p := range res.Created {
		t.m[p.NS] = append(t.m[p.NS], span{epoch: p.CreatedRevision, from: ev, to: -1})
	}
}

// gone lists, in order, the namespaces that had an incarnation and are not
// committed now.
func (t *timeline) gone(meta *metadata.Store) []metadata.Namespace {
	var out []metadata.Namespace
	for ns := range t.m {
		if _, ok := meta.Partition(ns); !ok {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// during returns the incarnations of ns committed at some point of the
// closed event interval [from, to].
func (t *timeline) during(ns metadata.Namespace, from, to int64) []uint64 {
	var out []uint64
	for _, sp := range t.m[ns] {
		if sp.from <= to && (sp.to < 0 || sp.to >= from) {
			out = append(out, sp.epoch)
		}
	}
	return out
}

// Quiescence bounds: the run must settle within quiesceLimit of virtual
// time once work and faults stop (the longest wait is a build backoff,
// then a client retry deadline), and stay settled for calmRounds passes.
const (
	quiesceLimit = 2 * time.Minute
	calmRounds   = shard.DefaultMaxPasses + 2
)

// settleLoop is quiescence's loop in both kinds: round runs one round and
// reports whether the run is calm and for how many rounds in a row it
// must be; past quiesceLimit of virtual time notQuiescent reports what
// kept it busy; otherwise wait moves the clock on, told the calm rounds
// so far. It reports whether the run settled.
func (b *base) settleLoop(round func() (calm bool, need int), notQuiescent func(), wait func(calm int)) bool {
	deadline := b.clk.Now().Add(quiesceLimit)
	calm := 0
	for b.viol == nil {
		if ok, need := round(); ok {
			if calm++; calm >= need {
				return true
			}
		} else {
			calm = 0
		}
		if !b.clk.Now().Before(deadline) {
			notQuiescent()
			return false
		}
		wait(calm)
	}
	return false
}

// quiesce stops new work and every fault, then settles the run (the
// harness's rounds, until nothing is in flight, nothing is parked and no
// client waits — or quiesceLimit passes, which violates invariant 1 or
// 4), checks the settled run and reads every partition back.
//
// A partition fenced after a failed fsync (shard.ErrPartitionFailed) is
// unreadable until its node restarts, by design; when a single node's
// final read meets one, the simulator does what an operator would —
// restarts the node process (the page cache survives, unlike in a
// crash) — and settles and reads again.
func (b *base) quiesce(h harness) {
	k := b.kind
	b.quiescing = true
	k.faultsOff()
	b.event("quiesce")
	for restarts := 0; b.viol == nil; restarts++ {
		if !k.settle() {
			return
		}
		settledChecks(h)
		fenced := k.finalReads()
		if !fenced || b.viol != nil {
			return
		}
		if restarts == 3 {
			b.fail(4, "partitions still fenced after %d restarts", restarts)
			return
		}
		k.restartFenced()
	}
}

// settle runs rounds until the node is idle for calmRounds rounds in a
// row, or reports what kept it busy past quiesceLimit.
func (s *sim) settle() bool {
	return s.settleLoop(func() (bool, int) {
		s.settleRound()
		return s.idle(), calmRounds
	}, s.notQuiescent, func(int) { s.advanceQuiet() })
}

// restartFenced stops the node process and starts it again on the same
// disk: unlike a crash, nothing written is lost.
func (s *sim) restartFenced() {
	s.restarts++
	old := s.nodes[0]
	old.inj.dead = true
	s.event("RESTART gen=%d inflight=%d", old.gen, len(s.inflight))
	s.abandon(old)
	old.close()
	s.nodes[0] = s.openNode(old)
}

// settleRound steps every shard until idle, retries what is due, and runs
// one pass of every reconciler.
func (s *sim) settleRound() {
	s.stepAll()
	s.retryDue(s.retry, nil)
	s.stepAll()
	for i := range s.nodes[0].shards {
		s.reconcile(i)
	}
	s.stepAll()
}

// advanceQuiet advances the clock to the next due retry, or by one pass
// period.
func (s *sim) advanceQuiet() {
	now := s.clk.Now()
	next := now.Add(passPeriod)
	for _, o := range s.waitingOps() {
		if o.retryAt.Before(next) {
			next = o.retryAt
		}
	}
	s.advance(max(next.Sub(now), time.Microsecond))
}

// idle: no request in flight or waiting to be retried, no frame queued or
// parked anywhere.
func (s *sim) idle() bool {
	return len(s.inflight) == 0 && len(s.waitingOps()) == 0 && s.nodesIdle()
}

// nodesIdle reports whether every node is idle (node.idle).
func (b *base) nodesIdle() bool {
	for _, n := range b.nodes {
		if !n.idle() {
			return false
		}
	}
	return true
}

// idle reports whether nothing waits in n: no message on its bus, no
// frame queued or parked in any of its shards.
func (n *node) idle() bool {
	if n.ep != nil && len(n.ep.Recv()) > 0 {
		return false
	}
	for i, sh := range n.shards {
		if len(n.shadow[i]) > 0 || sh.Parked() > 0 {
			return false
		}
	}
	return true
}

// parked lists the frames parked in every node's shards, one line per
// namespace, telling each to also (when set); ok is false when a shard
// could not be inspected (a violation).
func (b *base) parked(ctx context.Context, also func(n *node, pn shard.ParkedNamespace)) (lines []string, ok bool) {
	for _, n := range b.nodes {
		for i, sh := range n.shards {
			if sh.Parked() == 0 {
				continue
			}
			st, err := sh.Inspect(ctx)
			if err != nil {
				b.fail(0, "inspect %sshard %d: %v", n.tag(), i, err)
				return nil, false
			}
			for _, pn := range st.Parked {
				lines = append(lines, fmt.Sprintf("%sshard %d: %d frames for %v (survived %d passes)", n.tag(), i, pn.Frames, pn.NS, pn.OldestPasses))
				if also != nil {
					also(n, pn)
				}
			}
		}
	}
	return lines, true
}

// notQuiescent reports what kept the run from settling.
func (s *sim) notQuiescent() {
	parked, ok := s.parked(s.ctx, nil)
	if !ok {
		return
	}
	var unanswered []string
	for _, a := range s.inflight {
		unanswered = append(unanswered, fmt.Sprintf("attempt %d (op %d %v %v, sent at event %d)", a.id, a.op.id, a.op.kind, a.op.ns, a.sendEv))
	}
	limit := fmt.Sprintf("%v after work stopped", quiesceLimit)
	switch {
	case len(parked) > 0:
		s.fail(4, "park buffers not empty %s: %s; %d requests unanswered", limit, strings.Join(parked, "; "), len(unanswered))
	case len(unanswered) > 0:
		s.fail(1, "requests never answered (%s): %s", limit, strings.Join(unanswered, "; "))
	default:
		s.fail(4, "the node did not quiesce %s: %d operations still retrying", limit, len(s.waitingOps()))
	}
}

// finalReads reads every committed partition from offset 0 through the
// router, like a client, and checks it against the oracle: it holds
// exactly what was appended to its incarnation and survived, so every
// acknowledged message at its offset, with dense offsets (invariant 3).
//
// It reports true, having read nothing to the end, when a read meets a
// partition fenced after a failed fsync.
func (s *sim) finalReads() bool {
	snap := s.nodes[0].meta.Snapshot()
	for _, p := range snap.Partitions {
		if s.viol != nil {
			return false
		}
		if key := (incKey{p.NS, p.CreatedRevision}); s.lies.damageOK(key) {
			if s.finalReadDamaged(key) {
				return true
			}
			continue
		}
		o := s.dataOpFinal(p.NS, 0)
		if !s.awaitFinal(o, s.settleRound, s.advanceQuiet, fmt.Sprintf("final read of %v", o.ns)) {
			return false
		}
		key := incKey{p.NS, p.CreatedRevision}
		if errors.Is(o.err, shard.ErrPartitionFailed) {
			s.event("final read of %v: fenced after a failed fsync", key)
			return true
		}
		if o.outcome != outcomeOK {
			s.fail(4, "committed partition %v not readable at quiescence: %v", key, o.err)
			return false
		}
		log := s.oracle[key]
		if log == nil {
			s.fail(4, "committed partition %v was never built", key)
			return false
		}
		got := make([]uint64, 0, len(o.resp.Messages))
		for _, m := range o.resp.Messages {
			id, _ := decodePayload(m.Payload)
			got = append(got, id)
		}
		if !slices.Equal(got, log.ids) {
			s.fail(3, "final read of %v returned %d messages, the incarnation holds %d", key, len(got), len(log.ids))
			return false
		}
		if o.resp.Offset != uint64(len(log.ids)) {
			s.fail(3, "final read of %v: next offset %d, want %d", key, o.resp.Offset, len(log.ids))
			return false
		}
		acked := 0
		for _, a := range log.acked {
			if a {
				acked++
			}
		}
		s.event("final %v messages=%d acked=%d", key, len(got), acked)
	}
	return false
}

// dataOpFinal issues a final read of ns (no client: it is not part of the
// workload).
func (s *sim) dataOpFinal(ns metadata.Namespace, from uint64) *op {
	s.nextOp++
	o := &op{id: s.nextOp, kind: kindPoll, ns: ns, count: 1 << 20, from: from}
	s.allOps = append(s.allOps, o)
	s.finalOps = append(s.finalOps, o)
	a := s.newAttempt(o)
	o.callEv = s.event("call op=%d final read ns=%v from=%d", o.id, ns, from)
	s.startCall(o, a, s.nodes[0])
	return o
}

// awaitFinal runs quiescence rounds (round, then wait to move the clock
// on) until the final operation o is answered. It reports false on a
// violation: one found meanwhile, or o still unanswered after
// quiesceLimit (invariant 4, naming o by what).
func (b *base) awaitFinal(o *op, round, wait func(), what string) bool {
	deadline := b.clk.Now().Add(quiesceLimit)
	for !o.done && b.viol == nil {
		round()
		if o.done {
			break
		}
		if !b.clk.Now().Before(deadline) {
			b.fail(4, "%s never answered", what)
			return false
		}
		wait()
	}
	return b.viol == nil
}

// dropGates says which injected fault explains a drop reason; a reason
// missing from it is never acceptable.
var dropGates = map[string]func(s *sim) bool{
	// Convergence, not faults: frames parked for a namespace that was
	// deleted, that age out, or that another shard owns.
	metrics.ReasonParkExpired: func(*sim) bool { return true },
	metrics.ReasonNotOwner:    func(*sim) bool { return true },
	metrics.ReasonRemoved:     func(*sim) bool { return true },
	// Small inboxes under bursts.
	metrics.ReasonFull:         func(s *sim) bool { return s.faults.InboxFull > 0 },
	metrics.ReasonParkOverflow: func(s *sim) bool { return s.bursts > 0 },
	// Disk faults back builds off, and so does damage a lie left (a
	// build that fails with it is counted as detected), and a
	// misdirected write answered as a failed one (a commit it failed
	// fences its partition, whose rebuild may back off: seed 8597).
	metrics.ReasonBuildFailed: func(s *sim) bool {
		return s.faults.DiskFull+s.faults.DiskError+s.faults.Detected+s.faults.LieWriteErrors > 0
	},
	// A crashed node's shards shut down.
	metrics.ReasonShutdown:     func(s *sim) bool { return s.faults.Crash+s.restarts > 0 },
	metrics.ReasonDisconnected: func(s *sim) bool { return s.faults.Crash+s.restarts > 0 },
	// (A process crash closes nothing: its shards are abandoned.)
}

// history places every operation in its incarnation's history
// (invariant 5): a produce where the storage tap saw it land, the rest
// in the incarnation that served it.
func (s *sim) history() histories {
	hist := make(histories)
	for _, o := range s.allOps {
		key, in, out, ok := s.linearizeOp(o)
		if s.viol != nil {
			return nil
		}
		if ok {
			hist.add(o, key, in, out)
		}
	}
	return hist
}

// unlinearized leaves out the incarnations a lie damaged.
func (s *sim) unlinearized(k incKey) bool { return s.lies.damageOK(k) }

// dropOK is dropGates' verdict on a drop reason.
func (s *sim) dropOK(_, reason string) bool {
	gate, ok := dropGates[reason]
	return ok && gate(s)
}

// dropCounters lists the metrics of every incarnation of the node.
func (s *sim) dropCounters() []dropCounter {
	out := make([]dropCounter, 0, len(s.allMetrics))
	for gen, m := range s.allMetrics {
		out = append(out, dropCounter{m: m, who: fmt.Sprintf("node gen %d ", gen+1), label: fmt.Sprintf("gen=%d ", gen+1)})
	}
	return out
}

// linearizeOp places o in a partition history, or reports false to leave
// it out: a produce where the storage tap saw a try of it land (one try
// at most: a single node takes no (producer, sequence) pair), the rest in
// the incarnation that served the final try.
func (s *sim) linearizeOp(o *op) (incKey, linIn, linOut, bool) {
	if o.kind != kindProduce && o.kind != kindBatch {
		in, out, ok := linearizeRead(o)
		if !ok {
			return incKey{}, in, out, false
		}
		// The incarnation that served the final attempt (the tap saw
		// it), which was committed at that moment (the tap checked the
		// fence), so at some point while the operation ran. In flight at
		// a crash, no shard served it (answers are collected after every
		// engine action, crashes fall between them): it had no effect.
		key, ok := s.placeServed(o, s.nodes[0].incs, "", out)
		return key, in, out, ok
	}
	in := linIn{kind: o.kind}
	var out linOut
	var applied *attempt
	for _, a := range o.attempts {
		if len(a.ids) > 0 && s.msgs[a.ids[0]].appended {
			if applied != nil {
				s.fail(5, "op %d applied twice: attempts %d and %d", o.id, applied.id, a.id)
				return incKey{}, in, out, false
			}
			applied = a
		}
	}
	switch o.outcome {
	case outcomeOK:
		out.offset = o.resp.Offset
	case outcomeUnknown:
		out.unknown = true
	default:
		if applied != nil {
			s.fail(5, "op %d ended %v (%v), yet attempt %d was appended", o.id, o.outcome, o.err, applied.id)
		}
		return incKey{}, in, out, false
	}
	if applied == nil {
		return incKey{}, in, out, false // unknown and never appended
	}
	in.ids = applied.ids
	return s.msgs[applied.ids[0]].key, in, out, true
}
