package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
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
		produce := func(via transport.NodeID, tp parkway.Topic, part uint32, what string) {
			t.Helper()
			if _, err := nodes[via].Produce(ctx, tp, parkway.PartitionID(part), parkway.Message{Payload: []byte(what)}); err != nil {
				t.Fatalf("produce %q through node %d: %v", what, via, err)
			}
		}
		for i := range 3 {
			p := fmt.Sprint("before", i)
			produce(transport.NodeID(i+1), old, 0, p)
			acked = append(acked, p)
		}

		nodes[4] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
			Cluster: &parkway.ClusterConfig{ID: 4, Peers: []transport.NodeID{1, 2, 3, 4}, Join: true, Bus: net.Endpoint(4)}})
		if err := nodes[2].Cluster().AddNode(ctx, 4); err != nil {
			t.Fatalf("AddNode: %v", err)
		}
		if err := nodes[3].Cluster().AddNode(ctx, 4); err != nil {
			t.Fatalf("AddNode of a member again: %v", err)
		}
		// The cluster serves while and after the node joins.
		for i := range 3 {
			p := fmt.Sprint("during", i)
			produce(transport.NodeID(i+1), old, 0, p)
			acked = append(acked, p)
		}
		waitFor(t, "node 4 to learn the topic created before it joined", func() bool {
			_, err := nodes[4].Topic(ctxFor(t), s, "old")
			return err == nil
		})
		fresh := mustTopic(t, nodes[1], s, "new", 4, parkway.WithReplicas(3))
		parts, err := parkway.EnginePartitions(ctx, nodes[1], fresh)
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
		for id := range transport.NodeID(4) {
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

// A node is removed while the cluster serves: four nodes hold a topic at
// replication factor 3; node 2 is removed through node 1 while produces
// go on through node 3. Every replica node 2 held moves — the new replica
// is added, sent a snapshot and fetches the log before node 2's replica is
// removed — so afterwards every partition is materialised on exactly three
// of the remaining nodes, each of which holds every acknowledged message;
// node 2 holds nothing, and the metadata no longer names it.
func TestClusterRemoveNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := nodesCluster(t, 4)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 4, parkway.WithReplicas(3))
		// And a topic with one replica per partition: the one on node 2
		// moves whole (the new replica is added, leadership handed to it,
		// and the old one removed).
		single := mustTopic(t, nodes[1], s, "single", 4, parkway.WithReplicas(1))
		acked := map[uint32][]string{}
		produce := func(via transport.NodeID, part uint32, what string) {
			t.Helper()
			if _, err := nodes[via].Produce(ctx, tp, parkway.PartitionID(part), parkway.Message{Payload: []byte(what)}); err != nil {
				t.Fatalf("produce %q through node %d: %v", what, via, err)
			}
			acked[part] = append(acked[part], what)
		}
		for i := range 40 {
			produce(transport.NodeID(i%4+1), uint32(i%4), fmt.Sprint("before", i))
			if _, err := nodes[1].Produce(ctx, single, parkway.PartitionID(uint32(i%4)), parkway.Message{Payload: []byte(fmt.Sprint("s", i))}); err != nil {
				t.Fatal(err)
			}
		}
		parts, err := parkway.EnginePartitions(ctx, nodes[1], tp)
		if err != nil {
			t.Fatal(err)
		}
		on2 := 0
		for _, p := range parts {
			if slices.Contains(p.Replicas, 2) {
				on2++
			}
		}
		if on2 == 0 {
			t.Fatal("node 2 holds no replica to move")
		}

		done := make(chan error, 1)
		go func() {
			// Virtual time: a move that never finishes fails the test
			// instead of hanging it.
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			done <- nodes[1].Cluster().RemoveNode(rctx, 2)
		}()
		for i := 0; ; i++ {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("RemoveNode: %v", err)
				}
			default:
				if i < 200 {
					produce(3, uint32(i%4), fmt.Sprint("during", i))
					time.Sleep(5 * time.Millisecond) // virtual: let the moves progress
					continue
				}
				if err := <-done; err != nil {
					t.Fatalf("RemoveNode: %v", err)
				}
			}
			break
		}
		if err := nodes[3].Cluster().RemoveNode(ctx, 2); err != nil {
			t.Fatalf("RemoveNode of a removed node: %v", err)
		}
		delete(nodes, 2) // it serves nothing more; its Close is the cleanup's
		for i := range 8 {
			produce(transport.NodeID([]int{1, 3, 4}[i%3]), uint32(i%4), fmt.Sprint("after", i))
		}
		parts, err = parkway.EnginePartitions(ctx, nodes[1], tp)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			if len(p.Replicas) != 3 || slices.Contains(p.Replicas, 2) {
				t.Fatalf("partition %d placed on %v after removing node 2", p.Partition, p.Replicas)
			}
			expectReplicas(t, nodes, tp, p, acked[p.Partition])
		}
		sparts, err := parkway.EnginePartitions(ctx, nodes[1], single)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range sparts {
			if len(p.Replicas) != 1 || p.Replicas[0] == 2 {
				t.Fatalf("single-replica partition %d on %v", p.Partition, p.Replicas)
			}
			waitFor(t, fmt.Sprintf("single-replica partition %d materialised on %v", p.Partition, p.Replicas), func() bool {
				return slices.Equal(heldOn(nodes, p.NS), p.Replicas)
			})
			var want []string
			for i := int(p.Partition); i < 40; i += 4 {
				want = append(want, fmt.Sprint("s", i))
			}
			expectLog(t, nodes[transport.NodeID(p.Replicas[0])], single, p.Partition, want...)
		}
		for id, n := range nodes {
			if got := parkway.ClusterNodes(n); !slices.Equal(got, []uint64{1, 3, 4}) {
				t.Fatalf("node %d's metadata names nodes %v, want [1 3 4]", id, got)
			}
		}
	})
}

