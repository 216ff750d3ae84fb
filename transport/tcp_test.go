package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
)

func listen(t testing.TB, id NodeID, opts TCPOptions) *TCPBus {
	t.Helper()
	b, err := ListenTCP(id, "127.0.0.1:0", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// mesh introduces every bus to every other.
func mesh(t testing.TB, bs ...*TCPBus) {
	t.Helper()
	for _, a := range bs {
		for _, b := range bs {
			if err := a.AddPeer(b.ID(), b.Addr().String()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestTCPAllToAllInOrder(t *testing.T) {
	bs := []*TCPBus{listen(t, 1, TCPOptions{InsecurePlaintext: true}), listen(t, 2, TCPOptions{InsecurePlaintext: true}), listen(t, 3, TCPOptions{InsecurePlaintext: true})}
	mesh(t, bs...)
	const N = 300
	payload := bytes.Repeat([]byte{0xAB}, 100)
	for i := range uint64(N) {
		for _, from := range bs {
			for _, to := range bs {
				if from == to {
					continue
				}
				p := binary.BigEndian.AppendUint64(nil, i)
				mustSend(t, from, Message{To: to.ID(), Kind: uint8(from.ID()), Group: i, Payload: append(p, payload...)})
			}
		}
	}
	for _, to := range bs {
		next := map[NodeID]uint64{}
		for range 2 * N {
			m := recv(t, to.Recv())
			if m.To != to.ID() || m.Kind != uint8(m.From) || m.Group != next[m.From] ||
				seqOf(m) != next[m.From] || !bytes.Equal(m.Payload[8:], payload) {
				t.Fatalf("node %d: bad or out-of-order message from %d (want seq %d): kind %d group %d seq %d",
					to.ID(), m.From, next[m.From], m.Kind, m.Group, seqOf(m))
			}
			// Later frames may be read into this payload's bytes: each
			// still arrives intact.
			to.Recycle(m.Payload)
			next[m.From]++
		}
		assertEmpty(t, to.Recv())
		if s := to.Stats(); s.Sent != 2*N || s.Received != 2*N || s.BadFrames+s.WriteErrors+s.QueueFull+s.InboxFull != 0 {
			t.Fatalf("node %d stats %+v", to.ID(), s)
		}
	}
}

func TestTCPSelfSendAndErrors(t *testing.T) {
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, MaxFrame: headerLen + 8})
	mustSend(t, a, Message{To: 1, Payload: []byte("self")})
	if m := recv(t, a.Recv()); m.From != 1 || string(m.Payload) != "self" {
		t.Fatalf("self-send: %+v", m)
	}
	if err := a.Send(Message{To: 5}); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("unknown peer: %v", err)
	}
	if err := a.Send(Message{To: 1, Payload: make([]byte, 9)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if _, err := ListenTCP(0, "127.0.0.1:0", nil, TCPOptions{InsecurePlaintext: true}); err == nil {
		t.Fatal("node id 0 accepted")
	}
	if _, err := ListenTCP(1, a.Addr().String(), nil, TCPOptions{InsecurePlaintext: true}); err == nil {
		t.Fatal("listened twice on one address")
	}
}

// sendUntil re-sends m from a every few milliseconds (as raft would) until
// a message arrives on to's inbox, and returns it.
func sendUntil(t *testing.T, a *TCPBus, m Message, to <-chan Message) Message {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(guard)
	_ = a.Send(m)
	for {
		select {
		case got := <-to:
			return got
		case <-tick.C:
			_ = a.Send(m) // ErrQueueFull while the peer is down is fine
		case <-deadline:
			t.Fatal("no message after peer restart")
		}
	}
}

func TestTCPPeerRestart(t *testing.T) {
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true})
	b := listen(t, 2, TCPOptions{InsecurePlaintext: true})
	mesh(t, a, b)
	addr := b.Addr().String()

	mustSend(t, a, Message{To: 2, Payload: []byte("before")})
	if m := recv(t, b.Recv()); string(m.Payload) != "before" {
		t.Fatalf("got %q", m.Payload)
	}
	dialsBefore := a.Stats().Dials
	b.Close()

	b2, err := ListenTCP(2, addr, map[NodeID]string{1: a.Addr().String()}, TCPOptions{InsecurePlaintext: true})
	if err != nil {
		t.Fatal("re-listen on the same address:", err)
	}
	defer b2.Close()
	if m := sendUntil(t, a, Message{To: 2, Payload: []byte("after")}, b2.Recv()); string(m.Payload) != "after" || m.From != 1 {
		t.Fatalf("got %+v", m)
	}
	if a.Stats().Dials <= dialsBefore {
		t.Fatal("no redial")
	}
	// And the restarted node can answer.
	mustSend(t, b2, Message{To: 1, Payload: []byte("reply")})
	if m := recv(t, a.Recv()); string(m.Payload) != "reply" || m.From != 2 {
		t.Fatalf("got %+v", m)
	}
}

// TestTCPBackoffUsesClock: failed dials back off on the injected clock,
// doubling from BackoffMin; a peer whose address is fixed is reached on the
// next attempt.
func TestTCPBackoffUsesClock(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, Clock: clk})
	b := listen(t, 2, TCPOptions{InsecurePlaintext: true})
	if err := a.AddPeer(2, "127.0.0.1:0"); err != nil { // connection refused
		t.Fatal(err)
	}
	mustSend(t, a, Message{To: 2, Payload: []byte("x")})
	clk.WaitPending(1) // first dial failed; waiting 10 ms
	if s := a.Stats(); s.Dials != 1 || s.DialErrors != 1 {
		t.Fatalf("stats %+v", s)
	}
	clk.Advance(10 * time.Millisecond)
	clk.WaitPending(1) // second dial failed; now waiting 20 ms
	if s := a.Stats(); s.Dials != 2 || s.DialErrors != 2 {
		t.Fatalf("stats %+v", s)
	}
	clk.Advance(19 * time.Millisecond)
	if clk.Pending() != 1 || a.Stats().Dials != 2 {
		t.Fatal("backoff did not double")
	}
	if err := a.AddPeer(2, b.Addr().String()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Millisecond)
	if m := recv(t, b.Recv()); string(m.Payload) != "x" || m.From != 1 {
		t.Fatalf("got %+v", m)
	}
	if s := a.Stats(); s.Dials != 3 || s.DialErrors != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTCPMalformedFrames(t *testing.T) {
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, MaxFrame: 1 << 20})
	b := listen(t, 2, TCPOptions{InsecurePlaintext: true})
	mesh(t, a, b)

	frame := func(from, to NodeID, payload string) []byte {
		return appendFrame(nil, &Message{From: from, To: to, Kind: 3, Group: 4, Payload: []byte(payload)})
	}
	hugeLen := binary.BigEndian.AppendUint32(nil, 1<<20+1)
	cases := []struct {
		name string
		data []byte
		bad  bool
	}{
		{"length beyond MaxFrame", append(hugeLen, "garbage"...), true},
		{"length below header", []byte{0, 0, 0, 3, 1, 2, 3}, true},
		{"all ones", bytes.Repeat([]byte{0xff}, 64), true},
		{"addressed to another node", frame(7, 2, "x"), true},
		{"sender zero", frame(0, 1, "x"), true},
		{"truncated", frame(7, 1, "truncated")[:20], false},
	}
	for _, tc := range cases {
		raw, err := net.Dial("tcp", a.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		before := a.Stats().BadFrames
		// A good frame first: delivered, sender taken from the header.
		if _, err := raw.Write(append(frame(7, 1, "ok"), tc.data...)); err != nil {
			t.Fatal(err)
		}
		if tc.name == "truncated" {
			raw.(*net.TCPConn).CloseWrite()
		}
		raw.SetReadDeadline(time.Now().Add(guard))
		// The bus closes the connection: Read ends with EOF or a reset.
		if _, err := io.Copy(io.Discard, raw); err != nil && !errors.Is(err, io.EOF) && !isReset(err) {
			t.Fatalf("%s: connection not closed: %v", tc.name, err)
		}
		raw.Close()
		if m := recv(t, a.Recv()); m.From != 7 || string(m.Payload) != "ok" || m.Kind != 3 || m.Group != 4 {
			t.Fatalf("%s: good frame: %+v", tc.name, m)
		}
		if got := a.Stats().BadFrames - before; (got == 1) != tc.bad {
			t.Fatalf("%s: BadFrames +%d", tc.name, got)
		}
	}
	assertEmpty(t, a.Recv())
	// The bus still works both ways.
	mustSend(t, b, Message{To: 1, Payload: []byte("still")})
	if m := recv(t, a.Recv()); string(m.Payload) != "still" {
		t.Fatalf("got %q", m.Payload)
	}
	mustSend(t, a, Message{To: 2, Payload: []byte("working")})
	if m := recv(t, b.Recv()); string(m.Payload) != "working" {
		t.Fatalf("got %q", m.Payload)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

func TestTCPQueueFull(t *testing.T) {
	const Q = 4
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, QueueSize: Q})
	// Port 0 refuses connections: the writer holds one message and backs
	// off, so at most Q+1 sends are accepted.
	if err := a.AddPeer(9, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ok := 0
	var err error
	for range Q + 2 {
		if err = a.Send(Message{To: 9, Payload: []byte("p")}); err != nil {
			break
		}
		ok++
	}
	if !errors.Is(err, ErrQueueFull) || ok < Q || ok > Q+1 {
		t.Fatalf("accepted %d then %v; want %d or %d then ErrQueueFull", ok, err, Q, Q+1)
	}
	if s := a.Stats(); s.QueueFull != 1 || s.Sent != uint64(ok) {
		t.Fatalf("stats %+v", s)
	}
}

func TestTCPInboxFullDrops(t *testing.T) {
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, QueueSize: 2})
	raw, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// Five frames, then a bad one: frames on a connection are handled in
	// order, so once the bus closes the connection it has handled all five.
	var data []byte
	for i := range uint64(5) {
		data = appendFrame(data, &Message{From: 2, To: 1, Payload: seqPayload(i)})
	}
	data = append(data, 0, 0, 0, 0)
	if _, err := raw.Write(data); err != nil {
		t.Fatal(err)
	}
	raw.SetReadDeadline(time.Now().Add(guard))
	if _, err := io.Copy(io.Discard, raw); err != nil && !isReset(err) {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Received != 2 || s.InboxFull != 3 || s.BadFrames != 1 {
		t.Fatalf("stats %+v", s)
	}
	for i := range uint64(2) {
		if m := recv(t, a.Recv()); seqOf(m) != i {
			t.Fatalf("got %d want %d", seqOf(m), i)
		}
	}
	assertEmpty(t, a.Recv())
}

func TestTCPCloseIdempotent(t *testing.T) {
	a, err := ListenTCP(1, "127.0.0.1:0", map[NodeID]string{2: "127.0.0.1:0"}, TCPOptions{InsecurePlaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	b := listen(t, 3, TCPOptions{InsecurePlaintext: true})
	mesh(t, a, b)
	mustSend(t, a, Message{To: 2}) // writer stuck dialling a dead peer
	mustSend(t, a, Message{To: 3, Payload: []byte("x")})
	recv(t, b.Recv()) // a live outbound connection, and an inbound one on b
	mustSend(t, b, Message{To: 1, Payload: []byte("y")})
	recv(t, a.Recv())

	done := make(chan struct{})
	go func() { a.Close(); close(done) }()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-a.Recv(); ok {
		t.Fatal("Recv not closed")
	}
	for _, to := range []NodeID{1, 2, 3} {
		if err := a.Send(Message{To: to}); !errors.Is(err, ErrClosed) {
			t.Fatalf("send to %d after close: %v", to, err)
		}
	}
	if err := a.AddPeer(4, "127.0.0.1:1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddPeer after close: %v", err)
	}
	if _, err := net.Dial("tcp", a.Addr().String()); err == nil {
		t.Fatal("listener still open")
	}
	// Goroutine leaks are checked by goleak in TestMain.
}
