// Package testhooks holds switches that deliberately break parkway.
//
// They exist only so the deterministic simulator (internal/sim) can prove
// that it catches the bugs they introduce: a test flips one, expects the
// simulator to report an invariant violation within its default seeds, and
// flips it back. Nothing else may set them; production code reads each one
// with a single atomic load, off the per-frame hot path, and behaves
// normally while they are false (their zero value).
//
// The package imports nothing of parkway, so any package may read it.
package testhooks

import "sync/atomic"

var (
	// ServeStaleParked, when set, makes a shard serve parked frames stamped
	// with another incarnation when their partition materialises, instead
	// of rejecting them as stale (breaks DESIGN behaviour 4). Read in the
	// shard's re-dispatch, once per materialisation.
	ServeStaleParked atomic.Bool
	// FastSkipIgnoresParked, when set, makes the reconciler's fast-skip
	// ignore the park buffer, so a pass with nothing else to do is skipped
	// while frames are parked and they are never aged or answered (breaks
	// DESIGN behaviour 12). Read once per pass that is otherwise skippable.
	FastSkipIgnoresParked atomic.Bool

	// RaftWithoutEpoch, when set, makes the node engine (host) send
	// partition raft messages without their incarnation (epoch 0), as the
	// reference design does (breaks DESIGN behaviour 20). Read once per
	// raft message sent.
	RaftWithoutEpoch atomic.Bool
)
