package parkway_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// samples counts the observations of histogram family name whose labels
// include every pair of labels (alternating name, value).
func samples(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var n uint64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
					return lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}) {
					continue metric
				}
			}
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}

// A produce observes one produce-latency sample, labelled by the stream's
// and topic's names; under FsyncAlways on disk it observes a commit group
// and fsyncs (the journal or the segment, and the metadata log for the
// topic's creation). A topic deleted and created again under the same
// names continues the same series, although its ids are reused.
func TestMetricsProduceCommitAndFsyncLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1, DataDir: t.TempDir()})
		reg := registry(t, n)
		ctx := ctxFor(t)
		s := mustStream(t, n, "orders")
		tp := mustTopic(t, n, s, "eu", 1)
		if got := samples(t, reg, "parkway_fsync_seconds", "log", "metadata"); got == 0 {
			t.Fatal("creating a stream and a topic observed no fsync of the metadata log")
		}
		data := func() uint64 {
			return samples(t, reg, "parkway_fsync_seconds", "log", "journal") + samples(t, reg, "parkway_fsync_seconds", "log", "segment")
		}
		before, groups := data(), samples(t, reg, "parkway_commit_group_seconds")
		for range 3 {
			mustProduce(t, n, tp, parkway.PartitionID(0), "x")
		}
		names := []string{"stream", "orders", "topic", "eu"}
		if got := samples(t, reg, "parkway_produce_seconds", names...); got != 3 {
			t.Fatalf("%d produce latency samples for 3 produces, want 3", got)
		}
		if got := samples(t, reg, "parkway_commit_group_seconds"); got < groups+1 {
			t.Fatalf("commit groups observed %d → %d, want at least one more", groups, got)
		}
		if got := data(); got < before+1 {
			t.Fatalf("fsyncs of partition data observed %d → %d under FsyncAlways, want at least one more", before, got)
		}
		if err := n.Admin().DeleteTopic(ctx, tp); err != nil {
			t.Fatal(err)
		}
		again := mustTopic(t, n, s, "eu", 1)
		if again.ID != tp.ID {
			t.Fatalf("the new topic has id %d, not the reused %d: the test needs a reused id", again.ID, tp.ID)
		}
		mustProduce(t, n, again, parkway.PartitionID(0), "y")
		if got := samples(t, reg, "parkway_produce_seconds", names...); got != 4 {
			t.Fatalf("%d produce latency samples after one more produce to the recreated topic, want 4", got)
		}
		if got := metricValue(t, reg, "parkway_produced_messages_total", names...); got != 4 {
			t.Fatalf("produced messages %v under the names, want 4", got)
		}
	})
}

