package shard

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/affinity"
	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/internal/run"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
)

// Defaults for Config.
const (
	// DefaultInboxSize is the reference server's inbox bound.
	DefaultInboxSize = 1024
	// MaxInboxSize bounds Config.InboxSize: the inbox is allocated whole
	// when the shard starts (24 bytes a frame, 24 MiB at the bound).
	MaxInboxSize = 1 << 20
	// DefaultInboxBytes bounds the bytes of peer frames in the inbox: 64
	// MiB, four batches at the default MaxBatchBytes replicating at once.
	DefaultInboxBytes = 64 << 20
	// MaxInboxBytes bounds Config.InboxBytes.
	MaxInboxBytes = 1 << 30
	// DefaultControlSize bounds queued control operations. The reconciler
	// waits for each operation, so a handful is plenty.
	DefaultControlSize = 16
)

// Config configures a Shard. Zero fields take defaults.
type Config struct {
	// ID is the shard's index on its node, 0 ≤ ID < router shard count.
	ID int
	// InboxSize bounds the inbox (default 1,024 frames). Sends never block:
	// a full inbox refuses the frame and the sender answers it.
	InboxSize int
	// InboxBytes bounds the bytes of the peer frames (OpRaft, OpCatchUp)
	// waiting in the inbox (default DefaultInboxBytes, at most
	// MaxInboxBytes), each charged its payload (a raft message's encoded
	// size, a catch-up message's length) plus a fixed 64 bytes; one
	// partition's frames may hold a quarter of it, one sending peer's
	// (Request.Peer) half. A peer frame that would pass any is refused (ErrInboxBytes) unless nothing is
	// held ahead of it, so a frame larger than the bound is not refused
	// for good; a refused frame is lost, which raft and catch-up
	// repair by sending again. Client frames are not charged: their
	// callers wait for their answers (a forwarded request is bounded by
	// the node's forward budget).
	InboxBytes int64
	// ControlSize bounds queued control operations (default 16).
	ControlSize int
	// Park bounds the park buffer.
	Park ParkLimits
	// MaxWaiters bounds the polls waiting on the shard (default
	// DefaultMaxWaiters); one more is answered ErrTooManyWaiters.
	MaxWaiters int
	// PinCPU, when true, pins the pump's OS thread to CPU (Linux only).
	// A pinned shard's frames never run on their callers' goroutines
	// (inline.go): its work stays on its CPU.
	PinCPU bool
	CPU    int
	// Logger receives diagnostics (default: silent).
	Logger hclog.Logger
	// Metrics receives counters (default: a private, unregistered set).
	Metrics *metrics.Metrics
	// Clock times interval fsyncs and raft ticks (default: the wall clock).
	Clock clock.Clock
	// Replication, when set, replicates every owned partition with raft.
	Replication *Replication
	// Journal, when set, makes each commit group of FsyncAlways
	// partitions durable with one journal write and fsync instead of an
	// fsync per partition (partition.Journal; single node only: replicated
	// partitions keep their raft logs, so it is refused with Replication).
	// The shards of a node take handles on their store's one journal, so
	// groups the shards commit at the same time share one write and one
	// fsync. The shard owns its handle: Close closes it after the
	// partitions.
	Journal *partition.Journal
	// Carried, when set, returns the carried produce (Request.Carried
	// set, Messages the batch) that the host's metadata log holds for a
	// partition's incarnation and no fsync of the partition has settled
	// yet, or nil: a partition built for it (InsertOwned), or confirmed
	// without its carried produce having reached it, takes it before
	// anything else (carried.go). It runs on the shard's goroutine and
	// must not block. A node that is not clustered sets it.
	Carried func(ns metadata.Namespace, epoch uint64) *Request
	// Manual, when true, runs the shard without a goroutine, as a state
	// machine driven by hand (etcd raft's RawNode style), for the
	// deterministic simulator and for tests:
	//
	//   - Start launches nothing.
	//   - Control operations issued through the exported methods
	//     (InsertOwned, Tombstone, RemoveOwned, SetRow, Sweep, Inspect,
	//     SetDurability, EnforceRetention, Leader) are applied inline, on
	//     the caller's goroutine, before the method returns: the caller is
	//     the pump.
	//   - Frames handed to TrySend wait in the inbox until Step handles
	//     them, one per call.
	//
	// A manual shard is not safe for concurrent use: every method except
	// Parked and ID must be called from one goroutine (the driver), and
	// Step never runs concurrently with a control operation. What the
	// shard does is otherwise exactly what the pump does: both run the
	// same units of work in the same order of precedence.
	Manual bool
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.ID < 0 {
		errs = append(errs, fmt.Errorf("shard ID %d < 0", c.ID))
	}
	if c.InboxSize < 0 || c.InboxSize > MaxInboxSize {
		errs = append(errs, fmt.Errorf("shard InboxSize %d outside [0, %d] (0 for the default)", c.InboxSize, MaxInboxSize))
	}
	if c.InboxBytes < 0 || c.InboxBytes > MaxInboxBytes {
		errs = append(errs, fmt.Errorf("shard InboxBytes %d outside [0, %d] (0 for the default)", c.InboxBytes, MaxInboxBytes))
	}
	if c.ControlSize < 0 {
		errs = append(errs, fmt.Errorf("shard ControlSize %d < 0", c.ControlSize))
	}
	if c.MaxWaiters < 0 {
		errs = append(errs, fmt.Errorf("shard MaxWaiters %d < 0", c.MaxWaiters))
	}
	if c.PinCPU && c.CPU < 0 {
		errs = append(errs, fmt.Errorf("shard CPU %d < 0", c.CPU))
	}
	errs = append(errs, c.Park.validate()...)
	if c.Journal != nil && c.Replication != nil {
		errs = append(errs, errors.New("shard Journal and Replication are exclusive"))
	}
	if r := c.Replication; r != nil {
		if r.Node == 0 || len(r.Peers) == 0 || r.Send == nil {
			errs = append(errs, errors.New("shard Replication needs Node, Peers and Send"))
		}
		if r.TickInterval < 0 || r.ElectionTicks < 0 {
			errs = append(errs, errors.New("shard Replication TickInterval and ElectionTicks must not be negative"))
		}
	}
	return errors.Join(errs...)
}

