package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/transport"
)

// The repair tests run a 3-node cluster whose nodes keep their data on the
// real filesystem, stop a node, damage its files at chosen places (bytes
// flipped in the middle of a sealed and of the last segment, a segment
// deleted, the raft log flipped) and start it again.

// newRealCluster is a diskCluster whose nodes keep their data in
// directories of the real filesystem (dirs[id]).
func newRealCluster(t *testing.T, tweak func(*parkway.Config)) (*diskCluster, map[transport.NodeID]string) {
	base := t.TempDir()
	dirs := map[transport.NodeID]string{}
	c := &diskCluster{t: t, net: transport.NewNetwork(transport.NetworkOptions{}),
		peers: []transport.NodeID{1, 2, 3}, nodes: map[transport.NodeID]*parkway.Node{}}
	c.cfg = func(id transport.NodeID) parkway.Config {
		cfg := parkway.Config{Shards: 1, RequestTimeout: 20 * time.Second, DataDir: dirs[id], SegmentSize: parkway.MinSegmentSize,
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
		dirs[id] = filepath.Join(base, strconv.Itoa(int(id)))
		c.start(id)
	}
	return c, dirs
}

const repairPayload = 1000

func repairPayloadOf(prefix string, i int) string {
	s := fmt.Sprintf("%s%06d-", prefix, i)
	return s + strings.Repeat("y", repairPayload-len(s))
}

// produceBatches produces n messages through node via in batches of 100,
// each acknowledged, and returns their payloads.
func (c *diskCluster) produceBatches(via transport.NodeID, tp parkway.Topic, prefix string, n int) []string {
	c.t.Helper()
	var out []string
	for i := 0; i < n; i += 100 {
		msgs := make([]parkway.Message, min(100, n-i))
		for j := range msgs {
			p := repairPayloadOf(prefix, i+j)
			msgs[j].Payload = []byte(p)
			out = append(out, p)
		}
		if _, err := c.nodes[via].Produce(context.Background(), tp, parkway.PartitionID(0), msgs...); err != nil {
			c.t.Fatalf("produce %s%d via node %d: %v", prefix, i, via, err)
		}
	}
	return out
}

// leaderLog reads partition 0 through node n as a client does (leader
// reads, forwarded and retried), checking offsets are dense from 0.
func leaderLog(n *parkway.Node, tp parkway.Topic) ([]string, error) {
	var out []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := n.Poll(ctx, tp, 0, parkway.AtOffset(uint64(len(out))), 1000)
		cancel()
		if err != nil {
			return nil, err
		}
		if len(b.Messages) == 0 {
			return out, nil
		}
		for _, m := range b.Messages {
			if m.Offset != uint64(len(out)) {
				return nil, fmt.Errorf("offset %d where %d was due", m.Offset, len(out))
			}
			out = append(out, string(m.Payload))
		}
	}
}

// partitionDir is node dir's directory of partition 0 of tp.
func partitionDir(dir string, s parkway.Stream, tp parkway.Topic) string {
	return filepath.Join(dir, "streams", strconv.Itoa(int(s.ID)), "topics", strconv.Itoa(int(tp.ID)), "partitions", "0")
}

