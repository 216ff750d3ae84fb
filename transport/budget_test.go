package transport

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// fullFrames returns k frames from 2 to 1 whose length field is exactly
// maxFrame, sharing one payload buffer.
func fullFrames(k int, maxFrame int) [][]byte {
	payload := make([]byte, maxFrame-headerLen)
	var out [][]byte
	for range k {
		var h [frameOverhead]byte
		putHeader(&h, &Message{From: 2, To: 1, Payload: payload})
		out = append(out, h[:], payload)
	}
	return out
}

// drainUntilClosed reads c until the bus closes it.
func drainUntilClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(guard))
	if _, err := io.Copy(io.Discard, c); err != nil && !isReset(err) {
		t.Errorf("connection not closed by the bus: %v", err)
	}
}

// TestTCPBudgetBoundsMemory: 16 raw connections each send three
// maximum-size frames to a bus whose consumer reads nothing. The bus never
// holds more than MaxTotalBytes of them (it refuses a frame before
// allocating it), closes every connection that passes its own or the
// total budget, and counts each; once the consumer takes what was
// accepted and the bus closes, nothing is held.
func TestTCPBudgetBoundsMemory(t *testing.T) {
	const (
		maxFrame = 1 << 20
		conns    = 16
	)
	a := listen(t, 1, TCPOptions{
		InsecurePlaintext: true,
		MaxFrame:          maxFrame,
		MaxConnBytes:      2 * maxFrame,
		MaxTotalBytes:     4 * maxFrame,
	})
	frames := fullFrames(3, maxFrame)
	var wg sync.WaitGroup
	for range conns {
		raw, err := net.Dial("tcp", a.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		wg.Go(func() {
			bufs := net.Buffers(append([][]byte(nil), frames...))
			bufs.WriteTo(raw) // fails once the bus closes the connection
		})
		wg.Go(func() { drainUntilClosed(t, raw) })
	}
	wg.Wait()

	s := a.Stats()
	if s.OverBudget != conns {
		t.Fatalf("OverBudget %d, want every connection (%d): %+v", s.OverBudget, conns, s)
	}
	if s.PeakInFlightBytes > 4*maxFrame || s.Received == 0 || s.Received > 4 ||
		s.InFlightBytes != s.Received*maxFrame || s.InboundConns != 0 {
		t.Fatalf("accounting past the budget: %+v", s)
	}
	for range s.Received {
		if m := recv(t, a.Recv()); m.From != 2 || len(m.Payload) != maxFrame-headerLen {
			t.Fatalf("got from %d, %d bytes", m.From, len(m.Payload))
		}
	}
	a.Close()
	if s := a.Stats(); s.InFlightBytes != 0 {
		t.Fatalf("bytes still held after close: %+v", s)
	}
}

// TestTCPConnBudget: one connection cannot take the whole total budget:
// its third unconsumed frame passes MaxConnBytes and closes it, while
// another connection is still served.
func TestTCPConnBudget(t *testing.T) {
	const maxFrame = 1 << 16
	a := listen(t, 1, TCPOptions{
		InsecurePlaintext: true,
		MaxFrame:          maxFrame,
		MaxConnBytes:      2 * maxFrame,
		MaxTotalBytes:     100 * maxFrame,
	})
	raw, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	bufs := net.Buffers(fullFrames(3, maxFrame))
	go bufs.WriteTo(raw)
	drainUntilClosed(t, raw)
	if s := a.Stats(); s.OverBudget != 1 || s.Received != 2 || s.InFlightBytes != 2*maxFrame {
		t.Fatalf("stats %+v", s)
	}

	// A second connection still has its own budget and the total's rest.
	raw2, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw2.Close()
	if _, err := raw2.Write(appendFrame(nil, &Message{From: 3, To: 1, Payload: []byte("ok")})); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		recv(t, a.Recv())
	}
	if m := recv(t, a.Recv()); m.From != 3 || string(m.Payload) != "ok" {
		t.Fatalf("got %+v", m)
	}

	// What the consumer has taken no longer counts: a connection whose
	// frames are each taken before the next is sent never runs out.
	before := a.Stats().OverBudget
	for i, buf := range fullFrames(10, maxFrame) {
		if _, err := raw2.Write(buf); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 { // header and payload written: one whole frame
			recv(t, a.Recv())
		}
	}
	if s := a.Stats(); s.OverBudget != before || s.InFlightBytes != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestTCPConnLimit: with MaxConns open, one more inbound connection is
// closed at once and counted.
func TestTCPConnLimit(t *testing.T) {
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, MaxConns: 2})
	for i := range 2 {
		raw, err := net.Dial("tcp", a.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		// Once its frame arrives the connection was accepted and counted.
		if _, err := raw.Write(appendFrame(nil, &Message{From: 2, To: 1, Payload: seqPayload(uint64(i))})); err != nil {
			t.Fatal(err)
		}
		recv(t, a.Recv())
	}
	extra, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	drainUntilClosed(t, extra)
	if s := a.Stats(); s.RejectedConns != 1 || s.InboundConns != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestTCPReadDeadlines: a connection that sends nothing is closed at
// IdleTimeout, and one that stops inside a frame at FrameTimeout, with the
// bytes charged for that frame released.
func TestTCPReadDeadlines(t *testing.T) {
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, IdleTimeout: 50 * time.Millisecond})
	idle, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	drainUntilClosed(t, idle)
	if s := a.Stats(); s.ReadTimeouts != 1 {
		t.Fatalf("idle: stats %+v", s)
	}

	// No idle limit here, so only FrameTimeout can cut it.
	a = listen(t, 1, TCPOptions{InsecurePlaintext: true, FrameTimeout: 50 * time.Millisecond})
	slow, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	// A frame of 1000 bytes (length field, header, payload), sent up to
	// 10 bytes of its payload.
	frame := appendFrame(nil, &Message{From: 2, To: 1, Payload: make([]byte, 1000-headerLen)})
	if _, err := slow.Write(frame[:frameOverhead+10]); err != nil {
		t.Fatal(err)
	}
	drainUntilClosed(t, slow)
	if s := a.Stats(); s.ReadTimeouts != 1 || s.InFlightBytes != 0 || s.PeakInFlightBytes != 1000 {
		t.Fatalf("mid-frame: stats %+v", s)
	}
}