// Shard owns partitions and serves the frames addressed to them.
type Shard struct {
	id     int
	cfg    Config
	log    hclog.Logger
	m      *metrics.Shard
	meta   *metadata.Store
	router *router.Router[Frame]
	table  *router.Table

	inbox chan inboxFrame
	ctrl  chan control
	// lane queues the frames of waiting callers beside the inbox
	// (lane.go); laneLeft counts the frames of the run the pump is
	// handling still to come, laneRuns the runs taken (State).
	lane     lane
	laneLeft int
	laneRuns uint64
	// answered: the pump handed an answer over since it last waited for
	// work (yieldBeforeWait).
	answered bool
	// inboxBytes is what the peer frames in the inbox are charged
	// (inbox.go).
	inboxBytes *inboxBudget

	// run is held by whoever does the pump's work: the pump, except
	// while it waits, when a caller may run its own frame (inline.go).
	// handoffs counts the frames and control operations handed to the
	// inbox and the control channel, handled (holding run) those the
	// pump has taken (inbox.go's taken, and after each control
	// operation): a frame may run inline only when they are equal. waits is what the pump's wait selects on; poke wakes it
	// to look again. inlineRuns counts the frames run inline (State).
	run        runToken
	handoffs   atomic.Uint64
	handled    uint64
	waits      waitSet
	poke       chan struct{}
	inline     bool
	inlineRuns uint64

	// sendMu orders TrySend against Close: senders hold it shared while
	// they check closed and enqueue, Close takes it exclusively to flip
	// closed. After that no frame can enter the inbox, so the final drain
	// answers every frame that did.
	sendMu sync.RWMutex
	closed bool

	// parked mirrors the park buffer's frame count for readers off the
	// pump (the reconciler's fast-skip), without a round trip to the pump.
	parked atomic.Int64
	// fenced counts owned partitions fenced after a failed fsync.
	fenced atomic.Int64

	group     *run.Group
	startOnce sync.Once
	closeOnce sync.Once

	clock clock.Clock

	// rg hosts the partitions' raft groups (raftgroups.go).
	rg raftGroups
	// commit makes appends durable before their answers (commitgroup.go).
	commit commitGroup
	// polls are the waiting polls (polls.go).
	polls waitingPolls
	// offsets writes consumer offset stores off the pump (offsetwrite.go).
	offsets offsetWriter

	// Pump-owned state: touched only by the pump goroutine (or, in Manual
	// mode, by the driver's goroutine, which is the pump).
	owned        map[metadata.Namespace]*owned
	appending    []*owned                      // partitions with produces queued for one Append
	appendQueued int                           // produces queued across them
	coalesceBuf  []partition.Message           // scratch for a coalesced batch
	parkTimer    clock.Timer                   // armed at the earliest parked frame's expiry
	parkAt       time.Time                     // when parkTimer fires; zero when disarmed
	tombstoned   map[metadata.Namespace]uint64 // ns → epoch being torn down
	// carried are the carried produces (Request.Carried) not yet covered
	// by an fsync of their partition (carried.go).
	carried map[metadata.Namespace]*Request
	park    *parkBuffer
	pass    uint64 // sweeps applied
}