// segmentFiles lists the segment logs in a partition directory, oldest
// first.
func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range names {
		if base, ok := strings.CutSuffix(e.Name(), ".log"); ok && len(base) == 20 {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out
}

// TestBehaviour28ClusterRepairsDamagedReplica: a replica whose partition
// log is damaged — bytes flipped in the middle of a sealed segment and of
// its last segment, a sealed segment deleted — is not served around the
// damage when its node restarts: it reports the damage (metric), sets its
// copy aside and is brought back by the group, while the group serves
// every acknowledged message. It ends with the others' data, at the same
// offsets, with nothing skipped; a produce after it gets a new offset. The
// damaged node may be a follower or the group's leader when it stopped.
func TestBehaviour28ClusterRepairsDamagedReplica(t *testing.T) {
	for _, role := range []string{"follower", "leader"} {
		t.Run(role, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, dirs := newRealCluster(t, func(cfg *parkway.Config) {
					cfg.Cluster.CompactEntries = 8 // the repair fetches most of the log, not the raft log
				})
				s := mustStream(t, c.nodes[1], "s")
				tp := mustTopic(t, c.nodes[1], s, "t", 1)
				want := c.produceBatches(1, tp, "a", 4500)
				c.converged(tp, want)
				leader, err := c.nodes[1].Cluster().Leader(context.Background(), tp, 0)
				if err != nil || leader == 0 {
					t.Fatalf("leader: %d, %v", leader, err)
				}
				bad := leader
				if role == "follower" {
					bad = others(leader)[0]
				}
				c.stop(bad)
				pdir := partitionDir(dirs[bad], s, tp)
				segs := segmentFiles(t, pdir)
				if len(segs) < 4 {
					t.Fatalf("node %d has segments %v, want at least four", bad, segs)
				}
				flipAt(t, segs[0], fileLen(t, segs[0])/2)
				if err := os.Remove(segs[1]); err != nil {
					t.Fatal(err)
				}
				tail := segs[len(segs)-1]
				flipAt(t, tail, fileLen(t, tail)/2)

				// The group goes on without it.
				via := others(bad)[0]
				want = append(want, c.produceBatches(via, tp, "b", 300)...)
				n := c.start(bad)
				reg := registry(t, n)
				want = append(want, c.produceBatches(bad, tp, "c", 300)...)
				for _, id := range c.peers {
					got, err := leaderLog(c.nodes[id], tp)
					if err != nil || !slices.Equal(got, want) {
						t.Fatalf("reading through node %d: %d messages, %v; want the %d acknowledged", id, len(got), err, len(want))
					}
				}
				c.converged(tp, want)
				if v := metricValue(t, reg, "parkway_replica_repairs_total"); v != 1 {
					t.Fatalf("parkway_replica_repairs_total = %v on the damaged node, want 1", v)
				}
				if _, err := os.Stat(filepath.Join(pdir, "damaged-1", filepath.Base(tail))); err != nil {
					t.Fatalf("the damaged copy was not set aside: %v", err)
				}
				// A restart keeps the repaired copy, and new offsets follow.
				c.stop(bad)
				n = c.start(bad)
				ack, err := n.Produce(context.Background(), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")})
				if err != nil || ack.FirstOffset != uint64(len(want)) {
					t.Fatalf("produce after the repair: %+v, %v; want offset %d", ack, err, len(want))
				}
				c.converged(tp, append(want, "after"))
			})
		})
	}
}

// TestBehaviour28ClusterRepairsDamageFoundByARead: damage that opening a
// replica does not look for (a byte flipped in a sealed segment, without
// VerifyOnOpen) is found by the first read that reaches it, here on the
// group's leader while it runs: the read is not answered with the damage
// but served by the group, the leader hands leadership over, and its copy
// is set aside and fetched again.
func TestBehaviour28ClusterRepairsDamageFoundByARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, dirs := newRealCluster(t, func(cfg *parkway.Config) { cfg.Cluster.CompactEntries = 8 })
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", 1)
		want := c.produceBatches(1, tp, "a", 2500)
		c.converged(tp, want)
		leader, err := c.nodes[1].Cluster().Leader(context.Background(), tp, 0)
		if err != nil || leader == 0 {
			t.Fatalf("leader: %d, %v", leader, err)
		}
		segs := segmentFiles(t, partitionDir(dirs[leader], s, tp))
		flipAt(t, segs[0], fileLen(t, segs[0])/2)
		reg := registry(t, c.nodes[leader])
		if got, err := leaderLog(c.nodes[leader], tp); err != nil || !slices.Equal(got, want) {
			t.Fatalf("reading through the damaged leader: %d messages, %v; want the %d acknowledged", len(got), err, len(want))
		}
		waitFor(t, "the damaged replica's repair", func() bool {
			return metricValue(t, reg, "parkway_replica_repairs_total") == 1
		})
		c.converged(tp, want)
		want = append(want, c.produceBatches(leader, tp, "b", 100)...)
		c.converged(tp, want)
	})
}

