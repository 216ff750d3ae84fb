package transport

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
)

// guard bounds every blocking wait in the tests; it is a failure timeout,
// never a means of synchronisation.
const guard = 10 * time.Second

func recv(t testing.TB, ch <-chan Message) Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("recv: channel closed")
		}
		return m
	case <-time.After(guard):
		t.Fatal("recv: nothing arrived")
	}
	return Message{}
}

func assertEmpty(t *testing.T, ch <-chan Message) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected message %+v", m)
	default:
	}
}

func seqPayload(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }
func seqOf(m Message) uint64     { return binary.BigEndian.Uint64(m.Payload) }

func mustSend(t testing.TB, b Bus, m Message) {
	t.Helper()
	if err := b.Send(m); err != nil {
		t.Fatalf("send %+v: %v", m, err)
	}
}

func TestNetworkFIFO(t *testing.T) {
	n := NewNetwork(NetworkOptions{})
	defer n.Close()
	a, b, c := n.Endpoint(1), n.Endpoint(2), n.Endpoint(3)
	if n.Endpoint(1) != a {
		t.Fatal("Endpoint should return the open endpoint")
	}
	const N = 200
	for i := range uint64(N) {
		// From is overwritten by the bus.
		mustSend(t, a, Message{From: 99, To: 2, Kind: 1, Group: 7, Payload: seqPayload(i)})
		mustSend(t, c, Message{To: 2, Kind: 2, Group: 8, Payload: seqPayload(i)})
	}
	next := map[NodeID]uint64{}
	for range 2 * N {
		m := recv(t, b.Recv())
		if m.To != 2 || (m.From == 1) != (m.Kind == 1 && m.Group == 7) {
			t.Fatalf("bad header %+v", m)
		}
		if got := seqOf(m); got != next[m.From] {
			t.Fatalf("from %d: got seq %d, want %d", m.From, got, next[m.From])
		}
		next[m.From]++
	}
	if next[1] != N || next[3] != N {
		t.Fatalf("per-sender counts %v", next)
	}
	if s := n.Stats(); s.Sent != 2*N || s.Delivered != 2*N {
		t.Fatalf("stats %+v", s)
	}
}

func TestNetworkCopiesPayload(t *testing.T) {
	n := NewNetwork(NetworkOptions{})
	defer n.Close()
	a, b := n.Endpoint(1), n.Endpoint(2)
	buf := []byte("hello")
	mustSend(t, a, Message{To: 2, Payload: buf})
	copy(buf, "XXXXX")
	if m := recv(t, b.Recv()); string(m.Payload) != "hello" {
		t.Fatalf("payload aliased the sender's buffer: %q", m.Payload)
	}
}

func TestNetworkUnknownPeer(t *testing.T) {
	n := NewNetwork(NetworkOptions{})
	defer n.Close()
	a := n.Endpoint(1)
	for _, to := range []NodeID{0, 9} {
		if err := a.Send(Message{To: to}); !errors.Is(err, ErrUnknownPeer) {
			t.Fatalf("send to %d: %v, want ErrUnknownPeer", to, err)
		}
	}
	if s := n.Stats(); s.Sent != 0 {
		t.Fatalf("refused sends counted: %+v", s)
	}
}

func TestNetworkDisconnectPartitionHeal(t *testing.T) {
	n := NewNetwork(NetworkOptions{})
	defer n.Close()
	eps := map[NodeID]Bus{1: n.Endpoint(1), 2: n.Endpoint(2), 3: n.Endpoint(3)}
	// reach reports whether a message from → to arrives.
	reach := func(from, to NodeID) bool {
		t.Helper()
		before := n.Stats()
		mustSend(t, eps[from], Message{To: to, Payload: []byte{byte(from), byte(to)}})
		after := n.Stats()
		switch {
		case after.Delivered == before.Delivered+1:
			if m := recv(t, eps[to].Recv()); m.From != from {
				t.Fatalf("got %+v", m)
			}
			return true
		case after.Cut == before.Cut+1:
			return false
		}
		t.Fatalf("message neither delivered nor cut: %+v → %+v", before, after)
		return false
	}
	check := func(what string, want map[[2]NodeID]bool) {
		t.Helper()
		for _, from := range []NodeID{1, 2, 3} {
			for _, to := range []NodeID{1, 2, 3} {
				if from == to {
					continue
				}
				w, ok := want[[2]NodeID{from, to}]
				if !ok {
					w = true
				}
				if got := reach(from, to); got != w {
					t.Fatalf("%s: %d→%d reachable=%v, want %v", what, from, to, got, w)
				}
			}
		}
	}
	check("initial", nil)
	n.Disconnect(1, 2)
	check("disconnect 1→2", map[[2]NodeID]bool{{1, 2}: false})
	n.Connect(1, 2)
	check("connect 1→2", nil)
	n.Partition([]NodeID{1}, []NodeID{2, 3})
	check("partition {1} {2,3}", map[[2]NodeID]bool{{1, 2}: false, {2, 1}: false, {1, 3}: false, {3, 1}: false})
	n.Partition([]NodeID{1, 2}, []NodeID{3})
	check("re-partition {1,2} {3}", map[[2]NodeID]bool{{1, 3}: false, {3, 1}: false, {2, 3}: false, {3, 2}: false})
	n.Heal()
	check("heal", nil)
}

