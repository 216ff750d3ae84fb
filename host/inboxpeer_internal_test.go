package host

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// The node charges a peer's partition traffic to the peer the transport
// names (shard.Request.Peer), so a member flooding many partitions of one
// shard, each within its partition's share of InboxBytes, fills only its
// own half: another member's catch-up frame still enters. (A manual
// engine's shards are not pumped, so what enters stays.)
func TestDeliverChargesTheSendingPeer(t *testing.T) {
	const bound = 1 << 20
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	net := transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true})
	t.Cleanup(func() { net.Close() })
	peers := []transport.NodeID{1, 2, 3}
	e, err := New(Config{Shards: 1, Manual: true, Clock: clk, InboxBytes: bound,
		Cluster: &Cluster{ID: 1, Peers: peers, Bus: net.Endpoint(1)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	catchUp := func(from transport.NodeID, ns metadata.Namespace) transport.Message {
		p := make([]byte, 8+64<<10)
		binary.LittleEndian.PutUint64(p, 1)
		return transport.Message{From: from, To: 1, Kind: KindCatchUp, Group: uint64(ns), Payload: p}
	}
	refused := 0
	for i := range 64 {
		err := e.Deliver(catchUp(2, metadata.Namespace(1+i%8)))
		switch {
		case err == nil:
		case errors.Is(err, shard.ErrInboxBytes):
			refused++
		default:
			t.Fatal(err)
		}
	}
	if refused == 0 {
		t.Fatal("node 2's flood of 4 MiB was taken whole by a 1 MiB inbox")
	}
	for i := range 4 {
		if err := e.Deliver(catchUp(3, metadata.Namespace(100+i))); err != nil {
			t.Fatalf("node 3's frame %d refused while node 2 floods: %v", i, err)
		}
	}
}
