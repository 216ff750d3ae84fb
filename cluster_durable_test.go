package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// diskCluster is a 3-node cluster whose nodes keep their data — partition
// logs and every raft group's log — on their own in-memory disks, so a
// node can be stopped and started again on what it wrote, or lose power.
type diskCluster struct {
	t     *testing.T
	net   *transport.Network
	peers []transport.NodeID
	disks map[transport.NodeID]*vfs.MemFS
	nodes map[transport.NodeID]*parkway.Node
	cfg   func(id transport.NodeID) parkway.Config
}

func newDiskCluster(t *testing.T, tweak func(*parkway.Config)) *diskCluster {
	c := &diskCluster{t: t, net: transport.NewNetwork(transport.NetworkOptions{}),
		peers: []transport.NodeID{1, 2, 3}, disks: map[transport.NodeID]*vfs.MemFS{},
		nodes: map[transport.NodeID]*parkway.Node{}}
	c.cfg = func(id transport.NodeID) parkway.Config {
		cfg := parkway.Config{Shards: 2, RequestTimeout: 10 * time.Second, DataDir: "/data", FS: c.disks[id],
			Cluster: &parkway.ClusterConfig{ID: id, Peers: c.peers, Bus: c.net.Endpoint(id)}}
		if tweak != nil {
			tweak(&cfg)
		}
		return cfg
	}
	t.Cleanup(func() {
		synctest.Wait()
		for id := range c.nodes {
			c.stop(id)
		}
		_ = c.net.Close()
	})
	for _, id := range c.peers {
		c.disks[id] = vfs.NewMem()
		c.start(id)
	}
	return c
}

func (c *diskCluster) start(id transport.NodeID) *parkway.Node {
	c.t.Helper()
	n, err := parkway.Open(c.cfg(id))
	if err != nil {
		c.t.Fatalf("open node %d: %v", id, err)
	}
	c.nodes[id] = n
	return n
}

func (c *diskCluster) stop(id transport.NodeID) {
	c.t.Helper()
	if err := c.nodes[id].Close(); err != nil {
		c.t.Errorf("close node %d: %v", id, err)
	}
	delete(c.nodes, id)
}

// powerLoss stops node id and throws away everything its disk had not
// synced.
func (c *diskCluster) powerLoss(id transport.NodeID) {
	// The image is taken before the node stops: a clean Close syncs.
	crashed := c.disks[id].Crash()
	c.stop(id)
	c.disks[id] = crashed
}

// produce sends payloads one by one through node via, each acknowledged.
func (c *diskCluster) produce(via transport.NodeID, tp parkway.Topic, prefix string, n int) []string {
	c.t.Helper()
	var out []string
	for i := range n {
		p := fmt.Sprintf("%s%d", prefix, i)
		if _, err := c.nodes[via].Produce(context.Background(), tp, parkway.PartitionID(0),
			parkway.Message{Payload: []byte(p)}); err != nil {
			c.t.Fatalf("produce %s via node %d: %v", p, via, err)
		}
		out = append(out, p)
	}
	return out
}

// converged waits until every running node's copy of partition 0 holds
// exactly want, in order, at offsets 0, 1, …. A replica may refuse reads
// while it converges (fenced, rebuilding): that is waited out too.
func (c *diskCluster) converged(tp parkway.Topic, want []string) {
	c.t.Helper()
	for id, n := range c.nodes {
		var got []string
		var err error
		waitFor(c.t, fmt.Sprintf("node %d to hold %d messages", id, len(want)), func() bool {
			got, err = localLog(n, tp)
			return err == nil && len(got) >= len(want)
		})
		if !slices.Equal(got, want) {
			c.t.Fatalf("node %d holds %q, want %q", id, got, want)
		}
	}
}

// leader is the node that leads partition 0 of tp, as node 1 knows it.
func (c *diskCluster) leader(tp parkway.Topic) transport.NodeID {
	c.t.Helper()
	leader, err := c.nodes[1].Cluster().Leader(context.Background(), tp, 0)
	if err != nil || leader == 0 {
		c.t.Fatalf("leader: %d, %v", leader, err)
	}
	return leader
}

// localLog reads node n's own copy of partition 0, checking offsets are
// dense from 0.
func localLog(n *parkway.Node, tp parkway.Topic) ([]string, error) { return localLogFrom(n, tp, 0) }

// localLogFrom is localLog from offset from.
func localLogFrom(n *parkway.Node, tp parkway.Topic, from uint64) ([]string, error) {
	var out []string
	for {
		next := from + uint64(len(out))
		b, err := n.Poll(context.Background(), tp, 0, parkway.AtOffset(next).Local(), 1000)
		if err != nil {
			return nil, err
		}
		if len(b.Messages) == 0 {
			return out, nil
		}
		for _, m := range b.Messages {
			if m.Offset != from+uint64(len(out)) {
				return nil, fmt.Errorf("offset %d where %d was due", m.Offset, from+uint64(len(out)))
			}
			out = append(out, string(m.Payload))
		}
	}
}

