package sim

// Invariant 8: membership and failover (cluster mode). After every
// action every running node's metadata names exactly the members of the
// metadata group configuration it applied (checkVoters); at quiescence
// every addition and removal completed and every member's group has the
// members as voters (checkMembership); a quiesced leader that crashed or
// went deaf in a calm is replaced within a second; a node started on
// another's data directory is refused.
var invMembership = invariant{
	id:        8,
	name:      "membership whole, failover within a second, wrong disks refused",
	behaviour: "21, 27, 31",
	step: inCluster(func(c *sim) {
		for _, n := range c.nodes {
			if n.eng != nil && !n.down {
				c.checkVoters(n)
			}
		}
	}),
	settled:  inCluster((*sim).checkMembership),
	online:   "the failover checks after a calm (cfailover.go), the wrong-disk start (startOnWrongDisk)",
	caughtBy: []string{"BreakLeaderTransfer", "testhooks.NoJoinConfChange", "BreakZombieLiveness", "BreakEarlySettle", "BreakIdentityCheck", "BreakReplyPath", "BreakLivenessReport", "testhooks.NoTermStep"},
}
