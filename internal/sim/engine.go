package sim

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// Where the node keeps its data on the simulated disk.
const (
	dataDir = "/data"
	metaDir = "/data/metadata"
)

// Engine parameters of the simulated node. The build backoff is clamped
// at 8 s instead of the default 60 s so that quiescence, which must wait
// out the longest backoff, stays short in virtual time.
const (
	passPeriod     = reconciler.DefaultPeriod
	backoffMin     = time.Second
	backoffMax     = 8 * time.Second
	requestTimeout = 10 * time.Second
	retryMin       = 100 * time.Microsecond
	retryMax       = 50 * time.Millisecond
	snapshotEvery  = 16
)

// parkMaxAge is the shards' park age bound by their own clock for a seed:
// the engine's default (MaxPasses reconcile periods) on odd seeds, and far
// beyond any run on even ones, so that reconcile passes alone age parked
// frames there and a bug in pass-based aging (behaviour 12's fast-skip
// rule) cannot hide behind the shard's own expiry.
func parkMaxAge(seed uint64) time.Duration {
	if seed%2 == 0 {
		return 24 * time.Hour
	}
	return 0
}

// stepAll steps every shard until all are idle: queued frames, and due
// timers of the shards' own (waiting-poll deadlines, park expiry).
func (s *sim) stepAll() {
	for s.viol == nil {
		did := false
		for i := range s.nodes[0].shards {
			if len(s.nodes[0].shadow[i]) > 0 {
				if s.nodes[0].step(i) {
					s.collect()
				}
				did = true
			} else if s.nodes[0].shards[i].Step() {
				s.event("step shard=%d tick", i)
				s.collect()
				did = true
			}
		}
		if !did {
			return
		}
	}
}

// crashWith crashes the node — a power loss if power is set, else a
// process crash — and runs down, if set, while it is down.
func (s *sim) crashWith(power bool, down func()) {
	old := s.nodes[0]
	old.inj.dead = true
	s.event("CRASH (%s) gen=%d inflight=%d", s.countCrash(power), old.gen, len(s.inflight))
	s.abandon(old)
	var l *lies
	if s.cfg.Faults.Lie > 0 {
		l = s.lies
	}
	old.crashDisk(power, l)
	if down != nil {
		down()
	}
	s.oldMetrics = append(s.oldMetrics, old.m)
	s.nodes[0] = s.openNode(old.id, nil, old.mem, old)
}

// powerLoss draws how a node crashes: by a power loss two times in
// three, else by a process crash.
func (b *sim) powerLoss() bool { return b.rng.IntN(3) != 0 }

// abandon answers every request in flight on n, whose process is going
// away (answerCrashed). A forwarded request's answer is another node's
// to give: one forwarded by n ends with n's call; one forwarded to n
// stays in flight, and its forwarding node finds out by itself (no
// answer, probes unanswered or answered "not held", news of n's death).
func (b *sim) abandon(n *node) {
	kept := b.inflight[:0]
	for _, a := range b.inflight {
		switch {
		case a.fwd != nil && a.via.id == n.id:
			a.fwd.Abandon() // the forwarding node is gone, and the call with it
		case a.fwd != nil || a.node != n:
			kept = append(kept, a)
			continue
		}
		b.answerCrashed(a)
	}
	b.inflight = kept
}

// countCrash counts a node's crash, a power loss if power is set, else a
// process crash, and names it.
func (b *sim) countCrash(power bool) string {
	if power {
		b.faults.Crash++
		return "power loss"
	}
	b.faults.ProcessCrash++
	return "process crash"
}

// answerCrashed answers a, in flight on a node whose process ended: its
// client sees the connection drop. A write may or may not have been
// applied; a read did nothing.
func (b *sim) answerCrashed(a *attempt) {
	a.crashed = true
	a.ansEv = b.event("answer a=%d crashed", a.id)
	oc := outcomeError
	if k := a.op.kind; k == kindProduce || k == kindBatch || k == kindStore {
		oc = outcomeUnknown
	}
	b.finish(a.op, oc, shard.Response{}, errCrashed)
}

var errCrashed = errors.New("sim: node crashed with the request in flight")

// injector decides a data disk's faults. Only the simulator's goroutine
// touches it, so its decisions follow the seed.
type injector struct {
	// n is the node whose disk it is, which counts and records the
	// faults it fires.
	n *node
	// dead: the node crashed; its disk is gone and fails nothing.
	dead bool
	// quiet > 0 while the simulator does its own I/O (opening a node,
	// verifying a reopened partition).
	quiet int
	// enospc fails space-consuming operations while on (disk full).
	enospc *errorfs.Switch
	// eio, when armed, fails one of the next operations of its kind whose
	// path starts with eioPrefix ("" matches every path).
	eio       *errorfs.Index
	eioKind   string
	eioPrefix string
	// spare, when set, is a path prefix no fault touches.
	spare string
	// lies, when set, are the disk's lies (single-node mode); lied is
	// told of each one that fires.
	lies *lies
	lied func(kind int, op errorfs.Op)
}

func newInjector(n *node) *injector {
	return &injector{n: n, enospc: errorfs.NewSwitchFunc(syscall.ENOSPC, needsSpace)}
}

// needsSpace selects the operations a full disk fails: writes, file and
// directory creation, preallocation.
func needsSpace(op errorfs.Op) bool {
	switch op.Kind {
	case errorfs.OpWrite, errorfs.OpWriteAt, errorfs.OpPreallocate, errorfs.OpMkdirAll:
		return true
	case errorfs.OpOpen:
		return op.Flag&os.O_CREATE != 0
	}
	return false
}

// MaybeError implements errorfs.Injector.
func (j *injector) MaybeError(op errorfs.Op) error {
	if j.dead || j.quiet > 0 || (j.spare != "" && strings.HasPrefix(op.Path, j.spare)) {
		return nil
	}
	if err := j.enospc.MaybeError(op); err != nil {
		j.n.diskFault(true, "", op)
		return err
	}
	if j.eio != nil && strings.HasPrefix(op.Path, j.eioPrefix) {
		if err := j.eio.MaybeError(op); err != nil {
			j.eio = nil
			j.n.diskFault(false, j.eioKind, op)
			return err
		}
	}
	if j.lies != nil {
		return j.lies.maybeLie(op, j.lied)
	}
	return nil
}

func (s *sim) startDiskFull() {
	s.nodes[0].fillDisk(time.Duration(50+s.rng.IntN(1950)) * time.Millisecond)
}

// readAll reads p from offset 0 to its end without faults (the
// simulator's own verification).
func (s *sim) readAll(n *node, p partition.Partition) ([]partition.Message, error) {
	n.inj.quiet++
	defer func() { n.inj.quiet-- }()
	var out []partition.Message
	for from := p.StartOffset(); from < p.NextOffset(); {
		msgs, err := p.Read(from, 1024)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			break
		}
		out = append(out, msgs...)
		from = msgs[len(msgs)-1].Offset + 1
	}
	return out, nil
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
