package parkway_test

import (
	"context"
	"fmt"
	"log"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// Three replicas in one process over the in-memory network: a topic
// created through one node is replicated to all, a produce through any
// node is acknowledged once a quorum has it, and the cluster API
// (Node.Cluster) reports the members and each partition's replicas.
func ExampleCluster() {
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	var nodes []*parkway.Node
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 1,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			log.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	ctx := context.Background()
	stream, err := nodes[0].Admin().CreateStream(ctx, "s")
	if err != nil {
		log.Fatal(err)
	}
	topic, err := nodes[0].Admin().CreateTopic(ctx, stream, "t", 1)
	if err != nil {
		log.Fatal(err)
	}
	for i, n := range nodes {
		ack, err := n.Produce(ctx, topic, parkway.PartitionID(0),
			parkway.Message{Payload: fmt.Appendf(nil, "via node %d", i+1)})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("acknowledged at offset", ack.FirstOffset)
	}
	state, err := nodes[1].Cluster().State(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range state.Members {
		fmt.Println("member", m.ID)
	}
	for _, p := range state.Partitions {
		fmt.Println(p.Topic.Name, "partition", p.Partition, "on nodes", p.Replicas)
	}
	// Output:
	// acknowledged at offset 0
	// acknowledged at offset 1
	// acknowledged at offset 2
	// member 1
	// member 2
	// member 3
	// t partition 0 on nodes [1 2 3]
}

// Five nodes, a topic replicated three times: each partition lives on the
// three nodes its metadata places it on, the preferred leader first, and
// a produce through any node — one holding no replica included — reaches
// the partition's group.
func ExampleWithReplicas() {
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3, 4, 5}
	var nodes []*parkway.Node
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 1,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			log.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	ctx := context.Background()
	stream, err := nodes[0].Admin().CreateStream(ctx, "s")
	if err != nil {
		log.Fatal(err)
	}
	topic, err := nodes[0].Admin().CreateTopic(ctx, stream, "orders", 5, parkway.WithReplicas(3))
	if err != nil {
		log.Fatal(err)
	}
	parts, err := nodes[0].Admin().Partitions(ctx, topic)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range parts {
		fmt.Println("partition", p.Partition, "on nodes", p.Replicas)
	}
	for i, n := range nodes {
		ack, err := n.Produce(ctx, topic, parkway.PartitionID(0),
			parkway.Message{Payload: fmt.Appendf(nil, "via node %d", i+1)})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("acknowledged at offset", ack.FirstOffset)
	}
	// Output:
	// partition 0 on nodes [1 2 3]
	// partition 1 on nodes [4 5 2]
	// partition 2 on nodes [3 4 5]
	// partition 3 on nodes [5 1 4]
	// partition 4 on nodes [2 1 3]
	// acknowledged at offset 0
	// acknowledged at offset 1
	// acknowledged at offset 2
	// acknowledged at offset 3
	// acknowledged at offset 4
}

// A node leaves a running cluster: four nodes hold a topic replicated
// three times; RemoveNode moves every replica node 4 holds to the other
// nodes (each group adds its new replica before it removes the old one),
// then takes node 4 out of the metadata group. The messages acknowledged
// before are all still there.
func ExampleCluster_RemoveNode() {
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3, 4}
	var nodes []*parkway.Node
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 1,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			log.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	ctx := context.Background()
	stream, err := nodes[0].Admin().CreateStream(ctx, "s")
	if err != nil {
		log.Fatal(err)
	}
	topic, err := nodes[0].Admin().CreateTopic(ctx, stream, "orders", 4, parkway.WithReplicas(3))
	if err != nil {
		log.Fatal(err)
	}
	for p := range uint32(4) {
		if _, err := nodes[0].Produce(ctx, topic, parkway.PartitionID(p), parkway.Message{Payload: []byte("before")}); err != nil {
			log.Fatal(err)
		}
	}
	if err := nodes[0].Cluster().RemoveNode(ctx, 4); err != nil {
		log.Fatal(err)
	}
	parts, err := nodes[0].Admin().Partitions(ctx, topic)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range parts {
		b, err := nodes[0].Poll(ctx, topic, p.Partition, parkway.AtOffset(0), 10)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("partition", p.Partition, "on nodes", p.Replicas, "holds", len(b.Messages), "message")
	}
	// Output:
	// partition 0 on nodes [1 2 3] holds 1 message
	// partition 1 on nodes [2 3 1] holds 1 message
	// partition 2 on nodes [3 1 2] holds 1 message
	// partition 3 on nodes [2 1 3] holds 1 message
}
