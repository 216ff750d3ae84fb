package shard

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/btree"

	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
)

// Polls: start positions and waiting (long) polls (DESIGN behaviours 22
// and 24).
//
// A poll first resolves its start position against the partition (see
// StartKind) and reads. A poll with MaxWait > 0 that finds fewer than
// MinCount messages (and less than its byte budget) is not answered: it
// is registered as a waiter on its partition, here on the shard that
// appends to it, and costs nothing while it waits — no goroutine, no
// timer of its own, no re-poll. It is answered exactly once:
//
//   - with messages, when the append that satisfies it becomes readable:
//     at the append (fsync policies never and interval), at the group
//     commit's fsync (always: nothing unacknowledged is shown), or at the
//     raft apply (a replicated partition, on the leader for leader reads
//     and on the local replica for local reads);
//   - with what is there (possibly nothing) at its deadline, by the one
//     timer the shard keeps for its earliest waiter, on its injected
//     clock;
//   - with an error when its partition is torn down (errTombstoned, which
//     is retriable: the client re-resolves and learns the partition is
//     gone), fenced (ErrPartitionFailed), truncated past its position
//     (partition.ErrOffsetOutOfRange: poll again from the start), when
//     the replica stops leading the partition for a leader read
//     (NotLeaderError), or when the shard closes (ErrClosed).
//
// A shard holds at most Config.MaxWaiters waiting polls; one more is
// answered ErrTooManyWaiters at once. Waits are capped at MaxPollWait.
//
// A leader read (Request.FromLeader) of a replicated partition is
// confirmed with a quorum (ReadIndex, replication.go) before it reads and
// registers. One exception keeps idle consumers cheap: a waiting poll at
// the leader of a quiesced group, from an explicit offset that is the
// partition's end, registers unconfirmed (waitUnconfirmed). Such a poll
// can only be answered in two ways. With nothing at its deadline: answered
// here, no round and the group stays quiesced, since an empty answer
// serves no data. Its next offset is the offset the poll asked for, so
// even a deposed leader that does not know it lost (its followers elected
// another while it was cut off) only says "nothing yet" and moves no
// reader back; the reader polls again, and a node that learns of the new
// leader answers its leader reads "not leader", so they are sent there.
// With messages (or a partial batch at its deadline): never from here; it
// goes through the leader read as any other poll (confirmLeaderRead), so
// every message a poll returns is served after a quorum confirmed the
// leader. An idle partition's consumer thus costs its quiesced group
// nothing every MaxPollWait, where a confirmed re-poll woke the group for
// a heartbeat round to its followers and back.

// MaxPollWait caps Request.MaxWait: a longer wait is shortened to it. It
// is the reference server's cap (Apache Iggy's 30 s).
const MaxPollWait = 30 * time.Second

// DefaultMaxWaiters bounds the waiting polls of one shard.
const DefaultMaxWaiters = 10_000

// ErrTooManyWaiters answers a waiting poll that would take a shard past
// Config.MaxWaiters. It is not retriable in place (it does not wrap
// ErrRetry): retrying at once would only add load to a saturated shard.
// The caller backs off, polls without waiting, or raises the bound.
var ErrTooManyWaiters = errors.New("parkway: too many waiting polls on this shard")

// StartKind says where a poll starts.
type StartKind uint8

// Start positions.
const (
	// StartOffset starts at Request.Offset. An offset below the start
	// offset is partition.ErrOffsetOutOfRange; one past the end reads as
	// the end (an empty batch whose next offset is the end).
	StartOffset StartKind = iota
	// StartFirst starts at the partition's start offset (the oldest
	// readable message).
	StartFirst
	// StartLast starts at the last message (the end, when the partition
	// holds none: the poll waits for the next one).
	StartLast
	// StartNext starts at the consumer's stored offset (Request.Consumer).
	// With none stored, or one outside [start, end], Request.Reset
	// decides.
	StartNext
	// StartTimestamp starts at the first message appended at or after
	// Request.Timestamp (µs since the Unix epoch); the end if none is.
	StartTimestamp
)

// Reset says where a StartNext poll starts when the consumer has no
// stored offset, or one outside [start, end] (a truncation passed it):
// Kafka's auto.offset.reset.
type Reset uint8

