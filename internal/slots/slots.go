// Package slots is the transport's inbound connection slots as a core
// with no goroutine and no clock of its own: the decisions a receiver
// makes about the connections its listener accepts, taken from the
// caller's time and returned as values.
//
// A connection accepted takes a slot (Table.Accept) and is handshaking
// until it authenticates (Conn.Establish) or closes (Conn.Close, which
// gives the slot back). Three bounds decide whether a new connection is
// admitted, in this order: the connections open in all (MaxConns), those
// handshaking in all (MaxHandshakes), and those handshaking from its
// remote address (MaxAddrHandshakes). A refused connection is closed at
// once; the connections already admitted are never closed to make room
// for it. So connections that never finish their handshake (an outsider
// without a valid certificate, a slowloris) hold at most MaxHandshakes
// slots, and those from one address at most MaxAddrHandshakes: the
// MaxConns − MaxHandshakes slots are for authenticated members, and a
// member redialling from another address finds a handshake slot while
// one address floods. A handshake has until its deadline
// (HandshakeTimeout from its accept: Conn.Deadline, Conn.Due), which the
// owner enforces. Once authenticated as a member, a connection counts
// against that member's MaxPeerConns: the member's connection past the
// bound makes its oldest one the one to close (Establish returns it).
//
// transport.TCPBus drives it with the wall clock, keying addresses by
// the remote IP, and enforces the handshake deadline as a socket
// deadline; the simulator (internal/sim) drives the same code on each
// node's virtual monotonic clock against a flood of connections. A
// Table is not safe for concurrent use: its owner serialises the calls.
package slots

import (
	"time"

	"github.com/parkway-io/parkway/internal/testhooks"
)

// Limits are a receiver's bounds. They must satisfy
// MaxAddrHandshakes ≤ MaxHandshakes ≤ MaxConns and
// MaxPeerConns ≤ MaxConns (the transport checks its options), all
// positive.
type Limits struct {
	// MaxConns bounds the open connections, handshaking or not.
	MaxConns int
	// MaxHandshakes bounds the connections not yet authenticated.
	MaxHandshakes int
	// MaxAddrHandshakes bounds the same from one remote address.
	MaxAddrHandshakes int
	// MaxPeerConns bounds one authenticated member's connections.
	MaxPeerConns int
	// HandshakeTimeout is how long a connection has, from its accept, to
	// authenticate.
	HandshakeTimeout time.Duration
}

// Verdict is what Accept decided.
type Verdict int

// The verdicts: admitted, or the bound that refused the connection.
const (
	Admitted Verdict = iota
	RefusedConns
	RefusedHandshakes
	RefusedAddr
)

func (v Verdict) String() string {
	switch v {
	case Admitted:
		return "admitted"
	case RefusedConns:
		return "refused: MaxConns open"
	case RefusedHandshakes:
		return "refused: MaxHandshakes handshaking"
	case RefusedAddr:
		return "refused: MaxAddrHandshakes handshaking from its address"
	}
	return "unknown verdict"
}

// Table is one receiver's inbound connection slots.
type Table struct {
	lim         Limits
	open        int
	handshaking int
	addrs       map[string]int
	// peers holds each authenticated member's open connections, oldest
	// first.
	peers map[uint64][]*Conn
	// peakOpen and peakHandshaking are the high-water marks.
	peakOpen, peakHandshaking int
}

// New returns an empty table with limits l.
func New(l Limits) *Table {
	return &Table{lim: l, addrs: make(map[string]int), peers: make(map[uint64][]*Conn)}
}

// Limits are the table's bounds.
func (t *Table) Limits() Limits { return t.lim }

// Open is the connections holding a slot now.
func (t *Table) Open() int { return t.open }

// Handshaking is the connections not yet authenticated now.
func (t *Table) Handshaking() int { return t.handshaking }

// AddrHandshaking is the connections from addr not yet authenticated.
func (t *Table) AddrHandshaking(addr string) int { return t.addrs[addr] }

// PeerConns is member peer's authenticated connections open now.
func (t *Table) PeerConns(peer uint64) int { return len(t.peers[peer]) }

// Peers is how many members hold authenticated connections.
func (t *Table) Peers() int { return len(t.peers) }