// TestNetworkPartitionCutsInFlight: a delayed message whose link is cut by
// the time it is due is lost.
func TestNetworkPartitionCutsInFlight(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	n := NewNetwork(NetworkOptions{Clock: clk, ManualDelivery: true})
	defer n.Close()
	a, b := n.Endpoint(1), n.Endpoint(2)
	n.SetFaults(Faults{Delay: time.Millisecond})
	mustSend(t, a, Message{To: 2})
	n.Partition([]NodeID{1}, []NodeID{2})
	clk.Advance(time.Millisecond)
	if got := n.Pump(); got != 1 {
		t.Fatalf("pump released %d", got)
	}
	assertEmpty(t, b.Recv())
	if s := n.Stats(); s.Cut != 1 || s.Delivered != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// faultRun sends 1000 numbered messages 1→2 and 3→2 under f and returns
// the order they arrived in, plus the counters.
func faultRun(t *testing.T, f Faults) ([]uint64, Stats) {
	n := NewNetwork(NetworkOptions{QueueSize: 8192})
	defer n.Close()
	a, b, c := n.Endpoint(1), n.Endpoint(2), n.Endpoint(3)
	n.SetFaults(f)
	for i := range uint64(500) {
		mustSend(t, a, Message{To: 2, Payload: seqPayload(i)})
		mustSend(t, c, Message{To: 2, Payload: seqPayload(1000 + i)})
	}
	n.Flush()
	s := n.Stats()
	if s.Sent+s.Duplicated != s.Delivered+s.Dropped+s.Cut+s.Overflow {
		t.Fatalf("accounting: %+v", s)
	}
	var got []uint64
	for range s.Delivered {
		got = append(got, seqOf(recv(t, b.Recv())))
	}
	assertEmpty(t, b.Recv())
	return got, s
}

func TestNetworkFaultsFireAndReproduce(t *testing.T) {
	f := Faults{DropRate: 0.1, DuplicateRate: 0.1, ReorderRate: 0.1, Seed: 42}
	got1, s1 := faultRun(t, f)
	if s1.Dropped == 0 || s1.Duplicated == 0 || s1.Reordered == 0 {
		t.Fatalf("a fault never fired: %+v", s1)
	}
	var dups, inversions int
	seen := map[uint64]bool{}
	last := map[bool]uint64{}
	for i, v := range got1 {
		if seen[v] {
			dups++
		}
		seen[v] = true
		from3 := v >= 1000
		if i > 0 && v < last[from3] {
			inversions++
		}
		last[from3] = max(last[from3], v)
	}
	if dups == 0 || inversions == 0 || len(seen) >= 1000 {
		t.Fatalf("delivered sequence shows dups=%d inversions=%d distinct=%d", dups, inversions, len(seen))
	}

	got2, s2 := faultRun(t, f)
	if !slices.Equal(got1, got2) || s1 != s2 {
		t.Fatal("same seed, same sends: different delivered sequence")
	}
	f.Seed = 43
	got3, _ := faultRun(t, f)
	if slices.Equal(got1, got3) {
		t.Fatal("different seeds gave the same sequence")
	}

	// Without faults the same run is exact FIFO.
	clean, s := faultRun(t, Faults{Seed: 42})
	if s.Delivered != 1000 || s.Dropped+s.Duplicated+s.Reordered != 0 {
		t.Fatalf("fault-free stats %+v", s)
	}
	for i := range 500 {
		if clean[2*i] != uint64(i) || clean[2*i+1] != uint64(1000+i) {
			t.Fatalf("fault-free order broken at %d: %v", i, clean[2*i:2*i+2])
		}
	}
}

func TestNetworkDelayReleasesOnManualAdvance(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	n := NewNetwork(NetworkOptions{Clock: clk})
	defer n.Close()
	a, b := n.Endpoint(1), n.Endpoint(2)
	n.SetFaults(Faults{Delay: 10 * time.Millisecond})
	for i := range uint64(3) {
		mustSend(t, a, Message{To: 2, Payload: seqPayload(i)})
	}
	if clk.Pending() != 1 {
		t.Fatalf("want one armed delivery timer, have %d", clk.Pending())
	}
	clk.Advance(9 * time.Millisecond)
	assertEmpty(t, b.Recv()) // the timer is not due, so nothing can arrive
	clk.Advance(time.Millisecond)
	for i := range uint64(3) {
		if m := recv(t, b.Recv()); seqOf(m) != i {
			t.Fatalf("got seq %d, want %d", seqOf(m), i)
		}
	}
	// A message sent later is due later.
	mustSend(t, a, Message{To: 2, Payload: seqPayload(3)})
	clk.WaitPending(1)
	clk.Advance(5 * time.Millisecond)
	assertEmpty(t, b.Recv())
	clk.Advance(5 * time.Millisecond)
	if m := recv(t, b.Recv()); seqOf(m) != 3 {
		t.Fatalf("got seq %d", seqOf(m))
	}
	if s := n.Stats(); s.Delayed != 4 || s.Delivered != 4 {
		t.Fatalf("stats %+v", s)
	}
}

func TestNetworkDelayManualDeliveryPump(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	n := NewNetwork(NetworkOptions{Clock: clk, ManualDelivery: true})
	defer n.Close()
	a, b := n.Endpoint(1), n.Endpoint(2)
	n.SetFaults(Faults{Delay: time.Second})
	mustSend(t, a, Message{To: 2, Payload: seqPayload(0)})
	clk.Advance(500 * time.Millisecond)
	mustSend(t, a, Message{To: 2, Payload: seqPayload(1)})
	if clk.Pending() != 0 {
		t.Fatal("ManualDelivery must not arm timers")
	}
	clk.Advance(499 * time.Millisecond)
	if got := n.Pump(); got != 0 {
		t.Fatalf("released %d early", got)
	}
	clk.Advance(time.Millisecond)
	if got := n.Pump(); got != 1 {
		t.Fatalf("released %d, want 1", got)
	}
	if m := recv(t, b.Recv()); seqOf(m) != 0 {
		t.Fatal("wrong message")
	}
	assertEmpty(t, b.Recv())
	clk.Advance(500 * time.Millisecond)
	if got := n.Pump(); got != 1 {
		t.Fatalf("released %d, want 1", got)
	}
	if m := recv(t, b.Recv()); seqOf(m) != 1 {
		t.Fatal("wrong message")
	}
}

func TestNetworkFullInboxDrops(t *testing.T) {
	n := NewNetwork(NetworkOptions{QueueSize: 2})
	defer n.Close()
	a, b := n.Endpoint(1), n.Endpoint(2)
	for i := range uint64(5) {
		mustSend(t, a, Message{To: 2, Payload: seqPayload(i)}) // never blocks
	}
	if s := n.Stats(); s.Delivered != 2 || s.Overflow != 3 {
		t.Fatalf("stats %+v", s)
	}
	for i := range uint64(2) {
		if m := recv(t, b.Recv()); seqOf(m) != i {
			t.Fatalf("got %d want %d", seqOf(m), i)
		}
	}
	assertEmpty(t, b.Recv())
}

func TestNetworkClose(t *testing.T) {
	n := NewNetwork(NetworkOptions{})
	a, b := n.Endpoint(1), n.Endpoint(2)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, ok := <-b.Recv(); ok {
		t.Fatal("Recv not closed")
	}
	if err := b.Send(Message{To: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("send from closed: %v", err)
	}
	mustSend(t, a, Message{To: 2}) // to a closed node: lost, not an error
	if s := n.Stats(); s.Cut != 1 {
		t.Fatalf("stats %+v", s)
	}
	// A restarted node gets a fresh endpoint.
	b2 := n.Endpoint(2)
	if b2 == b {
		t.Fatal("closed endpoint returned")
	}
	mustSend(t, a, Message{To: 2, Payload: []byte("again")})
	if m := recv(t, b2.Recv()); string(m.Payload) != "again" {
		t.Fatal("restarted endpoint did not receive")
	}
	n.Close()
	n.Close()
	if _, ok := <-a.Recv(); ok {
		t.Fatal("network Close left an inbox open")
	}
	if err := a.Send(Message{To: 2}); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after network close: %v", err)
	}
	if err := n.Endpoint(3).Send(Message{To: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("endpoint of closed network: %v", err)
	}
}

// TestNetworkOneWayLinks: links are directional — a node can send
// without hearing, or hear without being heard — and DisconnectGroups
// cuts one direction between two groups only.
func TestNetworkOneWayLinks(t *testing.T) {
	n := NewNetwork(NetworkOptions{})
	defer n.Close()
	eps := map[NodeID]Bus{1: n.Endpoint(1), 2: n.Endpoint(2), 3: n.Endpoint(3)}
	arrives := func(from, to NodeID) bool {
		t.Helper()
		before := n.Stats()
		mustSend(t, eps[from], Message{To: to})
		if n.Stats().Delivered == before.Delivered+1 {
			recv(t, eps[to].Recv())
			return true
		}
		return false
	}
	// Node 1 is deaf: it sends to everyone and hears no one.
	n.DisconnectGroups([]NodeID{2, 3}, []NodeID{1})
	for _, c := range []struct {
		from, to NodeID
		want     bool
	}{{1, 2, true}, {1, 3, true}, {2, 1, false}, {3, 1, false}, {2, 3, true}, {3, 2, true}} {
		if got := arrives(c.from, c.to); got != c.want {
			t.Fatalf("deaf node 1: %d→%d arrives=%v, want %v", c.from, c.to, got, c.want)
		}
		if got := n.Linked(c.from, c.to); got != c.want {
			t.Fatalf("deaf node 1: Linked(%d, %d)=%v, want %v", c.from, c.to, got, c.want)
		}
	}
	n.Heal()
	// Node 1 is mute: everyone reaches it, it reaches no one.
	n.DisconnectGroups([]NodeID{1}, []NodeID{1, 2, 3})
	if arrives(1, 2) || arrives(1, 3) || !arrives(2, 1) || !arrives(3, 1) || !arrives(2, 3) {
		t.Fatal("mute node 1: wrong reachability")
	}
}

// TestNetworkClog: a clogged direction holds messages instead of losing
// them, in order, while the other direction and other links flow; Unclog
// delivers them, and a link cut meanwhile loses them.
func TestNetworkClog(t *testing.T) {
	n := NewNetwork(NetworkOptions{})
	defer n.Close()
	a, b, c := n.Endpoint(1), n.Endpoint(2), n.Endpoint(3)
	n.Clog(1, 2)
	for i := range uint64(5) {
		mustSend(t, a, Message{To: 2, Payload: seqPayload(i)})
	}
	mustSend(t, b, Message{To: 1, Payload: seqPayload(100)})
	mustSend(t, c, Message{To: 2, Payload: seqPayload(200)})
	if m := recv(t, a.Recv()); seqOf(m) != 100 {
		t.Fatalf("reverse direction: got %d", seqOf(m))
	}
	if m := recv(t, b.Recv()); seqOf(m) != 200 {
		t.Fatalf("other link: got %d", seqOf(m))
	}
	assertEmpty(t, b.Recv())
	if s := n.Stats(); s.Clogged != 5 || s.Delivered != 2 || s.Cut != 0 {
		t.Fatalf("while clogged: %+v", s)
	}
	// Heal and Partition leave the clog alone.
	n.Heal()
	assertEmpty(t, b.Recv())
	if got := n.Unclog(1, 2); got != 5 {
		t.Fatalf("Unclog released %d, want 5", got)
	}
	for i := range uint64(5) {
		if m := recv(t, b.Recv()); seqOf(m) != i || m.From != 1 {
			t.Fatalf("released out of order: got %d from %d, want %d", seqOf(m), m.From, i)
		}
	}
	if got := n.Unclog(1, 2); got != 0 {
		t.Fatalf("second Unclog released %d", got)
	}
	// Cut while clogged: what the clog held is lost when it ends.
	n.Clog(1, 2)
	n.Clog(3, 2)
	mustSend(t, a, Message{To: 2})
	mustSend(t, c, Message{To: 2, Payload: seqPayload(7)})
	n.Disconnect(1, 2)
	if got := n.UnclogAll(); got != 2 {
		t.Fatalf("UnclogAll released %d, want 2", got)
	}
	if m := recv(t, b.Recv()); seqOf(m) != 7 {
		t.Fatalf("got %d", seqOf(m))
	}
	assertEmpty(t, b.Recv())
	s := n.Stats()
	if s.Cut != 1 || s.Sent != s.Delivered+s.Cut {
		t.Fatalf("accounting: %+v", s)
	}
}

// TestNetworkClogDelayed: a delayed message that comes due on a clogged
// link is held until the clog ends (ManualDelivery).
func TestNetworkClogDelayed(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	n := NewNetwork(NetworkOptions{Clock: clk, ManualDelivery: true})
	defer n.Close()
	a, b := n.Endpoint(1), n.Endpoint(2)
	n.SetFaults(Faults{Delay: time.Millisecond})
	mustSend(t, a, Message{To: 2})
	n.Clog(1, 2)
	clk.Advance(time.Millisecond)
	n.Pump()
	assertEmpty(t, b.Recv())
	if got := n.Unclog(1, 2); got != 1 {
		t.Fatalf("Unclog released %d", got)
	}
	recv(t, b.Recv())
}
