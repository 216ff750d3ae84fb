package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
)

// Durability is how a partition's appends are made durable and retained:
// its topic's configuration with the node's defaults resolved.
type Durability struct {
	// Fsync is FsyncAlways, FsyncInterval or FsyncNever (FsyncDefault is
	// treated as FsyncAlways: an unresolved default errs on the safe side).
	Fsync metadata.FsyncPolicy
	// Interval bounds how long an append may stay un-synced under
	// FsyncInterval: the loss window on power failure.
	Interval time.Duration
	// RetentionAge and RetentionBytes bound the log (0 disables each).
	RetentionAge   time.Duration
	RetentionBytes int64
}

// always reports whether acks wait for fsync.
func (d Durability) always() bool {
	return d.Fsync == metadata.FsyncAlways || d.Fsync == metadata.FsyncDefault
}

// owned is a partition the shard holds, with its durability state.
type owned struct {
	p   partition.Partition
	dur Durability
	// sync is the partition's standing with the commit group.
	sync syncState

	// appendBuf holds produces queued to be appended together (see
	// coalesce.go).
	appendBuf []Frame

	// waiters are the polls waiting on the partition, in arrival order,
	// and touched whether it is on the shard's list for wakeWaiters (see
	// wait.go).
	waiters []*waiter
	touched bool

	// rep is the partition's replicated half: its raft group and the
	// state the group replicates (replicated.go). Zero on a single node.
	rep replicated

	// failed is set when a group-commit fsync of the partition failed.
	// Everything appended since its last good fsync was answered with the
	// error. Unless the commit took it back out of the log
	// (partition.ErrRolledBack) it may still sit there, readable, and
	// may or may not survive a crash, after which its offsets may hold
	// other messages; and what the partition's files hold of what was
	// acknowledged is unknown. So the shard serves nothing more from the
	// partition (reads included) until the reconciler has rebuilt it from
	// what is durable (its files and the journal).
	failed error
	// damaged is set with failed when the failure is damage found in the
	// local copy of a replicated partition (damage.go): the reconciler
	// sets the copy aside before building the partition again.
	damaged error
}

// syncState is an owned partition's standing with the shard's commit
// group (commitgroup.go): what of it waits for an fsync or a journal
// stage.
type syncState struct {
	// dirty: appended since the last Sync.
	dirty bool
	// staged: an FsyncInterval partition whose appends reach a file
	// through the shard's journal (a deferred partition attached at
	// InsertOwned, see partition.Journal.Stage) until its interval Sync
	// takes it out; stageDirty: appended since the last Stage, so its
	// acks wait for it, as an FsyncAlways partition's wait for the group
	// commit.
	staged, stageDirty bool
	// provisional is set while the partition's incarnation is not
	// committed (provisional.go); its produces made durable wait in the
	// commit group's held map for the commit. Here, not in owned, so an
	// owned keeps its allocation class (TestOwnedSize).
	provisional bool
	// deadline is when an interval-policy partition must be synced by.
	deadline time.Time
}

// pendingAck is a produce appended under FsyncAlways whose answer waits
// for the group's fsync.
type pendingAck struct {
	f Frame
	r Response
	o *owned
	// carried: a carried produce already answered (carried.go), in the
	// group for its fsync only; after it Req.Carried is called instead
	// of an answer.
	carried bool
}

// maxGroup bounds a commit group: after this many pending acks the pump
// syncs even if more frames wait, so latency stays bounded under load.
const maxGroup = 256

// appended records a successful append to o and either answers it now
// (never / interval) or queues the answer for the group's fsync (always).
func (cg *commitGroup) appended(o *owned, f Frame, r Response) {
	cg.polls.touch(o) // under FsyncAlways, wakeWaiters waits for the fsync
	if f.Req.Carried != nil && !o.dur.always() {
		cg.owner.forgetCarried(f.Req) // the ordinary path (carried.go)
	}
	switch {
	case o.dur.always() && f.Req.Carried != nil:
		// Durable in the metadata log once its incarnation commits:
		// answered now (held while provisional), and synced later, in
		// a group it shares, for the log to forget it (carried.go).
		cg.ack(pendingAck{f: f, r: r, o: o})
		if !o.sync.provisional {
			cg.syncCarried(o, f.Req)
		}
		return
	case o.dur.always():
		o.sync.dirty = true
		if len(cg.pending) == 0 {
			cg.groupStart = cg.clock.Now() // the group's first append
		}
		cg.pending = append(cg.pending, pendingAck{f: f, r: r, o: o})
		return
	case o.dur.Fsync == metadata.FsyncInterval:
		cg.dirtyInterval(o)
		if o.sync.staged && len(cg.pending) == 0 && !cg.owner.queued() && !cg.journal.Stages(o.p) {
			// Its appends go to its own file now (it stopped
			// stashing): a Stage would write nothing of it, so a lone
			// produce — no other ack pending, nothing queued for the
			// pump — is answered at once, without the group's pass,
			// its yield (lingerGroup) and its journal calls: for one
			// producer about a quarter of the round trip, until the
			// interval sync took the partition out of the journal.
			// Concurrent producers still share the group, whose
			// yield before answering lets the answered ones join the
			// next group (case 2's CPU per message rose by up to a
			// third when they were answered at once).
			cg.ack(pendingAck{f: f, r: r, o: o})
			return
		}
		if o.sync.staged {
			o.sync.stageDirty = true
			cg.pending = append(cg.pending, pendingAck{f: f, r: r, o: o})
			return
		}
	}
	cg.ack(pendingAck{f: f, r: r, o: o})
}