// FuzzTCPInbound feeds arbitrary bytes to a live bus over a raw
// connection: the bus never fails, delivers only frames addressed to it
// from a non-zero sender, holds no more than its budget, and is left
// holding nothing once the consumer has taken what it delivered.
func FuzzTCPInbound(f *testing.F) {
	const maxFrame = 1 << 10
	a, err := ListenTCP(1, "127.0.0.1:0", nil, TCPOptions{
		InsecurePlaintext: true,
		MaxFrame:          maxFrame,
		MaxConnBytes:      2 * maxFrame,
		MaxTotalBytes:     2 * maxFrame,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { a.Close() })
	good := func(n int) []byte {
		return appendFrame(nil, &Message{From: 2, To: 1, Kind: 1, Group: 7, Payload: make([]byte, n)})
	}
	f.Add(good(5))
	f.Add(append(good(maxFrame-headerLen), good(maxFrame-headerLen)...))
	f.Add(append(good(0), 0xff, 0xff, 0xff, 0xff))
	f.Add(appendFrame(nil, &Message{From: 0, To: 1}))
	f.Add(appendFrame(nil, &Message{From: 2, To: 3}))
	f.Add(good(10)[:20])
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, err := net.Dial("tcp", a.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		before := a.Stats().Received
		raw.Write(data)
		raw.(*net.TCPConn).CloseWrite()
		drainUntilClosed(t, raw)
		s := a.Stats()
		if s.PeakInFlightBytes > 2*maxFrame {
			t.Fatalf("held %d bytes", s.PeakInFlightBytes)
		}
		for range s.Received - before {
			if m := recv(t, a.Recv()); m.From == 0 || m.To != 1 {
				t.Fatalf("delivered %+v", m)
			}
		}
		if s := a.Stats(); s.InFlightBytes != 0 {
			t.Fatalf("still holding %d bytes", s.InFlightBytes)
		}
	})
}

// dialTLS opens a TLS connection to b presenting cert, as a member would,
// closed at the end of the test.
func dialTLS(t *testing.T, b *TCPBus, cert *tls.Certificate) *tls.Conn {
	t.Helper()
	raw, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	tc := tls.Client(raw, &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		},
	})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}