// PeakOpen and PeakHandshaking are the most Open and Handshaking have
// been.
func (t *Table) PeakOpen() int        { return t.peakOpen }
func (t *Table) PeakHandshaking() int { return t.peakHandshaking }

type state uint8

const (
	handshaking state = iota
	established
	closed
)

// Conn is one accepted connection's slot.
type Conn struct {
	t        *Table
	addr     string
	peer     uint64
	state    state
	deadline time.Time
}

// Accept decides on a connection from addr accepted at now: admitted (a
// handshaking Conn whose deadline is HandshakeTimeout from now), or
// refused with the bound that refused it (nil Conn; the caller closes
// the connection).
func (t *Table) Accept(addr string, now time.Time) (*Conn, Verdict) {
	switch {
	case t.open >= t.lim.MaxConns:
		return nil, RefusedConns
	case testhooks.NoHandshakeBound.Load():
		// Handshaking connections bounded only by MaxConns.
	case t.handshaking >= t.lim.MaxHandshakes:
		return nil, RefusedHandshakes
	case t.addrs[addr] >= t.lim.MaxAddrHandshakes:
		return nil, RefusedAddr
	}
	t.open++
	t.handshaking++
	t.addrs[addr]++
	t.peakOpen = max(t.peakOpen, t.open)
	t.peakHandshaking = max(t.peakHandshaking, t.handshaking)
	return &Conn{t: t, addr: addr, deadline: now.Add(t.lim.HandshakeTimeout)}, Admitted
}

// Addr is the remote address the connection was accepted from.
func (c *Conn) Addr() string { return c.addr }

// Peer is the member the connection authenticated as (0: none yet, or
// established without authentication).
func (c *Conn) Peer() uint64 { return c.peer }

// Handshaking reports whether the connection has neither authenticated
// nor closed.
func (c *Conn) Handshaking() bool { return c.state == handshaking }

// Closed reports whether Close ran.
func (c *Conn) Closed() bool { return c.state == closed }

// Deadline is when the handshake must have finished (zero once it has,
// or the connection closed).
func (c *Conn) Deadline() time.Time {
	if c.state != handshaking {
		return time.Time{}
	}
	return c.deadline
}

// Due reports whether the handshake missed its deadline at now: the
// caller closes the connection (Close).
func (c *Conn) Due(now time.Time) bool {
	return c.state == handshaking && !now.Before(c.deadline)
}

// Establish ends the handshake: the connection authenticated as member
// peer, or, for peer 0, carries frames without authentication (a
// plaintext transport, where no member bound applies). It returns the
// member's oldest connection when peer now has more than MaxPeerConns
// (no longer counted as the member's; the caller closes it, and its
// Close gives its slot back), else nil.
// A connection closed or established already is left as it is.
func (c *Conn) Establish(peer uint64) (evict *Conn) {
	t := c.t
	if c.state != handshaking {
		return nil
	}
	c.state = established
	c.leaveHandshake()
	if peer == 0 {
		return nil
	}
	c.peer = peer
	cs := append(t.peers[peer], c)
	if len(cs) > t.lim.MaxPeerConns {
		// Out of the member's count at once, so the next connection's
		// decision does not pick it again; its slot is given back when
		// the caller closes it.
		evict, cs = cs[0], cs[1:]
	}
	t.peers[peer] = cs
	return evict
}

func (c *Conn) leaveHandshake() {
	t := c.t
	t.handshaking--
	if t.addrs[c.addr]--; t.addrs[c.addr] <= 0 {
		delete(t.addrs, c.addr)
	}
}

// Close gives the connection's slot back (its member's and its
// address's share with it). Closing twice is harmless.
func (c *Conn) Close() {
	t := c.t
	switch c.state {
	case closed:
		return
	case handshaking:
		c.leaveHandshake()
	case established:
		if c.peer != 0 {
			cs := t.peers[c.peer]
			for i, o := range cs {
				if o == c {
					cs = append(cs[:i:i], cs[i+1:]...)
					break
				}
			}
			if len(cs) == 0 {
				delete(t.peers, c.peer)
			} else {
				t.peers[c.peer] = cs
			}
		}
	}
	c.state = closed
	if !testhooks.CloseKeepsSlot.Load() {
		t.open--
	}
}
