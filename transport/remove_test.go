package transport

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
)

// TestTCPRemovePeerDropsQueue: RemovePeer stops the peer's writer (here
// backing off from a refused dial, holding one message) and drops what it
// held and what was queued, counted as PeerRemoved; Send to the id then
// fails as to an unknown peer, and AddPeer makes it a peer again with
// nothing of the old queue left.
func TestTCPRemovePeerDropsQueue(t *testing.T) {
	const Q = 4
	clk := clock.NewManual(time.Unix(0, 0))
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, QueueSize: Q, Clock: clk})
	if err := a.AddPeer(2, "127.0.0.1:0"); err != nil { // connection refused
		t.Fatal(err)
	}
	p := (*a.peers.Load())[2]
	mustSend(t, a, Message{To: 2, Payload: []byte("held")})
	clk.WaitPending(1) // the writer holds it and backs off
	for range Q {
		mustSend(t, a, Message{To: 2, Payload: []byte("queued")})
	}
	if err := a.Send(Message{To: 2}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("send to a full queue: %v", err)
	}
	if err := a.RemovePeer(2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	default:
		t.Fatal("RemovePeer returned before the writer stopped")
	}
	if s := a.Stats(); s.Sent != Q+1 || s.PeerRemoved != Q+1 || s.WriteErrors != 0 {
		t.Fatalf("stats %+v, want Sent = PeerRemoved = %d", s, Q+1)
	}
	if err := a.Send(Message{To: 2}); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("send after RemovePeer: %v", err)
	}
	if err := a.RemovePeer(2); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := a.RemovePeer(1); err != nil { // own id: a no-op, as in AddPeer
		t.Fatal(err)
	}
	if err := a.RemovePeer(0); err == nil {
		t.Fatal("RemovePeer(0) accepted")
	}

	// Re-added (now at a live address), it is a peer again with a fresh
	// queue: the first message to arrive is the new one.
	b := listen(t, 2, TCPOptions{InsecurePlaintext: true})
	mesh(t, a, b)
	mustSend(t, a, Message{To: 2, Payload: []byte("again")})
	if m := recv(t, b.Recv()); string(m.Payload) != "again" || m.From != 1 {
		t.Fatalf("got %+v", m)
	}
	mustSend(t, b, Message{To: 1, Payload: []byte("back")})
	if m := recv(t, a.Recv()); string(m.Payload) != "back" || m.From != 2 {
		t.Fatalf("got %+v", m)
	}
	assertEmpty(t, b.Recv())
	if s := a.Stats(); s.PeerRemoved != Q+1 || s.RemovedSender != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// readUntilClosed reads c until the other end closes it, failing the test
// if that takes longer than guard.
func readUntilClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(guard))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) || err != nil && !isReset(err) {
		t.Fatalf("%s not closed: %v", what, err)
	}
}

// TestTCPRemovePeerClosesConnections: RemovePeer closes the connections
// to and from the peer, including one whose writer is stalled in a write
// (the peer reads nothing, and WriteTimeout is far away).
func TestTCPRemovePeerClosesConnections(t *testing.T) {
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true, QueueSize: 4, MaxFrame: 1 << 20, WriteTimeout: time.Hour})
	// Peer 2 is played by hand: a listener a dials, and a connection
	// into a that has carried a frame from 2.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := a.AddPeer(2, ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	in, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := in.Write(appendFrame(nil, &Message{From: 2, To: 1, Payload: []byte("in")})); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, a.Recv()); string(m.Payload) != "in" {
		t.Fatalf("got %+v", m)
	}

	// Fill the outbound connection until the writer stalls: once the
	// queue is full the writer is blocked in a write nobody reads.
	big := bytes.Repeat([]byte{1}, 1<<20-headerLen)
	mustSend(t, a, Message{To: 2, Payload: big})
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(guard))
	out, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// Stalled: the queue stays full across a tick while no frame is
	// written (a writer merely slow to be scheduled moves on).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(guard)
	for written := uint64(math.MaxUint64); ; {
		err := a.Send(Message{To: 2, Payload: big})
		if err != nil && !errors.Is(err, ErrQueueFull) {
			t.Fatal(err)
		}
		s := a.Stats()
		if err != nil && s.FramesWritten == written {
			break
		}
		written = s.FramesWritten
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the writer never stalled: %+v", s)
		}
	}

	removed := make(chan error, 1)
	go func() { removed <- a.RemovePeer(2) }()
	select {
	case err := <-removed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(guard):
		t.Fatal("RemovePeer stuck behind a stalled write")
	}
	readUntilClosed(t, out, "outbound connection")
	readUntilClosed(t, in, "inbound connection")
	// Closing the connection under the writer is not a write error.
	if s := a.Stats(); s.WriteErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestTCPRemovePeerRefusesFrames: without TLS, a frame naming a removed
