//go:build parkway_brokenbuild

package sim_test

import (
	"testing"

	"github.com/parkway-io/parkway/internal/testhooks"
)

// Serving parked frames stamped with another incarnation (instead of
// rejecting them) is caught as a message crossing incarnations.
func TestCatchesServeStaleParked(t *testing.T) {
	expectCaught(t, &testhooks.ServeStaleParked, 2)
}