// On a three-node cluster: each partition is led by one node
// (parkway_partitions_led sums to the partition count), each node counts
// the elections it observed, the metadata leader gauge names the leader
// ClusterState reports, leaders observe raft commit latency for the
// partition and metadata groups and raft-log fsyncs; cutting a
// partition's leader off makes the others count a new election.
func TestMetricsClusterLeadershipAndRaftCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		t.Cleanup(func() { _ = net.Close() })
		peers := []transport.NodeID{1, 2, 3}
		nodes := map[transport.NodeID]*parkway.Node{}
		regs := map[transport.NodeID]*prometheus.Registry{}
		for _, id := range peers {
			nodes[id] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second, DataDir: t.TempDir(),
				Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
			regs[id] = registry(t, nodes[id])
		}
		ctx := ctxFor(t)
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 3)
		for i := range 3 {
			mustProduce(t, nodes[1], tp, parkway.PartitionID(uint32(i)), "x")
		}
		sum := func(name string, labels ...string) (total float64) {
			for _, id := range peers {
				total += metricValue(t, regs[id], name, labels...)
			}
			return total
		}
		hist := func(name string, labels ...string) (total uint64) {
			for _, id := range peers {
				total += samples(t, regs[id], name, labels...)
			}
			return total
		}
		waitFor(t, "every partition led once", func() bool { return sum("parkway_partitions_led") == 3 })
		if got := sum("parkway_leader_elections_total", "group", "partition"); got < 3 {
			t.Fatalf("%v partition elections observed, want at least one per partition", got)
		}
		if got := sum("parkway_leader_elections_total", "group", "metadata"); got < 1 {
			t.Fatalf("%v metadata elections observed", got)
		}
		state, err := nodes[2].Cluster().State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if state.MetadataLeader == 0 {
			t.Fatal("no metadata leader known")
		}
		waitFor(t, "every node's metadata leader gauge naming the leader", func() bool {
			for _, id := range peers {
				if metricValue(t, regs[id], "parkway_metadata_leader") != float64(state.MetadataLeader) {
					return false
				}
			}
			return true
		})
		if got := hist("parkway_raft_commit_seconds", "group", "partition"); got < 3 {
			t.Fatalf("%d partition raft commits observed for 3 produces", got)
		}
		if got := hist("parkway_raft_commit_seconds", "group", "metadata"); got < 2 {
			t.Fatalf("%d metadata raft commits observed for a stream and a topic", got)
		}
		if got := hist("parkway_fsync_seconds", "log", "raft"); got == 0 {
			t.Fatal("no raft log fsync observed under FsyncAlways")
		}
		if got := hist("parkway_fsync_seconds", "log", "metadata"); got == 0 {
			t.Fatal("no metadata log fsync observed")
		}
		lead, err := nodes[1].Cluster().Leader(ctx, tp, 0)
		if err != nil || lead == 0 {
			t.Fatalf("Leader: %d, %v", lead, err)
		}
		survivors := others(lead)
		elections := func() (total float64) {
			for _, id := range survivors {
				total += metricValue(t, regs[id], "parkway_leader_elections_total", "group", "partition")
			}
			return total
		}
		before := elections()
		net.Partition([]transport.NodeID{lead}, survivors)
		waitFor(t, "the survivors to elect a new leader of partition 0", func() bool {
			l, err := nodes[survivors[0]].Cluster().Leader(ctx, tp, 0)
			return err == nil && l != 0 && l != lead
		})
		if got := elections(); got <= before {
			t.Fatalf("the survivors counted %v partition elections before the cut and %v after", before, got)
		}
		// The survivors lead every partition between them. The cut-off
		// node may go on believing it leads a quiesced group (it ticks no
		// quorum check) until it hears the new term: once healed, it steps
		// down (leader balance may hand a partition back to it later), and
		// the nodes' gauges again add up to one leader per partition.
		survivorsLed := func() (total float64) {
			for _, id := range survivors {
				total += metricValue(t, regs[id], "parkway_partitions_led")
			}
			return total
		}
		waitFor(t, "the survivors leading every partition", func() bool { return survivorsLed() == 3 })
		net.Heal()
		waitFor(t, "one leader per partition across the healed nodes", func() bool {
			return sum("parkway_partitions_led") == 3
		})
	})
}

