package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/parkway-io/parkway/internal/testhooks"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
)

// A control operation runs on the pump, ahead of inbox frames. The
// reconciler issues them through the exported methods below, which wait
// for the pump to apply them.
//
// Each operation is built by an op* constructor and applied by the pump;
// tests apply the same values directly to an unstarted shard, stepping it
// like a state machine without a goroutine.
type control struct {
	fn      func(s *Shard) error
	done    chan error
	abandon func() // releases what fn would have taken over (may be nil)
}

func newControl(fn func(s *Shard) error, abandon func()) control {
	return control{fn: fn, done: make(chan error, 1), abandon: abandon}
}

// apply runs the operation. The open commit group is closed first: an
// operation may close or replace a partition that pending acks wait on.
func (c control) apply(s *Shard) {
	s.commit.flushGroup()
	c.done <- c.fn(s)
}

func (c control) abandonIt() {
	if c.abandon != nil {
		c.abandon()
	}
}

// ErrAlreadyOwned reports an InsertOwned for a namespace the shard already
// holds; the reconciler must remove the old incarnation first.
var ErrAlreadyOwned = errors.New("parkway: namespace already owned by this shard")

// do enqueues c and waits for the pump to apply it. If ctx ends or the
// shard stops first, do returns an error while the operation may still be
// applied later (or abandoned at shutdown): callers must then not read
// anything the operation writes, since the pump may be writing it.
//
// On a Manual shard the caller is the pump: c is applied inline, at once,
// and its result returned.
func (s *Shard) do(ctx context.Context, c control) error {
	if s.cfg.Manual {
		return s.doManual(ctx, c)
	}
	if err := s.enqueue(ctx, c); err != nil {
		c.abandonIt()
		return err
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		// A result already sent wins over the deadline: the operation
		// landed, and a caller told otherwise would redo it.
		select {
		case err := <-c.done:
			return err
		default:
			return ctx.Err()
		}
	case <-s.group.Done():
		// The shard is stopping: the pump may still apply c, or shutdown
		// will abandon it. Either way the caller must not read results the
		// operation writes, so every caller discards them on error.
		select {
		case err := <-c.done:
			return err
		default:
			return ErrClosed
		}
	}
}

// doManual applies c inline on a Manual shard, exactly as the pump would
// (runControl), unless the shard is closed or ctx is done.
func (s *Shard) doManual(ctx context.Context, c control) error {
	if s.isClosed() {
		c.abandonIt()
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		c.abandonIt()
		return err
	}
	s.runControl(c)
	return <-c.done
}

// enqueue puts c on the control channel unless the shard is closed. It
// holds sendMu shared so Close cannot slip between the check and the send
// (the pump is still running while closed is false, so the send completes).
func (s *Shard) enqueue(ctx context.Context, c control) error {
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.handoffs.Add(1)
	select {
	case s.ctrl <- c:
		return nil
	case <-ctx.Done():
		s.handoffs.Add(^uint64(0))
		return ctx.Err()
	}
}

// InsertOwned hands a built partition to the shard (DESIGN behaviour 13).
// On the pump it becomes owned at p.Epoch(), the shard writes its routing
// row, and the namespace's parked frames are served at once in arrival
// order: those stamped with p.Epoch() or unstamped are delivered, those
// stamped with another epoch are rejected as stale. If the shard does not
// take p (closed, ErrAlreadyOwned), p is closed. Under FsyncAlways, p is
// synced before anything is served from it (a reopened log may hold
// writes that were never fsynced); if that fails, the partition is fenced
// like one whose group commit failed (ErrPartitionFailed).
func (s *Shard) InsertOwned(ctx context.Context, p partition.Partition, d Durability) error {
	return s.do(ctx, opInsertOwned(p, d))
}

