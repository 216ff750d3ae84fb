// Command membership changes a running cluster's nodes while it serves:
// three parkway nodes in one process over the in-memory network, each on
// its own temporary data directory, hold a topic and keep taking produces
// throughout. A fourth node starts with ClusterConfig.Join and is added through
// a member (Cluster.AddNode): it learns the cluster's metadata, and a topic
// created afterwards is placed over four nodes (replication factor 3).
// Cluster.Rebalance then moves replicas of the existing topic onto it, and
// Cluster.RemoveNode removes node 1: its replicas move to the others (each
// group adds the new replica before it removes the old one).
//
//	go run ./examples/membership
//
// It prints what it did and exits non-zero if an acknowledged message is
// missing or a step fails.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "membership: FAIL:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	founders := []transport.NodeID{1, 2, 3}
	nodes := map[transport.NodeID]*parkway.Node{}
	var dirs []string
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
		for _, dir := range dirs {
			os.RemoveAll(dir)
		}
	}()
	open := func(id transport.NodeID, peers []transport.NodeID, join bool) error {
		dir, err := os.MkdirTemp("", fmt.Sprintf("parkway-membership-node%d-", id))
		if err != nil {
			return err
		}
		n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dir,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Join: join, Bus: net.Endpoint(id)}})
		if err != nil {
			os.RemoveAll(dir)
			return err
		}
		nodes[id] = n
		dirs = append(dirs, dir)
		return nil
	}
	for _, id := range founders {
		if err := open(id, founders, false); err != nil {
			return err
		}
	}
	stream, err := nodes[1].Admin().CreateStream(ctx, "shop")
	if err != nil {
		return err
	}
	orders, err := nodes[1].Admin().CreateTopic(ctx, stream, "orders", 3)
	if err != nil {
		return err
	}
	fmt.Println("3 founding nodes; topic orders on", placements(ctx, nodes[1], orders))

	// Produces keep flowing while the fourth node joins.
	var (
		mu    sync.Mutex
		acked []string
		stop  = make(chan struct{})
		done  = make(chan error, 1)
	)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			p := fmt.Sprint("order-", i)
			via := transport.NodeID(2 + i%2) // nodes 2 and 3 stay throughout
			if _, err := nodes[via].Produce(ctx, orders, parkway.PartitionID(0), parkway.Message{Payload: []byte(p)}); err != nil {
				done <- fmt.Errorf("produce %s through node %d: %w", p, via, err)
				return
			}
			mu.Lock()
			acked = append(acked, p)
			mu.Unlock()
		}
	}()

	if err := open(4, []transport.NodeID{1, 2, 3, 4}, true); err != nil {
		return err
	}
	if err := nodes[2].Cluster().AddNode(ctx, 4); err != nil {
		return fmt.Errorf("add node 4: %w", err)
	}
	fmt.Println("node 4 added through node 2")
	for {
		if _, err := nodes[4].Topic(ctx, stream, "orders"); err == nil {
			break
		} else if !errors.Is(err, parkway.ErrTopicNotFound) && !errors.Is(err, parkway.ErrStreamNotFound) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("node 4 knows topic orders, created before it joined")

	payments, err := nodes[4].Admin().CreateTopic(ctx, stream, "payments", 4, parkway.WithReplicas(3))
	if err != nil {
		return err
	}
	fmt.Println("topic payments, created after the join, on", placements(ctx, nodes[4], payments))
	for _, id := range []transport.NodeID{1, 2, 3, 4} {
		for p := range uint32(4) {
			if _, err := nodes[id].Produce(ctx, payments, parkway.PartitionID(p), parkway.Message{Payload: []byte("paid")}); err != nil {
				return fmt.Errorf("produce to payments/%d through node %d: %w", p, id, err)
			}
		}
	}

	if err := nodes[3].Cluster().Rebalance(ctx); err != nil {
		return fmt.Errorf("rebalance: %w", err)
	}
	fmt.Println("rebalanced: orders on", placements(ctx, nodes[3], orders))
	if err := nodes[2].Cluster().RemoveNode(ctx, 1); err != nil {
		return fmt.Errorf("remove node 1: %w", err)
	}
	nodes[1].Close()
	delete(nodes, 1)
	fmt.Println("node 1 removed: orders on", placements(ctx, nodes[2], orders), "payments on", placements(ctx, nodes[2], payments))

	close(stop)
	if err := <-done; err != nil {
		return err
	}
	mu.Lock()
	want := slices.Clone(acked)
	mu.Unlock()
	for _, id := range []transport.NodeID{2, 3, 4} {
		b, err := nodes[id].Poll(ctx, orders, 0, parkway.AtOffset(0), len(want)+10)
		if err != nil {
			return fmt.Errorf("poll orders through node %d: %w", id, err)
		}
		var got []string
		for _, m := range b.Messages {
			got = append(got, string(m.Payload))
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("orders through node %d: %d messages, want the %d acknowledged", id, len(got), len(want))
		}
		for p := range uint32(4) {
			b, err := nodes[id].Poll(ctx, payments, p, parkway.AtOffset(0), 10)
			if err != nil || len(b.Messages) != 4 {
				return fmt.Errorf("payments/%d through node %d: %d messages, %v", p, id, len(b.Messages), err)
			}
		}
	}
	fmt.Printf("OK: %d orders acknowledged while node 4 joined, the replicas moved and node 1 left, all readable through every remaining node\n", len(want))
	return nil
}

// placements describes where a topic's partitions live.
func placements(ctx context.Context, n *parkway.Node, t parkway.Topic) string {
	parts, err := n.Admin().Partitions(ctx, t)
	if err != nil {
		return err.Error()
	}
	s := ""
	for _, p := range parts {
		s += fmt.Sprintf(" %d:%v", p.Partition, p.Replicas)
	}
	return s
}
