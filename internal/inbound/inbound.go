// Package inbound is the transport's inbound frame budget as a core with
// no goroutine and no clock of its own: the decisions a receiver makes
// about the frames its peers send it, taken from the caller's time.
//
// A frame's length field claims its size before its bytes arrive. The
// receiver charges the claim to the connection's budget, to the sending
// peer's across all its connections (when the peer is authenticated) and
// to the receiver's total, all or nothing, before it allocates anything
// for the payload (Conn.Admit); a claim that would pass one closes the
// connection. From the length field on, the frame must be whole within
// FrameTimeout, and each StallChunk of it within StallTimeout
// (Conn.Begin, Conn.Next): a peer that stops short of a frame's end
// loses the connection, and the frame's charge, at its stall deadline.
// A whole frame's charge passes to its message (Conn.Complete) and is
// given back once the receiver's consumer has taken it (Budget.Release).
//
// transport.TCPBus drives it with the wall clock and enforces the
// deadlines it returns as read deadlines on its sockets; the simulator
// (internal/sim) drives the same code on its virtual clock, for every
// message its in-memory network delivers and for a member that stalls
// frames. A Budget is not safe for concurrent use: its owner serialises
// the calls (TCPBus under a mutex, the simulator on its one goroutine),
// except a Conn's Begin, Next, Complete, Due and Deadline, which touch
// that connection's own state alone: the goroutine that reads the
// connection may call them without the others' lock.
package inbound

import (
	"time"

	"github.com/parkway-io/parkway/internal/testhooks"
)

// StallChunk is how much of a frame must arrive within StallTimeout.
const StallChunk = 64 << 10

// Limits are a receiver's bounds. The byte limits must satisfy
// MaxConn ≤ MaxTotal and MaxPeer ≤ MaxTotal (the transport checks its
// options); StallTimeout ≤ FrameTimeout.
type Limits struct {
	// MaxConn bounds the bytes one connection holds: the frame being
	// read plus its frames received and not yet released.
	MaxConn int64
	// MaxPeer bounds the same over all the connections of one
	// authenticated peer.
	MaxPeer int64
	// MaxTotal bounds the same over every connection.
	MaxTotal int64
	// FrameTimeout bounds a frame from its length field to its end;
	// StallTimeout each StallChunk of it.
	FrameTimeout, StallTimeout time.Duration
}

// Budget is one receiver's inbound budget.
type Budget struct {
	lim   Limits
	used  int64
	peak  int64
	peers map[uint64]int64
}

// New returns an empty budget with limits l.
func New(l Limits) *Budget {
	return &Budget{lim: l, peers: make(map[uint64]int64)}
}

// Limits are the budget's bounds.
func (b *Budget) Limits() Limits { return b.lim }

// Used is what every connection holds now; Peak its high-water mark.
func (b *Budget) Used() int64 { return b.used }

// Peak is the most Used has been.
func (b *Budget) Peak() int64 { return b.peak }

// PeerUsed is what peer's connections hold now (0 for peer 0, which has
// no share).
func (b *Budget) PeerUsed(peer uint64) int64 { return b.peers[peer] }

// Conn is one inbound connection's part of the budget.
type Conn struct {
	b *Budget
	// peer is the authenticated sender whose share the connection's
	// frames are charged to, 0 for none (plaintext: a sender is whoever
	// a frame names).
	peer uint64
	used int64
	// frame is the charge of the frame being read (0: none charged yet);
	// reading is set from its length field to its end.
	frame    int64
	reading  bool
	end      time.Time
	deadline time.Time
	closed   bool
}

// Open starts a connection whose frames are charged to peer's share
// (peer 0: to none).
func (b *Budget) Open(peer uint64) *Conn { return &Conn{b: b, peer: peer} }

// Peer is the sender the connection's frames are charged to.
func (c *Conn) Peer() uint64 { return c.peer }

// Used is what the connection holds now: the frame being read, and its
// frames completed and not yet released.
func (c *Conn) Used() int64 { return c.used }

// Reading reports whether a frame is being read (its length field has
// arrived, not yet its end).
func (c *Conn) Reading() bool { return c.reading }

// Deadline is when the frame being read must have its next StallChunk
// (or its end), zero when none is being read.
func (c *Conn) Deadline() time.Time {
	if !c.reading {
		return time.Time{}
	}
	return c.deadline
}

// Begin records that a frame's length field arrived at now, and returns
// the deadline of what follows: the header and the first StallChunk.
func (c *Conn) Begin(now time.Time) time.Time {
	c.reading, c.frame = true, 0
	c.end = now.Add(c.b.lim.FrameTimeout)
	return c.Next(now)
}

// Next records that the frame's next StallChunk is awaited from now (the
// previous one arrived), and returns its deadline: StallTimeout from now,
// never past the frame's FrameTimeout.
func (c *Conn) Next(now time.Time) time.Time {
	c.deadline = c.end
	if d := now.Add(c.b.lim.StallTimeout); d.Before(c.end) && !testhooks.NoStallTimeout.Load() {
		c.deadline = d
	}
	return c.deadline
}

// Admit charges the frame being read its claimed size n (length field,
// header included) on the connection, its peer's share and the total,
// all or nothing, before the payload is allocated; false when that would
// pass one of them (the caller closes the connection).
func (c *Conn) Admit(n int64) bool {
	b := c.b
	if c.closed || n < 0 || c.used+n > b.lim.MaxConn || b.used+n > b.lim.MaxTotal {
		return false
	}
	if c.peer != 0 && b.peers[c.peer]+n > b.lim.MaxPeer {
		return false
	}
	c.charge(n)
	c.frame += n
	return true
}

func (c *Conn) charge(n int64) {
	b := c.b
	c.used += n
	b.used += n
	b.peak = max(b.peak, b.used)
	if c.peer != 0 {
		if v := b.peers[c.peer] + n; v != 0 {
			b.peers[c.peer] = v
		} else {
			delete(b.peers, c.peer)
		}
	}
}

// Due reports whether the frame being read missed its deadline at now:
// the caller closes the connection (Close), which releases the frame.
func (c *Conn) Due(now time.Time) bool {
	return c.reading && !now.Before(c.deadline)
}

// Complete records that the frame being read arrived whole, and returns
// its charge, which its message holds until Release.
func (c *Conn) Complete() Charge {
	ch := Charge{c: c, n: c.frame}
	c.reading, c.frame = false, 0
	return ch
}

// Close ends the connection: the frame being read (if any) gives its
// charge back. The charges of its completed frames stay with their
// messages until Release. Closing twice is harmless.
func (c *Conn) Close() {
	if c.closed {
		return
	}
	c.closed = true
	if c.frame != 0 && !testhooks.CloseKeepsFrame.Load() {
		c.charge(-c.frame)
	}
	c.reading, c.frame = false, 0
}

// Charge is what one received message holds of its connection's, its
// peer's and the total budget. The zero Charge holds nothing.
type Charge struct {
	c *Conn
	n int64
}

// Bytes is what the charge holds.
func (ch Charge) Bytes() int64 { return ch.n }

// Release gives ch's bytes back, once the message's consumer took it.
func (b *Budget) Release(ch Charge) {
	if ch.c == nil || ch.n == 0 {
		return
	}
	ch.c.charge(-ch.n)
}