// Reset policies.
const (
	// ResetEarliest starts at the start offset (the default): a stored
	// offset below the start is clamped to it, so a consumer never wedges
	// after a truncation.
	ResetEarliest Reset = iota
	// ResetLatest starts at the end: only messages appended from now on.
	ResetLatest
	// ResetError answers partition.ErrOffsetOutOfRange.
	ResetError
)

// waiter is a waiting poll.
type waiter struct {
	f        Frame
	o        *owned
	from     uint64
	deadline time.Time
	seq      uint64
	// unconfirmed marks a leader read registered without its leader's
	// confirmation (waitUnconfirmed): it is answered here only with
	// nothing, at its deadline.
	unconfirmed bool
}

func waiterLess(a, b *waiter) bool {
	if !a.deadline.Equal(b.deadline) {
		return a.deadline.Before(b.deadline)
	}
	return a.seq < b.seq
}

func newWaiterTree() *btree.BTreeG[*waiter] { return btree.NewG(16, waiterLess) }

// resolveStart returns the offset a poll starts at. An offset past the end
// is returned as asked: a plain poll reads it as the end (readPoll), a
// waiting poll waits for it, so the answer is what a plain poll would get
// at the moment it is answered.
func resolveStart(p partition.Partition, r *Request) (uint64, error) {
	start, end := p.StartOffset(), p.NextOffset()
	kind := r.Start
	if r.UseConsumer {
		kind = StartNext
	}
	switch kind {
	case StartOffset:
		if r.Offset < start {
			return 0, fmt.Errorf("%w: offset %d below the start offset %d", partition.ErrOffsetOutOfRange, r.Offset, start)
		}
		return r.Offset, nil
	case StartFirst:
		return start, nil
	case StartLast:
		if end > start {
			return end - 1, nil
		}
		return end, nil
	case StartNext:
		off, ok, err := p.ConsumerOffset(r.Consumer)
		if err != nil {
			return 0, err
		}
		if ok && off >= start && off <= end {
			return off, nil
		}
		switch r.Reset {
		case ResetEarliest:
			return start, nil
		case ResetLatest:
			return end, nil
		}
		if !ok {
			return 0, fmt.Errorf("%w: consumer %q has no stored offset", partition.ErrOffsetOutOfRange, r.Consumer)
		}
		return 0, fmt.Errorf("%w: consumer %q stored offset %d outside [%d, %d]", partition.ErrOffsetOutOfRange, r.Consumer, off, start, end)
	case StartTimestamp:
		return p.OffsetForTime(r.Timestamp)
	}
	return 0, fmt.Errorf("parkway: unknown start position %d", kind)
}

// readPoll reads a poll's batch from from (read as the end when past it,
// so Next is an offset a consumer can store): up to Count messages,
// trimmed to the byte budget (the first message always). full reports
// that the poll is satisfied: MinCount messages, the byte budget
// reached, or a read that stopped below the end. With whole, a read the partition stops below its end (below
// damage, Partition.Read) is answered with the damage instead of short
// (see damage.go, stoppedAt).
func readPoll(p partition.Partition, from uint64, r *Request, whole bool) (Response, bool) {
	from = min(from, p.NextOffset())
	if k, ok := p.(partition.EncodedKeeper); ok && r.ReadEncoded {
		// A batch kept encoded is answered whole, whatever the budget
		// (as the first message always is): one batch satisfies a poll.
		b, base, err := k.ReadEncoded(from)
		if err != nil {
			return Response{Err: err}, true
		}
		if b != nil {
			return Response{Encoded: b, EncodedBase: base, Offset: base + uint64(b.Len()), Start: p.StartOffset(), End: p.NextOffset()}, true
		}
	}
	msgs, err := p.Read(from, r.Count)
	if err == nil && whole {
		err = stoppedAt(p, from, len(msgs), r.Count)
	}
	if err != nil {
		return Response{Err: err}, true
	}
	full := false
	if r.MaxBytes > 0 {
		total := 0
		for i := range msgs {
			total += partition.MessageSize(&msgs[i]) // as the produce limits count it
			if total >= r.MaxBytes {
				if total > r.MaxBytes && i > 0 {
					msgs = msgs[:i] // over budget: the first always stays
				} else {
					msgs = msgs[:i+1]
				}
				full = true
				break
			}
		}
	}
	next := from
	if n := len(msgs); n > 0 {
		next = msgs[n-1].Offset + 1
	}
	minCount := max(r.MinCount, 1)
	// A read that stopped short below the end (an in-memory partition's
	// stops at its chunk's end) is all one read serves: waiting would not
	// grow it, so it answers a poll waiting for more.
	short := len(msgs) > 0 && next < p.NextOffset()
	// Start and End let the caller compute its lag without another call.
	return Response{Messages: msgs, Offset: next, Start: p.StartOffset(), End: p.NextOffset()}, full || short || len(msgs) >= min(minCount, r.Count)
}

