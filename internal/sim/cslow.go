package sim

import (
	"time"

	"github.com/parkway-io/parkway/internal/inbound"
	"github.com/parkway-io/parkway/transport"
)

// A slow link (PeerFaultRates.SlowLink): the frames of one member's
// regular connection to another arrive slowly, and those behind wait.
//
// transport.TCPBus sends everything for one peer on one connection, a
// byte stream: its receiver reads frame after frame (readLoop), so a
// frame whose bytes come slowly holds back every frame written after it,
// and once the receiver's read deadline (internal/inbound's, which the
// simulator drives here on the receiver's monotonic clock) closes the
// connection, the frame being read and every byte behind it are gone: the
// reader has returned and nothing reads them. The sender learns of it by
// a failed write and redials; its next frames go on the new connection.
//
// The simulator reads each node's in-memory inbox as those connections,
// one per sender (frameIn, each frame through the receiver's inbound
// budget). A frame from the slow link's sender, read while the spell is
// on and nothing else is being read slowly on its connection, becomes
// the connection's slow head: charged at its length field as any frame,
// its StallChunks then arrive one after another on the receiver's clock,
// each up to 1.25× the stall timeout after the last (none while the
// sender is stopped or the link is cut), or stop for good (one frame in
// eight). Every later frame of that sender that the receiver reads off
// its inbox waits behind the head, in order, uncharged (its bytes not
// yet read). The head read whole goes to the engine, and the frames
// behind are read after it, in order (the first becoming a slow head in
// its turn while the spell lasts). A read deadline the head misses
// closes the connection: the head's charge is given back, the head and
// the frames behind it are lost, and the sender's next frame opens a new
// connection. A receiver that crashes loses them with its bus; a sender
// that crashes closes its connection (the receiver reads its end); calms
// and quiescence close every slow connection.
//
// Not modelled: the frames the sender writes into the closed connection
// before a write fails (TCPBus loses them too; raft re-sends either way),
// and the sender's queue filling while its connection is held (the
// in-memory network takes every message).

// slowHead is a frame being read slowly on a sender's regular connection,
// with the frames that wait behind it.
type slowHead struct {
	from, to *node
	conn     *inbound.Conn
	m        transport.Message
	// chunks is how many StallChunks the frame's bytes make (at least
	// one), got how many have arrived; stop says the rest never comes.
	chunks, got int
	stop        bool
	// next is when its next chunk arrives, begun when its length field
	// did, last when its last chunk did (the receiver's monotonic clock).
	next, begun, last time.Time
	// behind are the sender's later frames, in order, not yet read.
	behind []transport.Message
}

// startSlowLink starts, with chance rate, a spell of a slow link when
// none is on: the link from a member picked at random to another is slow
// until the spell ends, 100 ms – 2 s from now.
func (c *sim) startSlowLink(rate float64) {
	p := &c.peerf
	if p.slowFrom != 0 || !c.roll(rate) || len(c.nodes) < 2 {
		return
	}
	from := c.nodes[c.rng.IntN(len(c.nodes))]
	to := c.nodes[c.rng.IntN(len(c.nodes)-1)]
	if to == from {
		to = c.nodes[len(c.nodes)-1]
	}
	p.slowFrom, p.slowTo = from.id, to.id
	p.slowEnd = c.clk.Now().Add(c.randDuration(100*time.Millisecond, 2*time.Second))
	c.faults.SlowLinkSpells++
	c.event("n%d's link to n%d is slow until %v", from.id, to.id, p.slowEnd.Sub(epoch0))
}

// slowLink reports whether frames from node from to node to are read
// slowly now (a sender removed since the spell began has no connection
// left to be slow on).
func (c *sim) slowLink(from, to uint64) bool {
	p := &c.peerf
	return p.slowFrom == from && p.slowTo == to && !c.quiescing && !c.calming() && c.node(from) != nil
}

// headOn is the slow frame being read on n's connection from sender
// from, nil when there is none.
func (c *sim) headOn(n *node, from uint64) *slowHead {
	for _, h := range c.peerf.heads {
		if h.to == n && h.from.id == from {
			return h
		}
	}
	return nil
}

// slowDelay is how long a slow frame's next chunk takes: up to 1.25×
// the stall timeout, so that one chunk in five misses its deadline.
func (c *sim) slowDelay() time.Duration {
	return c.randDuration(0, simStallTimeout*5/4)
}

// beginSlow makes m, whose length field n just read on conn (charged),
// the connection's slow head.
func (c *sim) beginSlow(n *node, conn *inbound.Conn, m transport.Message, now time.Time) {
	from := c.node(uint64(m.From))
	h := &slowHead{from: from, to: n, conn: conn, m: m, begun: now, last: now,
		chunks: max(1, (len(m.Payload)+inbound.StallChunk-1)/inbound.StallChunk),
		stop:   c.rng.IntN(8) == 0}
	h.next = now.Add(c.slowDelay())
	c.peerf.heads = append(c.peerf.heads, h)
	c.faults.SlowFrames++
	c.event("n%d reads n%d's frame of %d bytes slowly (%d chunks, stops=%v)", n.id, from.id, frameHeader+len(m.Payload), h.chunks, h.stop)
}

