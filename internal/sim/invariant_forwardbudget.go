package sim

// Invariant 10: budgets against a misbehaving member (cluster mode).
// After every action no running node has ever held more bytes of
// forwarded requests than its budget; at quiescence none holds any.
var invForwardBudget = invariant{
	id:        10,
	name:      "forwarded requests within their budget",
	behaviour: "26",
	step:      inCluster(func(c *sim) { c.checkForwardBudget(false) }),
	settled:   inCluster(func(c *sim) { c.checkForwardBudget(true) }),
	caughtBy:  []string{"testhooks.NoForwardBudget"},
}