// servePoll serves a poll against o: answered now, or registered as a
// waiter when it asks to wait and is not satisfied yet.
func (wp *waitingPolls) servePoll(o *owned, f Frame) {
	r := f.Req
	from, err := resolveStart(o.p, r)
	if err != nil {
		wp.owner.answer(f, Response{Err: err})
		return
	}
	resp, full := readPoll(o.p, from, r, repairable(o))
	if full || r.MaxWait <= 0 || resp.Err != nil {
		resp.Err = wp.owner.damagedRead(o, f, wp.owner.fenceUnusable(o, resp.Err))
		wp.owner.answer(f, resp)
		return
	}
	if wp.waiters.Len() >= wp.maxWaiters {
		wp.m.Drop(r.Op.String(), metrics.ReasonWaitersFull)
		wp.owner.answer(f, Response{Err: fmt.Errorf("%w (%d)", ErrTooManyWaiters, wp.maxWaiters)})
		return
	}
	wp.register(o, f, from, false)
}

// register makes f a waiter on o from offset from.
func (wp *waitingPolls) register(o *owned, f Frame, from uint64, unconfirmed bool) {
	wp.waitSeq++
	w := &waiter{f: f, o: o, from: from, deadline: wp.clock.Now().Add(min(f.Req.MaxWait, MaxPollWait)), seq: wp.waitSeq, unconfirmed: unconfirmed}
	wp.waiters.ReplaceOrInsert(w)
	o.waiters = append(o.waiters, w)
	wp.armWait(w.deadline)
}

// waitUnconfirmed registers f, a leader read of replicated partition o,
// as a waiter without its leader's confirmation when it can only wait
// (see the package comment above: answered here with nothing at its
// deadline, through the leader read with anything else), and reports
// whether it did. It does so only where a confirmation costs a wake: the
// group is quiesced (every write committed and applied, so the leader's
// end is the group's as far as it knows). The poll must start at an
// explicit offset equal to the partition's end: a start resolved from
// this replica's state (a stored offset, the last message, a timestamp)
// or an offset past its end would be answered with an offset only a
// confirmed leader may vouch for. Anything else is confirmed first, as
// before.
func (wp *waitingPolls) waitUnconfirmed(o *owned, f Frame, quiesced bool) bool {
	r := f.Req
	if !quiesced || r.Op != OpPoll || !r.FromLeader || r.MaxWait <= 0 || r.Count <= 0 ||
		r.Start != StartOffset || r.UseConsumer || o.rep.grp == nil || !o.rep.grp.IsLeader() ||
		o.rep.catchup != nil || o.failed != nil || o.unacked() ||
		r.Offset != o.p.NextOffset() || wp.waiters.Len() >= wp.maxWaiters {
		return false
	}
	wp.register(o, f, r.Offset, true)
	return true
}

// touch notes that o's readable log changed (messages became readable,
// or its start moved): its waiters are looked at when the unit of pump
// work settles.
func (wp *waitingPolls) touch(o *owned) {
	if len(o.waiters) > 0 && !o.touched {
		o.touched = true
		wp.touchedList = append(wp.touchedList, o)
	}
}

// wakeWaiters answers the waiters of touched partitions that can be
// answered now.
func (wp *waitingPolls) wakeWaiters() {
	if len(wp.touchedList) == 0 {
		return
	}
	// Answering touches nothing, so the list is not appended to while it
	// is walked, and its memory is reused.
	list := wp.touchedList
	for _, o := range list {
		o.touched = false
		if o.rep.grp == nil && o.unacked() {
			// Appended but not yet acknowledged as durable: the group
			// commit touches o again after its fsync.
			continue
		}
		o.waiters = slices.DeleteFunc(o.waiters, func(w *waiter) bool {
			if !wp.finishWait(w, false) {
				return false
			}
			wp.waiters.Delete(w)
			return true
		})
	}
	clear(list)
	wp.touchedList = list[:0]
}

