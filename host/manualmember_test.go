package host_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// A manual cluster adds a node with ProposeAddNode through a follower:
// the change commits, every member — the joiner too, from the snapshot the
// leader sends it — names the node in its metadata and holds it as a
// metadata voter, and proposing the same change again under the same key
// changes nothing. The driver does the stepping a started engine's
// AddNode waits on.
// joiningCluster opens founders 1..3 and a fourth node with Cluster.Join
// as manual engines on one network; step delivers every message and
// ticks every metadata member once per round, the clock one raft tick
// further each round.
func joiningCluster(t *testing.T) (engines []*host.Engine, step func(rounds int)) {
	t.Helper()
	clk := clock.NewManual(t0)
	net := transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true})
	t.Cleanup(func() { _ = net.Close() })
	founders := []transport.NodeID{1, 2, 3}
	open := func(id transport.NodeID, peers []transport.NodeID, join bool) {
		e, err := host.New(host.Config{Shards: 1, Manual: true, Clock: clk,
			Cluster: &host.Cluster{ID: id, Peers: peers, Join: join, Bus: net.Endpoint(id)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines = append(engines, e)
	}
	for _, id := range founders {
		open(id, founders, false)
	}
	open(4, []transport.NodeID{1, 2, 3, 4}, true)
	step = func(rounds int) {
		t.Helper()
		for range rounds {
			for i, e := range engines {
				if err := e.HandleMetadata(); err != nil {
					t.Fatal(err)
				}
				ep := net.Endpoint(transport.NodeID(i + 1))
				for len(ep.Recv()) > 0 {
					if err := e.Deliver(<-ep.Recv()); err != nil {
						t.Fatal(err)
					}
				}
				if err := e.TickMetadata(); err != nil {
					t.Fatal(err)
				}
			}
			clk.Advance(10 * time.Millisecond)
		}
	}
	return engines, step
}

func TestManualClusterAddsANode(t *testing.T) {
	engines, step := joiningCluster(t)
	step(5)
	if _, err := engines[0].ProposeMetadata(engines[0].NewMetadataKey(), metadata.CreateStream{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	step(5)

	if err := engines[1].ProposeAddNode(engines[1].NewMetadataKey(), 0); !errors.Is(err, metadata.ErrInvalidNode) {
		t.Fatalf("adding node 0: %v, want ErrInvalidNode", err)
	}
	key := engines[1].NewMetadataKey()
	if err := engines[1].ProposeAddNode(key, 4); err != nil {
		t.Fatal(err)
	}
	step(50)
	want := []uint64{1, 2, 3, 4}
	check := func() {
		t.Helper()
		for i, e := range engines {
			if got := e.Meta().Nodes(); !slices.Equal(got, want) {
				t.Fatalf("node %d's metadata names nodes %v, want %v", i+1, got, want)
			}
			if got := e.MetadataStatus().Voters; !slices.Equal(got, want) {
				t.Fatalf("node %d's metadata group has voters %v, want %v", i+1, got, want)
			}
			if _, ok := e.Meta().StreamByName("orders"); !ok {
				t.Fatalf("node %d does not know stream orders, created before the join", i+1)
			}
		}
	}
	check()
	rev := engines[0].Meta().Revision()
	if err := engines[2].ProposeAddNode(key, 4); err != nil {
		t.Fatal(err)
	}
	step(20)
	check()
	if got := engines[0].Meta().Revision(); got != rev {
		t.Fatalf("the same change proposed again moved the revision from %d to %d", rev, got)
	}
}

// ProposeAddNode steps a manual engine's metadata member: a started
// engine, whose member belongs to its own goroutine, refuses it.
func TestProposeAddNodeNeedsAManualEngine(t *testing.T) {
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	e, err := host.New(host.Config{Shards: 1,
		Cluster: &host.Cluster{ID: 1, Peers: []transport.NodeID{1}, Bus: net.Endpoint(1)}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	if err := e.ProposeAddNode(e.NewMetadataKey(), 2); err == nil {
		t.Fatal("a started engine took ProposeAddNode")
	}
}

// A manual cluster removes a node with DrainNode, then ProposeRemoveNode
// through another member: before the drain the removal is refused as
// busy and nothing is proposed, a node cannot remove itself, and once the
// change commits every remaining member names only the remaining nodes in
// its metadata and holds only them as metadata voters.
func TestManualClusterRemovesANode(t *testing.T) {
	engines, step := joiningCluster(t)
	step(5)
	if err := engines[0].ProposeAddNode(engines[0].NewMetadataKey(), 4); err != nil {
		t.Fatal(err)
	}
	step(50)
	if got := engines[0].Meta().Nodes(); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("after the addition node 1 names nodes %v", got)
	}
	if err := engines[0].ProposeRemoveNode(engines[0].NewMetadataKey(), 2); !errors.Is(err, metadata.ErrNodeBusy) {
		t.Fatalf("removing an undrained node: %v, want ErrNodeBusy", err)
	}
	if err := engines[1].ProposeRemoveNode(engines[1].NewMetadataKey(), 2); !errors.Is(err, metadata.ErrInvalidNode) {
		t.Fatalf("a node removing itself: %v, want ErrInvalidNode", err)
	}
	step(20)
	if got := engines[0].MetadataStatus().Voters; !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("a refused removal changed the voters to %v", got)
	}
	if _, err := engines[0].ProposeMetadata(engines[0].NewMetadataKey(), metadata.DrainNode{Node: 2}); err != nil {
		t.Fatal(err)
	}
	step(20)
	key := engines[2].NewMetadataKey()
	if err := engines[2].ProposeRemoveNode(key, 2); err != nil {
		t.Fatal(err)
	}
	step(50)
	want := []uint64{1, 3, 4}
	for _, i := range []int{0, 2, 3} {
		e := engines[i]
		if got := e.Meta().Nodes(); !slices.Equal(got, want) {
			t.Fatalf("node %d's metadata names nodes %v, want %v", i+1, got, want)
		}
		if got := e.MetadataStatus().Voters; !slices.Equal(got, want) {
			t.Fatalf("node %d's metadata group has voters %v, want %v", i+1, got, want)
		}
		if d := e.Meta().Draining(); len(d) != 0 {
			t.Fatalf("node %d still lists draining nodes %v", i+1, d)
		}
	}
}
