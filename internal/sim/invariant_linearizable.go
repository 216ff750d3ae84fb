package sim

import (
	"errors"
	"slices"
	"sort"

	"github.com/parkway-io/parkway/partition"
)

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
func checkLinearizable(h *sim) {
	if h.viol != nil {
		return
	}
	hist := h.history()
	if h.viol != nil {
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
			h.ops.Unchecked++
			continue
		}
		switch check(hist[k]) {
		case checkIllegal:
			h.fail(5, "history of %v is not linearizable:\n%s", k, describeHistory(hist[k]))
			return
		case checkUnknown:
			h.ops.Unchecked++
		default:
			h.ops.Linearized++
		}
	}
}

// linearizeRead takes a poll or a consumer offset operation's input and
// output for the history, or reports false to leave it out: it failed,
// or, a store, it was refused for something else than an offset out of
// range (nothing a log with offsets says). A cluster poll may be Local
// (a read of a replica that may lag: stale) or a waiting one at the
// leader; a store's unknown outcome is left to the mode to place.
func linearizeRead(o *op) (linIn, linOut, bool) {
	in := linIn{kind: o.kind, from: o.from, count: o.count, consumer: o.consumer, useConsumer: o.useConsumer, offset: o.offset,
		stale: o.kind == kindPoll && o.local, wait: o.kind == kindPoll && o.home.replicated() && !o.local && o.wait > 0}
	var out linOut
	switch o.kind {
	case kindPoll:
		if o.outcome != outcomeOK {
			return in, out, false
		}
		out.offset = o.resp.Offset
		for _, m := range o.resp.Messages {
			id, _ := decodePayload(m.Payload)
			out.ids = append(out.ids, id)
		}
	case kindStore:
		switch o.outcome {
		case outcomeOK:
		case outcomeError:
			if !errors.Is(o.err, partition.ErrOffsetOutOfRange) {
				return in, out, false
			}
			out.outOfRange = true
		case outcomeUnknown:
			out.unknown = true
		default:
			return in, out, false
		}
	case kindGet:
		if o.outcome != outcomeOK {
			return in, out, false
		}
		out.offset, out.found = o.resp.Offset, o.resp.Found
	default:
		return in, out, false
	}
	return in, out, true
}

// placeServed places o, a read or an offset operation with output out, in
// the incarnation that served its final try — which must have been
// committed on the serving node (incs, who names it) while o ran — and
// checks that what it read was appended to that incarnation (invariant
// 2). It reports false to leave o out: its final try was answered by a
// crash, or by a refusal rather than by the partition.
func (b *sim) placeServed(o *op, incs *timeline, who string, out linOut) (incKey, bool) {
	last := o.attempts[len(o.attempts)-1]
	if last.crashed || !servedAnswer(last.resp.Err) {
		return incKey{}, false
	}
	key := incKey{o.ns, last.served}
	cands := incs.during(o.ns, o.callEv, o.retEv)
	if last.served == 0 || !slices.Contains(cands, key.epoch) {
		b.fail(2, "op %d on %v answered %v by %sincarnation %d, not committed there while it ran (%v)", o.id, o.ns, o.outcome, who, last.served, cands)
		return incKey{}, false
	}
	if len(out.ids) > 0 {
		info := b.msgs[out.ids[0]]
		if info == nil || !info.appended {
			b.fail(2, "op %d read message %d that was never appended", o.id, out.ids[0])
			return incKey{}, false
		}
		for _, id := range out.ids {
			if x := b.msgs[id]; x == nil || x.key != info.key {
				b.fail(2, "op %d read one batch from two incarnations", o.id)
				return incKey{}, false
			}
		}
		if info.key != key {
			b.fail(2, "op %d was served by %v but read messages of %v", o.id, key, info.key)
			return incKey{}, false
		}
	}
	return key, true
}
