package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
func (b *sim) settleLoop(round func() (calm bool, need int), notQuiescent func(), wait func(calm int)) bool {
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
func (s *sim) quiesce() {
	s.quiescing = true
	s.faultsOff()
	s.event("quiesce")
	for restarts := 0; s.viol == nil; restarts++ {
		if !s.settle() {
			return
		}
		settledChecks(s)
		fenced := s.finalReads()
		if !fenced || s.viol != nil {
			return
		}
		if restarts == 3 {
			s.fail(4, "partitions still fenced after %d restarts", restarts)
			return
		}
		s.restartFenced()
	}
}

// nodesIdle reports whether every node is idle (node.idle).
func (b *sim) nodesIdle() bool {
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
func (b *sim) parked(ctx context.Context, also func(n *node, pn shard.ParkedNamespace)) (lines []string, ok bool) {
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

// finalReads reads every committed partition from offset 0 through
// every node, through its router like a client, and checks each copy is
// the whole log the oracle holds: exactly what was appended to its
// incarnation and survived, every acknowledged message at its offset,
// offsets dense, the same on every replica (invariant 3); then each
// consumer's offset (finalOffsets). A replica answers from its own copy;
// a cluster node holding none sends the read on to a replica. A single
// node's partition a lie touched is read offset by offset instead
// (finalReadDamaged).
//
// It reports true, having read nothing to the end, when a single node's
// read meets a partition fenced after a failed fsync (quiesce restarts
// the node then).
func (s *sim) finalReads() bool {
	for _, p := range s.nodes[0].meta.Snapshot().Partitions {
		if s.viol != nil {
			return false
		}
		key := incKey{p.NS, p.CreatedRevision}
		if fenced, done := s.finalReadDamaged(key); done {
			if fenced {
				return true
			}
			continue
		}
		for _, n := range s.nodes {
			if s.viol != nil {
				return false
			}
			o := s.finalRead(n, p.NS, 0)
			read, fenced, stop := s.finalAnswer(n, o, key, "final read", "committed partition")
			switch {
			case stop:
				return false
			case fenced:
				return true
			case !read:
				continue
			}
			rl := s.oracle[key]
			if rl == nil {
				s.fail(4, "committed partition %v was never built", key)
				return false
			}
			got := make([]uint64, 0, len(o.resp.Messages))
			for _, m := range o.resp.Messages {
				id, _ := decodePayload(m.Payload)
				got = append(got, id)
			}
			if !slices.Equal(got, rl.ids) || o.resp.Offset != uint64(len(rl.ids)) {
				s.fail(3, "final read of %v on %s returned %d messages (next %d), the log holds %d",
					key, n.name(), len(got), o.resp.Offset, len(rl.ids))
				return false
			}
		}
		rl := s.oracle[key]
		acked := 0
		for _, a := range rl.acked {
			if a {
				acked++
			}
		}
		s.event("final %v messages=%d acked=%d replicas=%v", key, len(rl.ids), acked, p.Replicas)
		if s.finalOffsets(key) {
			return true
		}
	}
	return false
}

// fencedAt reports whether o, a final operation on n, met key fenced
// after a failed fsync on a single node, which only a restart of the
// node clears (a cluster's replica rebuilds from its group).
func (b *sim) fencedAt(n *node, o *op, key incKey) bool {
	if n.replicated() || !errors.Is(o.err, shard.ErrPartitionFailed) {
		return false
	}
	b.event("final read of %v: fenced after a failed fsync", key)
	return true
}

// finalAnswer waits for o, a final read (named what) of key through n, and
// sorts its answer: read, for the caller to check what it holds; fenced,
// a single node's partition fenced after a failed fsync (quiesce restarts
// the node); neither, damage a lie explains (counted as detected); or
// stop, the run ended or o failed otherwise (a violation of invariant 4,
// naming the thing read as subject).
func (s *sim) finalAnswer(n *node, o *op, key incKey, what, subject string) (read, fenced, stop bool) {
	if !s.awaitFinal(o, s.settleRound, s.advanceSettling, fmt.Sprintf("%s of %v on %s", what, key, n.name())) {
		return false, false, true
	}
	if s.fencedAt(n, o, key) {
		return false, true, false
	}
	if o.outcome == outcomeOK {
		return true, false, false
	}
	if s.damageReported(n, o, key) {
		return false, false, false
	}
	s.fail(4, "%s %v not readable on %s at quiescence: %v", subject, key, n.name(), o.err)
	return false, false, true
}

// finalOffsets reads each consumer's offset of key through every node,
// from its own copy where it holds one: consumer offsets are replicated
// writes, so every replica must hold the same (invariant 3), and a
// single node's must be readable. It reports true when a single node's
// read met key fenced (finalReads).
func (s *sim) finalOffsets(key incKey) bool {
	for _, consumer := range [...]string{"c0", "c1"} {
		var first *op
		for _, n := range s.nodes {
			if s.viol != nil {
				return false
			}
			s.nextOp++
			o := &op{id: s.nextOp, kind: kindGet, ns: key.ns, consumer: consumer, home: n, local: n.replicated()}
			s.allOps = append(s.allOps, o)
			s.finalOps = append(s.finalOps, o)
			o.callEv = s.event("call op=%d final offset %s ns=%v consumer=%s", o.id, n.name(), key.ns, consumer)
			s.startCall(o, s.newAttempt(o), n)
			s.afterAction()
			read, fenced, stop := s.finalAnswer(n, o, key, "final offset read", "consumer offset of")
			switch {
			case stop:
				return false
			case fenced:
				return true
			case !read:
				continue
			}
			if first == nil {
				first = o
				continue
			}
			if o.resp.Found != first.resp.Found || o.resp.Offset != first.resp.Offset {
				s.fail(3, "replicas disagree on consumer %s of %v: %s holds %d (found %v), %s holds %d (found %v)",
					consumer, key, first.home.name(), first.resp.Offset, first.resp.Found, n.name(), o.resp.Offset, o.resp.Found)
				return false
			}
		}
	}
	return false
}

// finalRead issues a read of ns from from through n (no client: it is
// not part of the workload).
func (s *sim) finalRead(n *node, ns metadata.Namespace, from uint64) *op {
	s.nextOp++
	o := &op{id: s.nextOp, kind: kindPoll, ns: ns, count: 1 << 20, from: from, home: n, local: n.replicated()}
	s.allOps = append(s.allOps, o)
	s.finalOps = append(s.finalOps, o)
	if from > 0 {
		o.callEv = s.event("call op=%d final read %s ns=%v from=%d", o.id, n.name(), ns, from)
	} else {
		o.callEv = s.event("call op=%d final read %s ns=%v", o.id, n.name(), ns)
	}
	s.startCall(o, s.newAttempt(o), n)
	s.afterAction()
	return o
}

// awaitFinal runs quiescence rounds (round, then wait to move the clock
// on) until the final operation o is answered. It reports false on a
// violation: one found meanwhile, or o still unanswered after
// quiesceLimit (invariant 4, naming o by what).
func (b *sim) awaitFinal(o *op, round, wait func(), what string) bool {
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
	// fences its partition, whose rebuild may back off: found by seed
	// 8597, pinned by TestFailedMisdirectWriteExplainsBuildFailedDrops).
	metrics.ReasonBuildFailed: func(s *sim) bool {
		return s.faults.DiskFull+s.faults.DiskError+s.faults.Detected+s.faults.LieWriteErrors > 0
	},
	// A crashed node's shards shut down.
	metrics.ReasonShutdown:     func(s *sim) bool { return s.faults.Crash+s.restarts > 0 },
	metrics.ReasonDisconnected: func(s *sim) bool { return s.faults.Crash+s.restarts > 0 },
	// (A process crash closes nothing: its shards are abandoned.)
}
