package sim

// Invariant 1: every client request is answered exactly once (a router
// refusal is an answer; a request in flight at a crash is answered by
// the crash; in a cluster, NotLeaderError and ErrOutcomeUnknown are
// answers), and every operation ends.
var invAnswers = invariant{
	id:        1,
	name:      "every request answered exactly once",
	behaviour: "17, 18, 22",
	final:     checkAnswers,
	online:    "an answer to an attempt already answered (onAnswer); requests still unanswered when the run does not settle (notQuiescent)",
	caughtBy:  []string{"BreakFastSkip", "BreakEarlySettle", "testhooks.NoTermStep"},
}

// checkAnswers: every attempt was answered once (or by the crash), no
// second answer waits in any reply channel, and every operation
// finished.
func checkAnswers(h *sim) {
	if h.viol != nil {
		return
	}
	for _, a := range h.allAttempts {
		if a.crashed {
			continue // answered by the crash; the dead shards may answer too
		}
		if !a.answered {
			h.fail(1, "attempt %d (op %d %v %v%s) never answered", a.id, a.op.id, a.op.kind, a.op.ns, a.where())
			return
		}
		if len(a.reply) > 0 {
			h.fail(1, "attempt %d (op %d %v %v%s) answered twice", a.id, a.op.id, a.op.kind, a.op.ns, a.where())
			return
		}
	}
	for _, ops := range [][]*op{h.allOps, h.metaOps} {
		for _, o := range ops {
			if !o.done {
				h.fail(1, "op %d (%v %v) never finished", o.id, o.kind, o.ns)
				return
			}
		}
	}
}

// where names the node a was sent to, in a cluster.
func (a *attempt) where() string {
	if a.node == nil {
		return ""
	}
	return a.node.on()
}
