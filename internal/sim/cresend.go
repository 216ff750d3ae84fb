package sim

import (
	"fmt"

	"github.com/parkway-io/parkway/host"
)

// resend is a membership change a driver (cjoin.go, cremove.go) proposes
// until a member has applied it, paced by the engine's own membership
// resend (host.ResendDriver, as Engine.AddNode and Engine.RemoveNode use
// it): the simulator only picks the member each proposal goes through.
type resend struct {
	node uint64 // the node added or removed
	what string // the step, for the trace
	// via is the member the last proposal went through.
	via *cnode
	d   host.ResendDriver
}

// newResend is the resend of step what of node's addition or removal,
// with the engine's forward timeout and the simulated retry pauses.
func (c *csim) newResend(node uint64, what string) resend {
	return resend{node: node, what: what, d: host.NewResendDriver(forwardTicks*c.cfg.TickInterval, retryMin, retryMax)}
}

// resendStep says what the driver of p does now: done is a member whose
// metadata holds the proposal applied (applied reports it), next the
// member to propose through (one of from, picked by the seed), and both
// are nil while it waits. retries counts the proposals made again after
// the timeout.
func (c *csim) resendStep(p *resend, applied func(*cnode) bool, from []*cnode, retries *int) (done, next *cnode) {
	var v *cnode
	ok := false
	if p.d.InFlight() {
		v = c.cur(p.via)
		ok = v.reachable() && applied(v)
	}
	st := p.d.Step(c.clk.Now(), ok)
	if st.Again {
		*retries++
		c.event("n%d %s not applied after %d ticks: propose again", p.node, p.what, forwardTicks)
	}
	switch st.Op {
	case host.ResendDone:
		return v, nil
	case host.ResendWait:
		return nil, nil
	}
	if len(from) == 0 {
		c.resendLater(p, fmt.Errorf("no member running"))
		return nil, nil
	}
	v = from[c.rng.IntN(len(from))]
	if applied(v) {
		return v, nil
	}
	return nil, v
}

// proposedThrough records that p was proposed through v.
func (c *csim) proposedThrough(p *resend, v *cnode) {
	p.via = v
	p.d.Proposed(c.clk.Now())
	c.event("n%d %s proposed through n%d", p.node, p.what, v.id)
}

// resendLater pauses p after a refusal.
func (c *csim) resendLater(p *resend, err error) {
	d := p.d.Refused(c.clk.Now())
	c.event("n%d %s retry in %v: %v", p.node, p.what, d, err)
}