// TestBehaviour28ClusterOneReplicaServedAroundDamage: a partition with a
// single replica in a cluster has no peer to be repaired from: its damage
// is handled as on a single node (read around, writes refused with the
// *CorruptError), never set aside.
func TestBehaviour28ClusterOneReplicaServedAroundDamage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, dirs := newRealCluster(t, nil)
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", 1, parkway.WithReplicas(1))
		want := c.produceBatches(1, tp, "a", 1500)
		holder, err := c.nodes[1].Cluster().Leader(context.Background(), tp, 0)
		if err != nil || holder == 0 {
			t.Fatalf("leader: %d, %v", holder, err)
		}
		c.stop(holder)
		pdir := partitionDir(dirs[holder], s, tp)
		segs := segmentFiles(t, pdir)
		tail := segs[len(segs)-1]
		flipAt(t, tail, fileLen(t, tail)/2)
		n := c.start(holder)
		reg := registry(t, n)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("x")})
		var ce *partition.CorruptError
		if !errors.As(err, &ce) || ce.Path != tail {
			t.Fatalf("produce to the one replica with a damaged tail: %v, want the *partition.CorruptError for %s", err, tail)
		}
		b, err := n.Poll(ctx, tp, 0, parkway.AtOffset(0), 10)
		if err != nil || len(b.Messages) != 10 || string(b.Messages[0].Payload) != want[0] {
			t.Fatalf("poll below the damage: %d messages, %v", len(b.Messages), err)
		}
		if v := metricValue(t, reg, "parkway_replica_repairs_total"); v != 0 {
			t.Fatalf("parkway_replica_repairs_total = %v for a partition with no other replica", v)
		}
		if _, err := os.Stat(filepath.Join(pdir, "damaged-1")); !os.IsNotExist(err) {
			t.Fatalf("a single replica's copy was set aside: %v", err)
		}
	})
}

