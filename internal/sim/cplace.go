package sim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
)

// Placement (invariant 7). A partition's raft group spans the nodes its
// metadata places it on (metadata.PartitionInfo.Replicas, preferred
// leader first), which on a five-node cluster or a topic with a factor
// below the node count is not every node. The simulator checks that:
//
//   - a replica materialises only on a node the committed placement
//     names, among its replicas or those still leaving it (checked at
//     every build, against the building node's own metadata; moves
//     change the placement, but only through commands every node
//     applies in the same order);
//   - at quiescence each committed partition is owned by exactly its
//     replicas, every replica holds the whole log (invariant 3, compared
//     among the replicas only), and a request through a node holding none
//     (every final read goes through every node) is sent on to one that
//     does and answered as if asked there;
//   - at quiescence leadership is balanced back: with every node up, each
//     group is led by its preferred leader (leader balance hands it back
//     with raft's leadership transfer after a failure moved it).
//
// A client that reaches a node holding no replica is answered "not
// leader" with a live replica as the hint, which it follows like any
// other redirect; its answer is checked against every other invariant
// exactly as one from a replica.

// replicasOf lists the nodes holding p: its placement, or every node for
// a partition placed before placement existed.
func (c *sim) replicasOf(p metadata.PartitionInfo) []*node {
	if len(p.Replicas) == 0 {
		return c.nodes
	}
	out := make([]*node, 0, len(p.Replicas))
	for _, id := range p.Replicas {
		if n := c.node(id); n != nil {
			out = append(out, n)
		}
	}
	return out
}

// checkPlacedBuild fails when n builds key though n's own metadata places
// that incarnation on other nodes. A build of an incarnation n's
// metadata no longer (or not yet) commits is the reconciler racing a
// delete and is not judged here.
func (c *sim) checkPlacedBuild(n *node, key incKey) {
	info, ok := n.meta.Partition(key.ns)
	if !ok || info.CreatedRevision != key.epoch || info.Holds(n.id) {
		return
	}
	c.fail(7, "n%d built a replica of %v, which its metadata places on %v only", n.id, key, info.Replicas)
}

// checkOwnership: at quiescence every committed partition is owned —
// materialised in a shard — by exactly the nodes of its placement, at its
// committed incarnation, and by no other.
func (c *sim) checkOwnership() {
	if c.viol != nil {
		return
	}
	owners := make(map[incKey][]uint64)
	for _, n := range c.nodes {
		for i, sh := range n.shards {
			st, err := sh.Inspect(c.ctx)
			if err != nil {
				c.fail(0, "inspect n%d shard %d: %v", n.id, i, err)
				return
			}
			for ns, epoch := range st.Owned {
				k := incKey{ns, epoch}
				owners[k] = append(owners[k], n.id)
			}
		}
	}
	committed := make(map[incKey]bool)
	for _, p := range c.nodes[0].meta.Snapshot().Partitions {
		k := incKey{p.NS, p.CreatedRevision}
		committed[k] = true
		want := make([]uint64, 0, len(p.Replicas))
		for _, n := range c.replicasOf(p) {
			want = append(want, n.id)
		}
		slices.Sort(want)
		got := owners[k]
		slices.Sort(got)
		if !slices.Equal(got, want) {
			c.fail(7, "at quiescence %v is owned by nodes %v, its placement is %v", k, got, p.Replicas)
			return
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(owners), incKey.compare) {
		if !committed[k] {
			c.fail(7, "at quiescence nodes %v still own %v, which is not committed", owners[k], k)
			return
		}
	}
}

// moving reports, empty when there is none, a partition some member's
// metadata still has replicas leaving.
func (c *sim) moving() string {
	for _, n := range c.nodes {
		if moving, _ := n.meta.Moving(0); moving == 0 {
			continue
		}
		for _, p := range n.meta.Snapshot().Partitions {
			if len(p.Leaving) > 0 {
				return fmt.Sprintf("n%d: %v (replicas %v) has %v leaving", n.id, p.NS, p.Replicas, p.Leaving)
			}
		}
	}
	return ""
}

// unbalanced reports, empty when there is none, a committed partition
// whose group is not led by its preferred leader (its first replica) as
// that node sees it. It is asked only while every node is up.
func (c *sim) unbalanced() string { return c.unbalancedExcept(nil) }

// unbalancedExcept is unbalanced, but for the partitions whose preferred
// leader's copy skip names.
func (c *sim) unbalancedExcept(skip func(id uint64, ns metadata.Namespace) bool) string {
	for _, p := range c.nodes[0].meta.Snapshot().Partitions {
		if len(p.Replicas) == 0 || (skip != nil && skip(p.Replicas[0], p.NS)) {
			continue
		}
		want := metadata.NodeOf(p.Replicas[0])
		n := c.node(want)
		if n == nil || n.down || int(p.Owner) >= len(n.shards) {
			return fmt.Sprintf("%v: preferred leader n%d not running", p.NS, want)
		}
		lead, err := n.shards[p.Owner].Leader(c.ctx, p.NS)
		if err != nil {
			c.fail(0, "leader of %v on n%d: %v", p.NS, want, err)
			return "error"
		}
		if lead != want {
			return fmt.Sprintf("%v (replicas %v): its preferred leader n%d sees leader n%d", p.NS, p.Replicas, want, lead)
		}
	}
	return ""
}

// leaderTransfers sums parkway_leader_transfers_total over every node
// incarnation of the run.
func (c *sim) leaderTransfers() int {
	total := 0
	for _, m := range slices.Concat(c.oldMetrics, nodeMetrics(c.nodes)) {
		reg := prometheus.NewRegistry()
		if reg.Register(m) != nil {
			continue
		}
		fams, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, f := range fams {
			if f.GetName() != "parkway_leader_transfers_total" {
				continue
			}
			for _, mt := range f.GetMetric() {
				total += int(mt.GetCounter().GetValue())
			}
		}
	}
	return total
}

func nodeMetrics(nodes []*node) []*metrics.Metrics {
	out := make([]*metrics.Metrics, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.m)
	}
	return out
}

