package sim

// Invariant 2: no message produced against one incarnation is ever
// readable in another. A produce is stamped with the committed
// created_revision when a shard takes it from its inbox (the simulator
// mirrors every inbox), the storage tap checks every append against that
// stamp, and every read is checked against what was appended to that
// incarnation and served only while it was committed on the serving
// node.
var invIncarnations = invariant{
	id:        2,
	name:      "no message crosses incarnations",
	behaviour: "4, 10, 20, 25",
	online:    "the storage tap (store.go, cstore.go) at every append and read; the incarnation that served each operation while the history is placed (invariant 5)",
	caughtBy:  []string{"BreakRaftEpoch", "testhooks.ServeStaleParked"},
}
