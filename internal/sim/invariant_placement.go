package sim

// Invariant 7: placement (cluster mode). A replica is built only on a
// node whose own metadata places the incarnation there; a node removes
// its copy only once its metadata no longer names it a member; at
// quiescence no move is under way, each committed partition is owned by
// exactly its replicas and each group is led by its preferred leader.
var invPlacement = invariant{
	id:        7,
	name:      "replicas exactly where the placement says, moves settle",
	behaviour: "31",
	settled:   inCluster((*sim).checkOwnership),
	online:    "every replica build and removal against the node's metadata (tap.go, cstore.go, cplace.go); moves and leadership that never settle (notQuiescent)",
	caughtBy:  []string{"BreakPlacement", "BreakLeaderTransfer", "BreakEarlySettle", "testhooks.NoTermStep"},
}