// sweepSlow moves the slow frames on, on each receiver's clock: their
// chunks due by now arrive unless a read deadline passed first; a frame
// whole goes to the engine and the frames behind it are read after it; a
// missed deadline closes the connection (closeSlow).
func (c *sim) sweepSlow() {
	p := &c.peerf
	var kept, whole []*slowHead
	for _, h := range p.heads {
		to, from := h.to, h.from
		switch {
		case c.node(to.id) != to || to.down:
			c.faults.SlowLost += len(h.behind)
			continue // the receiver's bus is gone, and its budget with it
		case c.node(from.id) != from || from.down:
			c.closeSlow(h, "its sender went down")
			if c.viol != nil {
				return
			}
			continue
		case to.stopped:
			kept = append(kept, h) // a stopped node's deadlines fire when it resumes
			continue
		}
		now := to.clk.monoNow()
		for !h.stop && h.got < h.chunks && !h.next.After(now) && !h.conn.Due(h.next) {
			if from.stopped || !c.net.Linked(transport.NodeID(from.id), transport.NodeID(to.id)) {
				h.next = now // held up: the chunk comes once the sender can send again
				break
			}
			h.got++
			h.last = h.next
			if h.got < h.chunks {
				h.conn.Next(h.next)
				h.next = h.next.Add(c.slowDelay())
			}
		}
		switch {
		case h.got == h.chunks:
			whole = append(whole, h)
		case h.conn.Due(now):
			c.faults.SlowTimeouts++
			c.closeSlow(h, "at its read deadline")
			if c.viol != nil {
				return
			}
		default:
			kept = append(kept, h)
		}
	}
	p.heads = kept
	for _, h := range whole {
		c.wholeSlow(h)
		if c.viol != nil {
			return
		}
	}
}

// wholeSlow hands a slow frame read whole to its receiver's engine, then
// reads the frames behind it, in order.
func (c *sim) wholeSlow(h *slowHead) {
	n := h.to
	c.faults.SlowWhole++
	c.event("n%d read n%d's slow frame whole: %s (%d behind)", n.id, h.from.id, describeMsg(h.m), len(h.behind))
	ch := h.conn.Complete()
	ok := c.receive(n, h.m)
	c.frameOut(n, ch)
	if !ok {
		return
	}
	for _, m := range h.behind {
		if !c.readIn(n, m) {
			return
		}
	}
}

// closeSlow closes a slow frame's connection, as the receiver's reader
// does when a read fails: the frame's charge is given back (checked: a
// closed connection holds nothing, its frames read whole having been
// released as their engine took them), and it and the frames behind it
// are lost; the sender's next frame opens a new connection.
func (c *sim) closeSlow(h *slowHead, why string) {
	in := c.inboundOf(h.to)
	from := h.from.id
	h.conn.Close()
	if in.conns[from] == h.conn {
		delete(in.conns, from)
	}
	c.faults.SlowLost += len(h.behind)
	c.event("n%d closes n%d's connection %s: its slow frame (%d of %d chunks) and %d behind lost", h.to.id, from, why, h.got, h.chunks, len(h.behind))
	c.checkClosed(h.to, from, h.conn)
}

// checkClosed checks invariant 13's rule for a connection just closed:
// it holds no charge (the frame it was reading gave its back, and the
// frames it read whole gave theirs back when their engine took them).
func (c *sim) checkClosed(n *node, from uint64, conn *inbound.Conn) {
	if u := conn.Used(); u != 0 {
		c.fail(13, "n%d closed its connection from n%d still holding %d bytes (n%d's share %d, total %d)",
			n.id, from, u, from, c.inboundOf(n).b.PeerUsed(from), c.inboundOf(n).b.Used())
	}
}

// slowOff closes every slow connection (quiescence, calms).
func (c *sim) slowOff() {
	p := &c.peerf
	p.slowFrom, p.slowTo = 0, 0
	heads := p.heads
	p.heads = nil
	for _, h := range heads {
		if c.node(h.to.id) != h.to || h.to.down {
			continue
		}
		c.closeSlow(h, "(faults off)")
	}
}

// checkSlow checks invariant 13's bounds and deadlines on the slow
// frames: no connection holds more than its budget, and none is still
// charged once its receiver's read deadlines were checked past the
// deadline the simulator computes for its frame.
func (c *sim) checkSlow() {
	lim := simInboundLimits
	for _, h := range c.peerf.heads {
		in := c.peerf.inb[h.to.id]
		if in == nil || in.n != h.to || h.to.down {
			continue
		}
		if h.conn.Used() > lim.MaxConn {
			c.fail(13, "n%d holds %d bytes on its connection from n%d, a connection's budget is %d", h.to.id, h.conn.Used(), h.from.id, lim.MaxConn)
			return
		}
		if c.overdue(in, h.begun, h.last) {
			c.fail(13, "n%d still holds n%d's slow frame (%d of %d chunks) %v past its read deadline",
				h.to.id, h.from.id, h.got, h.chunks, in.sweptAt.Sub(readDeadline(h.begun, h.last)))
			return
		}
	}
}
