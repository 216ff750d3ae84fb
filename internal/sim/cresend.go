package sim

import (
	"github.com/parkway-io/parkway/host"
)

// memberCall is an AddNode or RemoveNode call in flight on member via
// (incarnation gen): the engine's own membership change
// (host.MemberChange, the steps Engine.AddNode and Engine.RemoveNode
// block on), started on via's manual engine and stepped after every
// action. Its decisions — the read barrier, the drain and the wait for
// the moves, the configuration change proposed again under the same key
// until it applies, the wait for the promotion — are the engine's; the
// simulator only picks the member each call is made on, as an operator
// calls again through another member when a call fails or its node
// dies.
type memberCall struct {
	via     *node
	gen     int
	mc      *host.MemberChange
	retries int // the call's proposals made again, counted so far
}

// stepCall steps the call of step what of node's change in *p, first
// starting one (start) on a member of from the seed picks when none is
// in flight. It reports the call's outcome once it returned (done), and
// the member it went through; a call whose member crashed is gone with
// it, and one whose member is stopped waits.
func (c *sim) stepCall(p **memberCall, node uint64, what string, from []*node, start func(v *node) (*host.MemberChange, error), retries *int) (via *node, err error, done bool) {
	cl := *p
	if cl != nil && (cl.via.gen != cl.gen || cl.via.down || c.node(cl.via.id) != cl.via) {
		c.event("n%d %s call through n%d gone with it", node, what, cl.via.id)
		cl, *p = nil, nil
	}
	if cl == nil {
		if len(from) == 0 {
			return nil, nil, false
		}
		v := from[c.rng.IntN(len(from))]
		mc, err := start(v)
		if err != nil {
			c.fail(0, "n%d %s call through n%d: %v", node, what, v.id, err)
			return nil, nil, false
		}
		cl = &memberCall{via: v, gen: v.gen, mc: mc}
		*p = cl
		c.event("n%d %s call through n%d", node, what, v.id)
	}
	if cl.via.stopped {
		return nil, nil, false
	}
	err, done = cl.mc.Step()
	cl.via.flushOutbox()
	if r := cl.mc.Retries(); r > cl.retries {
		*retries += r - cl.retries
		cl.retries = r
		c.event("n%d %s not applied after %d ticks: proposed again through n%d", node, what, forwardTicks, cl.via.id)
	}
	if !done {
		return nil, nil, false
	}
	*p = nil
	c.event("n%d %s call through n%d returned: %v", node, what, cl.via.id, errString(err))
	return cl.via, err, true
}