// A node added to a running cluster takes its share after Rebalance:
// three nodes hold a topic at replication factor 3 (every node holds every
// partition); node 4 joins and Rebalance moves replicas onto it, so every
// node ends with three or four of the twelve replicas and one preferred
// leadership or more; the moved replicas hold every acknowledged message,
// and the partitions serve throughout.
func TestClusterRebalanceOntoAddedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := nodesCluster(t, 3)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 4, parkway.WithReplicas(3))
		acked := map[uint32][]string{}
		for i := range 40 {
			what := fmt.Sprint("m", i)
			if _, err := nodes[transport.NodeID(i%3+1)].Produce(ctx, tp, parkway.PartitionID(uint32(i%4)), parkway.Message{Payload: []byte(what)}); err != nil {
				t.Fatal(err)
			}
			acked[uint32(i%4)] = append(acked[uint32(i%4)], what)
		}
		nodes[4] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
			Cluster: &parkway.ClusterConfig{ID: 4, Peers: []transport.NodeID{1, 2, 3, 4}, Join: true, Bus: net.Endpoint(4)}})
		if err := nodes[2].Cluster().AddNode(ctx, 4); err != nil {
			t.Fatalf("AddNode: %v", err)
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second) // virtual time
		defer cancel()
		if err := nodes[1].Cluster().Rebalance(rctx); err != nil {
			t.Fatalf("Rebalance: %v", err)
		}
		parts, err := parkway.EnginePartitions(ctx, nodes[1], tp)
		if err != nil {
			t.Fatal(err)
		}
		load, leads := map[uint64]int{}, map[uint64]int{}
		for _, p := range parts {
			for i, n := range p.Replicas {
				load[n]++
				if i == 0 {
					leads[n]++
				}
			}
		}
		for n := uint64(1); n <= 4; n++ {
			if load[n] < 3 || load[n] > 4 || leads[n] < 1 {
				t.Fatalf("after Rebalance node %d holds %d replicas and %d preferred leaderships: %v %v", n, load[n], leads[n], load, leads)
			}
		}
		for i := range 8 {
			what := fmt.Sprint("after", i)
			if _, err := nodes[transport.NodeID(i%4+1)].Produce(ctx, tp, parkway.PartitionID(uint32(i%4)), parkway.Message{Payload: []byte(what)}); err != nil {
				t.Fatal(err)
			}
			acked[uint32(i%4)] = append(acked[uint32(i%4)], what)
		}
		for _, p := range parts {
			expectReplicas(t, nodes, tp, p, acked[p.Partition])
			// Leadership follows the preferred leaders, node 4 included.
			waitFor(t, fmt.Sprintf("partition %d led by its preferred leader %d", p.Partition, p.Replicas[0]), func() bool {
				return parkway.PartitionLeader(nodes[transport.NodeID(p.Replicas[0])], p.NS) == p.Replicas[0]
			})
		}
		if err := nodes[1].Cluster().RemoveNode(ctx, 1); !errors.Is(err, parkway.ErrInvalidNode) {
			t.Fatalf("a node removing itself: %v, want ErrInvalidNode", err)
		}
	})
}

// A node that is down is removed all the same: its replicas are rebuilt
// on the other nodes from the surviving replicas (a quorum of each group
// is alive), and every acknowledged message is on every new replica.
func TestClusterRemoveDeadNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := nodesCluster(t, 4)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 4, parkway.WithReplicas(3))
		acked := map[uint32][]string{}
		for i := range 20 {
			what := fmt.Sprint("m", i)
			if _, err := nodes[transport.NodeID(i%4+1)].Produce(ctx, tp, parkway.PartitionID(uint32(i%4)), parkway.Message{Payload: []byte(what)}); err != nil {
				t.Fatal(err)
			}
			acked[uint32(i%4)] = append(acked[uint32(i%4)], what)
		}
		if err := nodes[2].Close(); err != nil {
			t.Fatal(err)
		}
		delete(nodes, 2)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second) // virtual time
		defer cancel()
		if err := nodes[1].Cluster().RemoveNode(rctx, 2); err != nil {
			t.Fatalf("RemoveNode of a dead node: %v", err)
		}
		parts, err := parkway.EnginePartitions(ctx, nodes[3], tp)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			if slices.Contains(p.Replicas, 2) || len(p.Replicas) != 3 {
				t.Fatalf("partition %d on %v", p.Partition, p.Replicas)
			}
			expectReplicas(t, nodes, tp, p, acked[p.Partition])
		}
	})
}

