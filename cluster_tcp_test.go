package parkway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
)

// Three nodes over loopback TCP: create a topic, produce immediately on
// every node, and every node converges to the same log.
func TestClusterOverTCP(t *testing.T) {
	peers := []parkway.NodeID{1, 2, 3}
	buses := map[parkway.NodeID]*parkway.TCPBus{}
	for _, id := range peers {
		b, err := parkway.ListenTCP(id, "127.0.0.1:0", nil, parkway.TCPOptions{})
		if err != nil {
			t.Fatal(err)
		}
		buses[id] = b
	}
	for _, id := range peers {
		for _, p := range peers {
			if p != id {
				if err := buses[id].AddPeer(p, buses[p].Addr().String()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	nodes := map[parkway.NodeID]*parkway.Node{}
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 2,
			Cluster: &parkway.Cluster{ID: id, Peers: peers, Bus: buses[id]}})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		nodes[id] = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := nodes[1].CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := nodes[1].CreateTopic(ctx, s, "t", 1)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, id := range []parkway.NodeID{1, 2, 3, 1, 2, 3} {
		p := fmt.Sprintf("m%d-via-%d", i, id)
		if _, err := nodes[id].Produce(ctx, s, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte(p)}); err != nil {
			t.Fatalf("produce via node %d: %v", id, err)
		}
		want = append(want, p)
	}
	for id, n := range nodes {
		var got []string
		for ctx.Err() == nil {
			b, err := n.Poll(ctx, s, tp, 0, parkway.AtOffset(0), 100)
			if err != nil {
				t.Fatal(err)
			}
			got = got[:0]
			for _, m := range b.Messages {
				got = append(got, string(m.Payload))
			}
			if len(got) == len(want) {
				break
			}
			select { // real network: wait for the last commits to apply
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("node %d holds %q, want %q", id, got, want)
		}
	}
}