func opInsertOwned(p partition.Partition, d Durability) control {
	return newControl(func(s *Shard) error {
		ns := p.Namespace()
		if o, ok := s.owned[ns]; ok && o.p == p {
			// A provisional partition whose incarnation committed (a
			// frame served after the commit may have confirmed it
			// already): it is the partition the reconciler hands over.
			if o.sync.provisional {
				s.confirm(o, d)
			}
			o.dur = d
			return nil
		}
		if _, ok := s.owned[ns]; ok {
			_ = p.Close()
			return fmt.Errorf("%w: %v", ErrAlreadyOwned, ns)
		}
		epoch := p.Epoch()
		o := &owned{p: p, dur: d}
		if d.always() {
			// A partition reopened after a process crash may hold writes
			// that reached the page cache but were never fsynced (and
			// were never acknowledged). Under FsyncAlways nothing
			// un-synced may be served: a power loss would erase it and
			// hand its offsets to other messages. Sync first (a fresh,
			// empty partition has nothing to sync); if that fails,
			// fence it.
			if p.NextOffset() > 0 {
				if err := p.Sync(); err != nil {
					s.fence(o, err)
					s.log.Error("fsync of a materialised partition failed; partition fenced until rebuilt", "ns", ns, "error", err)
				}
			}
		}
		if j := s.cfg.Journal; j != nil && (d.always() || d.Fsync == metadata.FsyncInterval) {
			// A partition built deferred (nothing of it on disk yet)
			// journals its records from its first: its first
			// acknowledgement costs a share of the group's journal
			// write (under FsyncInterval one without an fsync), and no
			// file of its own (DESIGN behaviour 32).
			o.sync.staged = j.Attach(p) && !d.always()
		}
		if s.cfg.Replication != nil {
			if err := s.rg.replicate(o); err != nil {
				_ = p.Close()
				// The partition's own failure (its raft log is damaged
				// or unreadable): the reconciler backs its build off,
				// and its requests are answered with the cause.
				return fmt.Errorf("%w: %v: %w", ErrPartitionFailed, ns, err)
			}
		}
		s.owned[ns] = o
		delete(s.tombstoned, ns)
		s.table.Set(ns, router.Row{Owner: s.id, Epoch: epoch})
		s.m.Materialised.Inc()
		s.giveCarriedBack(o, true)
		s.redispatch(ns, o)
		return nil
	}, func() { _ = p.Close() })
}

// redispatch serves ns's parked frames against p, oldest first, before the
// pump looks at the inbox again, so they stay ahead of newer frames for the
// same namespace (DESIGN behaviour 5).
func (s *Shard) redispatch(ns metadata.Namespace, o *owned) {
	q := s.park.take(ns)
	if q == nil {
		return
	}
	epoch := o.p.Epoch()
	// A deliberately broken build for the simulator's self-test (see
	// package testhooks); always false in production.
	serveStale := testhooks.ServeStaleParked.Load()
	for q.len() > 0 {
		pf := q.pop()
		if pf.stamp != 0 && pf.stamp != epoch && !serveStale {
			s.stale(pf.frame)
			continue
		}
		s.serveOwned(o, pf.frame)
	}
	s.gauges()
}

// Tombstone starts the removal of ns (DESIGN behaviour 14, phase one): the
// shard stops serving it, closes the partition and drops its routing row.
// Requests for ns are answered with a retriable error until RemoveOwned.
// It returns the epoch that was owned (0 if none).
func (s *Shard) Tombstone(ctx context.Context, ns metadata.Namespace) (uint64, error) {
	var epoch uint64
	if err := s.do(ctx, opTombstone(ns, &epoch)); err != nil {
		return 0, err
	}
	return epoch, nil
}

func opTombstone(ns metadata.Namespace, epoch *uint64) control {
	return newControl(func(s *Shard) error {
		o, ok := s.owned[ns]
		if !ok {
			if e, ok := s.tombstoned[ns]; ok {
				*epoch = e
			}
			return nil
		}
		*epoch = o.p.Epoch()
		if o.failed != nil {
			s.fenced.Add(-1)
		}
		if o.sync.provisional {
			// Its command did not commit as announced: what it holds
			// is never served, so its held produces were not made.
			s.flushAppendsOf(o)
			s.commit.flushGroup()
			s.answerHeld(o, errIncarnation)
		}
		s.polls.dropWaiters(o, errTombstoned, false)
		s.rg.unreplicate(o, errTombstoned)
		delete(s.owned, ns)
		delete(s.carried, ns) // its incarnation is going: nothing to give back
		s.tombstoned[ns] = *epoch
		s.table.Delete(ns, *epoch)
		if err := o.p.Close(); err != nil {
			s.log.Warn("closing tombstoned partition", "ns", ns, "error", err)
		}
		return nil
	}, nil)
}

