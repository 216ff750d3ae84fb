package sim

import (
	"fmt"
	"time"

	"github.com/parkway-io/parkway/internal/slots"
	"github.com/parkway-io/parkway/transport"
)

// A connection flood (PeerFaultRates.ConnFlood): one node's listener is
// flooded with connections, and the other members' redials to it must
// still be admitted.
//
// transport.TCPBus admits, times and closes its inbound connections by
// internal/slots (the core it runs in its accept loop: MaxConns,
// MaxHandshakes, MaxAddrHandshakes, the handshake deadline, MaxPeerConns
// with oldest-first close). The simulator drives the same core for every
// running node (nodeSlots, a fresh table per incarnation, as a new bus
// would have), on the receiver's monotonic clock, with the limits of
// simSlotLimits; its in-memory network has no connections, so the core
// sees the connections this file opens:
//
//   - The flooder, for the spell (100 ms – 2 s): an outsider (one address,
//     no valid certificate, so no handshake it opens ever completes) or a
//     member (its own address) opens 1–3 connections now and then to the
//     flooded node. The outsider's never finish their handshake; one in
//     two of the member's does, 1–20 ms after its accept (a member
//     redialling in a loop: each authenticated connection past
//     MaxPeerConns closes its oldest), the others never do. Connections
//     that never finish are closed when the receiver's handshake deadline
//     (Conn.Due) passes; the member's established ones when the member
//     goes down or faults end.
//   - The honest members redial the flooded node now and then while the
//     spell lasts (one handshake in flight per member), each completing
//     its handshake 1–20 ms after its accept and staying open (their
//     oldest closed past MaxPeerConns) until faults end.
//
// Invariant 14 checks that an honest member's redial is admitted (the
// flood holds at most MaxAddrHandshakes handshake slots, so the others'
// redials find one) and authenticated before its handshake deadline;
// that no node's slots ever pass MaxConns, MaxHandshakes,
// MaxAddrHandshakes or MaxPeerConns; that the slots the core counts are
// those of the connections the simulator holds open (a closed
// connection gives its slot back); that no handshake is still open once
// its receiver's sweep passed its deadline; and that calms and
// quiescence, which close every connection, leave no slot held.
//
// Not modelled: an outsider from many addresses (which can hold all of
// MaxHandshakes, and delay the members' redials until its handshakes
// time out: the listener's network placement must prevent it, the
// README says), the CPU a TLS handshake costs, and the honest members'
// regular connections outside the spell (their frames are internal/
// inbound's, cpeer.go).

// The connection slots of the simulated nodes (internal/slots): sized so
// that a flood from one address never holds a slot an honest member
// needs — MaxHandshakes above MaxAddrHandshakes plus one redial in
// flight per other member, MaxConns above that plus MaxPeerConns per
// member (at most maxNodes).
const simHandshakeTimeout = 500 * time.Millisecond

var simSlotLimits = slots.Limits{
	MaxConns: 32, MaxHandshakes: 12, MaxAddrHandshakes: 3, MaxPeerConns: 2,
	HandshakeTimeout: simHandshakeTimeout,
}

// outsiderAddr is the outsider's one address; a member's is addrOf's.
const outsiderAddr = "outsider"

func addrOf(id uint64) string { return fmt.Sprintf("n%d", id) }

// connFlood is the flood's spell and every node's slots.
type connFlood struct {
	// to is flooded until end (0: no spell) by member from, or by the
	// outsider when from is 0.
	to, from uint64
	end      time.Time
	nodes    map[uint64]*nodeSlots
}

// nodeSlots is one running node's connection slots: what its bus would
// hold, and the connections the simulator holds open on it.
type nodeSlots struct {
	n     *node
	t     *slots.Table
	conns []*simConn
	// sweptAt is the node's monotonic time when its handshake deadlines
	// were last checked (sweepConns).
	sweptAt time.Time
}

