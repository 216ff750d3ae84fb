package sim

// Invariant 3: no acknowledged message is lost, across crashes too, and
// offsets are dense; in a cluster every replica holds the same log, an
// acknowledgement needs a quorum linked both ways, every read of an
// offset returns the same append time and append times never decrease
// along a log; damage is reported only where a lie explains it (see the
// package doc).
var invDurability = invariant{
	id:        3,
	name:      "acknowledged messages durable, logs dense and equal",
	behaviour: "21, 28",
	online: "the acknowledgements against the storage tap (onSuccess), every reopen against the acks, the quorum " +
		"linked at each acknowledgement (checkAckQuorum), the final reads of every committed partition through every node (finalReads)",
	caughtBy: []string{"BreakAppendTimeOrder", "BreakRaftEpoch", "BreakEarlySettle", "BreakReplyPath",
		"BreakSwallowDamage", "BreakRebuildOnDamage", "testhooks.NoTermStep"},
}
