package sim

import (
	"fmt"
	"time"

	"github.com/parkway-io/parkway/internal/backoff"
)

// resend is a membership proposal a driver makes again until a member
// has applied it (cjoin.go, cremove.go), as Engine.AddNode and
// Engine.RemoveNode do: raft drops a configuration change proposed while
// another is in flight, and a proposal is lost with its leader, so one
// not applied within the engine's forward timeout is made again, through
// whichever member runs then, and a refused one after a pause (doubling,
// clamped). The command keeps its key throughout, so a second commit is
// a no-op.
type resend struct {
	node uint64 // the node added or removed
	what string // the step, for the trace
	// via is the member the last proposal went through; proposed is set
	// while that proposal may still apply (until the forward timeout).
	via        *cnode
	proposed   bool
	proposedAt time.Time
	retryAt    time.Time
	pause      backoff.Backoff
}

// resendStep says what the driver of p does now: done is a member whose
// metadata holds the proposal applied (applied reports it), next the
// member to propose through (one of from, picked by the seed), and both
// are nil while it waits. retries counts the proposals made again after
// the timeout.
func (c *csim) resendStep(p *resend, applied func(*cnode) bool, from []*cnode, retries *int) (done, next *cnode) {
	now := c.clk.Now()
	if p.proposed {
		if v := c.cur(p.via); v.reachable() && applied(v) {
			return v, nil
		}
		if now.Before(p.proposedAt.Add(forwardTicks * c.cfg.TickInterval)) {
			return nil, nil
		}
		p.proposed = false
		*retries++
		c.event("n%d %s not applied after %d ticks: propose again", p.node, p.what, forwardTicks)
	}
	if now.Before(p.retryAt) {
		return nil, nil
	}
	if len(from) == 0 {
		c.resendLater(p, fmt.Errorf("no member running"))
		return nil, nil
	}
	v := from[c.rng.IntN(len(from))]
	if applied(v) {
		return v, nil
	}
	return nil, v
}

// proposedThrough records that p was proposed through v.
func (c *csim) proposedThrough(p *resend, v *cnode) {
	p.via, p.proposed, p.proposedAt = v, true, c.clk.Now()
	p.pause.Reset()
	c.event("n%d %s proposed through n%d", p.node, p.what, v.id)
}

// resendLater pauses p after a refusal.
func (c *csim) resendLater(p *resend, err error) {
	p.pause.Min, p.pause.Max = retryMin, retryMax
	d := p.pause.Next()
	p.retryAt = c.clk.Now().Add(d)
	c.event("n%d %s retry in %v: %v", p.node, p.what, d, err)
}
