package host_test

import (
	"testing"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/transport"
)

// forwardRig is node 1 of two as a manual engine, and node 2's endpoint:
// the tests of what node 1 does with requests forwarded to it send them
// as node 2 would and read node 2's answers.
type forwardRig struct {
	clk        *clock.Manual
	e          *host.Engine
	self, peer transport.Bus
}

func newForwardRig(t *testing.T) *forwardRig {
	t.Helper()
	clk := clock.NewManual(t0)
	net := transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true})
	t.Cleanup(func() { net.Close() })
	e, err := host.New(host.Config{Shards: 1, Manual: true, Clock: clk,
		Cluster: &host.Cluster{ID: 1, Peers: []transport.NodeID{1, 2}, Bus: net.Endpoint(1)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return &forwardRig{clk: clk, e: e, self: net.Endpoint(1), peer: net.Endpoint(2)}
}

// deliver sends a message of kind from node 2 and hands node 1 every
// message of that kind it got.
func (r *forwardRig) deliver(t *testing.T, kind uint8, id uint64, payload []byte) {
	t.Helper()
	if err := r.peer.Send(transport.Message{To: 1, Kind: kind, Group: id, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	for len(r.self.Recv()) > 0 {
		m := <-r.self.Recv()
		if m.Kind != kind {
			continue
		}
		if err := r.e.Deliver(m); err != nil {
			t.Fatal(err)
		}
	}
}