// RemoveOwned confirms the removal of ns once its data is gone from disk
// (phase three): the tombstone is cleared and any frames parked for ns are
// answered.
func (s *Shard) RemoveOwned(ctx context.Context, ns metadata.Namespace) error {
	return s.do(ctx, opRemoveOwned(ns))
}

func opRemoveOwned(ns metadata.Namespace) control {
	return newControl(func(s *Shard) error {
		if _, ok := s.tombstoned[ns]; ok {
			delete(s.tombstoned, ns)
			s.m.Removed.Inc()
		}
		s.answerParked(ns, metrics.ReasonRemoved, errRemoved)
		return nil
	}, nil)
}

// SetRow writes the routing row of a namespace this shard does not own
// (DESIGN behaviour 2: rewritten when the epoch differs). Frames parked
// here for ns are forwarded to the owner in arrival order; a frame the
// owner's inbox refuses as full is re-parked with its age, one refused as
// disconnected is answered (behaviour 6).
func (s *Shard) SetRow(ctx context.Context, ns metadata.Namespace, row router.Row) error {
	return s.do(ctx, opSetRow(ns, row))
}

func opSetRow(ns metadata.Namespace, row router.Row) control {
	return newControl(func(s *Shard) error {
		s.table.Set(ns, row)
		if row.Owner != s.id {
			s.forwardParked(ns, row.Owner)
		}
		return nil
	}, nil)
}

func (s *Shard) forwardParked(ns metadata.Namespace, owner int) {
	q := s.park.take(ns)
	if q == nil {
		return
	}
	for q.len() > 0 {
		_, err := s.router.SendTo(owner, q.frames[q.head].frame)
		if errors.Is(err, router.ErrFull) {
			break // the rest stays parked, in order, with its age
		}
		pf := q.pop()
		if err == nil {
			s.m.Forwarded.Inc()
			continue
		}
		s.drop(pf.frame, metrics.ReasonDisconnected, fmt.Errorf("%w: %w", ErrRetry, err))
	}
	s.park.restore(q)
	s.gauges()
}

// answerParked answers every frame parked for ns with err.
func (s *Shard) answerParked(ns metadata.Namespace, reason string, err error) int {
	q := s.park.take(ns)
	if q == nil {
		return 0
	}
	n := q.len()
	for q.len() > 0 {
		s.drop(q.pop().frame, reason, err)
	}
	s.gauges()
	return n
}

// Verdict is the reconciler's decision about a parked namespace.
type Verdict uint8

// Verdicts for Sweep.
const (
	// VerdictAge keeps the frames parked and ages them (the default for a
	// namespace not named in the sweep).
	VerdictAge Verdict = iota
	// VerdictNotOwner answers the frames now: committed metadata puts the
	// namespace on another shard.
	VerdictNotOwner
	// VerdictBuildFailed answers the frames now: the namespace's build is
	// backed off after a failure, so waiting here would only time out.
	// The answer carries the failure's cause (Sweep's causes): damage on
	// disk (partition.ErrCorrupt) is answered ErrPartitionFailed wrapping
	// the *partition.CorruptError, which is not retried in place — it
	// needs an operator, not a moment; any other cause is a retriable
	// answer naming it.
	VerdictBuildFailed
	// VerdictNotHeld answers the frames now: committed metadata places the
	// namespace's replicas on other nodes. Each is answered "not leader"
	// with a replica to go to (a raft message is dropped).
	VerdictNotHeld
)

// SweepResult counts what a sweep answered.
type SweepResult struct {
	Answered int // frames answered because of a verdict
	Expired  int // frames answered because they outlived MaxPasses
}

// Sweep is one pass over the park buffer (DESIGN behaviours 8 and 15):
// namespaces with a verdict are answered now, every other parked frame ages
// by one pass and is answered once it has survived MaxPasses passes.
// causes holds, for namespaces whose verdict is VerdictBuildFailed, the
// error the build failed with (nil or missing: unknown).
func (s *Shard) Sweep(ctx context.Context, verdicts map[metadata.Namespace]Verdict, causes map[metadata.Namespace]error) (SweepResult, error) {
	var res SweepResult
	if err := s.do(ctx, opSweep(verdicts, causes, &res)); err != nil {
		return SweepResult{}, err
	}
	return res, nil
}