// ack answers a produce made durable (or, under FsyncNever and
// FsyncInterval, appended), unless its partition is provisional and the
// answer succeeded: then it is held until the partition's incarnation
// commits (provisional.go).
//
// A held answer is still bound by its request's deadline (the barrier
// rule: no frame is left without an answer past it): one whose deadline
// has passed is answered errHeldExpired, at once or when the park timer,
// armed for it, fires (expireHeld).
func (cg *commitGroup) ack(pa pendingAck) {
	if pa.o.sync.provisional && pa.r.Err == nil {
		if d := pa.f.Req.Deadline; !d.IsZero() {
			if !d.After(cg.clock.Now()) {
				cg.expired(pa)
				return
			}
			cg.owner.armPark(d)
		}
		if cg.held == nil {
			cg.held = make(map[*owned][]pendingAck)
		}
		cg.held[pa.o] = append(cg.held[pa.o], pa)
		return
	}
	cg.polls.touch(pa.o) // acknowledged: readable by waiting polls
	cg.owner.answer(pa.f, pa.r)
}

// errHeldExpired answers a produce to a provisional partition whose
// request's deadline passed while its answer was held for the commit of
// the partition's topic: the record is durable and is served if that
// commit lands, and never if it does not — which the shard cannot know
// yet.
var errHeldExpired = fmt.Errorf("%w: the request's deadline passed before its topic committed", ErrOutcomeUnknown)

// expired answers a held produce whose deadline has passed.
func (cg *commitGroup) expired(pa pendingAck) {
	cg.m.Drop(pa.f.Req.Op.String(), metrics.ReasonParkExpired)
	cg.owner.answer(pa.f, Response{Err: errHeldExpired})
}

// expireHeld answers the held produces whose request's deadline is at or
// before now (errHeldExpired), partition by partition in namespace order
// and each partition's in arrival order, and returns the earliest
// deadline of those still held (zero if none has one).
func (cg *commitGroup) expireHeld(now time.Time) time.Time {
	var next time.Time
	if len(cg.held) == 0 {
		return next
	}
	parts := make([]*owned, 0, len(cg.held))
	for o := range cg.held {
		parts = append(parts, o)
	}
	slices.SortFunc(parts, func(a, b *owned) int { return cmp.Compare(a.p.Namespace(), b.p.Namespace()) })
	for _, o := range parts {
		held := cg.held[o]
		kept := held[:0]
		for _, pa := range held {
			switch d := pa.f.Req.Deadline; {
			case d.IsZero():
				kept = append(kept, pa)
			case !d.After(now):
				cg.expired(pa)
			default:
				kept = append(kept, pa)
				if next.IsZero() || d.Before(next) {
					next = d
				}
			}
		}
		clear(held[len(kept):])
		if len(kept) == 0 {
			delete(cg.held, o)
		} else {
			cg.held[o] = kept
		}
	}
	return next
}

// unacked reports whether o holds appends whose answers wait for the
// group (a commit, or a journal stage): never shown to a reader before.
func (o *owned) unacked() bool { return o.sync.dirty && o.dur.always() || o.sync.stageDirty }

