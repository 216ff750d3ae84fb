package parkway_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/transport"
)

// countingBus counts what a node sends, by message kind.
type countingBus struct {
	transport.Bus
	sent *[256]atomic.Int64
	// batched counts the raft messages inside the batches sent.
	batched *atomic.Int64
}

func (b countingBus) Send(m transport.Message) error {
	b.sent[m.Kind].Add(1)
	if m.Kind == host.KindPartitionRaftBatch && len(m.Payload) >= 4 {
		b.batched.Add(int64(binary.LittleEndian.Uint32(m.Payload)))
	}
	return b.Bus.Send(m)
}

// quietCluster is a 3-node cluster whose buses count what they send.
type quietCluster struct {
	net   *transport.Network
	nodes map[transport.NodeID]*parkway.Node
	sent  map[transport.NodeID]*[256]atomic.Int64
	// batched counts the raft messages that travelled in batches.
	batched atomic.Int64
}

func openQuietCluster(t *testing.T) *quietCluster {
	t.Helper()
	c := &quietCluster{net: transport.NewNetwork(transport.NetworkOptions{}),
		nodes: map[transport.NodeID]*parkway.Node{}, sent: map[transport.NodeID]*[256]atomic.Int64{}}
	t.Cleanup(func() { _ = c.net.Close() })
	peers := []transport.NodeID{1, 2, 3}
	for _, id := range peers {
		c.sent[id] = new([256]atomic.Int64)
		c.nodes[id] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: countingBus{Bus: c.net.Endpoint(id), sent: c.sent[id], batched: &c.batched}}})
	}
	return c
}

// count sums what the nodes sent of kind since the last reset.
func (c *quietCluster) count(kind uint8) int64 {
	var n int64
	for _, s := range c.sent {
		n += s[kind].Load()
	}
	return n
}

// raft sums the partition raft traffic the nodes sent since the last
// reset: single messages and batches.
func (c *quietCluster) raft() int64 {
	return c.count(host.KindPartitionRaft) + c.count(host.KindPartitionRaftBatch)
}

func (c *quietCluster) reset() {
	c.batched.Store(0)
	for _, s := range c.sent {
		for i := range s {
			s[i].Store(0)
		}
	}
}

// settleQuiet waits (virtual time) until a whole second passes with no
// partition raft message on the network.
func (c *quietCluster) settleQuiet(t *testing.T) {
	t.Helper()
	for range 30 {
		c.reset()
		time.Sleep(time.Second)
		if c.raft() == 0 {
			return
		}
	}
	t.Fatalf("partition groups never went quiet: %d raft messages in the last second", c.raft())
}

const quietPartitions = 24

// An idle cluster is quiet: once every partition's group has quiesced, a
// second of raft ticks (100 of them) puts no partition raft message on the
// network, while node liveness sends a number of heartbeats that does not
// depend on the partition count. A write wakes its group, is acknowledged
// and replicated, and the group goes quiet again.
func TestClusterIdlePartitionsQuiesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openQuietCluster(t)
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", quietPartitions)
		for p := range uint32(quietPartitions) {
			mustProduce(t, c.nodes[1], tp, parkway.PartitionID(p), fmt.Sprintf("m%d", p))
		}
		c.settleQuiet(t)

		c.reset()
		time.Sleep(time.Second)
		if n := c.raft(); n != 0 {
			t.Fatalf("%d partition raft messages in an idle second, want 0", n)
		}
		// 6 ordered node pairs, one heartbeat per 100 ms each.
		if n := c.count(host.KindLiveness); n < 6*5 || n > 6*11 {
			t.Fatalf("%d liveness heartbeats in a second, want about 60 (one per node pair per 100 ms)", n)
		}

		// A write wakes its group and is replicated.
		c.reset()
		mustProduce(t, c.nodes[2], tp, parkway.PartitionID(3), "wake")
		if c.raft() == 0 {
			t.Fatal("a write was acknowledged without a partition raft message")
		}
		for id, n := range c.nodes {
			waitFor(t, fmt.Sprintf("node %d to hold the write", id), func() bool { return len(readAll(t, n, tp, 3)) == 2 })
			expectLog(t, n, tp, 3, "m3", "wake")
		}
		c.settleQuiet(t)
	})
}

// A node leading quiesced groups dies: node liveness tells the survivors,
// which elect new leaders for all of its groups within a few liveness
// intervals, not an unbounded wait (quiesced followers run no election
// timer). No acknowledged write is lost and the new leaders take writes.
// The same holds once the followers hibernated (a second after the groups
// quiesced): liveness's verdict rebuilds their raft nodes.
func TestClusterQuiescedLeaderDeathElectsPromptly(t *testing.T) {
	for _, hibernated := range []bool{false, true} {
		t.Run(fmt.Sprintf("hibernated=%v", hibernated), func(t *testing.T) { quiescedLeaderDeath(t, hibernated) })
	}
}

