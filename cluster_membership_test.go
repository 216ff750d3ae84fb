package parkway_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
)

// A node joins a running cluster: three founders hold a topic and take
// produces throughout; node 4 starts with Cluster.Join and is added
// through one member; it receives the metadata (the topic created before
// it joined included), a topic created afterwards is placed over four
// nodes, node 4 holds its replicas, and every node — node 4 included —
// serves both topics. Nothing acknowledged is lost.
func TestClusterAddNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := nodesCluster(t, 3)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		old := mustTopic(t, nodes[1], s, "old", 3)
		var acked []string
		produce := func(via parkway.NodeID, tp parkway.Topic, part uint32, what string) {
			t.Helper()
			if _, err := nodes[via].Produce(ctx, tp, parkway.PartitionID(part), parkway.Message{Payload: []byte(what)}); err != nil {
				t.Fatalf("produce %q through node %d: %v", what, via, err)
			}
		}
		for i := range 3 {
			p := fmt.Sprint("before", i)
			produce(parkway.NodeID(i+1), old, 0, p)
			acked = append(acked, p)
		}

		nodes[4] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
			Cluster: &parkway.Cluster{ID: 4, Peers: []parkway.NodeID{1, 2, 3, 4}, Join: true, Bus: net.Endpoint(4)}})
		if err := nodes[2].AddNode(ctx, 4); err != nil {
			t.Fatalf("AddNode: %v", err)
		}
		if err := nodes[3].AddNode(ctx, 4); err != nil {
			t.Fatalf("AddNode of a member again: %v", err)
		}
		// The cluster serves while and after the node joins.
		for i := range 3 {
			p := fmt.Sprint("during", i)
			produce(parkway.NodeID(i+1), old, 0, p)
			acked = append(acked, p)
		}
		waitFor(t, "node 4 to learn the topic created before it joined", func() bool {
			_, err := nodes[4].Topic(ctxFor(t), s, "old")
			return err == nil
		})
		fresh := mustTopic(t, nodes[1], s, "new", 4, parkway.WithReplicas(3))
		parts, err := nodes[1].Partitions(ctx, fresh)
		if err != nil {
			t.Fatal(err)
		}
		on4 := 0
		for _, p := range parts {
			if slices.Contains(p.Replicas, 4) {
				on4++
				want := slices.Sorted(slices.Values(p.Replicas))
				waitFor(t, fmt.Sprintf("partition %d on %v", p.Partition, want), func() bool {
					return slices.Equal(heldOn(nodes, p.NS), want)
				})
			}
		}
		if on4 == 0 {
			t.Fatalf("no partition of the topic created after the join is placed on node 4: %+v", parts)
		}
		for id := range parkway.NodeID(4) {
			for _, p := range parts {
				produce(id+1, fresh, p.Partition, fmt.Sprintf("n%d-p%d", id+1, p.Partition))
			}
		}
		produce(4, old, 0, "through-4")
		acked = append(acked, "through-4")
		for id, n := range nodes {
			b, err := n.Poll(ctx, old, 0, parkway.AtOffset(0), 100)
			if err != nil {
				t.Fatalf("poll through node %d: %v", id, err)
			}
			if got := payloadsOnly(b.Messages); !slices.Equal(got, acked) {
				t.Fatalf("partition 0 through node %d: %v, want %v", id, got, acked)
			}
			for _, p := range parts {
				b, err := n.Poll(ctx, fresh, p.Partition, parkway.AtOffset(0), 100)
				if err != nil || len(b.Messages) != 4 {
					t.Fatalf("new topic's partition %d through node %d: %d messages, %v", p.Partition, id, len(b.Messages), err)
				}
			}
		}
	})
}

func payloadsOnly(ms []parkway.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Payload))
	}
	return out
}
