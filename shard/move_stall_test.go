package shard

import (
	"slices"
	"testing"

	"github.com/parkway-io/parkway/metadata"
)

// placedGroups creates a topic of count partitions with three replicas on
// every node of n, and ticks until each partition is led by its
// preferred leader (the first replica).
func (n *moveNet) placedGroups(count int) []metadata.Namespace {
	n.t.Helper()
	n.apply(metadata.CreateStream{Name: "s"})
	res := n.apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: count, Config: metadata.TopicConfig{Replicas: 3}})
	var all []metadata.Namespace
	for _, p := range res.Created {
		n.materialise(p.NS)
		all = append(all, p.NS)
	}
	for range 2000 {
		if n.ledByPreferred(all) {
			return all
		}
		n.tickAll()
	}
	n.t.Fatal("the groups are not led by their preferred leaders")
	return nil
}

func (n *moveNet) ledByPreferred(all []metadata.Namespace) bool {
	for _, ns := range all {
		info, _ := n.nodes[1].meta.Partition(ns)
		if n.leader(ns) != info.Replicas[0] {
			return false
		}
	}
	return true
}

// voters are ns's voters as its leader sees them (nil without a leader).
func (n *moveNet) voters(ns metadata.Namespace) []uint64 {
	if l := n.leader(ns); l != 0 {
		return n.shard(l).rg.replicated[ns].rep.grp.Voters()
	}
	return nil
}

// Moves whose newcomers never catch up do not block the moves queued
// behind them: a leader with more moves than its window, whose first
// movesPerShard newcomers are cut off, settles the others while those
// stall, and still never removes an old replica of a stalled one; once
// the cut heals the stalled ones settle too.
func TestStalledMovesYieldTheWindow(t *testing.T) {
	n := newMoveNet(t)
	all := n.placedGroups(40)

	// Drain node 4: every replica on it moves to the node its partition
	// lacks. Node lead leads the most of those groups.
	const drained = 4
	n.apply(metadata.DrainNode{Node: drained})
	var moving []metadata.Namespace
	for _, ns := range all {
		if info, _ := n.nodes[1].meta.Partition(ns); slices.Contains(info.Leaving, drained) {
			moving = append(moving, ns)
		}
		n.materialise(ns)
	}
	var lead uint64
	for id := uint64(1); id < drained; id++ {
		if lead == 0 || len(n.shard(id).rg.q.moves) > len(n.shard(lead).rg.q.moves) {
			lead = id
		}
	}
	queue := n.shard(lead).rg.q.moves
	if len(queue) <= movesPerShard {
		t.Fatalf("node %d leads %d moves, want more than the window of %d", lead, len(queue), movesPerShard)
	}
	// Cut the newcomers of the window's moves off their groups.
	var stalled, free []metadata.Namespace
	for i, o := range queue {
		ns := o.p.Namespace()
		if i >= movesPerShard {
			free = append(free, ns)
			continue
		}
		info, _ := n.nodes[1].meta.Partition(ns)
		n.cutGroup[replicaKey{info.Replicas[len(info.Replicas)-1], ns}] = true
		stalled = append(stalled, ns)
	}
	t.Logf("node %d leads %d of %d moves; stalled %v, behind them %v", lead, len(queue), len(moving), stalled, free)

	settled := func(ns metadata.Namespace) bool {
		info, _ := n.nodes[1].meta.Partition(ns)
		return len(info.Leaving) == 0 && slices.Equal(slices.Sorted(slices.Values(n.voters(ns))), slices.Sorted(slices.Values(info.Replicas)))
	}
	check := func() {
		t.Helper()
		for _, ns := range stalled {
			if v := n.voters(ns); v != nil && !slices.Contains(v, drained) {
				t.Fatalf("%v: replica %d removed while the newcomer was cut off (voters %v)", ns, drained, v)
			}
		}
		// The groups lead sends a snapshot or the entries to catch up
		// to, besides the stalled ones: no more than the window.
		catching := 0
		for _, o := range n.shard(lead).rg.q.moves {
			ns := o.p.Namespace()
			info, _ := n.nodes[1].meta.Partition(ns)
			joiner := info.Replicas[len(info.Replicas)-1]
			if !slices.Contains(stalled, ns) && o.rep.grp.IsLeader() && slices.Contains(o.rep.grp.Voters(), joiner) && !o.rep.grp.Caught(joiner) {
				catching++
			}
		}
		if catching > movesPerShard {
			t.Fatalf("node %d catches %d newcomers up at once, the window is %d", lead, catching, movesPerShard)
		}
	}
	done := func(list []metadata.Namespace) bool {
		for _, ns := range list {
			if !settled(ns) {
				return false
			}
		}
		return true
	}
	others := slices.DeleteFunc(slices.Clone(moving), func(ns metadata.Namespace) bool { return slices.Contains(stalled, ns) })
	for i := 0; !done(others); i++ {
		if i == 5000 {
			for _, ns := range others {
				if !settled(ns) {
					info, _ := n.nodes[1].meta.Partition(ns)
					t.Errorf("%v not settled: %+v, voters %v", ns, info, n.voters(ns))
				}
			}
			t.Fatal("the moves behind the stalled ones did not settle")
		}
		n.tickAll()
		check()
	}
	for _, ns := range stalled {
		if settled(ns) {
			t.Fatalf("%v settled with its newcomer cut off", ns)
		}
	}

	clear(n.cutGroup)
	for i := 0; !done(moving); i++ {
		if i == 5000 {
			t.Fatal("the stalled moves did not settle once the cut healed")
		}
		n.tickAll()
	}
}

// A newcomer whose node liveness reports dead is not added to the group:
// it would take nothing, and the group would count a dead voter in its
// quorum. The old replica stays; once the node is live again the move
// goes on and settles.
func TestMoveWaitsForDeadNewcomer(t *testing.T) {
	n := newMoveNet(t)
	ns := n.placedGroups(1)[0]
	info, _ := n.nodes[1].meta.Partition(ns)
	lead, gone := info.Replicas[0], info.Replicas[2]
	n.apply(metadata.DrainNode{Node: gone})
	info, _ = n.nodes[1].meta.Partition(ns)
	newcomer := info.Replicas[len(info.Replicas)-1]
	dead := func(down bool) {
		n.cut[newcomer] = down
		for id := uint64(1); id <= 4; id++ {
			if id != newcomer {
				n.shard(id).rg.setPeerLive(newcomer, !down)
			}
		}
	}
	dead(true)
	n.materialise(ns)
	for range 3 * moveStallTicks {
		n.tickAll()
		v := n.voters(ns)
		if slices.Contains(v, newcomer) || !slices.Contains(v, gone) {
			t.Fatalf("voters %v with the newcomer %d dead (old replica %d)", v, newcomer, gone)
		}
	}
	if l := n.leader(ns); l != lead {
		t.Fatalf("node %d leads, was %d", l, lead)
	}
	dead(false)
	for i := 0; ; i++ {
		if i == 3000 {
			t.Fatalf("the move did not settle once node %d was live: voters %v", newcomer, n.voters(ns))
		}
		n.tickAll()
		info, _ := n.nodes[1].meta.Partition(ns)
		if len(info.Leaving) == 0 && slices.Equal(slices.Sorted(slices.Values(n.voters(ns))), slices.Sorted(slices.Values(info.Replicas))) {
			break
		}
	}
}