// waitStats polls b's stats until cond holds (bounded by guard).
func waitStats(t *testing.T, b *TCPBus, what string, cond func(TCPStats) bool) TCPStats {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		s := b.Stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBehaviour26PeerShareKeepsOtherPeersServed pins issue 26's inbound
// starvation over TLS: one member (node 2's key) opens four connections
// and stalls a near-complete maximum-size frame on each — four of them
// filled the bus's whole MaxTotalBytes, and every other peer's frames
// were refused until FrameTimeout. Node 2's frames now count against its
// share (MaxPeerBytes, by default half the total here): the two past it
// close their connections, the two within it stay held, and node 3's
// frames are delivered meanwhile.
func TestBehaviour26PeerShareKeepsOtherPeersServed(t *testing.T) {
	const maxFrame = 1 << 20
	ca := newCA(t, "ca")
	opts := ca.tlsOpts(t, cluster, 1)
	opts.MaxFrame, opts.MaxConnBytes, opts.MaxTotalBytes = maxFrame, 2*maxFrame, 4*maxFrame
	// Only the share can help: no deadline cuts the stalled frames here.
	opts.FrameTimeout, opts.StallTimeout = time.Hour, time.Hour
	a := listen(t, 1, opts)

	evil := ca.member(t, cluster, 2)
	frame := fullFrames(1, maxFrame)
	nearly := append(append([]byte(nil), frame[0]...), frame[1][:len(frame[1])-1]...)
	for range 4 {
		c := dialTLS(t, a, evil)
		c.SetWriteDeadline(time.Now().Add(guard))
		go c.Write(nearly) // fails once the bus closes the connection
	}
	s := waitStats(t, a, "node 2's four frames to be charged or refused", func(s TCPStats) bool {
		return s.InFlightBytes+s.OverBudget*maxFrame >= 4*maxFrame
	})
	if s.InFlightBytes != 2*maxFrame || s.OverBudget != 2 {
		t.Fatalf("node 2 holds %d bytes (%d connections over budget), want its share %d: %+v", s.InFlightBytes, s.OverBudget, 2*maxFrame, s)
	}

	b3 := listen(t, 3, ca.tlsOpts(t, cluster, 3))
	if err := b3.AddPeer(1, a.Addr().String()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		payload := bytes.Repeat([]byte{byte(i)}, maxFrame/2)
		if err := b3.Send(Message{To: 1, Kind: 1, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		if m := recv(t, a.Recv()); m.From != 3 || !bytes.Equal(m.Payload, payload) {
			t.Fatalf("got %d bytes from %d, want node 3's frame %d", len(m.Payload), m.From, i)
		}
	}
	if s := a.Stats(); s.OverBudget != 2 || s.PeakInFlightBytes > 4*maxFrame {
		t.Fatalf("stats %+v", s)
	}
}

// TestTCPStallTimeout: a frame that stops short of its end is cut at
// StallTimeout, long before FrameTimeout, and its bytes released.
func TestTCPStallTimeout(t *testing.T) {
	const maxFrame = 1 << 20
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, MaxFrame: maxFrame,
		FrameTimeout: time.Hour, StallTimeout: 50 * time.Millisecond})
	raw, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	frame := fullFrames(1, maxFrame)
	go func() {
		raw.Write(frame[0])
		raw.Write(frame[1][:len(frame[1])-1])
	}()
	drainUntilClosed(t, raw)
	if s := a.Stats(); s.ReadTimeouts != 1 || s.InFlightBytes != 0 || s.PeakInFlightBytes != maxFrame {
		t.Fatalf("stats %+v", s)
	}
}

// TestTCPPeerConnLimit: one member opening connection after connection
// holds at most MaxPeerConns of the MaxConns slots — each one past the
// bound closes its oldest — so another member's connection is still
// accepted and served. Without the bound the member's fifth connection
// filled MaxConns and every later one, its own and other members', was
// closed on accept.
func TestTCPPeerConnLimit(t *testing.T) {
	ca := newCA(t, "ca")
	opts := ca.tlsOpts(t, cluster, 1)
	opts.MaxConns, opts.MaxPeerConns = 4, 2
	a := listen(t, 1, opts)

	member := ca.member(t, cluster, 2)
	var conns []*tls.Conn
	for i := 1; i <= 6; i++ {
		conns = append(conns, dialTLS(t, a, member))
		closed, open := uint64(max(0, i-2)), uint64(min(i, 2))
		waitStats(t, a, fmt.Sprintf("node 2's connection %d to be counted", i), func(s TCPStats) bool {
			return s.PeerConnsClosed == closed && s.InboundConns == open
		})
	}
	// The four oldest were closed by the bus: a read sees the end.
	for i, c := range conns[:4] {
		c.SetReadDeadline(time.Now().Add(guard))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("node 2's connection %d: read %v, want it closed by the bus", i+1, err)
		}
	}

	expectServed(t, ca, a, 3)
	if s := a.Stats(); s.RejectedConns != 0 || s.PeerConnsClosed != 4 {
		t.Fatalf("stats %+v", s)
	}
}

