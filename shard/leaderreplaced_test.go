package shard

import (
	"fmt"
	"slices"
	"testing"

	"github.com/parkway-io/parkway/metadata"
)

// A quiesced group whose leader's replica the metadata re-seeds (its
// node restarted with the raft log damaged, so the build set the replica
// aside) elects another leader among its intact voters once they are
// told of the placement, though node liveness never reports the leader's
// node dead: the followers wake, and their election timers run out with
// no word from the leader. Before, the quiesced followers, not ticked,
// waited for ever for a leader that was gone, and without a leader the
// group could not add the new replica or settle a move (simulator
// cluster seed 199 with slow links). Every partition of the topic is
// tried, so that each node leads one.
func TestQuiescedGroupWhoseLeaderWasReseededElectsAnother(t *testing.T) {
	for i := range 4 {
		t.Run(fmt.Sprint("partition", i), func(t *testing.T) {
			n := newMoveNetWith(t, func(r *Replication) { r.Quiesce = true })
			n.apply(metadata.CreateStream{Name: "s"})
			res := n.apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 4, Config: metadata.TopicConfig{Replicas: 3}})
			info := res.Created[i]
			ns := info.NS
			n.materialise(ns)
			for range 500 {
				if n.leader(ns) != 0 {
					break
				}
				n.tickAll()
			}
			lead := n.leader(ns)
			if lead == 0 {
				t.Fatal("no leader")
			}
			n.produceAcked(lead, ns, 2)
			for range 30 {
				n.tickAll()
			}
			for _, id := range info.Replicas {
				if o := n.shard(id).rg.replicated[ns]; !n.shard(id).rg.quiesced(o) {
					t.Fatalf("n%d's replica is not quiesced", id)
				}
			}
			// The leader's node restarts and its replica is set aside: it
			// never speaks again, though liveness holds the node alive.
			n.cut[lead] = true
			n.apply(metadata.ReseedReplica{NS: ns, CreatedRevision: info.CreatedRevision, Replica: lead})
			for _, id := range info.Replicas {
				if id != lead {
					n.shard(id).rg.updatePlacement(ns)
				}
			}
			n.settle()
			// Election rounds enough for a split vote or two (one in
			// about 75 runs needed more than 50 ticks), far inside one
			// hold (100 election timeouts). The old leader, cut off,
			// still believes it leads.
			for range 200 {
				for _, id := range info.Replicas {
					if id != lead && n.shard(id).rg.replicated[ns].rep.grp.IsLeader() {
						return
					}
				}
				n.tickAll()
			}
			t.Fatalf("no intact voter leads %v 200 ticks after its leader n%d was re-seeded", ns, lead)
		})
	}
}

// The same when the leader's node is drained (its replica leaves the
// replica set) and only then asks for the re-seed of its damaged
// replica: a re-seed of a leaving replica changes nothing in the
// metadata (metadata.ReseedReplica), so no later generation of the
// leader is ever named, yet the drain's placement is seen by every
// member. The quiesced followers wake on it: the leader they follow is
// leaving, and a leader with a move to drive does not quiesce its group
// again, so they keep watching it. Before, they waited for ever, and the
// drain never completed (simulator cluster seed 6825 with a proposal
// restarting the quiescence count: the leader quiesced its new group,
// its node lost power, and a lie cut its raft log short).
func TestQuiescedGroupWhoseLeavingLeaderWasSetAsideElectsAnother(t *testing.T) {
	for i := range 4 {
		t.Run(fmt.Sprint("partition", i), func(t *testing.T) {
			n := newMoveNetWith(t, func(r *Replication) { r.Quiesce = true })
			n.apply(metadata.CreateStream{Name: "s"})
			res := n.apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 4, Config: metadata.TopicConfig{Replicas: 3}})
			info := res.Created[i]
			ns := info.NS
			n.materialise(ns)
			for range 500 {
				if n.leader(ns) != 0 {
					break
				}
				n.tickAll()
			}
			lead := n.leader(ns)
			if lead == 0 {
				t.Fatal("no leader")
			}
			n.produceAcked(lead, ns, 2)
			for range 30 {
				n.tickAll()
			}
			for _, id := range info.Replicas {
				if o := n.shard(id).rg.replicated[ns]; !n.shard(id).rg.quiesced(o) {
					t.Fatalf("n%d's replica is not quiesced", id)
				}
			}
			// The leader's node restarts and its replica is set aside; the
			// node is drained, and the re-seed it asks for then is a no-op.
			n.cut[lead] = true
			n.apply(metadata.DrainNode{Node: lead})
			before, _ := n.nodes[1].meta.Partition(ns)
			n.apply(metadata.ReseedReplica{NS: ns, CreatedRevision: info.CreatedRevision, Replica: lead})
			if after, _ := n.nodes[1].meta.Partition(ns); after.Generation != before.Generation || !slices.Contains(after.Leaving, lead) {
				t.Fatalf("the re-seed of the leaving replica changed the partition: %+v, was %+v", after, before)
			}
			for id := uint64(1); id <= 4; id++ {
				if id != lead {
					n.shard(id).rg.updatePlacement(ns)
				}
			}
			n.settle()
			for range 200 { // as above
				for _, id := range info.Replicas {
					if id != lead && n.shard(id).rg.replicated[ns].rep.grp.IsLeader() {
						return
					}
				}
				n.tickAll()
			}
			t.Fatalf("no intact voter leads %v 200 ticks after its leaving leader n%d was set aside", ns, lead)
		})
	}
}
