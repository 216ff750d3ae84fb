package sim

// Invariant 11: read barriers (cluster mode). A metadata read barrier
// that returns without an error leaves its node having applied every
// metadata entry any node had applied when the barrier started: a
// lookup by name after it sees every command committed before it,
// through any node (README: the lookups are linearizable in a cluster).
// Checked online, when each barrier the workload starts (cbarrier.go)
// returns.
var invReadBarrier = invariant{
	id:        11,
	name:      "read barriers see every earlier commit",
	behaviour: "none (lookups by name are linearizable: README)",
	online:    "when a read barrier returns (stepBarriers)",
	caughtBy:  []string{"testhooks.NoReadIndexWait"},
}
