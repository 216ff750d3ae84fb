package parkway_test

import (
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// clusterNamed is three in-memory nodes of a cluster called id ("" for
// none), on a network of their own.
func clusterNamed(t *testing.T, id string) []*parkway.Node {
	t.Helper()
	net := transport.NewNetwork(transport.NetworkOptions{})
	t.Cleanup(func() { _ = net.Close() })
	peers := []transport.NodeID{1, 2, 3}
	var nodes []*parkway.Node
	for _, p := range peers {
		nodes = append(nodes, open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
			Cluster: &parkway.ClusterConfig{ID: p, Peers: peers, Bus: net.Endpoint(p), ClusterID: id}}))
	}
	return nodes
}

// TestHandleFromElsewhereRefused (issue 27): a handle names its origin —
// the cluster, or a single node's data directory (or, in memory, the
// node) — and its names, so a handle obtained on one node or cluster and
// used on another whose stream and topic have the same ids and revisions
// is refused with ErrStaleHandle: it neither produces into nor reads nor
// deletes the other's topic. Before, only ids and revision were checked,
// and such a handle acted on the other topic.
func TestHandleFromElsewhereRefused(t *testing.T) {
	cases := []struct {
		name       string
		here, away func(t *testing.T) *parkway.Node
		awayTopic  string // the other side's topic name
	}{
		{name: "single nodes in memory",
			here: func(t *testing.T) *parkway.Node { return open(t, parkway.Config{Shards: 2}) },
			away: func(t *testing.T) *parkway.Node { return open(t, parkway.Config{Shards: 2}) }},
		{name: "single nodes on data directories",
			here: func(t *testing.T) *parkway.Node { return open(t, parkway.Config{Shards: 2, DataDir: t.TempDir()}) },
			away: func(t *testing.T) *parkway.Node { return open(t, parkway.Config{Shards: 2, DataDir: t.TempDir()}) }},
		{name: "clusters with ids",
			here: func(t *testing.T) *parkway.Node { return clusterNamed(t, "east")[0] },
			away: func(t *testing.T) *parkway.Node { return clusterNamed(t, "west")[1] }},
		// Two clusters without an id are told apart by names only: here
		// the topics' names differ (the streams' do not, so a stream
		// handle passes for the other's).
		{name: "clusters without ids, other topic name",
			here:      func(t *testing.T) *parkway.Node { return clusterNamed(t, "")[0] },
			away:      func(t *testing.T) *parkway.Node { return clusterNamed(t, "")[1] },
			awayTopic: "other"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				here, away := c.here(t), c.away(t)
				ctx := ctxFor(t)
				hs := mustStream(t, here, "s")
				ht := mustTopic(t, here, hs, "t", 1)
				as := mustStream(t, away, "s")
				tname := "t"
				if c.awayTopic != "" {
					tname = c.awayTopic
				}
				at := mustTopic(t, away, as, tname, 1)
				if ht.ID != at.ID || ht.Revision != at.Revision || ht.Stream.ID != as.ID || hs.Revision != as.Revision {
					t.Fatalf("handles %v and %v differ in ids or revisions: the test needs a collision", ht, at)
				}
				mustProduce(t, away, at, parkway.PartitionID(0), "theirs")

				staleRefused(t, away, ht)
				if c.awayTopic == "" {
					if err := away.Admin().DeleteStream(ctx, hs); !errors.Is(err, parkway.ErrStaleHandle) {
						t.Fatalf("DeleteStream with %v on the other side: %v, want ErrStaleHandle", hs, err)
					}
				}
				// The other side's topic is untouched. Read through the
				// leader (readAllFrom): in a cluster the node at hand may
				// not have applied the write yet, so a local read could
				// come back short.
				if got := payloads(readAllFrom(t, away, at, 0, 0)); !slices.Equal(got, []string{"theirs@0"}) {
					t.Fatalf("the other side's topic holds %v, want [theirs@0]", got)
				}
				// Its own handles still work where they came from.
				mustProduce(t, here, ht, parkway.PartitionID(0), "ours")
				if got := payloads(readAllFrom(t, here, ht, 0, 0)); !slices.Equal(got, []string{"ours@0"}) {
					t.Fatalf("this side's topic holds %v, want [ours@0]", got)
				}
			})
		})
	}
}

// TestHandleOutlivesReopen: a single node's handles name its data
// directory, so they stay valid across a Close and an Open of the same
// directory.
func TestHandleOutlivesReopen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1)
		mustProduce(t, n, tp, parkway.PartitionID(0), "before")
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		n = open(t, parkway.Config{Shards: 2, DataDir: dir})
		mustProduce(t, n, tp, parkway.PartitionID(0), "after")
		expectLog(t, n, tp, 0, "before", "after")
	})
}
