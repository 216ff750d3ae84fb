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
//
// One switch is left. The other broken builds the simulator proves it
// catches (a fast-skip that ignores parked frames, raft messages without
// their incarnation) are built from outside, through the engine's public
// seams (internal/sim's Break* variables); this one breaks a check inside
// the shard's re-dispatch that no seam reaches.
package testhooks

import "sync/atomic"

var (
	// ServeStaleParked, when set, makes a shard serve parked frames stamped
	// with another incarnation when their partition materialises, instead
	// of rejecting them as stale (breaks DESIGN behaviour 4). Read in the
	// shard's re-dispatch, once per materialisation.
	ServeStaleParked atomic.Bool
)