// flushGroup is group commit: the dirty partitions made durable for every
// ack queued since the last flush, then the answers. Concurrent producers
// to a partition pile up in the inbox while the previous group syncs, so
// the group grows with the load and one fsync covers all of them; with a
// journal (Config.Journal) the group's records of every partition go into
// one journal write and one fsync, shared with the groups other shards of
// the node commit at the same time, and without one the partitions of the
// group are synced concurrently (syncEach), so producers to different
// partitions of the shard share one group either way (syncGroup). Nothing
// is answered before the group is durable. If a sync fails, every ack that depended on it is answered
// with the error (commitError): not appended, if the commit took the
// group's records back out of the log, else of unknown outcome.
func (cg *commitGroup) flushGroup() {
	cg.lingered = false
	if len(cg.pending) == 0 {
		return
	}
	cg.joinCarried() // the fsync covers them at no extra cost
	dirty, staged := cg.groupBuf[:0], cg.stageBuf[:0]
	for _, pa := range cg.pending {
		switch o := pa.o; {
		case o.sync.stageDirty:
			o.sync.stageDirty = false
			staged = append(staged, o)
		case o.sync.dirty && o.dur.always():
			o.sync.dirty = false
			dirty = append(dirty, o)
		}
	}
	var failed map[*owned]error
	fail := func(o *owned, err error) {
		if failed == nil {
			failed = make(map[*owned]error)
		}
		failed[o] = err
		cg.owner.fence(o, err)
		cg.log.Error("fsync failed; acks withheld, partition fenced until it is rebuilt from disk", "ns", o.p.Namespace(), "error", err)
	}
	for i, err := range cg.syncGroup(dirty) {
		if err != nil {
			fail(dirty[i], err)
		}
	}
	if len(staged) > 0 {
		for i, err := range cg.stageGroup(staged) {
			if err != nil {
				fail(staged[i], err)
			}
		}
	}
	clear(dirty)
	clear(staged)
	cg.groupBuf, cg.stageBuf = dirty[:0], staged[:0]
	for i, pa := range cg.pending {
		err, bad := failed[pa.o]
		switch {
		case pa.carried:
			cg.settleCarried(pa.f, err)
		case bad:
			pa.r = Response{Err: commitError(err)}
			fallthrough
		default:
			cg.ack(pa)
		}
		cg.pending[i] = pendingAck{}
	}
	cg.pending = cg.pending[:0]
	cg.m.CommitLatency.Observe(cg.clock.Now().Sub(cg.groupStart).Seconds())
}

// commitError is the answer to a produce whose group commit failed with
// err. A commit that took the group's appends back out of the log
// (partition.ErrRolledBack) answers exactly that: not appended (with a
// full disk the caller sees ErrNoSpace, and may send it again). Any other
// failure leaves them in the log or in the journal, where a rebuild or a
// reopen may find them: the outcome is unknown.
func commitError(err error) error {
	if errors.Is(err, partition.ErrRolledBack) {
		return fmt.Errorf("parkway: fsync failed, not appended: %w", err)
	}
	return OutcomeUnknown(fmt.Errorf("fsync: %w", err))
}

// lingerGroup runs before a commit group is closed because the inbox is
// empty, and reports whether frames arrived meanwhile. Producers answered
// by the previous group are runnable but may not have sent their next
// produce yet: closing the group at once would commit it with whichever
// one came first and leave the others to the next fsync. So the pump
// yields its processor once per group (runtime.Gosched: no sleep, no
// timer) and, if that brought frames, takes them into the group first. A
// manual shard does not linger: its driver decides what runs next.
func (cg *commitGroup) lingerGroup() bool {
	if cg.manual || cg.lingered || len(cg.pending) >= maxGroup {
		return false
	}
	cg.lingered = true
	runtime.Gosched()
	return cg.owner.inboxed()
}

// fence marks o failed (once) and counts it, so the reconciler's fast-skip
// sees there is work: the partition must be evicted and rebuilt.
func (s *Shard) fence(o *owned, err error) {
	if o.failed == nil {
		s.fenced.Add(1)
	}
	o.failed = err
}

// Fenced returns how many owned partitions are fenced after a failed
// fsync, for readers off the pump (the reconciler's fast-skip).
func (s *Shard) Fenced() int { return int(s.fenced.Load()) }

// dirtyInterval marks an interval-policy partition appended to: the first
// append since its last sync starts its loss window, puts it on the list
// syncDue walks (so the timer's work is in the dirty partitions, not the
// owned ones) and arms the timer for its deadline.
func (cg *commitGroup) dirtyInterval(o *owned) {
	if o.sync.dirty {
		return
	}
	o.sync.dirty = true
	o.sync.deadline = cg.clock.Now().Add(o.dur.Interval)
	cg.intervalDirty = append(cg.intervalDirty, o)
	cg.armSync(o.sync.deadline)
}

// armSync makes sure the interval timer fires by at.
func (cg *commitGroup) armSync(at time.Time) {
	if cg.syncTimer != nil && !cg.syncAt.IsZero() && !at.Before(cg.syncAt) {
		return
	}
	d := max(at.Sub(cg.clock.Now()), 0)
	if cg.syncTimer == nil {
		cg.syncTimer = cg.clock.NewTimer(d)
	} else {
		cg.syncTimer.Reset(d)
	}
	cg.syncAt = at
}

