package sim

import "sort"

// Invariant 5: each partition incarnation's produce/poll/offset history,
// as the clients saw it, is linearizable (porcupine, linearize.go)
// against an append-only log with consumer offsets. Each mode places its
// operations (history): on one node where the storage tap saw a produce
// land and the incarnation that served the rest; in a cluster a produce
// in every incarnation a try of it was applied to, a store of unknown
// outcome in every incarnation a leader took a try of it against, and a
// Local poll as a read of a replica that may lag.
var invLinearizable = invariant{
	id:        5,
	name:      "each incarnation's history linearizable",
	behaviour: "21, 22, 23 (a log with consumer offsets)",
	final:     checkLinearizable,
	online:    "answers that contradict the storage tap (a \"not applied\" answer for an appended try, a try applied twice)",
	caughtBy:  []string{"BreakRaftEpoch", "BreakNoProducerIDs", "BreakSwallowDamage", "BreakRebuildOnDamage"},
}

// Unknown outcomes never return, so the checker may also place them after
// everything else: not applied.
const unknownReturn int64 = 1 << 62

// histories are the operations of each partition incarnation, as the
// linearizability checker takes them.
type histories map[incKey][]linOp

// add places o in key's history with its input and output.
func (hs histories) add(o *op, key incKey, in linIn, out linOut) {
	ret := o.retEv
	if out.unknown {
		ret = unknownReturn + int64(o.id)
	}
	hs[key] = append(hs[key], linOp{client: clientID(o.client), in: in, out: out, call: o.callEv, ret: ret, op: o.id})
}

// checkLinearizable checks each partition incarnation's history, in
// incarnation order.
func checkLinearizable(h harness) {
	b := h.core()
	if b.viol != nil {
		return
	}
	hist := h.history()
	if b.viol != nil {
		return
	}
	keys := make([]incKey, 0, len(hist))
	for k := range hist {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].compare(keys[j]) < 0 })
	for _, k := range keys {
		if h.unlinearized(k) {
			// Reads stop below damage by design, which an intact log
			// cannot explain; invariant 3 checks these per offset.
			b.ops.Unchecked++
			continue
		}
		switch check(hist[k]) {
		case checkIllegal:
			b.fail(5, "history of %v is not linearizable:\n%s", k, describeHistory(hist[k]))
			return
		case checkUnknown:
			b.ops.Unchecked++
		default:
			b.ops.Linearized++
		}
	}
}
