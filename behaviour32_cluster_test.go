package parkway_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
)

// clusterCreateProduceCost opens three nodes over the in-memory network,
// each on a data directory of its own through one counting filesystem,
// creates and produces to a first topic (what a cluster pays once, held
// by every node before the count starts), then counts the fsyncs and
// directory entries created on every node from the call that creates a
// second topic, replicated on all three, past the acknowledgement of its
// first produce (a quorum holds it) until every node's groups of both
// topics have quiesced.
//
// The count ends at a state, not at a moment: what the replicas do
// after the ack (the followers applying the entry, each group's quiesce,
// which under FsyncAlways syncs what its partition wrote) is in it
// whatever the machine's load. Ended when Produce returned, the count
// raced with that work: a quiesce that materialised the replicas' files
// was counted on a loaded machine and missed on an idle one. So this is
// an upper bound on the path to the first ack, and what it counts is
// what an idle new replica costs its node.
//
// Only what concerns the new topic is returned: operations on paths in
// its directory (every node's) and fsyncs of the directories above it.
// Other operations in the same interval are another topic's (the warm
// one's partition quiescing) or the node's own (its identity file).
func clusterCreateProduceCost(t *testing.T, policy parkway.FsyncPolicy) (syncs, creates []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fsys := &countingFS{FS: vfs.Default}
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer func() { _ = net.Close() }()
	peers := []transport.NodeID{1, 2, 3}
	var nodes []*parkway.Node
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: t.TempDir(), FS: fsys,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := n.Close(); err != nil {
				t.Error(err)
			}
		}()
		nodes = append(nodes, n)
	}
	n := nodes[0]
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	opt := parkway.WithFsync(policy, time.Hour)
	warm, err := n.Admin().CreateTopic(ctx, s, "warm", 1, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Produce(ctx, warm, parkway.PartitionID(0), parkway.Message{Payload: []byte("warm")}); err != nil {
		t.Fatal(err)
	}
	// Every node holds the warm replica (its build created the stream's
	// topics/ directory) and the warm message before the count starts: a
	// node outside the warm produce's quorum may still be building it.
	for i, node := range nodes {
		pollUntil(ctx, t, fmt.Sprintf("node %d to hold the warm message", i+1), func() bool {
			b, err := node.Poll(ctx, warm, 0, parkway.AtOffset(0).Local(), 1)
			return err == nil && len(b.Messages) == 1
		})
	}
	fsys.reset()
	fsys.on.Store(true)
	tp, err := n.Admin().CreateTopic(ctx, s, "new", 1, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	// Every node holds the first message and has quiesced since: the
	// entry that carried it woke the group (a node that was not in the
	// ack's quorum may still be asleep from before the produce), and its
	// quiesce runs the FsyncAlways sync (shard.syncQuiesced) before
	// Inspect can report it.
	for i, node := range nodes {
		pollUntil(ctx, t, fmt.Sprintf("node %d to hold the first message, its groups quiesced", i+1), func() bool {
			b, err := node.Poll(ctx, tp, 0, parkway.AtOffset(0).Local(), 1)
			return err == nil && len(b.Messages) == 1 && parkway.QuiescedReplicas(node) == 2
		})
	}
	fsys.on.Store(false)
	mine := func(ops []string) []string {
		var out []string
		for _, op := range ops {
			_, path, _ := strings.Cut(op, " ")
			path = filepath.ToSlash(path)
			topic := fmt.Sprintf("/streams/%d/topics/%d", s.ID, tp.ID)
			if strings.Contains(path+"/", topic+"/") || strings.HasSuffix(path, fmt.Sprintf("/streams/%d/topics", s.ID)) {
				out = append(out, op)
			}
		}
		return out
	}
	syncs, creates = fsys.counts()
	return mine(syncs), mine(creates)
}

// DESIGN behaviour 32 in a cluster: a new replica costs its node no file
// of the partition's own on the path to the first acknowledgement — its
// raft log, which holds every entry since its last snapshot, is the one
// file it creates (with the log's sync mark), in the directories that
// lead to it; no segment, no offsets directory, no incarnation file is
// created or synced, on the path to the ack or after it while the
// replica idles. Counted through the vfs seam on all three nodes, from
// CreateTopic until every group has quiesced after the first produce's
// ack, under FsyncInterval and FsyncAlways (which syncs the raft log's
// directories first, and at a quiesce what a partition wrote to files of
// its own: none for a replica still deferred).
func TestBehaviour32ClusterReplicaCostsOnlyItsRaftLog(t *testing.T) {
	for _, policy := range []parkway.FsyncPolicy{parkway.FsyncInterval, parkway.FsyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			syncs, creates := clusterCreateProduceCost(t, policy)
			t.Logf("%d fsyncs, %d entries created over three nodes", len(syncs), len(creates))
			var bad []string
			for _, op := range append(syncs, creates...) {
				kind, path, _ := strings.Cut(op, " ")
				if !raftLogPath(kind, path) {
					bad = append(bad, op)
				}
			}
			if len(bad) > 0 {
				t.Errorf("create + first ack touched what is neither a raft log nor a directory leading to one:\n  %s\nall of it:\n%s",
					strings.Join(bad, "\n  "), describeOps(syncs, creates))
			}
			// Per replica: at most the topic's directory, partitions/,
			// the partition's directory, the raft log, its mark's
			// temporary file and the mark itself.
			if len(creates) > 3*6 {
				t.Errorf("%d entries created over three replicas, want at most 18:\n%s", len(creates), describeOps(syncs, creates))
			}
		})
	}
}

// raftLogPath reports whether a counted operation (kind "file", "dir" or
// "rename", see countingFS) is on a raft log (a partition's or the
// metadata group's), its sync mark, or a directory on the way to a
// partition's raft log.
func raftLogPath(kind, path string) bool {
	base := filepath.Base(path)
	switch {
	case kind == "dir":
		// streams/<s>/topics/<t>/partitions/<p> and the directories above.
		parts := strings.Split(filepath.ToSlash(path), "/")
		for i := len(parts) - 1; i >= 0; i-- {
			if parts[i] == "streams" {
				rest := parts[i+1:]
				return len(rest) <= 5 && (len(rest) < 2 || rest[1] == "topics") && (len(rest) < 4 || rest[3] == "partitions")
			}
		}
		return false
	default:
		return base == "raft.log" || base == "raft.log.mark" || base == ".raft.log.mark.tmp"
	}
}