// buildFailedAnswer is the answer to a frame whose partition's build
// failed with cause (see VerdictBuildFailed).
func buildFailedAnswer(ns metadata.Namespace, cause error) error {
	switch {
	case cause == nil:
		return errBuildFailed
	case errors.Is(cause, partition.ErrCorrupt):
		return fmt.Errorf("%w: %v cannot be opened from disk: %w", ErrPartitionFailed, ns, cause)
	}
	return fmt.Errorf("%w: %v", errBuildFailed, cause) // the text only: still a retry-here answer
}

func opSweep(verdicts map[metadata.Namespace]Verdict, causes map[metadata.Namespace]error, res *SweepResult) control {
	return newControl(func(s *Shard) error {
		s.pass++
		var emptied []*parkQueue
		s.park.order.Ascend(func(q *parkQueue) bool {
			switch verdicts[q.ns] {
			case VerdictNotOwner:
				res.Answered += q.len()
				emptied = append(emptied, q)
			case VerdictBuildFailed, VerdictNotHeld:
				res.Answered += q.len()
				emptied = append(emptied, q)
			default:
				// Frames are in arrival order, so the expired ones are a
				// prefix: the scan stops at the first young frame.
				for q.len() > 0 && s.pass-q.frames[q.head].pass >= uint64(s.cfg.Park.MaxPasses) {
					pf := q.pop()
					s.park.frames--
					s.park.bytes -= pf.size
					s.drop(pf.frame, metrics.ReasonParkExpired, errParkExpired)
					res.Expired++
				}
				if q.len() == 0 {
					emptied = append(emptied, q)
				}
			}
			return true
		})
		for _, q := range emptied {
			switch verdicts[q.ns] {
			case VerdictNotOwner:
				s.answerParked(q.ns, metrics.ReasonNotOwner, errNotOwner)
			case VerdictBuildFailed:
				s.answerBuildFailed(q.ns, causes[q.ns])
			case VerdictNotHeld:
				s.sendElsewhere(q.ns)
			default:
				s.park.take(q.ns)
			}
		}
		s.gauges()
		return nil
	}, nil)
}

// State is a snapshot of what a shard holds, for the reconciler's diff.
type State struct {
	// Owned maps each materialised namespace to its epoch.
	Owned map[metadata.Namespace]uint64
	// Durability maps each owned namespace to its durability.
	Durability map[metadata.Namespace]Durability
	// Provisional lists the namespaces held provisional (InsertProvisional),
	// in namespace order; they are in none of the other fields.
	Provisional []metadata.Namespace
	// Tombstoned maps each namespace mid-teardown to the epoch torn down.
	Tombstoned map[metadata.Namespace]uint64
	// Failed lists owned namespaces fenced after a failed fsync, in
	// namespace order: the reconciler evicts and rebuilds them.
	Failed []metadata.Namespace
	// Damaged maps the failed namespaces that were fenced for damage in
	// the local copy of a replicated partition to the *CorruptError: the
	// reconciler sets the copy aside and rebuilds it from the group.
	Damaged map[metadata.Namespace]error
	// Replaced maps the failed namespaces whose replica the metadata
	// replaced by a newer one on this node while it ran (a re-seed,
	// metadata.ReseedReplica) to the raft id it ran under: the reconciler
	// sets the copy aside whole and builds the new replica.
	Replaced map[metadata.Namespace]uint64
	// Parked lists the parked namespaces in namespace order.
	Parked       []ParkedNamespace
	ParkedFrames int
	ParkedBytes  int64
	// Passes is the number of sweeps applied.
	Passes uint64
	// Waiting is the number of polls waiting on the shard.
	Waiting int
	// Quiesced lists the namespaces whose raft group is quiesced (not
	// ticked: see Replication.Quiesce), in namespace order.
	Quiesced []metadata.Namespace
	// Hibernated lists the namespaces whose follower hibernates (it
	// stayed quiesced, and holds no raft node until something needs
	// it), in namespace order.
	Hibernated []metadata.Namespace
	// Applied maps each replicated namespace to the raft index its group
	// applied last: the entries it applied, empty ones included.
	Applied map[metadata.Namespace]uint64
	// LaneRuns counts the runs of the waited lane the pump took (each
	// one wake for every frame queued in it meanwhile), and InlineRuns
	// the frames their callers ran themselves while the pump waited
	// (inline.go): where a node's synchronous calls went.
	LaneRuns, InlineRuns uint64
}

