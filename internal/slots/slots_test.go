package slots

import (
	"testing"
	"time"
)

var t0 = time.Unix(0, 0)

func lim() Limits {
	return Limits{MaxConns: 6, MaxHandshakes: 3, MaxAddrHandshakes: 2, MaxPeerConns: 2, HandshakeTimeout: time.Second}
}

func mustAccept(t *testing.T, tb *Table, addr string, now time.Time) *Conn {
	t.Helper()
	c, v := tb.Accept(addr, now)
	if v != Admitted || c == nil {
		t.Fatalf("accept from %s: %v", addr, v)
	}
	return c
}

func expectRefused(t *testing.T, tb *Table, addr string, want Verdict) {
	t.Helper()
	if c, v := tb.Accept(addr, t0); v != want || c != nil {
		t.Fatalf("accept from %s: %v, want %v", addr, v, want)
	}
}

// One address holds at most MaxAddrHandshakes handshaking slots, all
// addresses MaxHandshakes; another address is admitted while one is at
// its bound, and authenticated connections use the slots handshakes may
// not.
func TestHandshakeBounds(t *testing.T) {
	tb := New(lim())
	a1 := mustAccept(t, tb, "outsider", t0)
	mustAccept(t, tb, "outsider", t0)
	expectRefused(t, tb, "outsider", RefusedAddr)
	m := mustAccept(t, tb, "member", t0)
	expectRefused(t, tb, "other", RefusedHandshakes)
	if ev := m.Establish(2); ev != nil {
		t.Fatalf("evicted %v", ev)
	}
	if tb.Handshaking() != 2 || tb.Open() != 3 || tb.PeerConns(2) != 1 {
		t.Fatalf("handshaking %d open %d member %d", tb.Handshaking(), tb.Open(), tb.PeerConns(2))
	}
	// The member's handshake done, another address may handshake.
	o := mustAccept(t, tb, "other", t0)
	o.Establish(3)
	a1.Close()
	mustAccept(t, tb, "outsider", t0) // its closed slot given back
	x := mustAccept(t, tb, "third", t0)
	x.Establish(4)
	mustAccept(t, tb, "fourth", t0).Establish(5)
	// 6 open: MaxConns refuses before any handshake bound.
	expectRefused(t, tb, "fifth", RefusedConns)
	if tb.PeakOpen() != 6 || tb.PeakHandshaking() != 3 {
		t.Fatalf("peaks %d %d", tb.PeakOpen(), tb.PeakHandshaking())
	}
}

// A handshake is due HandshakeTimeout after its accept, and not once
// established.
func TestHandshakeDeadline(t *testing.T) {
	tb := New(lim())
	c := mustAccept(t, tb, "a", t0)
	if d := c.Deadline(); !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("deadline %v", d)
	}
	if c.Due(t0.Add(time.Second-1)) || !c.Due(t0.Add(time.Second)) {
		t.Fatal("due at the wrong time")
	}
	c.Establish(0)
	if c.Due(t0.Add(time.Hour)) || !c.Deadline().IsZero() {
		t.Fatal("an established connection is due")
	}
	if tb.Peers() != 0 || tb.Handshaking() != 0 || tb.Open() != 1 {
		t.Fatalf("peers %d handshaking %d open %d", tb.Peers(), tb.Handshaking(), tb.Open())
	}
}

// A member's connection past MaxPeerConns evicts its oldest, which no
// longer counts as the member's; closing everything, twice, gives every
// slot back.
func TestPeerConnsOldestFirst(t *testing.T) {
	tb := New(lim())
	var cs []*Conn
	for i := range 4 {
		c := mustAccept(t, tb, "m", t0)
		ev := c.Establish(7)
		switch {
		case i < 2 && ev != nil:
			t.Fatalf("connection %d evicted %p", i, ev)
		case i >= 2 && ev != cs[i-2]:
			t.Fatalf("connection %d evicted %p, want the oldest open %p", i, ev, cs[i-2])
		}
		if ev != nil {
			ev.Close()
		}
		cs = append(cs, c)
	}
	if tb.PeerConns(7) != 2 || tb.Open() != 2 {
		t.Fatalf("member %d open %d", tb.PeerConns(7), tb.Open())
	}
	h := mustAccept(t, tb, "x", t0)
	for _, c := range append(cs, h, h) {
		c.Close()
		c.Close()
	}
	if tb.Open() != 0 || tb.Handshaking() != 0 || tb.Peers() != 0 || tb.AddrHandshaking("x") != 0 {
		t.Fatalf("open %d handshaking %d peers %d", tb.Open(), tb.Handshaking(), tb.Peers())
	}
	if ev := h.Establish(7); ev != nil || !h.Closed() {
		t.Fatal("a closed connection established")
	}
}
