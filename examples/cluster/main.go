// Command cluster runs three parkway nodes in one process over the
// in-memory network, each on its own temporary data directory: it creates
// a topic, produces, stops the node that leads the partition, produces
// again through a survivor, restarts the stopped node on its data
// directory — it rejoins as the same raft member and catches up — and
// reads everything back from all three.
//
//	go run ./examples/cluster
//
// It prints a summary and exits non-zero if any acknowledged message is
// missing.
package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster: FAIL:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	nodes := map[transport.NodeID]*parkway.Node{}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	dirs := map[transport.NodeID]string{}
	start := func(id transport.NodeID) error {
		n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dirs[id],
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			return err
		}
		nodes[id] = n
		return nil
	}
	for _, id := range peers {
		dir, err := os.MkdirTemp("", fmt.Sprintf("parkway-cluster-node%d-", id))
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dirs[id] = dir
		if err := start(id); err != nil {
			return err
		}
	}

	stream, err := nodes[1].Admin().CreateStream(ctx, "orders")
	if err != nil {
		return err
	}
	topic, err := nodes[1].Admin().CreateTopic(ctx, stream, "created", 1)
	if err != nil {
		return err
	}
	var acked []string
	produce := func(via transport.NodeID, n int, prefix string) error {
		for i := range n {
			p := fmt.Sprintf("%s-%d", prefix, i)
			if _, err := nodes[via].Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: []byte(p)}); err != nil {
				return fmt.Errorf("produce %s via node %d: %w", p, via, err)
			}
			acked = append(acked, p)
		}
		return nil
	}
	if err := produce(2, 100, "before"); err != nil {
		return err
	}
	leader, err := nodes[2].Cluster().Leader(ctx, topic, 0)
	if err != nil {
		return err
	}
	fmt.Printf("produced 100 messages (quorum-acked); node %d leads the partition\n", leader)

	if err := nodes[leader].Close(); err != nil {
		return err
	}
	delete(nodes, leader)
	var survivors []transport.NodeID
	for id := range nodes {
		survivors = append(survivors, id)
	}
	slices.Sort(survivors)
	fmt.Printf("stopped node %d; survivors %v elect a new leader\n", leader, survivors)
	if err := produce(survivors[0], 100, "after"); err != nil {
		return err
	}
	newLeader, err := nodes[survivors[0]].Cluster().Leader(ctx, topic, 0)
	if err != nil {
		return err
	}
	fmt.Printf("produced 100 more through node %d; node %d leads now\n", survivors[0], newLeader)

	if err := start(leader); err != nil {
		return fmt.Errorf("restart node %d: %w", leader, err)
	}
	fmt.Printf("restarted node %d on its data directory; it rejoins and catches up\n", leader)
	for _, id := range peers {
		got, err := readAll(ctx, nodes[id], topic, len(acked))
		if err != nil {
			return fmt.Errorf("node %d: %w", id, err)
		}
		if !slices.Equal(got, acked) {
			return fmt.Errorf("node %d holds %d messages, want the %d acknowledged in order", id, len(got), len(acked))
		}
		fmt.Printf("node %d holds all %d acknowledged messages in order\n", id, len(got))
	}
	fmt.Printf("cluster: OK: 3 nodes, leader %d stopped and restarted, %d acknowledged, 0 lost\n", leader, len(acked))
	return nil
}

// readAll polls a node's own replica until it holds want messages (it may
// still be applying the last commits) or the context ends.
func readAll(ctx context.Context, n *parkway.Node, topic parkway.Topic, want int) ([]string, error) {
	for {
		var out []string
		// Local: read this node's own replica, not the leader's.
		b, err := n.Poll(ctx, topic, 0, parkway.AtOffset(0).Local(), want+1)
		if err != nil {
			return nil, err
		}
		for _, m := range b.Messages {
			out = append(out, string(m.Payload))
		}
		if len(out) >= want {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
