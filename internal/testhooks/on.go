//go:build parkway_brokenbuild

package testhooks

import "sync/atomic"

// Enabled reports whether this build has the switches (the tag
// parkway_brokenbuild).
const Enabled = true

var (
	// ServeStaleParked, when set, makes a shard serve parked frames stamped
	// with another incarnation when their partition materialises, instead
	// of rejecting them as stale (breaks DESIGN behaviour 4). Read in the
	// shard's re-dispatch, once per materialisation.
	ServeStaleParked atomic.Bool
)
