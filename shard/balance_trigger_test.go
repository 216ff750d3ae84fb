package shard

import (
	"slices"
	"testing"

	"github.com/parkway-io/parkway/metadata"
)

// recommit commits another replica set for ns on every node's metadata,
// one revision on: edit changes the partition as a Rebalance would have.
// The shards are not told (materialise does that, as the reconciler).
func (n *moveNet) recommit(ns metadata.Namespace, edit func(*metadata.PartitionSnapshot)) {
	n.t.Helper()
	for id := uint64(1); id <= 4; id++ {
		meta := n.nodes[id].meta
		snap := meta.Export()
		snap.Revision++
		for i := range snap.Streams {
			st := &snap.Streams[i]
			for j := range st.Topics {
				if tp := &st.Topics[j]; st.ID == ns.Stream() && tp.ID == ns.Topic() {
					edit(&tp.Partitions[ns.Partition()])
				}
			}
		}
		if err := meta.Replace(snap); err != nil {
			n.t.Fatal(err)
		}
	}
}

// A reordered replica set (Rebalance's pass over the preferred
// leaderships, which moves no data) hands the group to its new preferred
// leader: UpdatePlacement, which follows the commit, makes the leader
// queue the transfer. Nothing else would: no leader changes, no peer comes
// back to life.
func TestReorderedReplicasHandLeadershipOver(t *testing.T) {
	n := newMoveNet(t)
	ns := n.placedGroups(1)[0]
	info, _ := n.nodes[1].meta.Partition(ns)
	old, next := info.Replicas[0], info.Replicas[1]
	n.recommit(ns, func(p *metadata.PartitionSnapshot) {
		p.Replicas = []uint64{next, old, p.Replicas[2]}
	})
	n.materialise(ns)
	for i := 0; n.leader(ns) != next; i++ {
		if i == 1000 {
			t.Fatalf("after %d ticks node %d leads, the preferred leader is node %d", i, n.leader(ns), next)
		}
		n.tickAll()
	}
	if got := n.shard(next).rg.replicated[ns].rep.grp.Voters(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(info.Replicas))) {
		t.Fatalf("voters %v after a reorder of %v", got, info.Replicas)
	}
}

// A move whose newcomer is the new preferred leader (Rebalance moved a
// replica to it and made it first) ends with the group handed to the
// newcomer: the newcomer cannot lead before it is a voter that caught up,
// so the handover waits for the end of the move, where the leader queues
// it. Nothing else would: the move's own leader changes happen before.
func TestMoveEndsWithTheNewcomerLeading(t *testing.T) {
	n := newMoveNet(t)
	ns := n.placedGroups(1)[0]
	info, _ := n.nodes[1].meta.Partition(ns)
	a, b, c := info.Replicas[0], info.Replicas[1], info.Replicas[2]
	var d uint64
	for id := uint64(1); id <= 4; id++ {
		if !slices.Contains(info.Replicas, id) {
			d = id
		}
	}
	// c's replica moves to d (d goes last), then d swaps places with the
	// first replica: as Rebalance commits it.
	n.recommit(ns, func(p *metadata.PartitionSnapshot) {
		p.Replicas, p.Leaving, p.Joined = []uint64{d, b, a}, []uint64{c}, []uint64{d}
	})
	n.materialise(ns)
	for i := 0; ; i++ {
		if i == 3000 {
			info, _ := n.nodes[1].meta.Partition(ns)
			t.Fatalf("after %d ticks node %d leads, voters %v, partition %+v; want node %d leading, the move settled",
				i, n.leader(ns), n.voters(ns), info, d)
		}
		n.tickAll()
		if l := n.leader(ns); l == d {
			// The newcomer leads only once it is a voter that holds the
			// snapshot, and it is handed the group only at the move's end.
			if info, _ := n.nodes[1].meta.Partition(ns); len(info.Leaving) != 0 {
				t.Fatalf("newcomer %d leads before the move settled: %+v", d, info)
			}
			break
		}
	}
	if v := slices.Sorted(slices.Values(n.voters(ns))); !slices.Equal(v, slices.Sorted(slices.Values([]uint64{a, b, d}))) {
		t.Fatalf("voters %v, want %v", v, []uint64{a, b, d})
	}
}
