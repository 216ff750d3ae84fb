package inbound

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func limits() Limits {
	return Limits{MaxConn: 200, MaxPeer: 300, MaxTotal: 400, FrameTimeout: 10 * time.Second, StallTimeout: time.Second}
}

// A claim is charged to the connection, the peer and the total, all or
// nothing: each bound refuses the frame that would pass it and charges
// nothing for it.
func TestAdmitBounds(t *testing.T) {
	b := New(limits())
	c1, c2, c3 := b.Open(7), b.Open(7), b.Open(9)
	for _, c := range []*Conn{c1, c2, c3} {
		c.Begin(t0)
	}
	if !c1.Admit(150) || c1.Admit(60) {
		t.Fatal("connection bound: want 150 admitted, then 60 refused (210 > 200)")
	}
	if !c2.Admit(150) || b.PeerUsed(7) != 300 {
		t.Fatalf("peer 7 holds %d, want 300", b.PeerUsed(7))
	}
	c4 := b.Open(7)
	c4.Begin(t0)
	if c4.Admit(1) {
		t.Fatal("peer bound: a byte past peer 7's 300 admitted")
	}
	if !c3.Admit(100) || b.Open(0).Admit(1) {
		t.Fatal("total bound: want 100 admitted for peer 9, then a byte past 400 refused")
	}
	if b.Used() != 400 || b.Peak() != 400 || c4.Used() != 0 {
		t.Fatalf("used %d peak %d c4 %d, want 400 400 0", b.Used(), b.Peak(), c4.Used())
	}
}

// A frame that stalls is due at its stall deadline, and closing its
// connection gives its charge back; a completed frame's charge stays
// with its message until Release.
func TestStallReleases(t *testing.T) {
	b := New(limits())
	c := b.Open(3)
	c.Begin(t0)
	c.Admit(100)
	done := c.Complete()
	if d := c.Begin(t0); !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("deadline %v, want StallTimeout after the length field", d.Sub(t0))
	}
	c.Admit(80)
	if c.Due(t0.Add(time.Second - 1)) {
		t.Fatal("due before its stall deadline")
	}
	if d := c.Next(t0.Add(900 * time.Millisecond)); !d.Equal(t0.Add(1900 * time.Millisecond)) {
		t.Fatalf("next chunk's deadline %v, want 1.9s", d.Sub(t0))
	}
	if !c.Due(t0.Add(1900 * time.Millisecond)) {
		t.Fatal("not due at its stall deadline")
	}
	c.Close()
	c.Close()
	if b.Used() != 100 || b.PeerUsed(3) != 100 {
		t.Fatalf("after close: used %d peer %d, want the completed frame's 100", b.Used(), b.PeerUsed(3))
	}
	b.Release(done)
	if b.Used() != 0 || b.PeerUsed(3) != 0 || c.Used() != 0 {
		t.Fatalf("after release: used %d peer %d conn %d, want 0", b.Used(), b.PeerUsed(3), c.Used())
	}
}

// A frame that keeps trickling is due at its FrameTimeout whatever its
// progress.
func TestFrameTimeoutCapsStalls(t *testing.T) {
	b := New(limits())
	c := b.Open(0)
	c.Begin(t0)
	var d time.Time
	for s := time.Duration(0); s < 10*time.Second; s += 900 * time.Millisecond {
		d = c.Next(t0.Add(s))
	}
	if !d.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("deadline %v, want the frame's end at 10s", d.Sub(t0))
	}
}