// simConn is one connection the simulator opened to a node.
type simConn struct {
	from   uint64 // the member that opened it, 0 for the outsider
	honest bool
	sc     *slots.Conn
	// begun is when it was accepted, done when its handshake completes
	// (zero: never), on the receiver's monotonic clock.
	begun, done time.Time
}

// slotsOf is n's connection slots, made for n's current incarnation.
func (c *sim) slotsOf(n *node) *nodeSlots {
	f := &c.peerf.conns
	if f.nodes == nil {
		f.nodes = make(map[uint64]*nodeSlots)
	}
	ns := f.nodes[n.id]
	if ns == nil || ns.n != n {
		ns = &nodeSlots{n: n, t: slots.New(simSlotLimits), sweptAt: n.clk.monoNow()}
		f.nodes[n.id] = ns
	}
	return ns
}

// startConnFlood starts, with chance rate, a flood when none is on: a
// node picked at random is flooded for 100 ms – 2 s, by the outsider or
// by another member (one time in two each); and while one is on, opens
// the flood's next connections and the honest members' redials.
func (c *sim) startConnFlood(rate float64) {
	f := &c.peerf.conns
	if f.to == 0 && c.roll(rate) && len(c.nodes) >= 2 {
		to := c.nodes[c.rng.IntN(len(c.nodes))]
		f.to, f.from = to.id, 0
		if c.rng.IntN(2) == 0 {
			from := c.nodes[c.rng.IntN(len(c.nodes)-1)]
			if from == to {
				from = c.nodes[len(c.nodes)-1]
			}
			f.from = from.id
		}
		f.end = c.clk.Now().Add(c.randDuration(100*time.Millisecond, 2*time.Second))
		c.faults.ConnFloodSpells++
		who := "the outsider"
		if f.from != 0 {
			who = fmt.Sprintf("n%d", f.from)
		}
		c.event("%s floods n%d with connections until %v", who, to.id, f.end.Sub(epoch0))
	}
	if f.to == 0 || c.quiescing || c.calming() {
		return
	}
	if c.rng.IntN(4) == 0 {
		c.floodConns()
	}
	if c.rng.IntN(8) == 0 {
		c.honestRedial()
	}
}

// floodConns opens 1–3 of the flood's connections to the flooded node.
func (c *sim) floodConns() {
	f := &c.peerf.conns
	to := c.node(f.to)
	if to == nil || !to.reachable() {
		return
	}
	addr := outsiderAddr
	if f.from != 0 {
		from := c.node(f.from)
		if from == nil || !from.reachable() || !c.net.Linked(transport.NodeID(from.id), transport.NodeID(to.id)) {
			return
		}
		addr = addrOf(from.id)
	}
	ns := c.slotsOf(to)
	now := to.clk.monoNow()
	k := 1 + c.rng.IntN(3)
	admitted, finishing, refused := 0, 0, slots.Admitted
	for range k {
		c.faults.FloodConns++
		sc, v := ns.t.Accept(addr, now)
		if v != slots.Admitted {
			c.faults.FloodConnsRefused++
			refused = v
			continue
		}
		admitted++
		nc := &simConn{from: f.from, sc: sc, begun: now}
		if f.from != 0 && c.rng.IntN(2) == 0 {
			nc.done = now.Add(c.randDuration(time.Millisecond, 20*time.Millisecond))
			finishing++
		}
		ns.conns = append(ns.conns, nc)
	}
	if admitted > 0 {
		// Refusals alone are not traced: a flood meets its bound on most
		// steps of its spell.
		c.event("n%d admits %d of %s's %d connections (%d to finish their handshake; the rest %v)", to.id, admitted, addr, k, finishing, refused)
	}
}

