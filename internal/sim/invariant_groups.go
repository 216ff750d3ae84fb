package sim

// Invariant 6: consumer groups (DESIGN behaviour 23). After every
// action, every running node's committed groups are checked
// (groupCheck, groups.go): each generation of a group incarnation assigns
// its partitions the same way wherever and whenever it is observed,
// holders are live members, a partition moving from its holder moves to
// another live member, and a committed group offset never goes
// backwards.
var invGroups = invariant{
	id:        6,
	name:      "consumer group assignments and offsets consistent",
	behaviour: "23",
	step:      checkGroupsNow,
	uncaught: "the group commands' state machine is package metadata's, which no seam of the simulator reaches and no testhooks " +
		"switch breaks as this checks (testhooks.CommitSkipsOffset moves an offset forward: invariant 12's); " +
		"TestGroupCheckFindsViolations feeds the checker committed groups that break each of its clauses",
}

// checkGroupsNow checks the committed groups of every running node.
func checkGroupsNow(h *sim) {
	for _, m := range metas(h) {
		h.checkGroups(m.name, m.meta)
	}
}
