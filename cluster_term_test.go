package parkway_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// agreedLeader waits until every node in ids names the same leader of
// tp's partition 0, one in among, and returns it and its term.
func agreedLeader(t *testing.T, nodes map[transport.NodeID]*parkway.Node, tp parkway.Topic, ids, among []transport.NodeID) (transport.NodeID, uint64) {
	t.Helper()
	var (
		lead transport.NodeID
		term uint64
	)
	waitFor(t, "the nodes to agree on a leader", func() bool {
		lead, term = 0, 0
		for _, id := range ids {
			l, tm, err := nodes[id].Cluster().LeaderTerm(context.Background(), tp, 0)
			if err != nil || l == 0 || lead != 0 && (l != lead || tm != term) {
				return false
			}
			lead, term = l, tm
		}
		return slices.Contains(among, lead)
	})
	return lead, term
}

// TestClusterProduceInTermFencesOtherTerms: a write fenced to a raft term
// is appended only by the leader elected in that term. A follower refuses
// it, and so does the same node once it leads again in a later term — it
// lost leadership and won it back, and a writer that read the partition
// under the earlier term must not write after the leader in between did.
// (Without the shard's term check the node leading again proposed the
// stale write in its new term, and it committed.) A leader cut off from
// the others, still leading in its own view, proposes the write but it
// never commits: raft's term fences it.
func TestClusterProduceInTermFencesOtherTerms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := threeNodes(t)
		ctx := context.Background()
		all := []transport.NodeID{1, 2, 3}
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 1)
		mustProduce(t, nodes[1], tp, parkway.PartitionID(0), "x")
		lead, term := agreedLeader(t, nodes, tp, all, all)

		if _, err := nodes[lead].Cluster().ProduceInTerm(ctx, tp, 0, term, parkway.Message{Payload: []byte("fenced ok")}); err != nil {
			t.Fatalf("ProduceInTerm at the leader in its term: %v", err)
		}
		follower := others(lead)[0]
		if _, err := nodes[follower].Cluster().ProduceInTerm(ctx, tp, 0, term, parkway.Message{Payload: []byte("at a follower")}); !errors.Is(err, parkway.ErrNotLeader) {
			t.Fatalf("ProduceInTerm at a follower: %v, want ErrNotLeader", err)
		}
		if _, err := nodes[lead].Cluster().ProduceInTerm(ctx, tp, 0, term+1, parkway.Message{Payload: []byte("future term")}); !errors.Is(err, parkway.ErrNotLeader) {
			t.Fatalf("ProduceInTerm at the leader in a term it does not lead in: %v, want ErrNotLeader", err)
		}

		// The leader is cut off: its proposal in its own term never
		// commits, while the others elect a leader of a later term.
		old, oldTerm := lead, term
		net.Partition([]transport.NodeID{old}, others(old))
		cut := make(chan error, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			_, err := nodes[old].Cluster().ProduceInTerm(cctx, tp, 0, oldTerm, parkway.Message{Payload: []byte("cut off")})
			cut <- err
		}()
		next, _ := agreedLeader(t, nodes, tp, others(old), others(old))
		mustProduce(t, nodes[next], tp, parkway.PartitionID(0), "majority")
		if err := <-cut; err == nil {
			t.Fatal("a leader cut off from the others acknowledged a write fenced to its term")
		}
		net.Heal()

		// Move leadership until the old leader leads again, in a later
		// term: isolate whoever else leads.
		var again uint64
		for range 20 {
			l, tm := agreedLeader(t, nodes, tp, all, all)
			if l == old {
				again = tm
				break
			}
			net.Partition([]transport.NodeID{l}, others(l))
			agreedLeader(t, nodes, tp, others(l), others(l))
			net.Heal()
		}
		if again == 0 {
			t.Fatal("the old leader never led again")
		}
		if again <= oldTerm {
			t.Fatalf("the old leader leads again in term %d, not after %d", again, oldTerm)
		}
		if _, err := nodes[old].Cluster().ProduceInTerm(ctx, tp, 0, oldTerm, parkway.Message{Payload: []byte("stale term")}); !errors.Is(err, parkway.ErrNotLeader) {
			t.Fatalf("ProduceInTerm of term %d at the leader of term %d: %v, want ErrNotLeader", oldTerm, again, err)
		}
		if _, err := nodes[old].Cluster().ProduceInTerm(ctx, tp, 0, again, parkway.Message{Payload: []byte("new term")}); err != nil {
			t.Fatalf("ProduceInTerm at the leader in its new term: %v", err)
		}
		for _, id := range all {
			waitFor(t, "the replicas to converge", func() bool { return len(readAll(t, nodes[id], tp, 0)) == 4 })
			expectLog(t, nodes[id], tp, 0, "x", "fenced ok", "majority", "new term")
		}
	})
}

// TestClusterInSyncReplicas: the in-sync set is the leader's view of its
// followers' progress, not the placement: all three replicas while they
// keep up, the two that remain once a follower is cut off and the log
// moves on without it, all three again once it is back and caught up. A
// node that does not lead the partition asks the leader: it answers the
// leader's view, not the placement.
func TestClusterInSyncReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := threeNodes(t)
		ctx := context.Background()
		all := []transport.NodeID{1, 2, 3}
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 1)
		mustProduce(t, nodes[1], tp, parkway.PartitionID(0), "x")
		lead, _ := agreedLeader(t, nodes, tp, all, all)
		isr := func() []transport.NodeID {
			t.Helper()
			got, _, err := nodes[lead].Cluster().InSyncReplicas(ctx, tp, 0)
			if err != nil {
				t.Fatalf("InSyncReplicas at the leader: %v", err)
			}
			return got
		}
		waitFor(t, "every replica in sync", func() bool { return slices.Equal(isr(), all) })

		cut := others(lead)[1]
		net.Disconnect(lead, cut)
		net.Disconnect(others(lead)[0], cut)
		for i := range 100 {
			mustProduce(t, nodes[lead], tp, parkway.PartitionID(0), "while cut "+string(rune('a'+i%26)))
		}
		want := slices.DeleteFunc(slices.Clone(all), func(id transport.NodeID) bool { return id == cut })
		waitFor(t, "the cut-off follower to leave the in-sync set", func() bool { return slices.Equal(isr(), want) })
		// The follower in touch answers the leader's view, in the term
		// the leader was elected in.
		_, leadTerm, err := nodes[lead].Cluster().InSyncReplicas(ctx, tp, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, term, err := nodes[others(lead)[0]].Cluster().InSyncReplicas(ctx, tp, 0)
		if err != nil || !slices.Equal(got, want) || term != leadTerm {
			t.Fatalf("InSyncReplicas at a follower: %v in term %d (%v), want the leader's %v in term %d", got, term, err, want, leadTerm)
		}

		net.Heal()
		waitFor(t, "the follower to return to the in-sync set", func() bool { return slices.Equal(isr(), all) })
		waitFor(t, "the follower to catch up", func() bool { return len(readAll(t, nodes[cut], tp, 0)) == 101 })
	})
}
