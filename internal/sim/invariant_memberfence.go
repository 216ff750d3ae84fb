package sim

// Invariant 9: consumer groups under faults (cluster mode with
// Config.GroupMembers; DESIGN behaviour 33). No message below the
// group's committed offset (the largest any node applied for the group's
// incarnation) reaches a member's application, which receives answers
// only through the fence a parkway.Consumer applies; and the Consumer's
// callbacks keep their order: a partition's messages reach the
// application only after its OnAssigned named the partition (in this
// membership) and not after its OnRevoked did, and a revocation releases
// only the partitions its OnRevoked named.
var invMemberFence = invariant{
	id:        9,
	name:      "no delivery below the group's committed offset",
	behaviour: "33",
	online:    "every answer a member hands its application (cmembers.go)",
	// testhooks.CommitSkipsOffset too: a member later handed the message
	// the broken commit stepped over (invariant 12 otherwise).
	caughtBy: []string{"BreakMemberFence", "testhooks.CommitSkipsOffset"},
}