// peer as its sender closes its connection, is dropped and counted, on a
// new connection or on one that carried another sender's frames before;
// other senders are still served, and AddPeer admits the id again.
func TestTCPRemovePeerRefusesFrames(t *testing.T) {
	a := listen(t, 1, TCPOptions{InsecurePlaintext: true})
	if err := a.RemovePeer(7); err != nil { // never a peer: refused all the same
		t.Fatal(err)
	}
	send := func(data []byte) {
		t.Helper()
		raw, err := net.Dial("tcp", a.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if _, err := raw.Write(data); err != nil {
			t.Fatal(err)
		}
		raw.(*net.TCPConn).CloseWrite()
		readUntilClosed(t, raw, "connection")
	}
	frame := func(from NodeID, p string) []byte {
		return appendFrame(nil, &Message{From: from, To: 1, Payload: []byte(p)})
	}
	send(frame(7, "removed"))
	send(append(frame(8, "other"), frame(7, "removed")...))
	if m := recv(t, a.Recv()); m.From != 8 || string(m.Payload) != "other" {
		t.Fatalf("got %+v", m)
	}
	assertEmpty(t, a.Recv())
	if s := a.Stats(); s.RemovedSender != 2 || s.Received != 1 || s.BadFrames != 0 {
		t.Fatalf("stats %+v", s)
	}
	if err := a.AddPeer(7, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	send(frame(7, "back"))
	if m := recv(t, a.Recv()); m.From != 7 || string(m.Payload) != "back" {
		t.Fatalf("got %+v", m)
	}
	if s := a.Stats(); s.RemovedSender != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestTLSRemovePeerRefusesHandshake: with TLS, a removed member's live
// connection is closed and its new connections are refused once
// authenticated, counted as RejectedHandshakes, though its certificate is
// valid; AddPeer admits it again and the pair exchanges as before.
func TestTLSRemovePeerRefusesHandshake(t *testing.T) {
	ca := newCA(t, "ca")
	a := listen(t, 1, ca.tlsOpts(t, cluster, 1))
	b := listen(t, 2, ca.tlsOpts(t, cluster, 2))
	mesh(t, a, b)
	mustSend(t, b, Message{To: 1, Payload: []byte("before")})
	if m := recv(t, a.Recv()); string(m.Payload) != "before" {
		t.Fatalf("got %+v", m)
	}
	if err := a.RemovePeer(2); err != nil {
		t.Fatal(err)
	}
	frame := appendFrame(nil, &Message{From: 2, To: 1, Payload: []byte("after")})
	before := a.Stats().RejectedHandshakes
	rawTLS(t, a, ca.member(t, cluster, 2), frame)
	if got := a.Stats().RejectedHandshakes - before; got != 1 {
		t.Fatalf("RejectedHandshakes +%d, want +1", got)
	}
	// Another member is served.
	rawTLS(t, a, ca.member(t, cluster, 3), append(appendFrame(nil, &Message{From: 3, To: 1, Payload: []byte("3")}), 0, 0, 0, 0))
	if m := recv(t, a.Recv()); m.From != 3 {
		t.Fatalf("got %+v", m)
	}
	assertEmpty(t, a.Recv())
	if err := a.Send(Message{To: 2}); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("send after RemovePeer: %v", err)
	}
	// b's connection to a was closed: b's frames reach a only through
	// a new one, which a refuses, until a admits 2 again.
	if err := a.AddPeer(2, b.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if m := sendUntil(t, b, Message{To: 1, Payload: []byte("again")}, a.Recv()); m.From != 2 || string(m.Payload) != "again" {
		t.Fatalf("got %+v", m)
	}
	mustSend(t, a, Message{To: 2, Payload: []byte("reply")})
	if m := recv(t, b.Recv()); m.From != 1 || string(m.Payload) != "reply" {
		t.Fatalf("got %+v", m)
	}
}

// TestTCPRemovePeerConcurrent: RemovePeer, AddPeer and Send race for one
// id, and Close races with all of them; every call returns one of its
// documented errors and, checked by goleak, no goroutine is left.
func TestTCPRemovePeerConcurrent(t *testing.T) {
	a, err := ListenTCP(1, "127.0.0.1:0", nil, TCPOptions{InsecurePlaintext: true, QueueSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	b := listen(t, 2, TCPOptions{InsecurePlaintext: true})
	addr := b.Addr().String()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	const rounds = 200
	halfway := make(chan struct{})
	wg.Add(3)
	go func() {
		defer wg.Done()
		for range rounds {
			if err := a.AddPeer(2, addr); err != nil && !errors.Is(err, ErrClosed) {
				errs <- err
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range rounds {
			if i == rounds/2 {
				close(halfway)
			}
			if err := a.RemovePeer(2); err != nil && !errors.Is(err, ErrClosed) {
				errs <- err
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range 4 * rounds {
			err := a.Send(Message{To: 2, Payload: []byte("x")})
			if err != nil && !errors.Is(err, ErrUnknownPeer) && !errors.Is(err, ErrQueueFull) && !errors.Is(err, ErrClosed) {
				errs <- err
				return
			}
		}
	}()
	<-halfway
	a.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := a.RemovePeer(2); !errors.Is(err, ErrClosed) {
		t.Fatalf("RemovePeer after Close: %v", err)
	}
}