func quiescedLeaderDeath(t *testing.T, hibernated bool) {
	synctest.Test(t, func(t *testing.T) {
		c := openQuietCluster(t)
		ctx := context.Background()
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", quietPartitions)
		for p := range uint32(quietPartitions) {
			mustProduce(t, c.nodes[1], tp, parkway.PartitionID(p), fmt.Sprintf("a%d", p))
		}
		c.settleQuiet(t)
		if hibernated {
			time.Sleep(time.Second)
			h := 0
			for _, n := range c.nodes {
				h += parkway.HibernatedReplicas(n)
			}
			if h != 2*quietPartitions {
				t.Fatalf("%d followers hibernate a second after the groups quiesced, want %d", h, 2*quietPartitions)
			}
		}

		// The victim leads the most partitions (the preferred leaders
		// spread them over the three nodes).
		led := map[transport.NodeID][]uint32{}
		for p := range uint32(quietPartitions) {
			lead, err := c.nodes[1].Cluster().Leader(ctx, tp, p)
			if err != nil || lead == 0 {
				t.Fatalf("partition %d: leader %d, %v", p, lead, err)
			}
			led[lead] = append(led[lead], p)
		}
		victim := transport.NodeID(1)
		for id := range c.nodes {
			if len(led[id]) > len(led[victim]) {
				victim = id
			}
		}
		if len(led[victim]) == 0 {
			t.Fatal("no node leads a partition")
		}
		survivors := others(victim)
		if err := c.nodes[victim].Close(); err != nil {
			t.Fatal(err)
		}
		died := time.Now()

		// Default liveness: a heartbeat every 100 ms, dead after 500 ms.
		// The bound allows the timeout plus three intervals for the
		// elections.
		const bound = 800 * time.Millisecond
		for {
			elected := true
			for _, p := range led[victim] {
				for _, id := range survivors {
					lead, err := c.nodes[id].Cluster().Leader(ctx, tp, p)
					if err != nil {
						t.Fatal(err)
					}
					if lead == 0 || lead == victim {
						elected = false
					}
				}
			}
			if elected {
				break
			}
			if time.Since(died) > bound {
				t.Fatalf("the %d groups node %d led have no new leader %v after it died", len(led[victim]), victim, time.Since(died))
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("node %d led %d partitions; new leaders after %v", victim, len(led[victim]), time.Since(died))

		for _, p := range led[victim] {
			mustProduce(t, c.nodes[survivors[0]], tp, parkway.PartitionID(p), fmt.Sprintf("b%d", p))
		}
		for _, id := range survivors {
			for _, p := range led[victim] {
				waitFor(t, fmt.Sprintf("node %d partition %d", id, p), func() bool { return len(readAll(t, c.nodes[id], tp, p)) == 2 })
				expectLog(t, c.nodes[id], tp, p, fmt.Sprintf("a%d", p), fmt.Sprintf("b%d", p))
			}
		}
	})
}

// Raft messages between a pair of nodes are coalesced: when a node that
// was cut off returns, the groups its peers lead all wake and heartbeat in
// the same ticks, and a shard's messages for one peer in one unit of work
// travel as one batch.
func TestClusterBatchesRaftPerNodePair(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openQuietCluster(t)
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", quietPartitions)
		for p := range uint32(quietPartitions) {
			mustProduce(t, c.nodes[1], tp, parkway.PartitionID(p), fmt.Sprintf("m%d", p))
		}
		c.settleQuiet(t)
		c.net.Partition([]transport.NodeID{3}, []transport.NodeID{1, 2})
		time.Sleep(time.Second) // node 3 is declared dead, and declares the others dead
		c.reset()
		c.net.Heal()
		time.Sleep(time.Second)
		frames := c.count(host.KindPartitionRaftBatch)
		if frames == 0 {
			t.Fatalf("no raft batch sent while every group woke (%d single raft messages)", c.count(host.KindPartitionRaft))
		}
		if per := float64(c.batched.Load()) / float64(frames); per < 2 {
			t.Fatalf("%d raft messages in %d batches: %.1f per batch", c.batched.Load(), frames, per)
		}
		t.Logf("%d raft messages in %d batches, %d sent alone", c.batched.Load(), frames, c.count(host.KindPartitionRaft))
		for p := range uint32(quietPartitions) {
			waitFor(t, fmt.Sprintf("partition %d on node 3", p), func() bool { return len(readAll(t, c.nodes[3], tp, p)) == 1 })
		}
		c.settleQuiet(t)
	})
}
