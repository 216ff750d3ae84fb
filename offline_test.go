package parkway_test

import (
	"testing"
	"testing/synctest"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
)

// TestReadMetadataGroupMatchesTheNode: the store rebuilt offline from a
// cluster member's metadata raft log, without changing it, is the store
// the member had.
func TestReadMetadataGroupMatchesTheNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := vfs.NewMem()
		net := transport.NewNetwork(transport.NetworkOptions{})
		defer net.Close()
		n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: "/data", FS: mem,
			Cluster: &parkway.ClusterConfig{ID: 1, Peers: []transport.NodeID{1}, Bus: net.Endpoint(1)}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t)
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 3)
		mustTopic(t, n, s, "u", 1)
		if err := n.Admin().CreateGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		if err := n.Admin().DeleteTopic(ctx, tp); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		log := "/data/metadata-raft/raft.log"
		before, _ := vfs.ReadFile(mem, log)
		cfg := metadata.Config{Shards: 2, Assign: router.Assign}
		got, err := host.ReadMetadataGroup(vfs.ReadOnly(mem), log, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if after, _ := vfs.ReadFile(mem, log); string(after) != string(before) {
			t.Fatal("ReadMetadataGroup changed the raft log")
		}
		// The node as a restart rebuilds it, for comparison.
		n2, err := parkway.Open(parkway.Config{Shards: 2, DataDir: "/data", FS: mem,
			Cluster: &parkway.ClusterConfig{ID: 1, Peers: []transport.NodeID{1}, Bus: net.Endpoint(1)}})
		if err != nil {
			t.Fatal(err)
		}
		streams, err := n2.Admin().Streams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(streams) != 1 || len(got.Streams()) != 1 || got.Streams()[0].Name != streams[0].Name {
			t.Fatalf("offline streams %+v, node %+v", got.Streams(), streams)
		}
		topics := got.Topics(got.Streams()[0].ID)
		if len(topics) != 1 || topics[0].Name != "u" {
			t.Fatalf("offline topics %+v, want only u", topics)
		}
		synctest.Wait()
		n2.Close()
	})
}
