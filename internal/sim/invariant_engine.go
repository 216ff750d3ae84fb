package sim

// Invariant 0: the engine neither panics (etcd raft's panics included)
// nor fails a call the simulator makes of it outside the faults it
// injected (inspecting a shard, the router refusing a frame for anything
// but a full inbox, a client call asking for what it cannot).
var invEngine = invariant{
	id:        0,
	name:      "no panic, no unexplained engine error",
	behaviour: "26 (no bytes from a peer or a disk stop the process)",
	online:    "sim.guard turns a panic into a violation with the seed; every engine call checks its error where it is made",
	caughtBy:  []string{"BreakRaftEpoch", "BreakIdentityCheck", "testhooks.NoTermStep"},
}
