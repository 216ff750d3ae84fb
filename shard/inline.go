package shard

import "time"

// Inline runs: a waiting caller's frame handled on the caller's own
// goroutine while the pump waits.
//
// A lone synchronous producer's round trip through the pump costs two
// goroutine hand-offs: its frame wakes the pump, the pump's answer wakes
// the producer. Each may land on another processor, and a wake of a
// processor whose thread sleeps costs a futex wake (on a virtual machine,
// tens of microseconds, one produce in ten: measured, bench/RESULTS.md
// "case 1, where the mean goes"). When the pump is waiting with nothing
// queued, the caller can do the pump's work itself: it takes the run
// token, which the pump holds whenever it works and lets go only to wait,
// handles its frame with the pump's own unit of work (handleFrame: the
// append, the sync its policy asks for, the answer on its reply channel),
// and lets go. Its answer is on its reply channel when SendWaited returns, so the
// call ends without either goroutine parking.
//
// What makes this the pump's work and not a second owner's:
//   - The run token: one goroutine at a time touches the shard's state,
//     the pump or one caller, and each hand-over is a channel hand-over
//     (the race detector and the memory model see it as such). A channel
//     of one token rather than a sync.Mutex: a goroutine waiting for it
//     is durably blocked for testing/synctest, so a host's synctest test
//     whose produce runs inline through a slow fsync still settles.
//   - Order: a frame runs inline only when every frame and control
//     operation handed to the inbox and the control channel has been
//     handled (handoffs == handled) and the waited lane is empty. The
//     pump may have taken a frame from the inbox and not yet handled it
//     (it takes the frame before the run token); the count covers that,
//     so a caller's async frame queued before its synchronous one is
//     handled first, as lane.go promises, and a control operation (a partition
//     that materialised) goes before a frame that follows it.
//   - The pump's wait: it selects on the timers armed when it started
//     waiting (waitSet). A frame run inline may arm one (a partition's
//     first dirty append arms the interval sync; a parked frame, the park
//     timer); the caller then pokes the pump to look again. Disarming
//     needs no poke: every timer unit checks what is due when it runs.
//   - Close: the pump exits holding the token and never lets it go, so
//     no frame runs inline once it has exited, and shutdown (which owns
//     the pump's state from then on) never overlaps one; a frame run
//     inline while Close waits for the pump is handled as the pump would
//     have handled it before it saw the stop.
//
// The price: the caller's goroutine runs the pump's path (the append, the
// file write), so one that runs a frame inline grows its stack to 8 KiB
// where a synchronous call handed to the pump fits in 4 KiB (measured: one
// producer at a time, each finding the shard idle). Many concurrent
// producers rarely find the shard idle and keep 4 KiB stacks (the root
// package's TestSyncProduceStack, 4,096 producers, is unchanged); a lone
// producer grows its stack once.
//
// Not inline: a Manual shard (its driver chooses what runs, for a
// reproducible schedule), a pinned one (its work belongs on its CPU), a
// shard of a cluster (its pump steps raft groups for peers, and a
// produce's round trip is a replication round anyway), and a frame that
// finds the pump working, frames queued, or the run token held (the
// caller queues it as before: the frames that arrive while the pump works
// share its next run).

// waitSet is what the pump's wait selects on besides its channels that
// never change: the timers armed when it started waiting.
type waitSet struct {
	sync, tick, wait, park <-chan time.Time
	journal, written       <-chan struct{}
}

// waitSet returns the pump's current wait set.
func (s *Shard) waitSet() waitSet {
	return waitSet{
		sync:    s.commit.syncC(),
		tick:    s.rg.tickC(),
		wait:    s.polls.waitC(),
		park:    s.parkC(),
		journal: s.commit.journalDue(),
		written: s.offsets.writtenC(),
	}
}

// runInline handles f on the caller's goroutine if the pump is waiting
// with nothing queued, and reports whether it did (f was handled, and
// answered unless it was parked or forwarded). On false nothing was done
// with f.
func (s *Shard) runInline(f Frame) bool {
	if !s.inline || !s.run.tryLock() {
		return false
	}
	defer s.run.unlock()
	if !s.inlineReady() {
		return false
	}
	s.inlineRuns++
	s.handleFrame(f)
	// The answer went to the caller, not to a goroutine the pump's yield
	// would let run (yieldBeforeWait).
	s.answered = false
	if s.waitSet() != s.waits {
		select {
		case s.poke <- struct{}{}:
		default: // a poke is already there
		}
	}
	return true
}

// inlineReady reports, under the run token, whether nothing handed to
// the pump waits to be handled: every inbox frame and control operation
// handed over was taken, and the waited lane is empty.
func (s *Shard) inlineReady() bool {
	return s.handoffs.Load() == s.handled && s.lane.queued.Load() == 0
}

// runToken is the run token: a channel holding it while it is taken.
type runToken chan struct{}

func (t runToken) lock()   { t <- struct{}{} }
func (t runToken) unlock() { <-t }

// tryLock takes the token if it is free.
func (t runToken) tryLock() bool {
	select {
	case t <- struct{}{}:
		return true
	default:
		return false
	}
}