// honestRedial makes a member picked at random, neither flooded nor
// flooding, redial the flooded node, unless its last redial, or a
// connection of a flood it made before, is still handshaking. Its redial must be admitted (invariant 14).
func (c *sim) honestRedial() {
	f := &c.peerf.conns
	to := c.node(f.to)
	if to == nil || !to.reachable() {
		return
	}
	m := c.nodes[c.rng.IntN(len(c.nodes))]
	if m == to || m.id == f.from || !m.reachable() || !c.net.Linked(transport.NodeID(m.id), transport.NodeID(to.id)) {
		return
	}
	ns := c.slotsOf(to)
	for _, o := range ns.conns {
		// One redial in flight per member; and a member that flooded is
		// not honest while its flood's handshakes hold its address's
		// share.
		if o.from == m.id && o.sc.Handshaking() {
			return
		}
	}
	now := to.clk.monoNow()
	c.faults.HonestRedials++
	sc, v := ns.t.Accept(addrOf(m.id), now)
	if v != slots.Admitted {
		c.fail(14, "n%d refused honest n%d's redial while flooded: %v (open %d, handshaking %d, the flooder's address %d)",
			to.id, m.id, v, ns.t.Open(), ns.t.Handshaking(), ns.t.AddrHandshaking(c.flooderAddr()))
		return
	}
	ns.conns = append(ns.conns, &simConn{from: m.id, honest: true, sc: sc, begun: now,
		done: now.Add(c.randDuration(time.Millisecond, 20*time.Millisecond))})
	c.event("n%d admits honest n%d's redial", to.id, m.id)
}

func (c *sim) flooderAddr() string {
	if f := c.peerf.conns.from; f != 0 {
		return addrOf(f)
	}
	return outsiderAddr
}

// expireConnFlood ends the spell whose time is up, and moves every
// node's connections on (sweepConns).
func (c *sim) expireConnFlood() {
	f := &c.peerf.conns
	if f.to != 0 && !c.clk.Now().Before(f.end) {
		c.event("n%d is flooded no more", f.to)
		f.to, f.from = 0, 0
	}
	if len(f.nodes) > 0 {
		c.sweepConns()
	}
}

// sweepConns moves the connections on, on each receiver's clock: a
// handshake whose completion came before its deadline authenticates
// (closing the member's oldest past MaxPeerConns), one past its
// deadline is closed; a connection whose member went down is closed (its
// end closed it). A node down or gone took its slots with its bus; a
// stopped node's deadlines fire when it resumes.
func (c *sim) sweepConns() {
	f := &c.peerf.conns
	for id, ns := range f.nodes {
		if c.node(id) != ns.n || ns.n.down {
			delete(f.nodes, id) // deleting in any order leaves the same map
		}
	}
	for _, ns := range c.slotsNow() {
		n := ns.n
		if n.stopped {
			continue
		}
		now := n.clk.monoNow()
		for _, o := range ns.conns {
			if o.sc.Closed() {
				continue
			}
			if o.from != 0 {
				if m := c.node(o.from); m == nil || m.down {
					c.closeConn(ns, o, "its member went down")
					continue
				}
			}
			if !o.sc.Handshaking() {
				continue
			}
			if !o.done.IsZero() && !o.done.After(now) && !o.sc.Due(o.done) {
				if old := o.sc.Establish(o.from); old != nil {
					c.faults.ConnsEvicted++
					c.closeConn(ns, ns.find(old), fmt.Sprintf("n%d's oldest past MaxPeerConns", o.from))
				}
				continue
			}
			if o.sc.Due(now) {
				if o.honest {
					c.fail(14, "n%d's handshake deadline closed honest n%d's redial (accepted %v ago)", n.id, o.from, now.Sub(o.begun))
					return
				}
				c.faults.HandshakeTimeouts++
				c.closeConn(ns, o, "at its handshake deadline")
			}
		}
		ns.compact()
		ns.sweptAt = now
	}
}

