package sim_test

import (
	"testing"

	"github.com/parkway-io/parkway/internal/sim"
)

// connFloodRate is the connection-flood rate (PeerFaultRates.ConnFlood)
// the flood seeds run at: a few floods in a run of the default length.
const connFloodRate = 0.001

// connFloodConfig is the default cluster configuration with connection
// floods on. They are off in DefaultClusterFaults because turning them on
// changes every seed's trace (each flood draws from the seed's source),
// which would move every schedule the default seeds and the broken
// builds' catches were chosen on; these seeds run them instead, and
// -sim.connflood runs any range with them.
func connFloodConfig(seed uint64) sim.Config {
	cfg := sim.DefaultClusterConfig(seed)
	cfg.Faults.Peer.ConnFlood = connFloodRate
	return cfg
}

// Connection floods: an outsider or a member floods one node's listener
// with connections that never finish their handshake (and, a member,
// with ones that do, redialling in a loop) while the other members
// redial it (cconns.go). Every invariant holds — invariant 14's bounds,
// deadlines, honest redials admitted and slots given back, and the rest
// — and each outcome happens: flood connections refused at accept,
// closed at their handshake deadline, a member's oldest closed past
// MaxPeerConns, honest redials admitted.
func TestClusterConnFlood(t *testing.T) {
	runs := offByDefaultSeeds(t, connFloodConfig)
	var total sim.FaultCounts
	for _, r := range runs {
		addFaults(&total, r.res.Faults)
	}
	t.Logf("%d connection-flood seeds: %d floods, %d flood connections (%d refused at accept, %d closed at the handshake deadline), %d members' connections closed past MaxPeerConns, %d honest redials admitted",
		len(runs), total.ConnFloodSpells, total.FloodConns, total.FloodConnsRefused, total.HandshakeTimeouts, total.ConnsEvicted, total.HonestRedials)
	if raceEnabled {
		return // too few seeds to see every outcome
	}
	expectHappened(t, "connection-flood", len(runs),
		happened{"flood connection refused at accept", total.FloodConnsRefused},
		happened{"flood connection closed at its handshake deadline", total.HandshakeTimeouts},
		happened{"member's connection closed past MaxPeerConns", total.ConnsEvicted},
		happened{"honest redial during a flood", total.HonestRedials})
}

// offByDefaultSeeds runs and judges the seeds of a fault that is off in
// the default faults: 0–23 (0–2 under the race detector) with cfg.
func offByDefaultSeeds(t *testing.T, cfg func(uint64) sim.Config) []outcome {
	t.Helper()
	n := 24
	if raceEnabled {
		n = 3
	}
	list := make([]uint64, n)
	for i := range list {
		list[i] = uint64(i)
	}
	runs := runSeeds(list, cfg, false)
	judge(t, list, runs, 5)
	return runs
}

// happened is one outcome a fault's seeds must show, with how many times
// it did.
type happened struct {
	name string
	n    int
}

// expectHappened fails for each outcome that never happened in the seeds
// of the fault named what.
func expectHappened(t *testing.T, what string, seeds int, hs ...happened) {
	t.Helper()
	for _, h := range hs {
		if h.n == 0 {
			t.Errorf("%q never happened in %d %s seeds", h.name, seeds, what)
		}
	}
}
