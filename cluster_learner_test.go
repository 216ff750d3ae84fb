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
	"github.com/parkway-io/parkway/transport"
)

// learnerOf reports node id's membership as via sees it: whether it is a
// member, and whether a learner of the metadata group.
func learnerOf(t *testing.T, via *parkway.Node, id transport.NodeID) (member, learner bool) {
	t.Helper()
	st, err := via.Cluster().State(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Members, func(m parkway.MemberState) bool { return m.ID == id })
	if i < 0 {
		return false, false
	}
	return true, st.Members[i].Learner
}

// joinCutOff opens node 4 with ClusterConfig.Join on net, cut off from
// nodes 1..3 both ways, and adds it through node 1 with a bounded
// context: it stays a learner, and AddNode fails with ErrNotPromoted.
func joinCutOff(t *testing.T, net *transport.Network, nodes map[transport.NodeID]*parkway.Node) {
	t.Helper()
	for id := range transport.NodeID(3) {
		net.Disconnect(4, id+1)
		net.Disconnect(id+1, 4)
	}
	nodes[4] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
		Cluster: &parkway.ClusterConfig{ID: 4, Peers: []transport.NodeID{1, 2, 3, 4}, Join: true, Bus: net.Endpoint(4)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := nodes[1].Cluster().AddNode(ctx, 4)
	cancel()
	if !errors.Is(err, parkway.ErrNotPromoted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AddNode of a node cut off: %v, want ErrNotPromoted and the deadline", err)
	}
	if member, learner := learnerOf(t, nodes[1], 4); !member || !learner {
		t.Fatalf("after AddNode timed out, node 4: member %v, learner %v; want a learner", member, learner)
	}
}

// Behaviour 31 through the public API: a node that AddNode cannot bring
// up to date stays a learner of the metadata group (AddNode fails with
// ErrNotPromoted when its context ends), so the three founders still
// commit metadata with one of them down — four voters, one of which
// cannot vote yet, would need three of the two that work. Reachable
// again, the node is promoted, and AddNode called again returns.
func TestClusterAddNodeIsLearnerUntilCaughtUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := nodesCluster(t, 3)
		mustStream(t, nodes[1], "before")
		joinCutOff(t, net, nodes)

		if err := nodes[3].Close(); err != nil {
			t.Fatal(err)
		}
		delete(nodes, 3)
		if _, err := nodes[1].Admin().CreateStream(ctxFor(t), "during"); err != nil {
			t.Fatalf("a stream created with node 3 down and node 4 cut off: %v", err)
		}

		for _, id := range []transport.NodeID{1, 2} {
			net.Connect(4, id)
			net.Connect(id, 4)
		}
		if err := nodes[2].Cluster().AddNode(ctxFor(t), 4); err != nil {
			t.Fatalf("AddNode again once node 4 is reachable: %v", err)
		}
		// AddNode returned: node 2 applied the promotion; the others
		// learn it in turn.
		if member, learner := learnerOf(t, nodes[2], 4); !member || learner {
			t.Fatalf("AddNode returned, and node 2 sees node 4 as member %v, learner %v", member, learner)
		}
		for _, via := range []transport.NodeID{1, 4} {
			waitFor(t, fmt.Sprint("node 4 promoted, as node ", via, " sees it"), func() bool {
				member, learner := learnerOf(t, nodes[via], 4)
				return member && !learner
			})
		}
		if _, err := nodes[4].Stream(ctxFor(t), "during"); err != nil {
			t.Fatalf("the promoted node 4 does not know the stream created while it was cut off: %v", err)
		}
	})
}

// A learner that never catches up is removed by RemoveNode as a voter is:
// afterwards the metadata names the founders only, none of them a
// learner, and they commit with one of them down.
func TestClusterRemoveNodeRemovesALearner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := nodesCluster(t, 3)
		mustStream(t, nodes[1], "before")
		joinCutOff(t, net, nodes)

		if err := nodes[2].Cluster().RemoveNode(ctxFor(t), 4); err != nil {
			t.Fatalf("RemoveNode of a learner: %v", err)
		}
		// RemoveNode returned once node 2 applied the removal; State is
		// node 1's local view, which learns it in turn.
		want := []parkway.MemberState{{ID: 1, Live: true}, {ID: 2, Live: true}, {ID: 3, Live: true}}
		waitFor(t, "node 1 sees the founders only, none a learner", func() bool {
			st, err := nodes[1].Cluster().State(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			return slices.Equal(st.Members, want)
		})
		if err := nodes[3].Close(); err != nil {
			t.Fatal(err)
		}
		delete(nodes, 3)
		if _, err := nodes[1].Admin().CreateStream(ctxFor(t), "after"); err != nil {
			t.Fatalf("a stream created with node 3 down after the learner's removal: %v", err)
		}
	})
}
