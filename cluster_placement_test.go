package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// nodesCluster opens an n-node cluster over an in-memory network inside a
// synctest bubble.
func nodesCluster(t *testing.T, n int) (*transport.Network, map[transport.NodeID]*parkway.Node) {
	t.Helper()
	net := transport.NewNetwork(transport.NetworkOptions{})
	t.Cleanup(func() { _ = net.Close() })
	var peers []transport.NodeID
	for i := range n {
		peers = append(peers, transport.NodeID(i+1))
	}
	nodes := map[transport.NodeID]*parkway.Node{}
	for _, id := range peers {
		nodes[id] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
	}
	return net, nodes
}

// heldOn reports which nodes hold a materialised replica of ns.
func heldOn(nodes map[transport.NodeID]*parkway.Node, ns metadata.Namespace) []uint64 {
	var on []uint64
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		if _, ok := parkway.HeldPartitions(nodes[id])[ns]; ok {
			on = append(on, uint64(id))
		}
	}
	return on
}

// Five nodes, replication factor 3: every partition is materialised on
// exactly the three nodes its metadata names, replicas and preferred
// leaders spread evenly; a produce and a read through any node — one
// holding no replica included — reach the partition's group, and every
// replica converges to the same log.
func TestClusterPlacesReplicationFactor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := nodesCluster(t, 5)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 10, parkway.WithReplicas(3))
		parts, err := parkway.EnginePartitions(ctx, nodes[1], tp)
		if err != nil || len(parts) != 10 {
			t.Fatalf("Partitions = %d, %v", len(parts), err)
		}
		load, leads := map[uint64]int{}, map[uint64]int{}
		for _, p := range parts {
			if len(p.Replicas) != 3 {
				t.Fatalf("partition %d: replicas %v", p.Partition, p.Replicas)
			}
			leads[p.Replicas[0]]++
			for _, r := range p.Replicas {
				load[r]++
			}
		}
		for id := range uint64(5) {
			if load[id+1] != 6 || leads[id+1] != 2 {
				t.Errorf("node %d holds %d replicas and prefers to lead %d, want 6 and 2", id+1, load[id+1], leads[id+1])
			}
		}
		for _, p := range parts {
			want := slices.Sorted(slices.Values(p.Replicas))
			waitFor(t, fmt.Sprintf("partition %d on %v", p.Partition, want), func() bool {
				return slices.Equal(heldOn(nodes, p.NS), want)
			})
		}
		for i := range 20 {
			id := transport.NodeID(i%5 + 1)
			part := uint32(i % 10)
			if _, err := nodes[id].Produce(ctx, tp, parkway.PartitionID(part),
				parkway.Message{Payload: []byte(fmt.Sprintf("m%d", i))}); err != nil {
				t.Fatalf("produce %d to partition %d through node %d: %v", i, part, id, err)
			}
		}
		for _, p := range parts {
			want := []string{fmt.Sprintf("m%d@0", p.Partition), fmt.Sprintf("m%d@1", p.Partition+10)}
			for id, n := range nodes {
				// A leader read through every node: the ones without a
				// replica forward it.
				b, err := n.Poll(ctx, tp, p.Partition, parkway.AtOffset(0), 10)
				if err != nil {
					t.Fatalf("poll partition %d through node %d: %v", p.Partition, id, err)
				}
				if got := payloads(b.Messages); !slices.Equal(got, want) {
					t.Fatalf("partition %d through node %d: %v, want %v", p.Partition, id, got, want)
				}
			}
		}
		// Still nowhere else: requests through other nodes built nothing
		// there.
		for _, p := range parts {
			if on, want := heldOn(nodes, p.NS), slices.Sorted(slices.Values(p.Replicas)); !slices.Equal(on, want) {
				t.Errorf("partition %d held on %v, placed on %v", p.Partition, on, want)
			}
		}
	})
}

// A factor above the node count is refused, and the factor cannot change.
func TestClusterReplicationFactorValidated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := nodesCluster(t, 3)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		if _, err := nodes[1].Admin().CreateTopic(ctx, s, "big", 1, parkway.WithReplicas(4)); !errors.Is(err, parkway.ErrInvalidTopicConfig) {
			t.Fatalf("factor 4 on 3 nodes: %v, want ErrInvalidTopicConfig", err)
		}
		tp := mustTopic(t, nodes[1], s, "one", 3, parkway.WithReplicas(1))
		if err := nodes[2].Admin().SetTopicConfig(ctx, tp, parkway.TopicConfig{Replicas: 2}); !errors.Is(err, parkway.ErrInvalidTopicConfig) {
			t.Fatalf("changing the factor: %v, want ErrInvalidTopicConfig", err)
		}
		// Factor 1: one node holds each partition, and every node serves
		// it.
		for id, n := range nodes {
			for p := range uint32(3) {
				if _, err := n.Produce(ctx, tp, parkway.PartitionID(p), parkway.Message{Payload: []byte(fmt.Sprint(id))}); err != nil {
					t.Fatalf("produce to partition %d through node %d: %v", p, id, err)
				}
			}
		}
		parts, _ := parkway.EnginePartitions(ctx, nodes[3], tp)
		for _, p := range parts {
			if len(p.Replicas) != 1 {
				t.Fatalf("partition %d: replicas %v", p.Partition, p.Replicas)
			}
			if ms := readAll(t, nodes[transport.NodeID(p.Replicas[0])], tp, p.Partition); len(ms) != 3 {
				t.Errorf("partition %d: %d messages on its replica, want 3", p.Partition, len(ms))
			}
		}
	})
}

// Leader balance: leadership starts on each partition's preferred leader
// (two per node for six partitions on three nodes); a node cut off loses
// its groups to the survivors, and once it is back they hand leadership
// back to it, so the spread is even again.
func TestClusterLeaderBalanceRestored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := nodesCluster(t, 3)
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 6)
		parts, err := parkway.EnginePartitions(context.Background(), nodes[1], tp)
		if err != nil || len(parts) != 6 {
			t.Fatalf("Partitions = %d, %v", len(parts), err)
		}
		// leaders counts the partitions each node leads, by the leader
		// every replica agrees on (0: they disagree, or none is known).
		leaders := func() map[uint64]int {
			out := map[uint64]int{}
			for _, p := range parts {
				lead := parkway.PartitionLeader(nodes[transport.NodeID(p.Replicas[0])], p.NS)
				for _, r := range p.Replicas[1:] {
					if parkway.PartitionLeader(nodes[transport.NodeID(r)], p.NS) != lead {
						lead = 0
					}
				}
				out[lead]++
			}
			return out
		}
		balanced := func() bool {
			l := leaders()
			return l[1] == 2 && l[2] == 2 && l[3] == 2
		}
		waitFor(t, "leaders on their preferred nodes", balanced)

		net.Partition([]transport.NodeID{1}, others(1))
		waitFor(t, "node 1's groups led by the survivors", func() bool {
			for _, p := range parts {
				if p.Replicas[0] != 1 {
					continue
				}
				lead := parkway.PartitionLeader(nodes[2], p.NS)
				if lead != 2 && lead != 3 {
					return false
				}
			}
			return true
		})
		net.Heal()
		waitFor(t, "leadership handed back to node 1", balanced)
		// And the cluster serves throughout.
		for _, p := range parts {
			if _, err := nodes[3].Produce(context.Background(), tp, parkway.PartitionID(p.Partition), parkway.Message{Payload: []byte("x")}); err != nil {
				t.Fatalf("produce to partition %d after the transfers: %v", p.Partition, err)
			}
		}
	})
}