// TestBehaviour28ClusterRepairsDamagedIncarnationFile: a replica whose
// incarnation file is damaged (a byte flipped: the record fails its
// check) cannot say which incarnation its directory holds, but its raft
// log can: it is tagged with the incarnation it was created for. When
// that tag names the incarnation the metadata names, the copy is set
// aside with the damaged file (kept as evidence), the file is rewritten
// from the metadata, the raft log is kept, and the group brings the copy
// back. A raft log that does not prove the incarnation — tagged with
// another one, or damaged as well — is never kept under this one (it may
// be another group's term, vote and entries), nor discarded under the
// replica's raft id (a member that forgets its vote can vote twice): the
// replica is re-seeded under a new raft id, as one whose raft log is
// damaged, the old copy set aside whole. Left unrepaired, the group ran
// one voter short for good and its leader's frames to the old id parked
// on the node for ever (cluster seed 20382: the incarnation file and the
// raft log of one directory flipped).
func TestBehaviour28ClusterRepairsDamagedIncarnationFile(t *testing.T) {
	for _, tc := range []string{"own raft log", "another incarnation's raft log", "damaged raft log"} {
		t.Run(tc, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, dirs := newRealCluster(t, func(cfg *parkway.Config) { cfg.Cluster.CompactEntries = 8 })
				s := mustStream(t, c.nodes[1], "s")
				tp := mustTopic(t, c.nodes[1], s, "t", 1)
				other := mustTopic(t, c.nodes[1], s, "u", 1) // another incarnation
				want := c.produceBatches(1, tp, "a", 1500)
				c.produce(1, other, "o", 3)
				c.converged(tp, want)
				ctx := context.Background()
				leader := c.leader(tp)
				bad := others(leader)[0]
				c.stop(bad)
				pdir := partitionDir(dirs[bad], s, tp)
				inc := filepath.Join(pdir, "incarnation")
				flipAt(t, inc, 0)
				damagedInc, err := os.ReadFile(inc)
				if err != nil {
					t.Fatal(err)
				}
				raftLog := filepath.Join(pdir, "raft.log")
				switch tc {
				case "another incarnation's raft log":
					b, err := os.ReadFile(filepath.Join(partitionDir(dirs[bad], s, other), "raft.log"))
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(raftLog, b, 0o644); err != nil {
						t.Fatal(err)
					}
				case "damaged raft log":
					flipAt(t, raftLog, fileLen(t, raftLog)/2)
				}
				n := c.start(bad)
				reg := registry(t, n)
				if tc != "own raft log" {
					info := waitReseeded(t, ctx, c.nodes[leader], tp, bad)
					if id, _ := info.ReplicaOf(uint64(bad)); id == uint64(bad) || len(info.Replicas) != 3 {
						t.Fatalf("after the re-seed: replicas %#x; want node %d's replica of a later generation among 3", info.Replicas, bad)
					}
					c.converged(tp, want)
					if b, err := os.ReadFile(filepath.Join(pdir, "damaged-1", "incarnation")); err != nil || !slices.Equal(b, damagedInc) {
						t.Fatalf("damaged incarnation file set aside as %q, %v; want %q", b, err, damagedInc)
					}
					// Refused as damaged by its sync mark (another
					// incarnation's log under this one's mark, or a flip),
					// the log was recorded refused at once, in
					// raft-refused, which went aside with the copy.
					if _, err := os.Stat(filepath.Join(pdir, "damaged-1", "raft-refused", "raft.log")); err != nil {
						t.Fatalf("the old copy's refused raft log not set aside: %v", err)
					}
				}
				want = append(want, c.produceBatches(bad, tp, "b", 100)...)
				for _, id := range c.peers {
					got, err := leaderLog(c.nodes[id], tp)
					if err != nil || !slices.Equal(got, want) {
						t.Fatalf("reading through node %d: %d messages, %v; want the %d acknowledged", id, len(got), err, len(want))
					}
				}
				c.converged(tp, want)
				if v := metricValue(t, reg, "parkway_replica_repairs_total"); v != 1 {
					t.Fatalf("parkway_replica_repairs_total = %v on the damaged node, want 1", v)
				}
				if b, err := os.ReadFile(filepath.Join(pdir, "damaged-1", "incarnation")); err != nil || !slices.Equal(b, damagedInc) {
					t.Fatalf("damaged incarnation file set aside as %q, %v; want %q", b, err, damagedInc)
				}
				// A restart keeps the repaired copy under a whole file.
				c.stop(bad)
				n = c.start(bad)
				ack, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")})
				if err != nil || ack.FirstOffset != uint64(len(want)) {
					t.Fatalf("produce after the repair: %+v, %v; want offset %d", ack, err, len(want))
				}
				c.converged(tp, append(want, "after"))
			})
		})
	}
}

