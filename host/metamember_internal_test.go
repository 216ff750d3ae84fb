package host

import (
	"context"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// manualTrio is three manual cluster engines over a manually delivered
// network; deliver hands every queued message to its node and counts the
// liveness heartbeats each node received.
type manualTrio struct {
	t       *testing.T
	net     *transport.Network
	engines []*Engine
	beats   map[transport.NodeID]int
}

func newManualTrio(t *testing.T) *manualTrio {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	peers := []transport.NodeID{1, 2, 3}
	tr := &manualTrio{t: t, net: transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true}),
		beats: make(map[transport.NodeID]int)}
	t.Cleanup(func() { tr.net.Close() })
	for _, id := range peers {
		e, err := New(Config{Shards: 1, Manual: true, Clock: clk,
			Cluster: &Cluster{ID: id, Peers: peers, Bus: tr.net.Endpoint(id)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		tr.engines = append(tr.engines, e)
	}
	return tr
}

func (tr *manualTrio) deliver() {
	for moved := true; moved; {
		moved = false
		for _, e := range tr.engines {
			ep := tr.net.Endpoint(transport.NodeID(e.NodeID()))
			for len(ep.Recv()) > 0 {
				m := <-ep.Recv()
				if m.Kind == KindLiveness {
					tr.beats[m.To]++
				}
				if err := e.Deliver(m); err != nil {
					tr.t.Fatal(err)
				}
				moved = true
			}
		}
	}
}

// tick ticks every engine's metadata n times, delivering everything
// after each round.
func (tr *manualTrio) tick(n int) {
	for range n {
		for _, e := range tr.engines {
			if err := e.TickMetadata(); err != nil {
				tr.t.Fatal(err)
			}
		}
		tr.deliver()
	}
}

// A started engine's metadata driver sleeps through the ticks of a
// quiesced member up to node liveness's next heartbeat round, and fires
// every tick again once the member wakes. Counting the ticks slept
// through at once sends the heartbeats that ticking one at a time would.
func TestQuiescedMetadataDriverSleepsUntilLivenessBeat(t *testing.T) {
	tr := newManualTrio(t)
	tr.tick(20)
	m, live := tr.engines[0].cl.meta, tr.engines[0].cl.live
	if !m.quiesced() {
		t.Fatal("node 1's metadata member did not quiesce")
	}
	// 20 ticks counted, one heartbeat round every 10: the next is 10 away.
	if n := m.sleepTicks(); n != 10 || n != live.untilBeat() {
		t.Fatalf("quiesced member: the driver sleeps %d ticks, want 10 (until the next heartbeat round)", n)
	}
	live.advance(context.Background(), 3, 3)
	if n := m.sleepTicks(); n != 7 {
		t.Fatalf("3 ticks later: the driver sleeps %d ticks, want 7", n)
	}

	// 97 more ticks, counted in steps of 6 (a driver woken between
	// rounds counts what it slept through), cross ten intervals: ten
	// heartbeats to each peer, as 97 single ticks would send.
	clear(tr.beats)
	for left := int64(97); left > 0; {
		k := min(6, left)
		live.advance(context.Background(), k, k)
		left -= k
	}
	tr.deliver()
	if tr.beats[2] != 10 || tr.beats[3] != 10 {
		t.Fatalf("heartbeats over 97 ticks in steps of 6: %v, want 10 to each of nodes 2 and 3", tr.beats)
	}

	// A proposal wakes the member: the driver fires every tick again.
	e := tr.engines[0]
	if _, err := e.ProposeMetadata(e.NewMetadataKey(), metadata.CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	if n := m.sleepTicks(); n != 1 {
		t.Fatalf("awake member: the driver sleeps %d ticks, want 1", n)
	}
}