// Inspect returns the shard's state, read on the pump.
func (s *Shard) Inspect(ctx context.Context) (State, error) {
	var st State
	if err := s.do(ctx, opInspect(&st)); err != nil {
		return State{}, err
	}
	return st, nil
}

func opInspect(st *State) control {
	return newControl(func(s *Shard) error {
		st.Owned = make(map[metadata.Namespace]uint64, len(s.owned))
		st.Durability = make(map[metadata.Namespace]Durability, len(s.owned))
		for ns, o := range s.owned {
			if o.sync.provisional {
				// Not the reconciler's yet: it hands it over or
				// tears it down from its own account (Provisional).
				st.Provisional = append(st.Provisional, ns)
				continue
			}
			st.Owned[ns] = o.p.Epoch()
			st.Durability[ns] = o.dur
			if o.failed != nil {
				st.Failed = append(st.Failed, ns)
				if o.damaged != nil {
					if st.Damaged == nil {
						st.Damaged = make(map[metadata.Namespace]error)
					}
					st.Damaged[ns] = o.damaged
				}
				if errors.Is(o.failed, errReplaced) {
					if st.Replaced == nil {
						st.Replaced = make(map[metadata.Namespace]uint64)
					}
					st.Replaced[ns] = o.rep.id
				}
			}
		}
		slices.Sort(st.Failed)
		slices.Sort(st.Provisional)
		st.Applied = make(map[metadata.Namespace]uint64, len(s.rg.replicated))
		for ns, o := range s.rg.replicated {
			if !s.rg.q.awake.Has(o.p.Namespace(), o) {
				st.Quiesced = append(st.Quiesced, ns)
			}
			if o.rep.grp.Hibernating() {
				st.Hibernated = append(st.Hibernated, ns)
			}
			st.Applied[ns] = o.rep.grp.Applied()
		}
		slices.Sort(st.Quiesced)
		slices.Sort(st.Hibernated)
		st.Tombstoned = maps.Clone(s.tombstoned)
		s.park.order.Ascend(func(q *parkQueue) bool {
			st.Parked = append(st.Parked, ParkedNamespace{
				NS: q.ns, Frames: q.len(), Bytes: q.bytes,
				OldestPasses: int(s.pass - q.frames[q.head].pass),
			})
			return true
		})
		st.ParkedFrames, st.ParkedBytes, st.Passes = s.park.frames, s.park.bytes, s.pass
		st.Waiting = s.polls.waiters.Len()
		st.LaneRuns, st.InlineRuns = s.laneRuns, s.inlineRuns
		return nil
	}, nil)
}

// Evict drops a partition fenced after a failed fsync so the reconciler can
// rebuild it: the partition is closed (its data stays in the store, and
// reopening it recovers what is durable), its routing row is kept, and
// requests arriving until the rebuild park as for any unmaterialised
// partition. A partition that is not fenced is left alone (false).
func (s *Shard) Evict(ctx context.Context, ns metadata.Namespace) (bool, error) {
	var evicted bool
	if err := s.do(ctx, newControl(func(s *Shard) error {
		o, ok := s.owned[ns]
		if !ok || o.failed == nil {
			return nil
		}
		s.polls.dropWaiters(o, fmt.Errorf("%w: %v: %w", ErrPartitionFailed, ns, o.failed), false)
		s.rg.unreplicate(o, ErrPartitionFailed)
		delete(s.owned, ns)
		s.fenced.Add(-1)
		if err := o.p.Close(); err != nil {
			s.log.Warn("closing a fenced partition", "ns", ns, "error", err)
		}
		evicted = true
		return nil
	}, nil)); err != nil {
		return false, err
	}
	return evicted, nil
}

func sortedOwned(m map[metadata.Namespace]*owned) []metadata.Namespace {
	return slices.Sorted(maps.Keys(m))
}