// expectReplicas waits until p is materialised exactly on its replicas,
// then checks that each replica's own log holds the acknowledged
// messages, in order.
func expectReplicas(t *testing.T, nodes map[transport.NodeID]*parkway.Node, tp parkway.Topic, p metadata.PartitionInfo, acked []string) {
	t.Helper()
	want := slices.Sorted(slices.Values(p.Replicas))
	waitFor(t, fmt.Sprintf("partition %d materialised exactly on %v", p.Partition, want), func() bool {
		return slices.Equal(heldOn(nodes, p.NS), want)
	})
	for _, id := range want {
		n := nodes[transport.NodeID(id)]
		waitFor(t, fmt.Sprintf("node %d's replica of partition %d to converge", id, p.Partition), func() bool {
			return len(readAll(t, n, tp, p.Partition)) == len(acked)
		})
		expectLog(t, n, tp, p.Partition, acked...)
	}
}

// RemoveNode through a member whose metadata lags behind the addition of
// the node (it was cut off while the node was added) still removes it:
// the call first brings the member's metadata up to what the cluster had
// committed (a read barrier) instead of judging "not a member, nothing to
// do" from a stale view — which returned success with the node still a
// voter of the metadata group and a holder of replicas.
func TestClusterRemoveNodeThroughALaggingMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := nodesCluster(t, 3)
		ctx := context.Background()
		mustStream(t, nodes[1], "s")
		for _, p := range []transport.NodeID{1, 2} {
			net.Disconnect(3, p)
			net.Disconnect(p, 3)
		}
		nodes[4] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
			Cluster: &parkway.ClusterConfig{ID: 4, Peers: []transport.NodeID{1, 2, 3, 4}, Join: true, Bus: net.Endpoint(4)}})
		net.Disconnect(3, 4)
		net.Disconnect(4, 3)
		if err := nodes[1].Cluster().AddNode(ctx, 4); err != nil {
			t.Fatalf("AddNode: %v", err)
		}
		net.Heal()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second) // virtual time
		defer cancel()
		if err := nodes[3].Cluster().RemoveNode(rctx, 4); err != nil {
			t.Fatalf("RemoveNode through the lagging node 3: %v", err)
		}
		// Three nodes are left: a topic of four replicas does not fit.
		s, err := nodes[1].Stream(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodes[1].Admin().CreateTopic(ctx, s, "wide", 1, parkway.WithReplicas(4)); err == nil {
			t.Fatal("a topic of 4 replicas was created after node 4's removal: node 4 is still a member")
		}
	})
}

// A replica that a move added, restarted on its data directory, leads its
// group again when it is the only replica: the metadata keeps it among
// the partition's joined replicas for as long as it holds the replica,
// and it had been rebuilt as a joiner waiting for a leader's snapshot
// that no one was left to send (simulator cluster seed 5561 with node
// removal: a one-replica partition moved off a removed node had no
// leader for good after its new node lost power).
func TestClusterMovedReplicaLeadsAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newDiskCluster(t, nil)
		ctx := context.Background()
		s := mustStream(t, c.nodes[1], "s")
		// Fsync on every write: what raft acknowledged survives the power
		// loss below (under interval fsync it need not).
		tp := mustTopic(t, c.nodes[1], s, "t", 1, parkway.WithReplicas(1), parkway.WithFsync(parkway.FsyncAlways, 0))
		parts, err := parkway.EnginePartitions(ctx, c.nodes[1], tp)
		if err != nil {
			t.Fatal(err)
		}
		from := transport.NodeID(parts[0].Replicas[0])
		via := others(from)[0]
		want := c.produce(via, tp, "a", 5)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second) // virtual time
		defer cancel()
		if err := c.nodes[via].Cluster().RemoveNode(rctx, from); err != nil {
			t.Fatalf("RemoveNode(%d): %v", from, err)
		}
		c.stop(from)
		parts, err = parkway.EnginePartitions(ctx, c.nodes[via], tp)
		if err != nil {
			t.Fatal(err)
		}
		to := transport.NodeID(parts[0].Replicas[0])
		if to == from || len(parts[0].Replicas) != 1 {
			t.Fatalf("after removing node %d the partition is on %v", from, parts[0].Replicas)
		}
		c.powerLoss(to)
		c.start(to)
		want = append(want, c.produce(to, tp, "b", 3)...)
		got, err := localLog(c.nodes[to], tp)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("node %d holds %q (%v), want %q", to, got, err, want)
		}
	})
}