// TestBehaviour28ClusterRepairsDamagedConsumerOffset: a named consumer's
// offset is per-partition state every replica holds. A replica whose
// offset file is damaged (a byte flipped in each slot: they fail their
// checksums) is not
// served with the offset reset to 0, nor with the damage: the copy is set
// aside and rebuilt from its peers, and its consumer offset comes back
// from the group's replicated state. A local poll at the consumer on the
// repaired node starts where the consumer stood.
func TestBehaviour28ClusterRepairsDamagedConsumerOffset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, dirs := newRealCluster(t, func(cfg *parkway.Config) { cfg.Cluster.CompactEntries = 8 })
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", 1)
		want := c.produceBatches(1, tp, "a", 500)
		ctx := context.Background()
		const at = 321
		if err := c.nodes[1].Admin().StoreOffset(ctx, tp, 0, "reader", at); err != nil {
			t.Fatal(err)
		}
		want = append(want, c.produceBatches(1, tp, "b", 100)...) // the store is in the snapshot, not the tail
		c.converged(tp, want)
		leader, err := c.nodes[1].Cluster().Leader(ctx, tp, 0)
		if err != nil || leader == 0 {
			t.Fatalf("leader: %d, %v", leader, err)
		}
		bad := others(leader)[0]
		c.stop(bad)
		file := filepath.Join(partitionDir(dirs[bad], s, tp), "offsets", "consumers", "reader")
		flipConsumerOffset(t, file)
		n := c.start(bad)
		reg := registry(t, n)
		waitFor(t, "the damaged replica's repair", func() bool {
			return metricValue(t, reg, "parkway_replica_repairs_total") == 1
		})
		c.converged(tp, want)
		var b parkway.Batch
		waitFor(t, "a local poll at the consumer on the repaired node", func() bool {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			b, err = n.Poll(pctx, tp, 0, parkway.AtConsumer("reader").Local(), 1)
			return err == nil && len(b.Messages) == 1
		})
		if b.Messages[0].Offset != at || string(b.Messages[0].Payload) != want[at] {
			t.Fatalf("local poll at the consumer on the repaired node starts at offset %d, want %d", b.Messages[0].Offset, at)
		}
		off, ok, err := n.Admin().ConsumerOffset(ctx, tp, 0, "reader")
		if err != nil || !ok || off != at {
			t.Fatalf("consumer offset through the repaired node: %d, %v, %v; want %d", off, ok, err, at)
		}
	})
}

// TestBehaviour28ClusterCutTailRefetched: the last segment of a replica
// cut short while its node is down (half of it gone, whole records with
// it) looks like a torn tail to the partition's recovery, but in a
// cluster the replica's raft state knows how far its log reached: the
// replica fetches the rest from its peers, so nothing acknowledged is
// lost and no offset is handed out again, whether it was a follower or
// the group's leader.
func TestBehaviour28ClusterCutTailRefetched(t *testing.T) {
	for _, role := range []string{"follower", "leader"} {
		t.Run(role, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, dirs := newRealCluster(t, func(cfg *parkway.Config) { cfg.Cluster.CompactEntries = 8 })
				s := mustStream(t, c.nodes[1], "s")
				tp := mustTopic(t, c.nodes[1], s, "t", 1)
				want := c.produceBatches(1, tp, "a", 1500)
				c.converged(tp, want)
				leader, err := c.nodes[1].Cluster().Leader(context.Background(), tp, 0)
				if err != nil || leader == 0 {
					t.Fatalf("leader: %d, %v", leader, err)
				}
				bad := leader
				if role == "follower" {
					bad = others(leader)[0]
				}
				c.stop(bad)
				segs := segmentFiles(t, partitionDir(dirs[bad], s, tp))
				tail := segs[len(segs)-1]
				if err := os.Truncate(tail, fileLen(t, tail)/2); err != nil {
					t.Fatal(err)
				}
				n := c.start(bad)
				c.converged(tp, want)
				ack, err := n.Produce(context.Background(), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")})
				if err != nil || ack.FirstOffset != uint64(len(want)) {
					t.Fatalf("produce after the cut: %+v, %v; want offset %d", ack, err, len(want))
				}
				want = append(want, "after")
				for _, id := range c.peers {
					got, err := leaderLog(c.nodes[id], tp)
					if err != nil || !slices.Equal(got, want) {
						t.Fatalf("reading through node %d: %d messages, %v; want the %d acknowledged", id, len(got), err, len(want))
					}
				}
				c.converged(tp, want)
			})
		})
	}
}
