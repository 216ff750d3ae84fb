package parkway_test

import (
	"context"
	"fmt"

	"github.com/parkway-io/parkway"
)

// Three replicas in one process over the in-memory network: a topic
// created through one node is replicated to all, and a produce through any
// node is acknowledged once a quorum has it.
func ExampleCluster() {
	net := parkway.NewNetwork(parkway.NetworkOptions{})
	defer net.Close()
	peers := []parkway.NodeID{1, 2, 3}
	var nodes []*parkway.Node
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 1,
			Cluster: &parkway.Cluster{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			panic(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	ctx := context.Background()
	stream, _ := nodes[0].CreateStream(ctx, "s")
	topic, _ := nodes[0].CreateTopic(ctx, stream, "t", 1)
	for i, n := range nodes {
		ack, err := n.Produce(ctx, topic, parkway.PartitionID(0),
			parkway.Message{Payload: fmt.Appendf(nil, "via node %d", i+1)})
		if err != nil {
			panic(err)
		}
		fmt.Println("acknowledged at offset", ack.FirstOffset)
	}
	// Output:
	// acknowledged at offset 0
	// acknowledged at offset 1
	// acknowledged at offset 2
}
