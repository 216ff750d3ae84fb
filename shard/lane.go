package shard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway/router"
)

// WaitedLaneFactor is the waited lane's bound in inboxes: it holds at
// most WaitedLaneFactor × InboxSize frames (8,192 by default).
const WaitedLaneFactor = 8

// The waited lane: frames whose callers wait for their answers
// (synchronous Produce), queued beside the inbox and taken by the pump
// all at once.
//
// Through the inbox, each such call costs a channel send that wakes the
// pump, or, on a full inbox (thousands of synchronous producers against
// a 1,024-frame inbox), a timer and a park of its own until the pump
// takes one frame and wakes it; the pump then pays a select per frame.
// The async API queues the same load from one goroutine. Here a call
// appends its frame under a mutex and only the call that finds the lane
// empty wakes the pump: the calls that arrive while the pump is busy
// (answering, proposing, applying) share one wake and are handled as one
// run of frames, whose produces the shard coalesces into one append or
// one raft proposal as it does queued inbox frames. Each caller parks
// once, on its answer, unless it finds the lane full.
//
// The lane holds at most WaitedLaneFactor × InboxSize frames: a caller
// that finds it full waits for room (SendWaitedBefore) until its
// deadline, as on a full inbox, and the pump makes room for a whole
// lane's worth each time it takes a run. It is larger than the inbox
// because its frames are bounded by their callers anyway (each waits
// for its answer before it can queue again), and because a caller that
// has to wait for room costs what the lane saves: bounded at InboxSize,
// 4,096 producers against the default 1,024 found it full most of the
// time and woke in herds each time the pump took a run. Its frames are
// the callers' own, never peers' (no byte charge).
//
// A lone caller gains nothing from the lane and would pay for it (the
// lock and the wake token, twice the hand-off of a channel send to the
// waiting pump): a call that finds the lane and the inbox both empty (the
// pump is idle, or about to be) runs its frame itself if the pump waits
// (inline.go), else sends it to the inbox.
//
// Order: a caller's frames reach the partition in the order it sent
// them. A frame it queued in the inbox before one it queues here (an
// async produce, then a synchronous one) is in the inbox by the time the
// pump takes the lane, so the pump handles what the inbox holds then
// before the lane's frames (handleLane).
type lane struct {
	mu     sync.Mutex
	frames []Frame
	spare  []Frame // the last run's slice, emptied, for the next
	max    int
	closed bool
	// queued mirrors len(frames) for SendWaited's look without the lock.
	queued atomic.Int64
	// room, while callers wait for room, is closed when the pump takes
	// the lane's frames (or the shard closes).
	room chan struct{}
	// wake holds one token while the lane has frames the pump has not
	// been woken for.
	wake chan struct{}
}

func newLane(max int) lane { return lane{max: max, wake: make(chan struct{}, 1)} }

// SendWaited queues f in the waited lane, or hands it to the inbox when
// both are empty: for a frame whose caller waits for its answer
// (f.Reply) and sends nothing else meanwhile. It never blocks: it
// returns router.ErrFull when the lane is full (WaitedLaneFactor ×
// InboxSize frames), router.ErrDisconnected once the shard is closed.
func (s *Shard) SendWaited(f Frame) error {
	if s.lane.queued.Load() == 0 && len(s.inbox) == 0 {
		// Nothing to share a wake with: the caller runs f itself if the
		// pump is waiting (inline.go), else the inbox hands f to the pump.
		if s.runInline(f) {
			return nil
		}
		if err := s.TrySend(f); !errors.Is(err, router.ErrFull) {
			return err
		}
	}
	_, err := s.queueWaited(f)
	return err
}

// SendWaitedBefore is queueing in the lane that waits for room until
// ctx ends (ctx's error) or expire delivers (router.ErrFull: the lane
// stayed full, the frame was not queued), as SendBefore waits for room
// in the inbox.
func (s *Shard) SendWaitedBefore(ctx context.Context, f Frame, expire <-chan time.Time) error {
	for {
		room, err := s.queueWaited(f)
		if room == nil {
			return err
		}
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		case <-expire:
			return router.ErrFull
		}
	}
}

// queueWaited queues f in the lane, or returns ErrFull with the channel
// that is closed once there may be room.
func (s *Shard) queueWaited(f Frame) (room chan struct{}, _ error) {
	l := &s.lane
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, router.ErrDisconnected
	}
	if len(l.frames) >= l.max {
		if l.room == nil {
			l.room = make(chan struct{})
		}
		room = l.room
		l.mu.Unlock()
		return room, router.ErrFull
	}
	first := len(l.frames) == 0
	l.frames = append(l.frames, f)
	l.queued.Store(int64(len(l.frames)))
	l.mu.Unlock()
	if first {
		select {
		case l.wake <- struct{}{}:
		default: // a token is already there
		}
	}
	return nil, nil
}

// takeLane returns the lane's frames, leaving it empty; giveLane hands
// the slice back once its frames are handled.
func (s *Shard) takeLane() []Frame {
	l := &s.lane
	l.mu.Lock()
	frames := l.frames
	l.frames, l.spare = l.spare[:0], nil
	l.queued.Store(0)
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
	l.mu.Unlock()
	return frames
}

func (s *Shard) giveLane(frames []Frame) {
	clear(frames)
	l := &s.lane
	l.mu.Lock()
	l.spare = frames[:0]
	l.mu.Unlock()
}

// handleLane handles the lane's frames on the pump, one by one as inbox
// frames are, after the frames the inbox holds once they are taken (see
// lane's order). While the run lasts, its frames still to be handled
// count as waiting (waiting), so the produces among them are appended or
// proposed together at its end, not one by one.
func (s *Shard) handleLane() {
	frames := s.takeLane()
	if len(frames) == 0 {
		return
	}
	s.laneRuns++
	s.laneLeft = len(frames)
	for n := len(s.inbox); n > 0; n-- {
		s.handleFrame(s.taken(<-s.inbox)) // only the run token's holder takes from the inbox
	}
	for i, f := range frames {
		s.laneLeft = len(frames) - 1 - i
		s.handleFrame(f)
	}
	s.giveLane(frames)
}

// waiting is the number of frames the pump will handle next without
// blocking: the inbox's, and the rest of a lane run.
func (s *Shard) waiting() int { return len(s.inbox) + s.laneLeft }

// closeLane refuses new lane frames and answers those queued with err:
// the pump has exited.
func (s *Shard) closeLane(reason string, err error) {
	l := &s.lane
	l.mu.Lock()
	l.closed = true
	frames := l.frames
	l.frames = nil
	l.queued.Store(0)
	if l.room != nil {
		close(l.room) // its waiters find the lane closed
		l.room = nil
	}
	l.mu.Unlock()
	for _, f := range frames {
		s.drop(f, reason, err)
	}
}
