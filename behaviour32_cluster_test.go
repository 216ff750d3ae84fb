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
// creates and produces to a first topic (what a cluster pays once), then
// counts the fsyncs and directory entries created on every node from
// the call that creates a second topic, replicated on all three, to the
// acknowledgement of its first produce (a quorum holds it).
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
	fsys.reset()
	fsys.on.Store(true)
	tp, err := n.Admin().CreateTopic(ctx, s, "new", 1, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("first")}); err != nil {
		t.Fatal(err)
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
// created or synced. Counted through the vfs seam on all three nodes,
// from CreateTopic to the first produce's ack, under FsyncInterval and
// FsyncAlways (which syncs the raft log's directories first).
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