// slotsNow is the slots of the running nodes that have any, in the
// nodes' order (the map's order would make the trace depend on Go's map
// iteration).
func (c *sim) slotsNow() []*nodeSlots {
	var out []*nodeSlots
	for _, n := range c.nodes {
		if ns := c.peerf.conns.nodes[n.id]; ns != nil && ns.n == n && !n.down {
			out = append(out, ns)
		}
	}
	return out
}

// find is the simulator's connection for slot sc.
func (ns *nodeSlots) find(sc *slots.Conn) *simConn {
	for _, o := range ns.conns {
		if o.sc == sc {
			return o
		}
	}
	return nil
}

// compact drops the closed connections.
func (ns *nodeSlots) compact() {
	kept := ns.conns[:0]
	for _, o := range ns.conns {
		if !o.sc.Closed() {
			kept = append(kept, o)
		}
	}
	clear(ns.conns[len(kept):])
	ns.conns = kept
}

// closeConn closes one connection, as its reader's return does.
func (c *sim) closeConn(ns *nodeSlots, o *simConn, why string) {
	if o == nil {
		c.fail(14, "n%d's slots closed a connection the simulator does not hold", ns.n.id)
		return
	}
	o.sc.Close()
	who := outsiderAddr
	if o.from != 0 {
		who = addrOf(o.from)
	}
	c.event("n%d closes %s's connection %s", ns.n.id, who, why)
}

// connsOff ends the flood and closes every connection the simulator
// holds (quiescence, calms): every node's slots must then be all free.
func (c *sim) connsOff() {
	f := &c.peerf.conns
	f.to, f.from = 0, 0
	all := c.slotsNow()
	f.nodes = nil
	for _, ns := range all {
		for _, o := range ns.conns {
			o.sc.Close()
		}
		ns.conns = nil
		if t := ns.t; t.Open() != 0 || t.Handshaking() != 0 || t.Peers() != 0 {
			c.fail(14, "n%d's slots hold %d connections (%d handshaking, %d members) once every connection closed", ns.n.id, t.Open(), t.Handshaking(), t.Peers())
			return
		}
	}
}

// checkConns checks invariant 14 after every action: no running node's
// slots passed their bounds, the slots held are those of the
// connections the simulator holds open, and no handshake is still open
// once its receiver's sweep passed the deadline the simulator computes
// for it (simHandshakeTimeout after its accept).
func (c *sim) checkConns() {
	lim := simSlotLimits
	for _, ns := range c.slotsNow() {
		id, t := ns.n.id, ns.t
		if t.PeakOpen() > lim.MaxConns || t.PeakHandshaking() > lim.MaxHandshakes {
			c.fail(14, "n%d held %d connections (%d handshaking), its bounds are %d (%d)", id, t.PeakOpen(), t.PeakHandshaking(), lim.MaxConns, lim.MaxHandshakes)
			return
		}
		open := 0
		for _, o := range ns.conns {
			if o.sc.Closed() {
				continue
			}
			open++
			if a := o.sc.Addr(); t.AddrHandshaking(a) > lim.MaxAddrHandshakes {
				c.fail(14, "n%d has %d connections handshaking from %s, the bound is %d", id, t.AddrHandshaking(a), a, lim.MaxAddrHandshakes)
				return
			}
			if p := o.sc.Peer(); p != 0 && t.PeerConns(p) > lim.MaxPeerConns {
				c.fail(14, "n%d has %d connections of n%d, the bound is %d", id, t.PeerConns(p), p, lim.MaxPeerConns)
				return
			}
			if o.sc.Handshaking() && !ns.sweptAt.Before(o.begun.Add(simHandshakeTimeout)) {
				c.fail(14, "n%d still holds a handshaking connection %v past its deadline", id, ns.sweptAt.Sub(o.begun.Add(simHandshakeTimeout)))
				return
			}
		}
		if t.Open() != open {
			c.fail(14, "n%d's slots count %d connections open, %d are (a closed connection kept its slot)", id, t.Open(), open)
			return
		}
	}
}
