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
	online:    "the storage tap (tap.go, with store.go and cstore.go) at every append and read; the incarnation that served each operation while the history is placed (invariant 5)",
	caughtBy:  []string{"BreakRaftEpoch", "testhooks.ServeStaleParked", "BreakFastSkip"},
}

// tapAppend checks, at the storage tap, the first append of message id
// (info) to an incarnation's log, at key/off: it is in no log yet (a try
// applied twice breaks invariant 5), a shard took its frame first, and
// the incarnation its frame was stamped with when the shard took it is
// the one it lands in; then it records where it landed. It reports false
// after recording a violation.
func (b *sim) tapAppend(info *msgInfo, id uint64, key incKey, off uint64) bool {
	a := info.a
	switch {
	case info.appended:
		b.fail(5, "message %d of attempt %d (op %d) is in the log twice: at %v/%d and %v/%d",
			id, a.id, a.op.id, info.key, info.off, key, off)
	case a.handles == 0:
		b.fail(0, "message %d of attempt %d appended before any shard took its frame", id, a.id)
	case a.stamp != 0 && a.stamp != key.epoch:
		b.fail(2, "attempt %d (op %d) was taken from its inbox%s while incarnation %d of %v was committed there, "+
			"but its message %d was appended to incarnation %d", a.id, a.op.id, a.where(), a.stamp, key.ns, id, key.epoch)
	default:
		info.appended, info.key, info.off = true, key, off
		return true
	}
	return false
}