// links is the network's connectivity between running nodes, by
// direction: bit j of links[i] is set when nodes i and j are both up,
// neither is stopped, and a message from i reaches j — no partition, one
// way or both, separates them and no clog holds i's messages to j (bit i
// of links[i]: node i is up).
type links [maxNodes + 1]uint8

// links is the connectivity now.
func (c *sim) links() links {
	var l links
	w := &c.netf
	side := func(id uint64) int {
		if w.partitioned && slices.Contains(w.sides[0], id) {
			return 0
		}
		return 1
	}
	for _, a := range c.nodes {
		if !a.reachable() {
			continue
		}
		for _, b := range c.nodes {
			if b.reachable() && side(a.id) == side(b.id) && !w.cut(a.id, b.id) && !w.clogged(a.id, b.id) {
				l[a.id] |= 1 << b.id
			}
		}
	}
	return l
}

// noteLinks adds the links now up to every produce in flight.
func (c *sim) noteLinks() {
	now := c.links()
	for _, cl := range c.clients {
		if o := cl.op; o != nil && (o.kind == kindProduce || o.kind == kindBatch) {
			for i := range o.reach {
				o.reach[i] |= now[i]
			}
		}
	}
}

// quorumReached reports whether some replica of reps, as the leader that
// committed an entry, can have exchanged messages with a majority of reps
// (itself included) while the entry's op ran: a necessary condition for a
// commit, since the leader sent the entry to each member of the
// committing quorum and heard its acknowledgement back, each over a link
// that was up at some moment in between (a replica only relays an entry
// as leader, and then it is the one that commits). Links are directional:
// a member the leader can send to but not hear from, or hear from but not
// send to, does not count. reach holds every link seen up while the op
// ran.
func quorumReached(reach links, reps []uint64) bool {
	need := len(reps)/2 + 1
	for _, r := range reps {
		if r > maxNodes {
			continue
		}
		k := 0
		for _, f := range reps {
			if f <= maxNodes && reach[r]&(1<<f) != 0 && reach[f]&(1<<r) != 0 {
				k++
			}
		}
		if k >= need {
			return true
		}
	}
	return false
}

// checkAckQuorum: an acknowledged produce was committed by a quorum of its
// partition's replicas — the nodes its placement names, not the cluster —
// so while it ran some replica must have been linked to a majority of
// them (invariant 3). A group whose quorum counted other nodes, or a
// leader answering before the commit, acknowledges writes a partition
// can lose.
func (c *sim) checkAckQuorum(a *attempt, key incKey) {
	configs := c.placed[key]
	if len(configs) == 0 || slices.ContainsFunc(configs, func(reps []uint64) bool { return quorumReached(a.op.reach, reps) }) {
		return
	}
	c.fail(3, "attempt %d (op %d) acknowledged by n%d for %v, whose replicas (in every configuration its group may have had: %v) were never a linked majority while it ran (links %v)",
		a.id, a.op.id, a.node.id, key, configs, a.op.reach)
}

// notePlacement adds the configurations p's group may pass through to
// what checkAckQuorum accepts for its incarnation. A move replaces
// replica a by b in p.Replicas, leaves a in p.Leaving and b in p.Joined;
// the group's leader then adds b and removes a, one change at a time, so
// the group's voters are p.Replicas less some replicas still joining,
// plus some still leaving (moves may overlap: any combination). The
// configurations of earlier states were noted when those were seen, so
// the list only grows.
func (c *sim) notePlacement(p metadata.PartitionInfo) {
	if len(p.Replicas) == 0 {
		return
	}
	key := incKey{p.NS, p.CreatedRevision}
	var joining []uint64
	for _, j := range p.Joined {
		if slices.Contains(p.Replicas, j) {
			joining = append(joining, j)
		}
	}
	k := len(p.Leaving) + len(joining)
	for mask := range 1 << k {
		set := slices.Clone(p.Replicas)
		for i, l := range p.Leaving {
			if mask&(1<<i) != 0 {
				set = append(set, l)
			}
		}
		for i, j := range joining {
			if mask&(1<<(len(p.Leaving)+i)) != 0 {
				set = slices.DeleteFunc(set, func(x uint64) bool { return x == j })
			}
		}
		if len(set) == 0 {
			continue
		}
		slices.Sort(set)
		set = slices.Compact(set)
		if !slices.ContainsFunc(c.placed[key], func(s []uint64) bool { return slices.Equal(s, set) }) {
			c.placed[key] = append(c.placed[key], set)
		}
	}
}

// notePlacements notes the placement of every partition in n's metadata
// that some node has built (after a command that may move replicas).
func (c *sim) notePlacements(n *node) {
	for _, p := range n.meta.Snapshot().Partitions {
		if _, built := c.placed[incKey{p.NS, p.CreatedRevision}]; built {
			c.notePlacement(p)
		}
	}
}
