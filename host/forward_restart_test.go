package host_test

import (
	"testing"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// TestForwardReplyFromAnEarlierLifeIsNotTaken: a node that restarts while
// a request it forwarded is still held by the leader must not take the
// late answer to that request for the answer to one it forwards in its
// new life. Request ids numbered from 1 on every start made the two share
// an id: the leader's answer to a consumer-offset store of the first life
// ("ok, offset 0") answered a produce of the second, whose message was
// never appended — an acknowledged offset that held another message
// (cluster simulator seed 880, invariant 3).
func TestForwardReplyFromAnEarlierLifeIsNotTaken(t *testing.T) {
	clk := clock.NewManual(t0)
	net := transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true})
	t.Cleanup(func() { net.Close() })
	peer := net.Endpoint(2)
	start := func() *host.Engine {
		t.Helper()
		e, err := host.New(host.Config{Shards: 1, Manual: true, Clock: clk,
			Cluster: &host.Cluster{ID: 1, Peers: []transport.NodeID{1, 2}, Bus: net.Endpoint(1)}})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// sent is the id of the request node 2 received last.
	sent := func() uint64 {
		t.Helper()
		for len(peer.Recv()) > 0 {
			if m := <-peer.Recv(); m.Kind == host.KindRequest {
				return m.Group
			}
		}
		t.Fatal("node 2 received no request")
		return 0
	}
	reply := func(e *host.Engine, id uint64, r shard.Response) {
		t.Helper()
		if err := peer.Send(transport.Message{To: 1, Kind: host.KindReply, Group: id, Payload: host.EncodeResponse(r)}); err != nil {
			t.Fatal(err)
		}
		self := net.Endpoint(1)
		for len(self.Recv()) > 0 {
			if err := e.Deliver(<-self.Recv()); err != nil {
				t.Fatal(err)
			}
		}
	}
	ns := metadata.Namespace(1 << 20)

	first := start()
	if _, err := first.StartForward(2, &shard.Request{Op: shard.OpStoreOffset, NS: ns, Consumer: "c1"}); err != nil {
		t.Fatal(err)
	}
	old := sent()
	if err := first.Close(); err != nil { // restarted with the store still held by node 2
		t.Fatal(err)
	}

	second := start()
	t.Cleanup(func() { second.Close() })
	f, err := second.StartForward(2, &shard.Request{Op: shard.OpProduce, NS: ns,
		Messages: []partition.Message{{Payload: []byte("m")}}})
	if err != nil {
		t.Fatal(err)
	}
	id := sent()
	reply(second, old, shard.Response{Offset: 0}) // the first life's answer, late
	if r, err, done := f.Step(); done {
		t.Fatalf("the new life's produce (request %d) took the answer to the earlier life's request %d: %+v, %v", id, old, r, err)
	}
	reply(second, id, shard.Response{Offset: 7})
	r, err, done := f.Step()
	if !done || err != nil || r.Err != nil || r.Offset != 7 {
		t.Fatalf("the produce's own answer: %+v, %v, done=%v; want offset 7", r, err, done)
	}
}