// finishWait answers w if it can be answered now (always at its
// deadline) and reports whether it was.
func (wp *waitingPolls) finishWait(w *waiter, deadline bool) bool {
	o, p := w.o, w.o.p
	if rev, ok := wp.meta.CreatedRevision(p.Namespace()); !ok || rev != p.Epoch() {
		wp.owner.deny(w.f, metrics.DenyIncarnation, errIncarnation)
		return true
	}
	if o.failed != nil {
		wp.owner.fenceFailed(o, w.f)
		return true
	}
	if w.from < p.StartOffset() {
		wp.owner.answer(w.f, Response{Err: fmt.Errorf("%w: truncated past the waiting poll's offset %d (start offset %d)",
			partition.ErrOffsetOutOfRange, w.from, p.StartOffset())})
		return true
	}
	if !deadline {
		// Without a byte budget the count alone decides: no read until
		// enough messages are there, so an append costs a waiter O(1).
		avail, r := p.NextOffset()-min(w.from, p.NextOffset()), w.f.Req
		if avail == 0 || r.MaxBytes <= 0 && avail < uint64(min(max(r.MinCount, 1), r.Count)) {
			return false
		}
	}
	resp, full := readPoll(p, w.from, w.f.Req, repairable(o))
	if !full && !deadline {
		return false
	}
	if w.unconfirmed && resp.Err == nil && len(resp.Messages) > 0 {
		// Messages are served only by a confirmed leader: the poll
		// becomes a leader read that answers what is there once
		// confirmed (it does not wait again).
		req := *w.f.Req
		req.MaxWait = 0
		f := w.f
		f.Req = &req
		wp.owner.confirmLeaderRead(o, f)
		return true
	}
	// Nothing (or an error) for an unconfirmed waiter at its deadline:
	// answered here, without a round, as the package comment explains.
	resp.Err = wp.owner.damagedRead(o, w.f, wp.owner.fenceUnusable(o, resp.Err))
	wp.owner.answer(w.f, resp)
	return true
}

// armWait makes sure the wait timer fires by at.
func (wp *waitingPolls) armWait(at time.Time) {
	if wp.waitTimer != nil && !wp.waitAt.IsZero() && !at.Before(wp.waitAt) {
		return
	}
	d := max(at.Sub(wp.clock.Now()), 0)
	if wp.waitTimer == nil {
		wp.waitTimer = wp.clock.NewTimer(d)
	} else {
		wp.waitTimer.Stop()
		wp.waitTimer.Reset(d)
	}
	wp.waitAt = at
}

// waitC is the wait timer's channel, nil (never ready) while no waiter
// needs it.
func (wp *waitingPolls) waitC() <-chan time.Time {
	if wp.waitTimer == nil || wp.waitAt.IsZero() {
		return nil
	}
	return wp.waitTimer.C()
}

// waitFired answers every waiter whose deadline has passed and re-arms
// the timer for the earliest remaining one.
func (wp *waitingPolls) waitFired() {
	wp.waitAt = time.Time{}
	now := wp.clock.Now()
	expired := map[*owned]bool{}
	for {
		w, ok := wp.waiters.Min()
		if !ok || w.deadline.After(now) {
			break
		}
		wp.waiters.DeleteMin()
		wp.finishWait(w, true)
		expired[w.o] = true
		w.o = nil // marks it answered for the sweep below
	}
	for o := range expired {
		o.waiters = slices.DeleteFunc(o.waiters, func(w *waiter) bool { return w.o == nil })
	}
	if w, ok := wp.waiters.Min(); ok {
		wp.armWait(w.deadline)
	}
}

// dropWaiters answers o's waiters with err (all of them, or only leader
// reads with leaderOnly): the partition is going away, or this replica
// stopped leading it.
func (wp *waitingPolls) dropWaiters(o *owned, err error, leaderOnly bool) {
	if len(o.waiters) == 0 {
		return
	}
	o.waiters = slices.DeleteFunc(o.waiters, func(w *waiter) bool {
		if leaderOnly && !w.f.Req.FromLeader {
			return false
		}
		wp.waiters.Delete(w)
		wp.owner.answer(w.f, Response{Err: err})
		return true
	})
}

// dropAllWaiters answers every waiting poll with err (the shard closes).
func (wp *waitingPolls) dropAllWaiters(err error) {
	wp.waiters.Ascend(func(w *waiter) bool {
		wp.owner.answer(w.f, Response{Err: err})
		w.o.waiters = nil
		return true
	})
	wp.waiters.Clear(false)
}
