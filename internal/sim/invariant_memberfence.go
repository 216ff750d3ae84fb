package sim

// Invariant 9: consumer groups under faults (cluster mode with
// Config.GroupMembers; DESIGN behaviour 33). No message below the
// group's committed offset (the largest any node applied for the group's
// incarnation) reaches a member's application, which receives answers
// only through the fence a parkway.Consumer applies.
var invMemberFence = invariant{
	id:        9,
	name:      "no delivery below the group's committed offset",
	behaviour: "33",
	online:    "every answer a member hands its application (cmembers.go)",
	caughtBy:  []string{"BreakMemberFence"},
}
