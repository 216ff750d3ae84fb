package parkway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
)

// Three nodes over loopback TCP, each on its own data directory: create a
// topic, produce immediately on every node, and every node converges to
// the same log; a node stopped and restarted on its data directory and
// its address rejoins over the reconnecting transport and catches up.
func TestClusterOverTCP(t *testing.T) {
	peers := []parkway.NodeID{1, 2, 3}
	buses := map[parkway.NodeID]*parkway.TCPBus{}
	for _, id := range peers {
		b, err := parkway.ListenTCP(id, "127.0.0.1:0", nil, parkway.TCPOptions{InsecurePlaintext: true})
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
	dirs := map[parkway.NodeID]string{}
	start := func(id parkway.NodeID) {
		t.Helper()
		n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dirs[id],
			Cluster: &parkway.Cluster{ID: id, Peers: peers, Bus: buses[id]}})
		if err != nil {
			t.Fatal(err)
		}
		nodes[id] = n
	}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	for _, id := range peers {
		dirs[id] = t.TempDir()
		start(id)
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
		if _, err := nodes[id].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte(p)}); err != nil {
			t.Fatalf("produce via node %d: %v", id, err)
		}
		want = append(want, p)
	}
	converge := func() {
		t.Helper()
		for id, n := range nodes {
			var got []string
			for ctx.Err() == nil {
				// Local: each node's own replica.
				b, err := n.Poll(ctx, tp, 0, parkway.AtOffset(0).Local(), 100)
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
	converge()

	// Node 3 stops; the others go on; it restarts on its data directory
	// and its address, and the peers' transports reconnect to it.
	addr := buses[3].Addr().String()
	if err := nodes[3].Close(); err != nil {
		t.Fatal(err)
	}
	delete(nodes, 3)
	for i := range 5 {
		p := fmt.Sprintf("while-away-%d", i)
		if _, err := nodes[1].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte(p)}); err != nil {
			t.Fatalf("produce while node 3 is away: %v", err)
		}
		want = append(want, p)
	}
	b3, err := parkway.ListenTCP(3, addr, map[parkway.NodeID]string{1: buses[1].Addr().String(), 2: buses[2].Addr().String()}, parkway.TCPOptions{InsecurePlaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	buses[3] = b3
	start(3)
	converge()
}
