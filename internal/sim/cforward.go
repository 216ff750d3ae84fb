package sim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// Forwarding. A client's call follows a "not leader" answer as the
// Node's does: its home node's engine forwards the request to the node
// named, over the bus (host.Engine.StartForward, the forward a started
// engine's call blocks on, stepped here), and that node's engine serves
// it (Deliver, then PumpReplies sends the answer back). The forward's
// driver (host.ForwardDriver) decides what ends it: the answer, a probe
// saying the node no longer holds the request, news that the partition's
// leader moved or that the node died, the request's deadline. Every
// network fault reaches the request, its answer and the probes.

// fwdKey names a forwarded request on the bus: the node that forwarded
// it and its request id there. A key is not one attempt: the bus carries
// no incarnation, and a node's request ids count from a new base on
// every start, so one life's forward may share its key with an earlier
// life's still queued at a node that was stopped (or delayed on the
// bus). The engines count from a random base, which makes that rare, not
// impossible; the harness's crediting must not rest on it (cluster seed
// 805, when engines counted from 1: an earlier life's produce, queued at
// a stopped node, was taken for the later life's forward to another node
// and its append credited to no attempt). So c.fwds keeps every attempt
// forwarded under a key, and each use picks the one it concerns.
type fwdKey struct{ from, id uint64 }

// keepForward records that home forwarded attempt a (to a.node) under
// request id id, beside any attempt forwarded under the same key before.
func (c *sim) keepForward(a *attempt, home *node, id uint64) {
	k := fwdKey{home.id, id}
	c.fwds[k] = append(c.fwds[k], a)
}

// forwardedTo lists the attempts forwarded under m's key (its sender and
// request id) to node n: those a request m that n reads off the bus may
// be (forwardedReq picks the one by its content).
func (c *sim) forwardedTo(n *node, m transport.Message) []*attempt {
	var to []*attempt
	for _, a := range c.fwds[fwdKey{uint64(m.From), m.Group}] {
		if a.node.id == n.id {
			to = append(to, a)
		}
	}
	return to
}

// forwardedReq is the attempt whose forwarded request req is, among those
// forwardedTo found for the bus message being delivered (the newest
// first), or nil when none is.
func (c *sim) forwardedReq(req *shard.Request) *attempt {
	for i := len(c.delivering) - 1; i >= 0; i-- {
		if a := c.delivering[i]; sameRequest(a.req, req) {
			return a
		}
	}
	return nil
}

// replyTo is the attempt whose answer node n sends as m, a reply to the
// forwarded request under m's key: one forwarded to n whose request a
// shard of n took, and whose operation still waits (an earlier life's
// attempts under the key ended with that life); nil when none, or when
// more than one could be (nothing is captured then).
func (c *sim) replyTo(n *node, m transport.Message) *attempt {
	var got *attempt
	for _, a := range c.fwds[fwdKey{uint64(m.To), m.Group}] {
		if a.node.id != n.id || a.op.done || a.handles == 0 {
			continue
		}
		if got != nil {
			return nil
		}
		got = a
	}
	return got
}

// forward sends attempt a of o from its home node to node to, as the
// home's client call does on a "not leader" answer. The request carries
// the call's deadline, as a started engine's call stamps it.
func (c *sim) forward(a *attempt, home, to *node) {
	o := a.op
	a.node, a.via = to, home
	if o.fwdDeadline.IsZero() {
		o.fwdDeadline = home.clk.Now().Add(requestTimeout)
	}
	a.req.Deadline = o.fwdDeadline
	f, err := home.eng.StartForward(to.id, a.req)
	if err != nil {
		a.sendEv = c.event("forward a=%d op=%d n%d->n%d err=%v", a.id, o.id, home.id, to.id, err)
		c.onAnswer(a, shard.Response{Err: err})
		return
	}
	a.fwd = f
	c.keepForward(a, home, f.ID())
	a.sendEv = c.event("forward a=%d op=%d n%d->n%d id=%d", a.id, o.id, home.id, to.id, f.ID())
	c.inflight = append(c.inflight, a)
}

// sameRequest reports whether got, decoded from the bus, is the request
// want that was forwarded (and not an earlier one under the same id from
// a node that restarted since).
func sameRequest(want, got *shard.Request) bool {
	return want.Op == got.Op && want.NS == got.NS && want.Producer == got.Producer && want.Seq == got.Seq &&
		want.Offset == got.Offset && want.Consumer == got.Consumer && len(want.Messages) == len(got.Messages) &&
		(len(want.Messages) == 0 || slices.Equal(want.Messages[0].Payload, got.Messages[0].Payload))
}

// forwardReplied captures, as node n sends the answer m to a forwarded
// request, what its shard answered: the incarnation that served it and
// the consumer offset it stored (the forward may end without the answer,
// or receive it later).
func (c *sim) forwardReplied(n *node, m transport.Message) {
	a := c.replyTo(n, m)
	if a == nil {
		return
	}
	r, err := host.DecodeResponse(m.Payload)
	if err != nil {
		c.fail(0, "n%d sent an answer to forwarded attempt %d that does not decode: %v", n.id, a.id, err)
		return
	}
	if servedAnswer(r.Err) && !errors.Is(r.Err, shard.ErrNotLeader) && !errors.Is(r.Err, shard.ErrOutcomeUnknown) {
		a.fwdServed = n.lastServe[a.op.ns]
	}
	o := a.op
	if o.kind == kindStore && r.Err == nil {
		i := slices.IndexFunc(n.stored, func(st storeRecord) bool {
			return st.ns == o.ns && st.consumer == o.consumer && st.offset == o.offset && st.err == nil
		})
		if i >= 0 {
			st := n.stored[i]
			a.fwdStored = &st
			n.stored = slices.Delete(n.stored, i, i+1)
		}
	}
	c.event("n%d reply a=%d op=%d to=n%d %s", n.id, a.id, o.id, m.To, describe(r))
}

// stepForwards steps the forwards in flight of the running nodes and
// hands each one over to the client's call as its attempt's answer.
func (c *sim) stepForwards() {
	stepped := false
	for i := 0; i < len(c.inflight) && c.viol == nil; {
		a := c.inflight[i]
		if a.fwd == nil || !c.cur(a.via).reachable() {
			i++
			continue
		}
		r, err, done := a.fwd.Step()
		if !done {
			i++
			continue
		}
		c.inflight = slices.Delete(c.inflight, i, i+1)
		if err != nil {
			r = shard.Response{Err: err}
		}
		stepped = true
		c.onAnswer(a, r)
	}
	if stepped {
		for _, n := range c.nodes {
			n.flushOutbox()
		}
	}
}

// forwardFailed is the error a forward to n that cannot be made answers.
func forwardFailed(to uint64, cause error) error {
	return fmt.Errorf("%w: no forward to n%d: %v", shard.ErrRetry, to, cause)
}
