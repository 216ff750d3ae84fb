package shard

import (
	"slices"
	"testing"

	"github.com/parkway-io/parkway/metadata"
)

// Behaviour 31: a replica that joins a group catches up as a non-voting
// learner and becomes a voter only when its log is whole and synced, so a
// moving group keeps its fault tolerance throughout. A group of three
// moves one replica to a fourth node that is cut off, so it cannot catch
// up; then one of the staying replicas fails too. As a learner the
// newcomer counts in no quorum, so the two replicas left (of three
// voters) still commit a write. Added as a voter at once, the newcomer
// would make four voters with two out of reach, and the group would stop.
// Healed, the move completes: the newcomer is promoted only after it
// reported its log whole, and the old replica leaves last.
func TestBehaviour31JoinerIsLearnerUntilWhole(t *testing.T) {
	n := newMoveNet(t)
	info, lead := n.ledPartition(3)
	ns := info.NS
	want := n.produceAcked(lead, ns, 3)

	// Move a replica that does not lead to the fourth node.
	var leaving, staying uint64
	for _, r := range info.Replicas {
		if r != lead {
			if leaving == 0 {
				leaving = r
			} else {
				staying = r
			}
		}
	}
	n.apply(metadata.DrainNode{Node: leaving})
	info, _ = n.nodes[1].meta.Partition(ns)
	joiner := info.Replicas[len(info.Replicas)-1]
	if !info.Joins(joiner) || !slices.Equal(info.Leaving, []uint64{leaving}) {
		t.Fatalf("after DrainNode(%d): %+v", leaving, info)
	}
	n.cut[joiner] = true
	n.materialise(ns)
	g := n.shard(lead).rg.replicated[ns].rep.grp
	for range 100 {
		n.tickAll()
		if slices.Contains(g.Learners(), joiner) {
			break
		}
	}
	if !slices.Contains(g.Learners(), joiner) {
		t.Fatalf("the joiner %d was not added as a learner: voters %v, learners %v", joiner, g.Voters(), g.Learners())
	}
	if slices.Contains(g.Voters(), joiner) {
		t.Fatalf("the joiner %d is a voter before it caught up: voters %v", joiner, g.Voters())
	}

	// One more failure while the newcomer catches up: the group still
	// commits.
	n.cut[staying] = true
	c := produce(ns, "x")
	n.shard(lead).handle(c.f)
	var r Response
	answered := false
	for range 200 {
		n.tickAll()
		select {
		case r = <-c.reply:
			answered = true
		default:
		}
		if answered {
			break
		}
	}
	if !answered || r.Err != nil {
		t.Fatalf("a moving group with one more replica down did not commit (answered %v: %v); voters %v, learners %v",
			answered, r.Err, g.Voters(), g.Learners())
	}
	want = append(want, "x")

	// Healed, the move completes; the joiner was whole when promoted.
	n.cut[joiner], n.cut[staying] = false, false
	promoted := false
	for range 3000 {
		n.tickAll()
		l := n.leader(ns)
		if l == 0 {
			continue
		}
		o := n.shard(l).rg.replicated[ns]
		if !promoted && slices.Contains(o.rep.grp.Voters(), joiner) {
			promoted = true
			if j := n.shard(joiner).rg.replicated[ns]; j == nil || j.rep.catchup != nil {
				t.Fatalf("the joiner %d was promoted before its partition log was whole", joiner)
			}
			if !slices.Contains(o.rep.grp.Voters(), leaving) {
				t.Fatalf("the old replica %d left before the joiner %d was promoted", leaving, joiner)
			}
		}
		if info, _ := n.nodes[1].meta.Partition(ns); len(info.Leaving) == 0 {
			break
		}
	}
	if info, _ := n.nodes[1].meta.Partition(ns); len(info.Leaving) != 0 || !promoted {
		t.Fatalf("the move did not complete (promoted %v): %+v", promoted, info)
	}
	l := n.leader(ns)
	if v := slices.Sorted(slices.Values(n.shard(l).rg.replicated[ns].rep.grp.Voters())); !slices.Equal(v, slices.Sorted(slices.Values(info.Replicas))) {
		t.Fatalf("voters %v after the move, want %v", v, info.Replicas)
	}
	if lr := n.shard(l).rg.replicated[ns].rep.grp.Learners(); len(lr) != 0 {
		t.Fatalf("learners %v after the move", lr)
	}
	for range 20 {
		n.tickAll() // the joiner's catch-up fetch
	}
	if got := payloads(t, n.parts[replicaKey{joiner, ns}]); !slices.Equal(got, want) {
		t.Fatalf("joiner %d holds %q, want %q", joiner, got, want)
	}
}
