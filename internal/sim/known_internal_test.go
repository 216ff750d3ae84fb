package sim

import (
	"errors"
	"testing"
)

// TestKnownTwoVoterReseedFromACutMark pins knownTwoVoterReseed's route
// with no lie on the raft log (known.go): in cluster seed 2461 a lie cut
// the liar's sync mark of an empty, untagged raft log short, the next
// incarnation placed a replica of a group of two on that directory, the
// liar refused it and re-seeded its replica, and the move never settled
// (invariant 7). The classification reads the cut mark on the liar's
// disk (markUnreadable); before it asked for a lie on the log too, and
// the seed failed unclassified. The seed was found before slow links were
// on in the default cluster faults, and runs without them: their draws
// move every schedule, and with them on the seed passes.
func TestKnownTwoVoterReseedFromACutMark(t *testing.T) {
	const seed = 2461
	cfg := DefaultClusterConfig(seed)
	cfg.Faults.Peer.SlowLink = 0
	_, err := Run(cfg)
	var v *Violation
	if !errors.As(err, &v) || v.Invariant != 7 {
		t.Fatalf("cluster seed %d: %v; want its re-seed that never settles (invariant 7): the traces moved and it no longer tests the route", seed, err)
	}
	if v.Known != knownTwoVoterReseed {
		t.Fatalf("cluster seed %d: classified %q, want knownTwoVoterReseed: %v", seed, v.Known, err)
	}
}