// Consumer group series: a join adds a member and starts a generation (a
// rebalance), a commit is counted, and a member whose session lapses is
// counted as an expiry once the next group command applies.
func TestMetricsConsumerGroups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		reg := registry(t, n)
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 2)
		mustProduce(t, n, tp, parkway.PartitionID(0), "x")
		g := []string{"stream", "s", "topic", "t", "group", "g"}
		value := func(name string) float64 { return metricValue(t, reg, name, g...) }
		if err := n.Admin().CreateGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		if m, gen := value("parkway_group_members"), value("parkway_group_generation"); m != 0 || gen != 0 {
			t.Fatalf("a new group: members %v, generation %v; want 0, 0", m, gen)
		}
		a, err := n.JoinGroup(ctx, tp, "g", parkway.MemberConfig{Name: "a", SessionTimeout: time.Second, MaxPollInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if m, gen, r := value("parkway_group_members"), value("parkway_group_generation"), value("parkway_group_rebalances_total"); m != 1 || gen != 1 || r != 1 {
			t.Fatalf("after one join: members %v, generation %v, rebalances %v; want 1, 1, 1", m, gen, r)
		}
		if err := a.Commit(ctx, map[uint32]uint64{0: 1}); err != nil {
			t.Fatal(err)
		}
		if got := value("parkway_group_commits_total"); got != 1 {
			t.Fatalf("commits %v after one commit, want 1", got)
		}
		// a never heartbeats (and its node keeps its session for a
		// millisecond after its last call): its session lapses, and b's
		// join expires it.
		time.Sleep(2 * time.Second)
		if _, err := n.JoinGroup(ctx, tp, "g", parkway.MemberConfig{Name: "b"}); err != nil {
			t.Fatal(err)
		}
		if m, e := value("parkway_group_members"), value("parkway_group_expiries_total"); m != 1 || e != 1 {
			t.Fatalf("after a's session lapsed and b joined: members %v, expiries %v; want 1, 1", m, e)
		}
		if gen := value("parkway_group_generation"); gen < 2 {
			t.Fatalf("generation %v after a second join and an expiry, want at least 2", gen)
		}
		if err := n.Admin().DeleteGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		if got := samplesOf(t, reg, "parkway_group_members"); got != 0 {
			t.Fatalf("%d group series after the group was deleted, want none", got)
		}
	})
}

// samplesOf counts the series of family name.
func samplesOf(t testing.TB, reg prometheus.Gatherer, name string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// ClusterState on a three-node cluster: every member live, a metadata
// leader, a leader for every partition; once a node is closed, the
// others judge it dead, and the metadata and every partition are led by
// survivors.
func TestClusterStateFollowsAKilledNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := threeNodes(t)
		ctx := ctxFor(t)
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 3)
		for i := range 3 {
			mustProduce(t, nodes[1], tp, parkway.PartitionID(uint32(i)), "x")
		}
		var state parkway.ClusterState
		waitFor(t, "a leader known for every partition on node 2", func() bool {
			var err error
			if state, err = nodes[2].Cluster().State(ctx); err != nil {
				t.Fatal(err)
			}
			for _, p := range state.Partitions {
				if p.Leader == 0 {
					return false
				}
			}
			return len(state.Partitions) == 3 && state.MetadataLeader != 0
		})
		if state.Node != 2 {
			t.Fatalf("Node %d, want 2", state.Node)
		}
		want := []parkway.MemberState{{ID: 1, Live: true}, {ID: 2, Live: true}, {ID: 3, Live: true}}
		if !slices.Equal(state.Members, want) {
			t.Fatalf("members %+v, want %+v", state.Members, want)
		}
		for i, p := range state.Partitions {
			if p.Topic != tp || p.Partition != uint32(i) || len(p.Replicas) != 3 {
				t.Fatalf("partition %d: %+v, want %v partition %d on 3 replicas", i, p, tp, i)
			}
		}
		// Kill the node that leads partition 0.
		victim := state.Partitions[0].Leader
		if err := nodes[victim].Close(); err != nil {
			t.Fatal(err)
		}
		observer := others(victim)[0]
		waitFor(t, fmt.Sprintf("node %d judged dead and its leaderships moved", victim), func() bool {
			st, err := nodes[observer].Cluster().State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range st.Members {
				if m.Live != (m.ID != victim) {
					return false
				}
			}
			if st.MetadataLeader == 0 || st.MetadataLeader == victim {
				return false
			}
			for _, p := range st.Partitions {
				if p.Leader == 0 || p.Leader == victim {
					return false
				}
			}
			state = st
			return true
		})
		if _, err := nodes[observer].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")}); err != nil {
			t.Fatalf("produce after the kill: %v", err)
		}
		if _, err := nodes[victim].Cluster().State(ctx); err == nil {
			t.Fatal("a closed node answered ClusterState")
		}
		single := open(t, parkway.Config{})
		if _, err := single.Cluster().State(context.Background()); err == nil {
			t.Fatal("a single node answered ClusterState")
		}
	})
}
