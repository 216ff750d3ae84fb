package shard

import "time"

// The shard's three pump-owned parts — its raft groups (raftGroups), its
// commit group (commitGroup) and its waiting polls (waitingPolls) — do
// not hold the shard. Each holds the narrow interface below of what it
// does to it, and the shard implements them all, so what a part may do
// to the shard is written down here rather than being the whole of
// *Shard. What a part needs of another part it holds directly (the raft
// groups and the commit group wake the waiting polls; an applied entry
// dirties a partition for the commit group's interval sync), and what it
// only reads (the configuration, clock, logger, metrics, metadata) it is
// given when the shard is built.

// answerer is what every part does to the shard: answer a frame (the
// shard counts it and hands it to the caller's reply), deny one, fence a
// partition after a failed write, and answer a frame of a fenced one.
type answerer interface {
	answer(f Frame, r Response) bool
	deny(f Frame, reason string, err error)
	fence(o *owned, err error)
	fenceFailed(o *owned, f Frame)
}

// groupsOwner is what the raft groups need of the shard: besides
// answering, serving a leader read once it is confirmed and applied.
type groupsOwner interface {
	answerer
	serveRead(o *owned, f Frame)
}

// pollsOwner is what the waiting polls need of the shard: besides
// answering, the checks a read ends with (a partition that cannot be
// read from fenced, a damaged read answered as the shard answers it).
type pollsOwner interface {
	answerer
	fenceUnusable(o *owned, err error) error
	damagedRead(o *owned, f Frame, err error) error
	// confirmLeaderRead serves f, a waiting poll registered unconfirmed
	// that has messages to answer, as a leader read (wait.go).
	confirmLeaderRead(o *owned, f Frame)
}

// confirmLeaderRead serves f through the leader read (pollsOwner).
func (s *Shard) confirmLeaderRead(o *owned, f Frame) { s.rg.readReplicated(o, f) }

// commitOwner is what the commit group needs of the shard: besides
// answering, whether frames wait in the inbox (an open group waits for
// their appends) and whether a partition is still the shard's (an
// interval sync skips one evicted or replaced).
type commitOwner interface {
	answerer
	inboxed() bool
	queued() bool
	owns(o *owned) bool
	// armPark makes the park timer fire no later than at: a held
	// answer's deadline (expireHeld).
	armPark(at time.Time)
	// forgetCarried forgets a carried produce an fsync of its partition
	// covered, or one that took the ordinary path (carried.go).
	forgetCarried(r *Request)
}

// inboxed reports whether frames wait in the inbox or the rest of a
// lane run (commitOwner).
func (s *Shard) inboxed() bool { return s.waiting() > 0 }

// queued reports whether any frame waits for the pump: in the inbox, in
// the rest of a lane run, or in the waited lane (commitOwner).
func (s *Shard) queued() bool { return s.waiting() > 0 || s.lane.queued.Load() > 0 }

// owns reports whether o is the shard's partition of its namespace
// (commitOwner).
func (s *Shard) owns(o *owned) bool { return s.owned[o.p.Namespace()] == o }