// TestTCPHandshakeLimit: connections that never finish a handshake hold
// at most MaxAddrHandshakes slots from one address and MaxHandshakes in
// all, never the slots a member's connection needs: while an outsider
// holds every handshake slot its address may, a member's connection is
// accepted and served; past MaxHandshakes another address is refused;
// and the outsider's connections, closed, give their slots back. Without
// the bound (MaxConns alone, as before issue 28) the outsider's
// connections filled MaxConns and the member's was closed on accept.
func TestTCPHandshakeLimit(t *testing.T) {
	ca := newCA(t, "ca")
	opts := ca.tlsOpts(t, cluster, 1)
	opts.MaxConns, opts.MaxHandshakes, opts.MaxAddrHandshakes, opts.MaxPeerConns = 5, 3, 2, 2
	opts.HandshakeTimeout = time.Minute // the outsider's connections outlast the test
	a := listen(t, 1, opts)

	// The outsiders dial from their own loopback addresses; the member's
	// bus dials from 127.0.0.1.
	outsider := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", a.Addr().String())
		if err != nil {
			t.Skipf("cannot dial from %s: %v", ip, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var held []net.Conn
	for i := 1; i <= 6; i++ {
		c := outsider("127.0.0.2")
		if i <= 2 {
			held = append(held, c)
			waitStats(t, a, fmt.Sprintf("the outsider's connection %d admitted", i), func(s TCPStats) bool {
				return s.InboundConns == uint64(i)
			})
			continue
		}
		drainUntilClosed(t, c)
		if s := a.Stats(); s.RejectedConns != uint64(i-2) || s.InboundConns != 2 {
			t.Fatalf("the outsider's connection %d: stats %+v", i, s)
		}
	}

	expectServed(t, ca, a, 3)

	// Two handshaking and the member's: a third address takes the last
	// handshake slot, and its next connection is refused by MaxHandshakes
	// though MaxConns has room.
	held = append(held, outsider("127.0.0.3"))
	waitStats(t, a, "the third address's connection admitted", func(s TCPStats) bool { return s.InboundConns == 4 })
	drainUntilClosed(t, outsider("127.0.0.3"))
	if s := a.Stats(); s.RejectedConns != 5 || s.InboundConns != 4 {
		t.Fatalf("stats %+v", s)
	}

	for _, c := range held {
		c.Close()
	}
	waitStats(t, a, "the outsiders' slots given back", func(s TCPStats) bool { return s.InboundConns == 1 })
	c := outsider("127.0.0.2")
	waitStats(t, a, "the outsider's address admitted again", func(s TCPStats) bool { return s.InboundConns == 2 })
	c.Close()
}

// TestTCPHandshakeLimitValidated: handshake bounds out of order are
// refused.
func TestTCPHandshakeLimitValidated(t *testing.T) {
	for _, o := range []TCPOptions{
		{InsecurePlaintext: true, MaxConns: 4, MaxHandshakes: 5},
		{InsecurePlaintext: true, MaxConns: 4, MaxHandshakes: 2, MaxAddrHandshakes: 3},
	} {
		if _, err := ListenTCP(1, "127.0.0.1:0", nil, o); !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("%+v: err %v, want ErrInvalidOptions", o, err)
		}
	}
}

// expectServed dials a from a new member, node id, which must be
// accepted and its frame delivered.
func expectServed(t *testing.T, ca *testCA, a *TCPBus, id NodeID) {
	t.Helper()
	b := listen(t, id, ca.tlsOpts(t, cluster, id))
	if err := b.AddPeer(a.ID(), a.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(Message{To: a.ID(), Kind: 1, Payload: []byte("served")}); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, a.Recv()); m.From != id || string(m.Payload) != "served" {
		t.Fatalf("got %q from %d, want node %d's frame", m.Payload, m.From, id)
	}
}

// TestTCPPeerConnLimitValidated: a per-peer bound above the total is refused.
func TestTCPPeerConnLimitValidated(t *testing.T) {
	_, err := ListenTCP(1, "127.0.0.1:0", nil, TCPOptions{InsecurePlaintext: true, MaxConns: 2, MaxPeerConns: 3})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("err %v, want ErrInvalidOptions", err)
	}
}