// A replica stopped while the others go on, restarted on its data
// directory, rejoins as the same raft member: it keeps what it had,
// catches up on what it missed, and the cluster's logs agree. The leader
// restarting works the same way, and so does the whole cluster.
func TestClusterNodeRestartsOnItsDataDir(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newDiskCluster(t, nil)
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", 1)
		want := c.produce(1, tp, "a", 10)
		c.converged(tp, want)

		c.stop(3)
		want = append(want, c.produce(1, tp, "b", 10)...)
		c.start(3)
		c.converged(tp, want)

		leader, err := c.nodes[1].Cluster().Leader(context.Background(), tp, 0)
		if err != nil || leader == 0 {
			t.Fatalf("leader: %d, %v", leader, err)
		}
		c.stop(leader)
		via := others(leader)[0]
		want = append(want, c.produce(via, tp, "c", 5)...)
		c.start(leader)
		want = append(want, c.produce(leader, tp, "d", 5)...)
		c.converged(tp, want)

		// Everyone stops; everyone comes back with metadata and logs.
		for _, id := range c.peers {
			c.stop(id)
		}
		for _, id := range c.peers {
			c.start(id)
		}
		want = append(want, c.produce(2, tp, "e", 3)...)
		c.converged(tp, want)
		if _, err := c.nodes[2].Admin().CreateStream(context.Background(), "s"); err == nil {
			t.Fatal("stream created twice: metadata forgotten across a restart")
		}
	})
}

// Behaviour 21 across a power loss on every node at once, under FsyncAlways: every acknowledged
// produce is in the quorum's synced raft logs, so after the restart every
// replica holds every acked message, whatever its partition log kept.
func TestBehaviour21ClusterPowerLossKeepsAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newDiskCluster(t, nil)
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", 1)
		want := c.produce(2, tp, "a", 20)
		synctest.Wait()
		for _, id := range c.peers {
			c.powerLoss(id)
		}
		for _, id := range c.peers {
			c.start(id)
		}
		want = append(want, c.produce(1, tp, "b", 3)...)
		c.converged(tp, want)
	})
}

// A clean Close fsyncs whatever the policy (README, FsyncNever): under
// FsyncNever a new replica's records are in its raft log alone (DESIGN
// behaviour 32: it is built deferred, and its Close leaves them to the
// log), so the shard's close syncs the raft log too. Every node closed,
// then a power loss on every disk: the acknowledged messages are all
// there after the restart.
func TestClusterCleanCloseKeepsFsyncNeverRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newDiskCluster(t, nil)
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", 1, parkway.WithFsync(parkway.FsyncNever, 0))
		want := c.produce(2, tp, "a", 6)
		c.converged(tp, want)
		for _, id := range c.peers {
			c.stop(id)
			c.disks[id] = c.disks[id].Crash()
		}
		for _, id := range c.peers {
			c.start(id)
		}
		c.converged(tp, want)
		want = append(want, c.produce(1, tp, "b", 2)...)
		c.converged(tp, want)
	})
}

// A replica away while the leader compacts its raft log past what the
// replica has is sent a snapshot, fetches the messages its partition log
// lacks from a peer, and converges — also across its own restart; the
// raft logs stay bounded by compaction.
func TestClusterSnapshotCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newDiskCluster(t, func(cfg *parkway.Config) {
			cfg.Cluster.CompactEntries = 8
		})
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", 1)
		want := c.produce(1, tp, "a", 5)
		c.converged(tp, want)

		c.stop(3)
		want = append(want, c.produce(1, tp, "b", 1500)...)
		// Replicated writes the snapshot must carry: a consumer offset and
		// a truncation.
		ctx := context.Background()
		if err := c.nodes[2].Admin().StoreOffset(ctx, tp, 0, "c", 1000); err != nil {
			t.Fatal(err)
		}
		if err := c.nodes[2].Admin().TruncatePartition(ctx, tp, 0, 3); err != nil {
			t.Fatal(err)
		}
		want = append(want, c.produce(1, tp, "x", 20)...) // the log moves past both before node 3 returns
		n3 := c.start(3)
		reg3 := registry(t, n3)
		waitFor(t, "node 3 to catch up", func() bool {
			b, err := n3.Poll(ctx, tp, 0, parkway.AtOffset(1524).Local(), 10)
			return err == nil && len(b.Messages) == 1
		})
		// Every message it lacked, in order, at its offset.
		if got, err := localLogFrom(n3, tp, 3); err != nil || !slices.Equal(got, want[3:]) {
			t.Fatalf("node 3 after catching up: %d messages (%v), want %d", len(got), err, len(want)-3)
		}
		if _, err := n3.Poll(ctx, tp, 0, parkway.AtOffset(2).Local(), 1); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("node 3 serves an offset truncated while it was away: %v", err)
		}
		b, err := n3.Poll(ctx, tp, 0, parkway.AtConsumer("c").Local(), 1)
		if err != nil || len(b.Messages) != 1 || b.Messages[0].Offset != 1000 {
			t.Fatalf("node 3's copy of the consumer offset: %v %v", payloads(b.Messages), err)
		}
		if v := metricValue(t, reg3, "parkway_raft_snapshots_installed_total"); v == 0 {
			t.Fatal("the lagging replica caught up without a snapshot: the leader's log was not compacted")
		}
		if v := metricValue(t, reg3, "parkway_catchup_messages_total"); v < 1000 {
			t.Fatalf("the replica fetched %v messages, want the ≥1000 it lacked", v)
		}
		// The catch-up is durable: a restart keeps it.
		c.stop(3)
		n3 = c.start(3)
		want = append(want, c.produce(2, tp, "c", 3)...)
		waitFor(t, "node 3 after its restart", func() bool {
			got, err := localLogFrom(n3, tp, 3)
			return err == nil && slices.Equal(got, want[3:])
		})
		for _, id := range c.peers {
			info, err := c.disks[id].Stat(fmt.Sprintf("/data/streams/%d/topics/%d/partitions/0/raft.log", s.ID, tp.ID))
			if err != nil {
				t.Fatalf("node %d raft log: %v", id, err)
			}
			if info.Size() > 64<<10 {
				t.Fatalf("node %d raft log is %d bytes after compaction", id, info.Size())
			}
		}
	})
}

