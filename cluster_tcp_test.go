package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// Three nodes over loopback TCP, each on its own data directory: create a
// topic, produce immediately on every node, and every node converges to
// the same log; a node stopped and restarted on its data directory and
// its address rejoins over the reconnecting transport and catches up.
func TestClusterOverTCP(t *testing.T) {
	peers := []transport.NodeID{1, 2, 3}
	buses := map[transport.NodeID]*transport.TCPBus{}
	for _, id := range peers {
		b, err := transport.ListenTCP(id, "127.0.0.1:0", nil, transport.TCPOptions{InsecurePlaintext: true})
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
	nodes := map[transport.NodeID]*parkway.Node{}
	dirs := map[transport.NodeID]string{}
	start := func(id transport.NodeID) {
		t.Helper()
		n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dirs[id],
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: buses[id]}})
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
	s, err := nodes[1].Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := nodes[1].Admin().CreateTopic(ctx, s, "t", 1)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, id := range []transport.NodeID{1, 2, 3, 1, 2, 3} {
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
	b3, err := transport.ListenTCP(3, addr, map[transport.NodeID]string{1: buses[1].Addr().String(), 2: buses[2].Addr().String()}, transport.TCPOptions{InsecurePlaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	buses[3] = b3
	start(3)
	converge()
}

// A node removed from a TCP cluster loses its admission: three TCP nodes
// admit a fourth (AddPeer on every member, then AddNode), it holds
// replicas, RemoveNode(4) through node 1 moves them off it, and once the
// remaining members' buses have RemovePeer(4), node 4's bus — still open —
// cannot deliver to them: its frames are refused and counted, and they
// cannot send to it.
func TestClusterOverTCPRemovePeer(t *testing.T) {
	founders := []transport.NodeID{1, 2, 3}
	buses := map[transport.NodeID]*transport.TCPBus{}
	for _, id := range []transport.NodeID{1, 2, 3, 4} {
		b, err := transport.ListenTCP(id, "127.0.0.1:0", nil, transport.TCPOptions{InsecurePlaintext: true})
		if err != nil {
			t.Fatal(err)
		}
		buses[id] = b
		defer b.Close()
	}
	for id, b := range buses {
		for p, pb := range buses {
			if p != id && (p != 4 || id != 4) {
				if err := b.AddPeer(p, pb.Addr().String()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	nodes := map[transport.NodeID]*parkway.Node{}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	for _, id := range founders {
		n, err := parkway.Open(parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{ID: id, Peers: founders, Bus: buses[id]}})
		if err != nil {
			t.Fatal(err)
		}
		nodes[id] = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n4, err := parkway.Open(parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{ID: 4, Peers: []transport.NodeID{1, 2, 3, 4}, Join: true, Bus: buses[4]}})
	if err != nil {
		t.Fatal(err)
	}
	nodes[4] = n4
	if err := nodes[1].Cluster().AddNode(ctx, 4); err != nil {
		t.Fatalf("AddNode: %v", err)
	}
	s, err := nodes[1].Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	// Four partitions over four nodes: node 4 holds replicas.
	tp, err := nodes[1].Admin().CreateTopic(ctx, s, "t", 4, parkway.WithReplicas(3))
	if err != nil {
		t.Fatal(err)
	}
	for part := range uint32(4) {
		if _, err := nodes[1].Produce(ctx, tp, parkway.PartitionID(part), parkway.Message{Payload: []byte("m")}); err != nil {
			t.Fatalf("produce to partition %d: %v", part, err)
		}
	}
	if err := nodes[1].Cluster().RemoveNode(ctx, 4); err != nil {
		t.Fatalf("RemoveNode: %v", err)
	}
	for _, id := range founders {
		if err := buses[id].RemovePeer(4); err != nil {
			t.Fatal(err)
		}
		if err := buses[id].Send(transport.Message{To: 4}); !errors.Is(err, transport.ErrUnknownPeer) {
			t.Fatalf("node %d sends to the removed node: %v", id, err)
		}
	}
	// Node 4's bus still has the members as peers and queues to them;
	// each member refuses the first frame from 4 on any connection.
	for _, id := range founders {
		for buses[id].Stats().RemovedSender == 0 {
			_ = buses[4].Send(transport.Message{To: id}) // queued, then refused
			select {
			case <-ctx.Done():
				t.Fatalf("node %d never refused node 4's frames: %+v", id, buses[id].Stats())
			case <-time.After(10 * time.Millisecond): // real network
			}
		}
	}
	// The cluster serves without node 4.
	for part := range uint32(4) {
		if _, err := nodes[2].Produce(ctx, tp, parkway.PartitionID(part), parkway.Message{Payload: []byte("after")}); err != nil {
			t.Fatalf("produce to partition %d after the removal: %v", part, err)
		}
	}
}