// New returns a shard reading committed metadata from meta and routing
// forwarded frames through rt. Call Start to run its pump.
func New(cfg Config, meta *metadata.Store, rt *router.Router[Frame]) (*Shard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if meta == nil || rt == nil {
		return nil, errors.New("parkway: shard needs a metadata store and a router")
	}
	if cfg.ID >= rt.Shards() {
		return nil, fmt.Errorf("parkway: shard ID %d out of range for %d shards", cfg.ID, rt.Shards())
	}
	if cfg.InboxSize == 0 {
		cfg.InboxSize = DefaultInboxSize
	}
	if cfg.InboxBytes == 0 {
		cfg.InboxBytes = DefaultInboxBytes
	}
	if cfg.ControlSize == 0 {
		cfg.ControlSize = DefaultControlSize
	}
	if cfg.MaxWaiters == 0 {
		cfg.MaxWaiters = DefaultMaxWaiters
	}
	cfg.Park = cfg.Park.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if r := cfg.Replication; r != nil {
		rc := *r
		if rc.TickInterval == 0 {
			rc.TickInterval = DefaultTickInterval
		}
		if rc.CompactEntries == 0 {
			rc.CompactEntries = DefaultCompactEntries
		}
		if rc.CompactBytes == 0 {
			rc.CompactBytes = DefaultCompactBytes
		}
		cfg.Replication = &rc
	}
	s := &Shard{
		id:         cfg.ID,
		cfg:        cfg,
		log:        cfg.Logger.Named(fmt.Sprintf("shard-%d", cfg.ID)),
		m:          cfg.Metrics.Shard(cfg.ID),
		meta:       meta,
		router:     rt,
		table:      rt.Table(),
		inbox:      make(chan inboxFrame, cfg.InboxSize),
		inboxBytes: newInboxBudget(cfg.InboxBytes),
		lane:       newLane(WaitedLaneFactor * cfg.InboxSize),
		ctrl:       make(chan control, cfg.ControlSize),
		group:      run.NewGroup(),
		clock:      cfg.Clock,
		owned:      make(map[metadata.Namespace]*owned),
		tombstoned: make(map[metadata.Namespace]uint64),
		park:       newParkBuffer(cfg.Park),
		run:        make(runToken, 1),
		poke:       make(chan struct{}, 1),
		inline:     !cfg.Manual && !cfg.PinCPU && cfg.Replication == nil,
	}
	// run is the pump's from the start (see pump): a frame may run
	// inline only once a started pump waits.
	s.run.lock()
	s.rg = raftGroups{
		owner: s, polls: &s.polls, commit: &s.commit,
		cfg: cfg.Replication, log: s.log, m: s.m, meta: meta, clock: cfg.Clock,
		replicated: make(map[metadata.Namespace]*owned),
	}
	if r := cfg.Replication; r != nil {
		s.rg.elect = groups.NewElections[*owned](&s.rg, r.Quiesce, s.rg.electionTicks())
	}
	s.commit = commitGroup{owner: s, polls: &s.polls, clock: cfg.Clock, log: s.log, m: s.m,
		manual: cfg.Manual, journal: cfg.Journal}
	s.polls = waitingPolls{owner: s, clock: cfg.Clock, meta: meta, m: s.m, maxWaiters: cfg.MaxWaiters,
		waiters: newWaiterTree()}
	return s, nil
}

// ID is the shard's index.
func (s *Shard) ID() int { return s.id }

// Journaled reports whether the shard commits FsyncAlways partitions
// through a journal (Config.Journal), which holds the records of a
// partition built deferred (partition.FileStore.BuildDeferred) until its
// files exist.
func (s *Shard) Journaled() bool { return s.cfg.Journal != nil }

// Replicated reports whether the shard's partitions are raft group
// members (Config.Replication): each keeps a raft log in its directory,
// which holds the records of a partition built deferred
// (partition.FileStore.BuildDeferred) until its files exist (see
// partition.Lodger).
func (s *Shard) Replicated() bool { return s.cfg.Replication != nil }

// Start runs the pump. It is idempotent. A Manual shard starts no
// goroutine: its driver calls Step instead.
func (s *Shard) Start() {
	if s.cfg.Manual {
		return
	}
	s.startOnce.Do(func() { s.group.Go(s.pump) })
}

// Close stops taking frames, stops the pump, answers every queued and
// parked frame with ErrClosed and closes the owned partitions. It is
// idempotent and waits for the pump to exit.
func (s *Shard) Close() error {
	s.closeOnce.Do(func() {
		s.sendMu.Lock()
		s.closed = true
		s.sendMu.Unlock()
		s.group.Stop()
		if s.cfg.Manual {
			s.stopTimers() // the pump's exit does this in goroutine mode
		}
		s.shutdown()
	})
	return nil
}

// TrySend hands f to the inbox without blocking. It returns
// router.ErrFull or router.ErrDisconnected when it did not take f.
func (s *Shard) TrySend(f Frame) error {
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	if s.closed {
		return router.ErrDisconnected
	}
	in, err := s.charge(f)
	if err != nil {
		return err
	}
	s.handoffs.Add(1)
	select {
	case s.inbox <- in:
		return nil
	default:
		s.handoffs.Add(^uint64(0))
		s.uncharge(in)
		return router.ErrFull
	}
}