// A node away while the metadata group compacts its log past what the
// node has is sent the store whole: its reconcilers see the new state,
// build what it holds, and the node serves it — topics created while it
// was away included. It also restarts from the snapshot in its own log.
func TestClusterMetadataSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newDiskCluster(t, func(cfg *parkway.Config) { cfg.MetadataSnapshotEvery = 5 })
		ctx := context.Background()
		s := mustStream(t, c.nodes[1], "s")
		c.stop(3)
		var topics []parkway.Topic
		for i := range 12 {
			tp, err := c.nodes[1].Admin().CreateTopic(ctx, s, fmt.Sprintf("t%d", i), 1)
			if err != nil {
				t.Fatal(err)
			}
			topics = append(topics, tp)
		}
		if err := c.nodes[2].Admin().DeleteTopic(ctx, topics[0]); err != nil {
			t.Fatal(err)
		}
		last := topics[len(topics)-1]
		want := c.produce(1, last, "m", 3)
		n3 := c.start(3)
		waitFor(t, "node 3 to learn the last topic", func() bool { _, err := n3.Topic(ctxFor(t), s, "t11"); return err == nil })
		if _, err := n3.Topic(ctxFor(t), s, "t0"); err == nil {
			t.Fatal("node 3 still has the topic deleted while it was away")
		}
		waitFor(t, "node 3 to serve the last topic", func() bool { return len(readAll(t, n3, last, 0)) == len(want) })
		c.stop(3)
		n3 = c.start(3)
		if _, err := n3.Topic(ctxFor(t), s, "t11"); err != nil {
			t.Fatal("node 3 restarted without the metadata of its snapshot")
		}
		if got := len(readAll(t, n3, last, 0)); got != len(want) {
			t.Fatalf("node 3 serves %d messages after restarting, want %d", got, len(want))
		}
	})
}

// A replica whose disk refuses partition writes (ENOSPC) cannot apply
// committed entries: it fences the partition and stops applying instead
// of serving a log with a hole, the majority goes on, and once space
// returns the reconciler rebuilds the partition, which restores from its
// raft log and converges.
func TestClusterReplicaDiskFullRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		full := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool {
			return (op.Kind == errorfs.OpWrite || op.Kind == errorfs.OpWriteAt) &&
				strings.Contains(op.Path, "/partitions/") && !strings.HasSuffix(op.Path, "raft.log")
		})
		c := newDiskCluster(t, func(cfg *parkway.Config) {
			if cfg.Cluster.ID == 3 {
				cfg.FS = errorfs.New(cfg.FS, full)
			}
		})
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", 1)
		want := c.produce(1, tp, "a", 5)
		c.converged(tp, want)
		full.Set(true)
		want = append(want, c.produce(1, tp, "b", 10)...) // the majority acks
		synctest.Wait()
		if _, err := c.nodes[3].Poll(context.Background(), tp, 0, parkway.AtOffset(0).Local(), 100); !errors.Is(err, parkway.ErrPartitionFailed) {
			t.Fatalf("a replica that could not apply serves reads: %v", err)
		}
		full.Set(false)
		want = append(want, c.produce(2, tp, "c", 3)...)
		c.converged(tp, want)
	})
}