// syncDue syncs every interval-policy partition whose deadline has passed
// (concurrently, as a commit group is) and re-arms the timer for the
// earliest remaining one. The timer exists only while some partition is
// dirty, so an idle shard has none.
func (cg *commitGroup) syncDue() {
	now := cg.clock.Now()
	cg.syncAt = time.Time{}
	var next time.Time
	if len(cg.carriedLater) > 0 {
		if now.Before(cg.carriedAt) {
			next = cg.carriedAt
		} else {
			cg.flushCarried()
		}
	}
	due := cg.groupBuf[:0]
	keep := cg.intervalDirty[:0] // compacted in place: keep never passes the loop
	for _, o := range cg.intervalDirty {
		if !o.sync.dirty || o.dur.always() || !cg.owner.owns(o) {
			continue // synced meanwhile, reconfigured, or no longer owned
		}
		if !now.Before(o.sync.deadline) {
			o.sync.dirty = false
			due = append(due, o)
			continue
		}
		keep = append(keep, o)
		if next.IsZero() || o.sync.deadline.Before(next) {
			next = o.sync.deadline
		}
	}
	clear(cg.intervalDirty[len(keep):])
	cg.intervalDirty = keep
	cg.syncEach(due, func(o *owned) error {
		if err := o.p.Sync(); err != nil {
			cg.log.Error("interval fsync failed", "ns", o.p.Namespace(), "error", err)
		} else {
			o.sync.staged = false // its files hold everything: out of the journal
		}
		if o.rep.grp != nil && o.rep.grp.Disk() != nil {
			if err := o.rep.grp.Disk().Sync(); err != nil {
				cg.log.Error("interval fsync of a raft log failed", "ns", o.p.Namespace(), "error", err)
			}
		}
		return nil
	})
	clear(due)
	cg.groupBuf = due[:0]
	if !next.IsZero() {
		cg.armSync(next)
	}
}

// syncC is the interval timer's channel, or nil (blocks forever) when no
// timer is armed.
func (cg *commitGroup) syncC() <-chan time.Time {
	if cg.syncTimer == nil || cg.syncAt.IsZero() {
		return nil
	}
	return cg.syncTimer.C()
}

// SetDurability changes the durability of an owned namespace (after a
// topic configuration change). A partition leaving FsyncAlways or
// FsyncInterval is synced first, so nothing acked under the stricter policy
// is left behind.
func (s *Shard) SetDurability(ctx context.Context, ns metadata.Namespace, d Durability) error {
	return s.do(ctx, opSetDurability(ns, d))
}

func opSetDurability(ns metadata.Namespace, d Durability) control {
	return newControl(func(s *Shard) error {
		o, ok := s.owned[ns]
		if !ok {
			return nil
		}
		s.commit.flushGroup()
		// A partition leaving FsyncAlways is synced even if no ack waits:
		// its acknowledged records may be in the journal only, or held
		// behind for a journal commit that no longer comes (its appends
		// are now acknowledged without one, so they must reach its files
		// at once), and the Sync takes it out of the journal.
		if o.sync.dirty || (o.dur.always() && !d.always()) {
			o.sync.dirty = false
			if err := o.p.Sync(); err != nil {
				return err
			}
		}
		if o.rep.grp != nil && o.rep.grp.Disk() != nil {
			// The raft log carries the acks of a replicated partition; it
			// lives in the partition's directory, synced with it.
			if err := o.p.Sync(); err != nil {
				return err
			}
			if err := o.rep.grp.Disk().Sync(); err != nil {
				return err
			}
			o.rep.grp.Disk().SetSync(d.always())
		}
		o.dur = d
		// Synced above if it left FsyncInterval dirty; under FsyncAlways
		// its journal commits cover what it stages.
		o.sync.staged = false
		return nil
	}, nil)
}

// RetentionResult counts what a retention pass removed.
type RetentionResult struct {
	Messages uint64
	Errors   int
}

// EnforceRetention applies every owned partition's retention bounds at
// now: whole segments older than the age bound, then the oldest while over
// the size bound. It runs on the pump (deleting a segment file is quick
// and must not race an append or a read).
func (s *Shard) EnforceRetention(ctx context.Context, now time.Time) (RetentionResult, error) {
	var res RetentionResult
	if err := s.do(ctx, opRetain(now, &res)); err != nil {
		return RetentionResult{}, err
	}
	return res, nil
}

func opRetain(now time.Time, res *RetentionResult) control {
	return newControl(func(s *Shard) error {
		for _, ns := range sortedOwned(s.owned) {
			o := s.owned[ns]
			if o.dur.RetentionAge == 0 && o.dur.RetentionBytes == 0 {
				continue
			}
			var olderThan int64
			if o.dur.RetentionAge > 0 {
				olderThan = now.Add(-o.dur.RetentionAge).UnixMicro()
			}
			n, err := o.p.EnforceRetention(olderThan, o.dur.RetentionBytes)
			if n > 0 {
				s.polls.touch(o)
			}
			res.Messages += n
			if err != nil {
				res.Errors++
				s.log.Warn("retention failed", "ns", ns, "error", err)
			}
		}
		return nil
	}, nil)
}
