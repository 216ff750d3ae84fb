package host

import (
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/parkway-io/parkway/internal/backoff"
	"github.com/parkway-io/parkway/internal/testhooks"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// A consumer's decisions — which partitions to fetch after an
// assignment changes and when their OnAssigned runs, where a fetch
// starts, what a failed fetch does next, when a message may be handed
// to the application, which handled positions to commit and when (the
// interval commit's deadline included), when to revoke a partition and
// in which order its revocation waits, calls OnRevoked, commits and
// releases, which generation a heartbeat acknowledges, when the
// application stalled and the member leaves, when it rejoins — are made from the consumer's own
// state, told the time and each event, with no goroutine and no clock:
// ConsumerDriver holds that state and makes them. The root package's
// Consumer carries the actions out with its goroutines (a fetcher per
// partition, the iterator, the maintenance loop, a revocation); the
// simulator's group members step the same driver over the faulty bus,
// so the rebalance and commit decisions it checks are the code that
// ships. The group membership below it (the fence, the heartbeat's
// choice, the commit command) is GroupMember's.

// CommitMode is when a consumer commits the positions it handled.
type CommitMode uint8

const (
	// CommitOnInterval commits within an interval of a handling: the
	// driver keeps the deadline (ConsumerDriver.Handled sets it,
	// NextCommit reports it, IntervalCommit takes it), the owner's timer
	// runs while positions wait.
	CommitOnInterval CommitMode = iota
	// CommitAfterBatch commits once a batch is handled
	// (ConsumerDriver.BatchDone).
	CommitAfterBatch
	// CommitManual commits only when the application asks: not before a
	// revocation releases a partition nor when the consumer leaves.
	CommitManual
)

// ConsumerDriverConfig configures a ConsumerDriver.
type ConsumerDriverConfig struct {
	// Group is set for a group member's consumer; without it the
	// consumer reads every partition under a name.
	Group  bool
	Commit CommitMode
	// MaxPollInterval bounds the application's time between two asks.
	MaxPollInterval time.Duration
	// SessionTimeout is the member's session timeout: a lost member's
	// rejoin is retried at a third of it.
	SessionTimeout time.Duration
	// CommitInterval is CommitOnInterval's bound: a handled position is
	// committed at most this long after it was handled.
	CommitInterval time.Duration
	// ResetError is set when the consumer's reset policy refuses an
	// offset out of the partition's range (parkway's ResetError): a
	// fetch that falls out of it ends the consumer instead of starting
	// over at the committed offset.
	ResetError bool
	// RetryMin and RetryMax bound the pause after a fetch failed with a
	// retriable error (the one backoff, doubling per failure of the
	// fetch, reset by its next answer).
	RetryMin, RetryMax time.Duration
}

// Fetcher names one fetch of a partition: a new one (a new ID) starts
// whenever the partition is held anew, so what an old one fetched is
// recognised and dropped.
type Fetcher struct {
	Part uint32
	ID   uint64
}

// ConsumerDriver is a consumer's state and decisions. It is not safe
// for concurrent use: its owner serialises calls.
type ConsumerDriver struct {
	cfg ConsumerDriverConfig
	// fetchers are the current fetches by partition; from, of each, the
	// offset its next fetch starts at (absent: at the committed offset,
	// or the reset policy's choice); retry, of each that failed since its
	// last answer, its backoff.
	fetchers map[uint32]uint64
	from     map[uint64]uint64
	retry    map[uint64]*backoff.Backoff
	nextID   uint64
	// processed are the handled positions not yet committed; commitAt,
	// under CommitOnInterval, when they are due for a commit (set when
	// the first of them was handled, moved on by each interval commit).
	processed map[uint32]uint64
	commitAt  time.Time
	// asking is set while the application waits for a message, askedAt
	// is when it last asked; idle once the member left for stalling.
	asking  bool
	askedAt time.Time
	idle    bool
	// delivering is the partition a message of which the application is
	// handling (-1: none), for member incarnation deliveringFor (epoch:
	// each join is a new one).
	delivering    int64
	deliveringFor uint64
	epoch         uint64
	// revokeBusy is set while a revocation runs: of generation revGen,
	// of partitions revParts, at step revStage. ackGen is the
	// generation heartbeats acknowledge: the last one whose revoked
	// partitions were released.
	revokeBusy bool
	revGen     uint64
	revParts   []uint32
	revStage   RevokeOp
	ackGen     uint64
}

// NewConsumerDriver returns the driver of a consumer started at now.
func NewConsumerDriver(cfg ConsumerDriverConfig, now time.Time) *ConsumerDriver {
	return &ConsumerDriver{cfg: cfg, fetchers: map[uint32]uint64{}, from: map[uint64]uint64{},
		retry: map[uint64]*backoff.Backoff{}, processed: map[uint32]uint64{}, askedAt: now, delivering: -1}
}

// Joined records a new membership (the first join or a rejoin after
// the old one lapsed) in generation gen: the fetchers of the old one
// stop (returned) and its handled positions are forgotten — the new
// member's partitions start at the group's committed offsets.
func (d *ConsumerDriver) Joined(gen uint64) []Fetcher {
	d.epoch++
	d.ackGen = gen
	stopped := d.dropFetchers()
	clear(d.processed)
	return stopped
}

// Member is the current membership's incarnation (0 before a join).
func (d *ConsumerDriver) Member() uint64 { return d.epoch }

// Partitions are the partitions fetched now, ascending.
func (d *ConsumerDriver) Partitions() []uint32 { return slices.Sorted(maps.Keys(d.fetchers)) }

// Fetching reports the current fetcher of part.
func (d *ConsumerDriver) Fetching(part uint32) (Fetcher, bool) {
	id, ok := d.fetchers[part]
	return Fetcher{Part: part, ID: id}, ok
}

// Assign makes the fetches match an assignment: held are the
// partitions the consumer may read, revoking those it still holds that
// move away. Fetchers of partitions not held stop (returned); handled
// positions of partitions neither held nor revoking are forgotten (the
// next holder starts from the committed offset; a revocation commits
// the revoking ones). added are the held partitions without a fetcher:
// the owner starts them with Start (after OnAssigned).
func (d *ConsumerDriver) Assign(held, revoking []uint32) (stopped []Fetcher, added []uint32) {
	for _, p := range slices.Sorted(maps.Keys(d.fetchers)) {
		if !slices.Contains(held, p) {
			stopped = append(stopped, d.stop(p))
		}
	}
	for p := range d.processed {
		if !slices.Contains(held, p) && !slices.Contains(revoking, p) {
			delete(d.processed, p)
		}
	}
	for _, p := range held {
		if _, ok := d.fetchers[p]; !ok {
			added = append(added, p)
		}
	}
	return stopped, added
}

// Assigned starts the fetches of parts, Assign's added, once the
// application was told of them (OnAssigned returned): the started ones
// are returned, for the owner to run.
func (d *ConsumerDriver) Assigned(parts []uint32) []Fetcher {
	var started []Fetcher
	for _, p := range parts {
		if f, ok := d.Start(p); ok {
			started = append(started, f)
		}
	}
	return started
}

// Start starts a fetch of part, unless one runs (ok false): its first
// fetch starts at the committed offset (From).
func (d *ConsumerDriver) Start(part uint32) (f Fetcher, ok bool) {
	if _, running := d.fetchers[part]; running {
		return Fetcher{}, false
	}
	d.nextID++
	d.fetchers[part] = d.nextID
	return Fetcher{Part: part, ID: d.nextID}, true
}

// stop forgets part's fetcher.
func (d *ConsumerDriver) stop(part uint32) Fetcher {
	id := d.fetchers[part]
	delete(d.fetchers, part)
	delete(d.from, id)
	delete(d.retry, id)
	return Fetcher{Part: part, ID: id}
}

// dropFetchers stops every fetcher.
func (d *ConsumerDriver) dropFetchers() []Fetcher {
	var stopped []Fetcher
	for _, p := range slices.Sorted(maps.Keys(d.fetchers)) {
		stopped = append(stopped, d.stop(p))
	}
	return stopped
}

// current reports whether f is its partition's current fetcher.
func (d *ConsumerDriver) current(f Fetcher) bool {
	id, ok := d.fetchers[f.Part]
	return ok && id == f.ID
}

// From is where f's next fetch starts: at offset, or (ok false) at the
// committed offset — a group's, or a named consumer's stored one — or
// where the reset policy says without one.
func (d *ConsumerDriver) From(f Fetcher) (offset uint64, ok bool) {
	offset, ok = d.from[f.ID]
	return offset, ok
}

// Fetched records that f's fetch answered up to next (exclusive) and
// its messages, if any, went to the application's queue: the next
// fetch starts there, at once (a failure's backoff starts over).
func (d *ConsumerDriver) Fetched(f Fetcher, next uint64) {
	if d.current(f) {
		d.from[f.ID] = next
		delete(d.retry, f.ID)
		if testhooks.CommitBeforeHandled.Load() {
			d.processed[f.Part] = next // the broken build: handled before it was handed out
		}
	}
}

// FetchOp is what a consumer's fetch does after a failed poll.
type FetchOp uint8

const (
	// FetchRetry polls again after FetchStep.Wait (0: at once).
	FetchRetry FetchOp = iota
	// FetchEnd ends the fetch: the group moved on, or the member's
	// lease lapsed. The owner refreshes the assignment, which starts the
	// partition's fetch again if it is still held.
	FetchEnd
	// FetchFatal ends the consumer: its iteration ends with the error.
	FetchFatal
)

// FetchStep is a failed fetch's next step (FetchFailed).
type FetchStep struct {
	Op FetchOp
	// Wait is FetchRetry's pause.
	Wait time.Duration
	// Stopped is set, with FetchEnd, when f was current: the driver
	// forgot it, and the owner stops it.
	Stopped bool
}

// FetchFailed decides what fetch f does after its poll failed with err:
// a refusal because the group moved on or the member's lease lapsed
// ends it (FetchEnd); a position truncation passed starts over at the
// committed offset, at once (unless the reset policy refuses: fatal); a
// topic, stream or group gone, or the node closed, ends the consumer;
// anything else is retried after the fetch's backoff.
func (d *ConsumerDriver) FetchFailed(f Fetcher, err error) FetchStep {
	switch {
	case errors.Is(err, metadata.ErrNotAssigned), errors.Is(err, metadata.ErrStaleGeneration),
		errors.Is(err, metadata.ErrUnknownMember), errors.Is(err, metadata.ErrRebalanceInProgress):
		return FetchStep{Op: FetchEnd, Stopped: d.Stopped(f)}
	case errors.Is(err, partition.ErrOffsetOutOfRange) && !d.cfg.ResetError:
		d.Reset(f)
		return FetchStep{Op: FetchRetry}
	case ConsumerFatal(err):
		return FetchStep{Op: FetchFatal}
	}
	if !d.current(f) {
		return FetchStep{Op: FetchEnd}
	}
	bo := d.retry[f.ID]
	if bo == nil {
		b := backoff.New(d.cfg.RetryMin, d.cfg.RetryMax)
		bo = &b
		d.retry[f.ID] = bo
	}
	return FetchStep{Op: FetchRetry, Wait: bo.Next()}
}

// ConsumerFatal reports the errors a consumer cannot recover from by
// itself: its topic, stream or group is gone, its node closed, or an
// offset out of range that its reset policy refuses.
func ConsumerFatal(err error) bool {
	return errors.Is(err, metadata.ErrTopicNotFound) || errors.Is(err, metadata.ErrStreamNotFound) ||
		errors.Is(err, metadata.ErrGroupNotFound) || errors.Is(err, ErrClosed) ||
		errors.Is(err, partition.ErrOffsetOutOfRange)
}

// Reset records that f's position fell out of the partition's range
// (truncation passed it): the next fetch starts over at the committed
// offset.
func (d *ConsumerDriver) Reset(f Fetcher) { delete(d.from, f.ID) }

// Stopped records that f ended by itself (the group moved on, the
// member's lease lapsed): it is forgotten, if still current, and the
// owner refreshes the assignment, which starts it again if the
// partition is still held.
func (d *ConsumerDriver) Stopped(f Fetcher) bool {
	if !d.current(f) {
		return false
	}
	d.stop(f.Part)
	return true
}

// Deliver is the check before one message of f is handed to the
// application: f is still current. If it is, from here until Handled
// (or Refused) a revocation of the partition waits; the owner then
// applies the member's fence and reports a refusal with Refused.
func (d *ConsumerDriver) Deliver(f Fetcher) bool {
	if !d.current(f) {
		return false
	}
	d.delivering, d.deliveringFor = int64(f.Part), d.epoch
	return true
}

// Refused records that the fence refused a message of f (its partition
// is moving away, or the member's lease lapsed): it is not handed out,
// and neither is the rest of its batch. If f was current it is replaced
// (ok set): the owner stops f and starts restart, whose first fetch
// starts at the committed offset. f's position is past messages never
// handed out: were it kept, a lease that lapsed and came back would let
// the fetcher go on past them, and a commit after would skip them. A
// partition that moved stops at the new fetcher's first poll, which its
// fence refuses.
func (d *ConsumerDriver) Refused(f Fetcher) (restart Fetcher, ok bool) {
	d.delivering, d.deliveringFor = -1, 0
	if !d.current(f) {
		return Fetcher{}, false
	}
	d.stop(f.Part)
	return d.Start(f.Part)
}

// Handled records that the application handled f's messages before
// next (its loop body returned) at now. The position counts if f is
// current, or if the message passed the fence for the current member
// while its partition moved meanwhile (the revocation commits it). arm
// reports a first position waiting for a commit under CommitOnInterval:
// it is due CommitInterval after now, and the owner's commit timer
// starts (NextCommit).
func (d *ConsumerDriver) Handled(f Fetcher, next uint64, now time.Time) (arm bool) {
	fenced := d.delivering == int64(f.Part) && d.deliveringFor != 0 && d.deliveringFor == d.epoch
	if d.current(f) || fenced {
		arm = len(d.processed) == 0 && d.cfg.Commit == CommitOnInterval
		if arm {
			d.commitAt = now.Add(d.cfg.CommitInterval)
		}
		d.processed[f.Part] = next
	}
	d.delivering, d.deliveringFor = -1, 0
	return arm
}

// Delivering reports whether the application handles a message of one
// of parts now: a revocation of parts waits for it.
func (d *ConsumerDriver) Delivering(parts []uint32) bool {
	return d.delivering >= 0 && slices.Contains(parts, uint32(d.delivering))
}

// BatchDone reports whether the end of a handled batch commits now
// (CommitAfterBatch).
func (d *ConsumerDriver) BatchDone() bool { return d.cfg.Commit == CommitAfterBatch }

// Uncommitted reports whether handled positions wait for a commit.
func (d *ConsumerDriver) Uncommitted() bool { return len(d.processed) > 0 }

// NextCommit is CommitOnInterval's timer at now: the wait until the
// handled positions waiting are due (0: now), ok false when none wait
// or the policy is another (the timer stops: an idle consumer's never
// fires).
func (d *ConsumerDriver) NextCommit(now time.Time) (wait time.Duration, ok bool) {
	if d.cfg.Commit != CommitOnInterval || len(d.processed) == 0 {
		return 0, false
	}
	return max(d.commitAt.Sub(now), 0), true
}

// IntervalCommit is CommitOnInterval's commit at now: when the handled
// positions waiting are due (ok), offsets are to commit (then
// Committed, as ToCommit's), and the positions still waiting after it —
// its commit failed, or more were handled meanwhile — are due an
// interval later.
func (d *ConsumerDriver) IntervalCommit(now time.Time) (offsets map[uint32]uint64, ok bool) {
	if _, armed := d.NextCommit(now); !armed || now.Before(d.commitAt) {
		return nil, false
	}
	d.commitAt = now.Add(d.cfg.CommitInterval)
	offsets = d.ToCommit()
	if testhooks.IntervalCommitsFetched.Load() {
		// The broken build: the fetches' positions, past batches the
		// application was not handed yet.
		for p, id := range d.fetchers {
			if off, known := d.from[id]; known {
				offsets[p] = off
			}
		}
	}
	return offsets, true
}

// ToCommit are the handled positions to commit (nil: none), a copy.
func (d *ConsumerDriver) ToCommit() map[uint32]uint64 {
	if len(d.processed) == 0 {
		return nil
	}
	return maps.Clone(d.processed)
}

// Committed forgets the positions of offsets that did not move since
// ToCommit read them: they are committed, or given up (their partition
// moved; its next holder redelivers from the committed offset).
func (d *ConsumerDriver) Committed(offsets map[uint32]uint64) {
	for p, off := range offsets {
		if d.processed[p] == off {
			delete(d.processed, p)
		}
	}
}

// Rebalanced records that a group's commit of offsets (read with
// ToCommit) was refused because the group moved on; held are the
// partitions the member holds after a refresh (those being revoked
// included; none if the refresh failed). The positions of partitions
// that moved are given up — their next holder redelivers from the
// committed offset —, and retry are the others, to commit again (then
// Committed, whether that commit succeeds or is refused again).
func (d *ConsumerDriver) Rebalanced(offsets map[uint32]uint64, held []uint32) (retry map[uint32]uint64) {
	moved := maps.Clone(offsets)
	maps.DeleteFunc(moved, func(p uint32, _ uint64) bool { return slices.Contains(held, p) })
	d.Committed(moved)
	retry = maps.Clone(offsets)
	maps.DeleteFunc(retry, func(p uint32, _ uint64) bool { return !slices.Contains(held, p) })
	return retry
}

// CommitsOnLeave reports whether the consumer commits what it handled
// when it leaves (closes, ends, stalls) or gives a partition up.
func (d *ConsumerDriver) CommitsOnLeave() bool { return d.cfg.Commit != CommitManual }

// Follow acts on the assignment a refresh found, in generation gen: a
// member with nothing being revoked acknowledges gen (its next heartbeat
// releases nothing it still hands out); one with partitions being
// revoked starts a revocation of them (revoke set), one at a time,
// which the owner runs step by step (RevokeNext) and ends with
// RevokeDone.
func (d *ConsumerDriver) Follow(gen uint64, revoking []uint32) (revoke bool) {
	if d.revokeBusy {
		return false
	}
	if len(revoking) == 0 {
		d.ackGen = max(d.ackGen, gen)
		return false
	}
	d.revokeBusy, d.revGen, d.revParts, d.revStage = true, gen, slices.Clone(revoking), RevokeWait
	return true
}

// RevokeOp is a revocation's next step.
type RevokeOp uint8

const (
	// RevokeWait waits until the application is done with the message
	// of a revoked partition it is handling (Handled or Refused ends
	// it), or until the owner gives up after MaxPollInterval.
	RevokeWait RevokeOp = iota
	// RevokeCallback tells the application (its OnRevoked): it has
	// handled the last message of the partitions it will get, and may
	// commit (CommitManual's application commits here).
	RevokeCallback
	// RevokeCommit commits the revoked partitions' handled positions,
	// RevokeStep.Offsets (none under CommitManual, or none handled: no
	// commit).
	RevokeCommit
	// RevokeRelease sends the heartbeat acknowledging the revocation's
	// generation, which releases the partitions to their next holders;
	// its answer ends the revocation (RevokeDone).
	RevokeRelease
)

// RevokeStep is a revocation's next step (RevokeNext).
type RevokeStep struct {
	Op RevokeOp
	// Parts are the revoked partitions, Gen the generation that revokes
	// them, Offsets RevokeCommit's positions.
	Parts   []uint32
	Gen     uint64
	Offsets map[uint32]uint64
}

// RevokeNext is the running revocation's next step, in order: wait for
// the message being handled (unless waited: the owner gave up waiting),
// OnRevoked, the commit, the release; the owner carries each out and
// asks again, until RevokeRelease, whose answer it reports with
// RevokeDone. Behaviour 33: the next holder gets the partitions only
// after the application handled its last message of them, was told,
// and their positions were committed.
func (d *ConsumerDriver) RevokeNext(waited bool) RevokeStep {
	st := RevokeStep{Op: d.revStage, Parts: slices.Clone(d.revParts), Gen: d.revGen}
	switch d.revStage {
	case RevokeWait:
		if !waited && d.Delivering(d.revParts) {
			return st
		}
		d.revStage = RevokeCallback
		st.Op = RevokeCallback
	case RevokeCallback:
		d.revStage = RevokeCommit
		st.Op, st.Offsets = RevokeCommit, d.revoke(d.revParts)
	case RevokeCommit:
		d.revStage = RevokeRelease
		st.Op = RevokeRelease
	}
	return st
}

// revoke takes the handled positions of the revoked parts: to commit
// before they are released (none under CommitManual, whose application
// commits in OnRevoked); they are forgotten either way.
func (d *ConsumerDriver) revoke(parts []uint32) map[uint32]uint64 {
	offsets := map[uint32]uint64{}
	for _, p := range parts {
		if off, ok := d.processed[p]; ok && d.cfg.Commit != CommitManual {
			offsets[p] = off
		}
		delete(d.processed, p)
	}
	return offsets
}

// RevokeDone ends a revocation: released reports whether the heartbeat
// acknowledging its generation was answered (the partitions went to
// their next holders); if not, the next refresh revokes again.
func (d *ConsumerDriver) RevokeDone(released bool) {
	if d.revokeBusy && released {
		d.ackGen = max(d.ackGen, d.revGen)
	}
	d.revokeBusy, d.revParts, d.revStage = false, nil, RevokeWait
}

// Revoking reports whether a revocation runs.
func (d *ConsumerDriver) Revoking() bool { return d.revokeBusy }

// AckGen is the generation a heartbeat acknowledges.
func (d *ConsumerDriver) AckGen() uint64 { return d.ackGen }

// Asked records at now that the application asks for a message
// (waiting: the iterator now waits for one) or is done waiting. rejoin
// reports an ask after the member left for stalling: the owner
// heartbeats now, which finds the member gone and joins again.
func (d *ConsumerDriver) Asked(waiting bool, now time.Time) (rejoin bool) {
	d.asking, d.askedAt = waiting, now
	rejoin = d.idle
	d.idle = false
	return rejoin
}

// GotBatch records that the iterator stopped waiting: it hands the
// application a batch, whose handling MaxPollInterval bounds.
func (d *ConsumerDriver) GotBatch() { d.asking = false }

// Stalled reports whether a group member's application has not asked
// for a message for longer than MaxPollInterval at now: the owner
// leaves (Leave).
func (d *ConsumerDriver) Stalled(now time.Time) bool {
	return d.cfg.Group && !d.idle && !d.asking && now.Sub(d.askedAt) > d.cfg.MaxPollInterval
}

// Leave records that the member leaves its group for a stalled
// application, or the consumer ends: every fetcher stops (returned), so
// nothing more is handed out under this membership; the owner commits
// (CommitsOnLeave) and leaves. The application's next ask joins again.
func (d *ConsumerDriver) Leave(stalled bool) []Fetcher {
	if stalled {
		d.idle = true
	}
	return d.dropFetchers()
}

// Idle reports whether the member left for a stalled application.
func (d *ConsumerDriver) Idle() bool { return d.idle }

// Live is the member's liveness bound at now, which its node's lease
// keeping asks: the application asks for messages, or has handled one
// for no longer than MaxPollInterval, and the consumer did not leave
// for exceeding it.
func (d *ConsumerDriver) Live(now time.Time) bool {
	return !d.idle && (d.asking || now.Sub(d.askedAt) <= d.cfg.MaxPollInterval)
}

// NextHeartbeat is the wait at now before the next heartbeat: every,
// or less if the application's processing bound passes sooner, or a
// third of the session timeout while the member is lost (its node
// found it gone and the rejoin failed: it is tried again then).
func (d *ConsumerDriver) NextHeartbeat(now time.Time, every time.Duration, lost bool) time.Duration {
	if !d.cfg.Group {
		return every
	}
	if lost {
		every = min(every, d.cfg.SessionTimeout/3)
	}
	if !d.asking && !d.idle {
		every = min(every, max(d.askedAt.Add(d.cfg.MaxPollInterval).Sub(now)+time.Millisecond, time.Millisecond))
	}
	return every
}
