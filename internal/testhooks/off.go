//go:build !parkway_brokenbuild

package testhooks

// Enabled reports whether this build has the switches (the tag
// parkway_brokenbuild).
const Enabled = false

// ServeStaleParked is off for good in this build: see on.go for what it
// breaks when the tag is set.
var ServeStaleParked off

// NoTermStep and NoForwardBudget are off for good in this build, like
// ServeStaleParked.
var (
	NoTermStep             off
	NoForwardBudget        off
	NoReadIndexWait        off
	NoJoinConfChange       off
	CommitSkipsOffset      off
	CommitBeforeHandled    off
	IntervalCommitsFetched off
	NoStallTimeout         off
	CloseKeepsFrame        off
	NoHandshakeBound       off
	CloseKeepsSlot         off
)

// off is a switch that cannot be set: Load is the constant false, so a
// branch on it is dead code.
type off struct{}

// Load reports false.
func (off) Load() bool { return false }
