package shard

import (
	"sync"

	"github.com/parkway-io/parkway/router"
)

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
// once, on its answer.
//
// The lane is not bounded by the inbox's frame bound: a caller that
// queues here waits for its answer before it can queue again, so the
// lane holds at most one frame per waiting caller, what a full inbox's
// blocked senders held before (the runtime's queue of them is no more
// bounded). Its frames are the callers' own, never peers' (no byte
// charge).
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
	closed bool
	// wake holds one token while the lane has frames the pump has not
	// been woken for.
	wake chan struct{}
}

func newLane() lane { return lane{wake: make(chan struct{}, 1)} }

// SendWaited queues f in the waited lane: for a frame whose caller waits
// for its answer (f.Reply) and sends nothing else meanwhile. It never
// blocks. It returns router.ErrDisconnected once the shard is closed.
func (s *Shard) SendWaited(f Frame) error {
	l := &s.lane
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return router.ErrDisconnected
	}
	first := len(l.frames) == 0
	l.frames = append(l.frames, f)
	l.mu.Unlock()
	if first {
		select {
		case l.wake <- struct{}{}:
		default: // a token is already there
		}
	}
	return nil
}

// takeLane returns the lane's frames, leaving it empty; giveLane hands
// the slice back once its frames are handled.
func (s *Shard) takeLane() []Frame {
	l := &s.lane
	l.mu.Lock()
	frames := l.frames
	l.frames, l.spare = l.spare[:0], nil
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
		s.handleFrame(s.taken(<-s.inbox)) // only the pump takes from the inbox
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
	l.mu.Unlock()
	for _, f := range frames {
		s.drop(f, reason, err)
	}
}
