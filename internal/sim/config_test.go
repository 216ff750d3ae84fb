package sim_test

import (
	"errors"
	"testing"

	"github.com/parkway-io/parkway/internal/sim"
)

// TestSingleNodeRefusesGroupMembers: consumer group members are a
// cluster's (the one harness drives them only where the run has a
// network), so a single-node configuration asking for them is refused
// rather than run with its last clients taken for members.
func TestSingleNodeRefusesGroupMembers(t *testing.T) {
	for _, cfg := range []sim.Config{
		{Seed: 1, GroupMembers: 3},
		{Seed: 1, Nodes: 1, MemberPartitions: 4},
	} {
		res, err := sim.Run(cfg)
		var v *sim.Violation
		if err == nil || errors.As(err, &v) || res.Events > 0 {
			t.Errorf("Run(%+v) ran a single node with group members (%d events): %v", cfg, res.Events, err)
		}
	}
	cfg := sim.Config{Seed: 1, Nodes: 3, GroupMembers: 3, Steps: 1}
	if res, err := sim.Run(cfg); err != nil || res.Events == 0 {
		t.Errorf("Run(%+v) refused a cluster's members (%d events): %v", cfg, res.Events, err)
	}
}