// Flush waits until every frame that entered the inbox before it has been
// handled (served, parked, forwarded or answered). It is a barrier through
// the inbox itself, so it orders with frames the way control operations,
// which overtake the inbox, cannot: a test or simulator that sends a frame
// and then flushes knows the frame has reached its fate. Frames in the
// waited lane (lane.go) are not ordered with it: their callers wait for
// their answers themselves.
func (s *Shard) Flush(ctx context.Context) error {
	if s.cfg.Manual {
		return s.flushManual(ctx)
	}
	reply := make(chan Response, 1)
	if err := s.Send(ctx, Frame{Req: &Request{Op: opFlush}, Reply: reply}); err != nil {
		return err
	}
	select {
	case r := <-reply:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Send is TrySend that waits for room in the inbox until ctx ends: the
// backpressure a client applies after a refusal, instead of polling. It
// needs a running pump (not manual mode). Holding sendMu shared while
// blocked is safe: closed is still false, so the pump is running and frees
// a slot.
func (s *Shard) Send(ctx context.Context, f Frame) error {
	return s.SendBefore(ctx, f, nil) // a nil channel never delivers
}

// pump is the shard's goroutine. Order of precedence: stop, control
// operations, inbox frames. Control first means a partition that just
// materialised serves its parked frames before newer frames are looked at.
// There is no periodic tick of the shard's own: re-dispatch happens when
// InsertOwned applies, and aging when the reconciler sweeps. The only
// timers are the interval-fsync timer, armed while an FsyncInterval
// partition is dirty, the raft tick, armed while the shard holds
// replicated partitions (raft needs heartbeats), and the wait timer,
// armed for the earliest deadline of the waiting polls. An idle single
// node's shard sleeps, waiting polls or not.
//
// Each unit of work (runControl, handleFrame, syncFired, tickFired) is
// shared with Step, which runs the same units without blocking.
func (s *Shard) pump(ctx context.Context) {
	if s.cfg.PinCPU {
		if err := affinity.Pin(s.cfg.CPU); err != nil {
			s.log.Warn("cpu pinning failed; running unpinned", "cpu", s.cfg.CPU, "error", err)
		}
	}
	done := ctx.Done()
	defer s.stopTimers()
	// The pump holds the run token while it works and lets it go only to
	// wait: a caller may run its frame inline while the pump waits
	// (inline.go). New took it for the pump, so nothing runs inline
	// before Start, and the pump exits holding it, so nothing runs
	// inline after.
	for {
		select {
		case <-done:
			return
		case c := <-s.ctrl:
			s.runControl(c)
			s.handled++
			continue
		default:
		}
		if s.yieldBeforeWait() {
			s.run.unlock()
			runtime.Gosched()
			s.run.lock()
			continue
		}
		w := s.waitSet()
		s.waits = w
		s.run.unlock()
		var (
			c    control
			in   inboxFrame
			unit pumpUnit
		)
		select {
		case <-done:
			unit = unitDone
		case c = <-s.ctrl:
			unit = unitControl
		case in = <-s.inbox:
			unit = unitFrame
		case <-s.lane.wake:
			unit = unitLane
		case <-w.sync:
			unit = unitSync
		case <-w.tick:
			unit = unitTick
		case <-w.wait:
			unit = unitWait
		case <-w.park:
			unit = unitPark
		case <-w.journal:
			unit = unitJournal
		case <-w.written:
			unit = unitWritten
		case <-s.poke:
			unit = unitPoke
		}
		s.run.lock()
		switch unit {
		case unitDone:
			return
		case unitControl:
			s.runControl(c)
			s.handled++
		case unitFrame:
			s.handleFrame(s.taken(in))
		case unitLane:
			s.handleLane()
		case unitSync:
			s.syncFired()
		case unitTick:
			s.tickFired()
		case unitWait:
			s.waitTimerFired()
		case unitPark:
			s.parkFired()
		case unitJournal:
			s.commit.journalCheckpoint()
		case unitWritten:
			s.offsetsWrittenFired()
		case unitPoke:
			// A frame run inline changed what the pump waits on: look again.
		}
	}
}

// pumpUnit is the unit of work the pump's wait ended with, run once it
// holds the run token again.
type pumpUnit uint8

const (
	unitDone pumpUnit = iota
	unitControl
	unitFrame
	unitLane
	unitSync
	unitTick
	unitWait
	unitPark
	unitJournal
	unitWritten
	unitPoke
)

// yieldBeforeWait reports whether the pump, about to wait for work,
// yields its processor first (runtime.Gosched): it answered callers since
// it last waited, and nothing is queued for it. A caller woken by an
// answer is made runnable on the pump's processor and runs only once the
// pump stops; had the pump parked in its select first (every channel of
// it locked, a waiter queued on each), a synchronous producer's next
// produce would wake it again (a second goroutine wake per round trip,
// often with a futex wake of an idle thread). Yielding, the caller runs
// at once and sends into the inbox while the pump is still runnable, and
// the pump finds that frame without parking: one wake per produce and
// wait instead of two. A caller that sends nothing more costs the pump
// one yield before it parks as before. A Manual shard's driver decides
// what runs next; Step never yields. Nor does a shard of a cluster
// (Config.Replication): its pump also steps raft groups for peers, and
// a yielded pump waits behind every runnable goroutine (transport,
// other pumps) where a parked one woken by a frame runs next on the
// sender's processor; the lone producer's round trip there is a
// replication round, and the yield was not measured to pay for it.
func (s *Shard) yieldBeforeWait() bool {
	y := s.answered && s.cfg.Replication == nil && s.waiting() == 0 && len(s.lane.wake) == 0
	s.answered = false
	return y
}

// Step does one unit of pump work on a Manual shard without blocking and
// reports whether there was any: a queued control operation first, else
// one inbox frame, else the waited lane's frames (lane.go), else a due
// interval-fsync timer, else a due raft tick, else a due waiting-poll
// deadline, else a due park expiry, else a due journal checkpoint — each
// followed, as on the pump, by
// raft ready processing, the commit-group flush check and the wake of
// waiting polls. It returns false, doing nothing, when the shard
// is idle, closed, or not Manual (a started shard's pump owns its state).
//
// Unlike the pump's select, which picks at random among ready cases, Step
// always takes the first ready unit in that order, so a driver that steps
// with a fixed schedule gets a reproducible run.
func (s *Shard) Step() bool {
	if !s.cfg.Manual || s.isClosed() {
		return false
	}
	select {
	case c := <-s.ctrl:
		s.runControl(c)
		s.handled++
		return true
	default:
	}
	select {
	case in := <-s.inbox:
		s.handleFrame(s.taken(in))
		return true
	default:
	}
	select {
	case <-s.lane.wake:
		s.handleLane()
		return true
	default:
	}
	select {
	case <-s.commit.syncC():
		s.syncFired()
		return true
	default:
	}
	select {
	case <-s.rg.tickC():
		s.tickFired()
		return true
	default:
	}
	select {
	case <-s.polls.waitC():
		s.waitTimerFired()
		return true
	default:
	}
	select {
	case <-s.parkC():
		s.parkFired()
		return true
	default:
	}
	select {
	case <-s.commit.journalDue():
		s.commit.journalCheckpoint()
		return true
	default:
	}
	return false
}

// runControl applies one control operation, as the pump does.
func (s *Shard) runControl(c control) {
	// A control operation may close, evict or re-configure a partition:
	// queued produces are appended (and answered) first.
	s.flushAppends()
	c.apply(s)
	s.settle()
}

// handleFrame handles one inbox frame, as the pump does.
func (s *Shard) handleFrame(f Frame) {
	s.handle(f)
	s.settle()
}

// syncFired runs the interval-fsync timer's work.
func (s *Shard) syncFired() {
	s.commit.syncDue()
	s.settle()
}

// waitTimerFired answers the waiting polls whose deadline passed.
func (s *Shard) waitTimerFired() {
	s.polls.waitFired()
	s.settle()
}

// tickFired runs the raft tick's work.
func (s *Shard) tickFired() {
	s.rg.tickArmed = false
	s.rg.tickRaft()
	s.settle()
}

// settle ends every unit of pump work: raft groups with work are
// processed and the commit group is closed if nothing else waits.
func (s *Shard) settle() {
	for {
		if len(s.rg.proposing) > 0 && (s.waiting() == 0 || s.rg.proposed >= maxGroup) {
			s.rg.flushProposals()
		}
		s.rg.processReady()
		// Applying the last entry in flight of a partition released the
		// produces gathered behind it: they are proposed now, with the
		// commit's frames (groupcommit.go).
		if !s.rg.released {
			break
		}
		s.rg.released = false
	}
	s.maybeFlush()
	s.polls.wakeWaiters()
	for len(s.rg.readyList) > 0 {
		// A waiter registered unconfirmed became a leader read (wait.go):
		// its confirmation starts now, not at the next unit of work.
		s.rg.processReady()
		s.polls.wakeWaiters()
	}
	s.rg.flushRaft()
}

func (s *Shard) stopTimers() {
	if s.commit.syncTimer != nil {
		s.commit.syncTimer.Stop()
	}
	if s.parkTimer != nil {
		s.parkTimer.Stop()
	}
	if s.rg.raftTimer != nil {
		s.rg.raftTimer.Stop()
	}
	if s.polls.waitTimer != nil {
		s.polls.waitTimer.Stop()
	}
}

func (s *Shard) isClosed() bool {
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	return s.closed
}

// flushManual is Flush on a Manual shard: the caller is the pump, so it
// steps the shard until the marker frame has been handled.
func (s *Shard) flushManual(ctx context.Context) error {
	reply := make(chan Response, 1)
	f := Frame{Req: &Request{Op: opFlush}, Reply: reply}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := s.TrySend(f)
		if err == nil {
			break
		}
		if !errors.Is(err, router.ErrFull) || !s.Step() {
			return ErrClosed
		}
	}
	for {
		select {
		case r := <-reply:
			return r.Err
		default:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !s.Step() {
			return ErrClosed // closed meanwhile: shutdown answered the marker
		}
	}
}

// maybeFlush appends the queued produces and closes the commit group when
// nothing else is waiting in the inbox (the pump is about to block, so
// waiting longer only adds latency) or when the group is full.
func (s *Shard) maybeFlush() {
	if len(s.appending) > 0 && (s.waiting() == 0 || s.appendQueued >= maxGroup) {
		s.flushAppends()
	}
	if len(s.commit.pending) > 0 && (s.waiting() == 0 || len(s.commit.pending) >= maxGroup) && !s.commit.lingerGroup() {
		s.commit.flushGroup()
	}
}

// shutdown runs after the pump has exited (so it owns the pump state) and
// after closed was set (so nothing new enters the inbox).
func (s *Shard) shutdown() {
	for {
		select {
		case in := <-s.inbox:
			s.drop(s.taken(in), metrics.ReasonShutdown, ErrClosed)
			continue
		case c := <-s.ctrl:
			c.abandonIt()
			continue
		default:
		}
		break
	}
	s.closeLane(metrics.ReasonShutdown, ErrClosed)
	s.park.order.Ascend(func(q *parkQueue) bool {
		for q.len() > 0 {
			s.drop(q.pop().frame, metrics.ReasonShutdown, ErrClosed)
		}
		return true
	})
	s.park = newParkBuffer(s.cfg.Park)
	s.gauges()
	s.flushAppends()
	s.commit.flushCarried() // their metadata log may forget them
	s.commit.flushGroup()
	s.polls.dropAllWaiters(ErrClosed)
	s.drainOffsetWrites()
	for _, o := range s.rg.replicated {
		s.rg.unreplicate(o, ErrClosed)
	}
	for ns, o := range s.owned {
		s.answerHeld(o, OutcomeUnknown(ErrClosed))
		if err := o.p.Close(); err != nil {
			s.log.Warn("closing partition", "ns", ns, "error", err)
		}
	}
	clear(s.owned)
	if j := s.cfg.Journal; j != nil {
		if err := j.Close(); err != nil {
			s.log.Warn("closing the journal", "error", err)
		}
	}
}

// handle routes one frame on the pump: serve, fence, forward or park.
func (s *Shard) handle(f Frame) {
	if f.Req.Op == opFlush {
		s.flushAppends()
		s.commit.flushGroup() // frames before the barrier include their acks
		s.answer(f, Response{})
		return
	}
	ns := f.Req.NS
	if o, ok := s.owned[ns]; ok {
		s.serveOwned(o, f)
		return
	}
	if _, ok := s.tombstoned[ns]; ok {
		// Behaviour 9: mid-teardown, not served.
		s.deny(f, metrics.DenyTombstoned, errTombstoned)
		return
	}
	info, known := s.meta.Partition(ns)
	if known && info.Owner != s.id {
		// The committed owner is another shard: a frame routed by a stale
		// row or by the hash fallback under a placement that differs from
		// the hash. Forward it rather than park it where it can never
		// materialise.
		s.forward(f, info.Owner)
		return
	}
	if known && !s.holds(info) {
		// The partition lives on other nodes: parking it here would only
		// time out.
		s.elsewhere(f, info)
		return
	}
	stamp := f.Req.Epoch
	if stamp == 0 && known {
		stamp = info.CreatedRevision
	}
	if f.Req.Carried != nil {
		s.keepCarried(f.Req)
	}
	s.parkFrame(f, stamp, s.pass)
}

// serveOwned applies the incarnation fences and serves f.
func (s *Shard) serveOwned(o *owned, f Frame) {
	epoch := o.p.Epoch()
	if f.Req.Epoch != 0 && f.Req.Epoch != epoch {
		s.stale(f)
		return
	}
	if f.Req.Carried != nil {
		s.keepCarried(f.Req)
	}
	if f.Req.Op == OpRaft {
		// Behaviour 20: the epoch matched, so the message is for this
		// incarnation; raft itself orders it against the group.
		s.rg.stepRaft(o, f)
		return
	}
	if f.Req.Op == OpCatchUp {
		s.rg.catchUpFrame(o, f)
		s.polls.touch(o)
		return
	}
	// Behaviour 10: an ack must never land in an incarnation that teardown
	// is about to erase. The committed created_revision is the truth; the
	// partition we hold is only as fresh as the last reconcile.
	// A provisional partition (provisional.go) is served before its
	// commit only for produces, whose answers it holds.
	committed, err := s.confirmed(o)
	if err != nil {
		s.deny(f, metrics.DenyIncarnation, err)
		return
	}
	if !committed && f.Req.Op != OpProduce {
		s.parkProvisional(o, f)
		return
	}
	if o.failed != nil {
		s.fenceFailed(o, f)
		return
	}
	if o.rep.grp != nil {
		switch {
		case f.Req.Op.IsWrite():
			s.rg.propose(o, f)
			return
		case f.Req.Op == OpPoll, f.Req.Op == OpGetOffset, f.Req.Op == OpOffsets:
			if s.polls.waitUnconfirmed(o, f, s.rg.quiesced(o)) || s.rg.readReplicated(o, f) {
				return
			}
		}
	}
	if f.Req.Term != 0 {
		// Fenced to a raft term, on a partition that is not replicated.
		s.answer(f, Response{Err: errTermFenced})
		return
	}
	if f.Req.Op == OpProduce {
		// An empty batch would vanish inside a coalesced one: it is
		// appended alone, which answers its error.
		if len(f.Req.Messages) > 0 || f.Req.Encoded != nil {
			s.queueAppend(o, f)
			if s.waiting() == 0 || s.appendQueued >= maxGroup {
				s.flushAppends() // nothing more to wait for
			}
		} else {
			s.flushAppendsOf(o)
			s.appendOne(o, f) // answers the bad input alone
		}
		return
	}
	// Anything else sees the partition with every produce queued before it.
	s.flushAppendsOf(o)
	if o.unacked() {
		// Never show a reader what has not been acknowledged: close the
		// group (sync and ack) before reading past it.
		s.commit.flushGroup()
		if o.failed != nil {
			s.fenceFailed(o, f) // the sync failed: what it covered is not acknowledged
			return
		}
	}
	s.serveRead(o, f)
}

// serveRead serves a request other than a produce against o's partition:
// a poll (which may wait), or an operation answered at once. Truncations
// touch o, so waiting polls they passed are answered.
func (s *Shard) serveRead(o *owned, f Frame) {
	if f.Req.Op == OpPoll {
		s.polls.servePoll(o, f)
		return
	}
	if f.Req.Op == OpStoreOffset && o.rep.grp == nil && s.stageOffset(o, f) {
		return
	}
	resp := serve(o.p, f.Req)
	if f.Req.Op == OpOffsets && o.rep.grp != nil {
		resp.Term = o.rep.grp.Term()
		if f.Req.FromLeader && o.rep.grp.IsLeader() {
			resp.InSync = o.rep.grp.InSync(inSyncLag)
			for i, id := range resp.InSync {
				resp.InSync[i] = raftid.Node(id) // replica ids name their nodes
			}
		}
	}
	resp.Err = s.damagedRead(o, f, s.fenceUnusable(o, resp.Err))
	s.answer(f, resp)
	if f.Req.Op == OpTruncate || f.Req.Op == OpPurge {
		s.polls.touch(o)
	}
}

// fenceUnusable fences o when err says its partition refuses every later
// operation until it is built again (partition.ErrUnusable: a write held
// behind failed and could not be taken back durably, met by a read as by
// a write), so the reconciler evicts and rebuilds it as after a failed
// fsync; unfenced, it stayed unusable until the node restarted. It
// returns the error to answer with: ErrPartitionFailed, as every later
// request to the fenced partition is answered.
func (s *Shard) fenceUnusable(o *owned, err error) error {
	if err == nil || !errors.Is(err, partition.ErrUnusable) {
		return err
	}
	if o.failed == nil {
		s.fence(o, err)
	}
	return fmt.Errorf("%w: %v: %w", ErrPartitionFailed, o.p.Namespace(), err)
}

// fenceFailed answers a request to a partition whose fsync failed (see
// owned.failed). A damaged replica waiting for its repair sends the
// group's requests to the group (damage.go).
func (s *Shard) fenceFailed(o *owned, f Frame) {
	if s.toGroup(o, f) {
		return
	}
	s.answer(f, Response{Err: fmt.Errorf("%w: %v: %w", ErrPartitionFailed, o.p.Namespace(), o.failed)})
}

// serve runs a request that is neither a produce nor a poll against its
// partition.
func serve(p partition.Partition, r *Request) Response {
	switch r.Op {
	case OpOffsets:
		resp := Response{Start: p.StartOffset(), End: p.NextOffset()}
		if r.Consumer != "" {
			resp.Offset, resp.Found, resp.Err = p.ConsumerOffset(r.Consumer)
		}
		return resp
	case OpStoreOffset:
		return Response{Err: p.StoreConsumerOffset(r.Consumer, r.Offset), Offset: r.Offset}
	case OpDeleteOffset:
		_, found, err := p.ConsumerOffset(r.Consumer)
		if err == nil {
			err = p.DeleteConsumerOffset(r.Consumer)
		}
		return Response{Err: err, Found: found}
	case OpGetOffset:
		off, ok, err := p.ConsumerOffset(r.Consumer)
		return Response{Err: err, Offset: off, Found: ok}
	case OpTruncate:
		return Response{Err: p.TruncateBefore(r.Offset), Offset: p.StartOffset()}
	case OpPurge:
		return Response{Err: p.TruncateBefore(p.NextOffset()), Offset: p.StartOffset()}
	}
	return Response{Err: fmt.Errorf("parkway: unknown op %d", r.Op)}
}

// parkFrame parks f, or sheds it when a bound is reached (behaviour 7).
// The frame expires at the earlier of its deadline and MaxAge from now;
// the park timer is pulled forward when it is the earliest.
func (s *Shard) parkFrame(f Frame, stamp, pass uint64) {
	expires := s.clock.Now().Add(s.cfg.Park.MaxAge)
	if d := f.Req.Deadline; !d.IsZero() && d.Before(expires) {
		expires = d
	}
	p := parkedFrame{frame: f, stamp: stamp, pass: pass, size: s.cfg.Park.footprint(f.payloadBytes()), expires: expires}
	if !s.park.park(f.Req.NS, p) {
		s.drop(f, metrics.ReasonParkOverflow, errParkOverflow)
		return
	}
	s.armPark(expires)
	s.gauges()
}

// armPark makes the park timer fire no later than at.
func (s *Shard) armPark(at time.Time) {
	if !s.parkAt.IsZero() && !at.Before(s.parkAt) {
		return
	}
	d := max(at.Sub(s.clock.Now()), 0)
	if s.parkTimer == nil {
		s.parkTimer = s.clock.NewTimer(d)
	} else {
		s.parkTimer.Reset(d)
	}
	s.parkAt = at
}

// parkC is the park timer's channel, nil (never ready) while disarmed.
func (s *Shard) parkC() <-chan time.Time {
	if s.parkAt.IsZero() {
		return nil
	}
	return s.parkTimer.C()
}

// parkFired answers the parked frames whose deadline or age bound has
// passed — by the shard's clock, whatever the reconciler is doing — and
// the held answers of provisional partitions whose deadline has
// (commitGroup.expireHeld), and re-arms the timer for the next expiry.
func (s *Shard) parkFired() {
	s.parkAt = time.Time{}
	now := s.clock.Now()
	next := s.park.expire(now, func(p parkedFrame) {
		s.drop(p.frame, metrics.ReasonParkExpired, errParkExpired)
	})
	if !next.IsZero() {
		s.armPark(next)
	}
	if held := s.commit.expireHeld(now); !held.IsZero() {
		s.armPark(held)
	}
	s.gauges()
	s.settle()
}

// forward hands f to shard owner's inbox. A full inbox answers the client
// with a retriable error (the shard cannot block its pump on a peer).
func (s *Shard) forward(f Frame, owner int) {
	_, err := s.router.SendTo(owner, f)
	switch {
	case err == nil:
		s.m.Forwarded.Inc()
	case errors.Is(err, router.ErrFull):
		s.drop(f, metrics.ReasonFull, errForwardFull)
	default:
		s.drop(f, metrics.ReasonMisrouted, fmt.Errorf("%w: %w", ErrRetry, err))
	}
}

// answer delivers r on f's reply path and reports whether it was taken.
func (s *Shard) answer(f Frame, r Response) bool {
	if f.Reply == nil {
		return false
	}
	select {
	case f.Reply <- r:
		s.answered = true
		return true
	default:
		// The reply channel had no room: a caller broke the capacity-1
		// contract or a frame was answered twice. Count it; never block.
		s.m.Drop(f.Req.Op.String(), metrics.ReasonDeliveryFailed)
		s.log.Error("reply channel full; answer lost", "ns", f.Req.NS, "op", f.Req.Op)
		return false
	}
}

// deny answers with a transient error and counts it once it is handed over.
func (s *Shard) deny(f Frame, reason string, err error) {
	if s.answer(f, Response{Err: err}) {
		s.m.Deny(reason)
	}
}

// drop answers a frame that will not be delivered and counts the drop.
func (s *Shard) drop(f Frame, reason string, err error) {
	s.m.Drop(f.Req.Op.String(), reason)
	s.answer(f, Response{Err: err})
}

// stale rejects a frame addressed to a dead incarnation (behaviour 4).
func (s *Shard) stale(f Frame) {
	s.m.StaleRejects.Inc()
	s.answer(f, Response{Err: ErrStaleIncarnation})
}

// Parked returns how many frames are parked right now.
func (s *Shard) Parked() int { return int(s.parked.Load()) }

func (s *Shard) gauges() {
	if s.park.frames == 0 && len(s.commit.held) == 0 && !s.parkAt.IsZero() {
		// Nothing left to expire: an idle shard keeps no timer armed.
		s.parkTimer.Stop()
		s.parkAt = time.Time{}
	}
	s.parked.Store(int64(s.park.frames))
	s.m.ParkedFrames.Set(float64(s.park.frames))
	s.m.ParkedBytes.Set(float64(s.park.bytes))
}
