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

	// The simulator's cluster mode stands in for the root package's
	// transport and client side (it cannot drive the Node's goroutines);
	// these break its stand-ins the way the design warns against, and
	// only internal/sim reads them.

	// SimRaftWithoutEpoch, when set, makes the simulated transport send
	// partition raft messages without their incarnation (epoch 0), as the
	// reference design does (breaks DESIGN behaviour 20).
	SimRaftWithoutEpoch atomic.Bool
	// SimNoProducerIDs, when set, makes simulated clients produce without
	// a (producer, sequence) pair, so the partition cannot deduplicate the
	// retry of a produce whose outcome was unknown.
	SimNoProducerIDs atomic.Bool
)
