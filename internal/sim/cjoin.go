package sim

import (
	"errors"
	"slices"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
)

// Nodes joining mid-run (Config.Faults.Join). A new node starts as a host
// starts one that joins a running cluster — an engine with Cluster.Join
// on an empty disk, its Peers the nodes running then and itself — and is
// added through a running member by Engine.AddNode's own steps
// (Engine.StartAddNode, stepped on the member's manual engine): the
// membership change of the metadata group that carries the AddNode
// command, proposed again under the same key when the member has not
// applied it within the engine's forward timeout, then the wait for the
// promotion; a call that fails, or whose member crashes, is made again
// through whichever member is running then. The change adds the joiner as a learner
// (behaviour 31); the metadata leader promotes it to voter on a tick
// once it has caught up. The joiner receives the metadata as a snapshot
// from the metadata leader; partitions created from then on are placed
// over it too (invariant 7 checks every build against the placement).
// Every fault reaches it as any other node, before and after it is
// added; clients use it once AddNode returned.
//
// Invariant 8 checks membership: after every action, every running
// node's metadata names exactly the members — voters and learners — of
// the metadata group's configuration it has applied (the AddNode command
// travels inside the change that adds the learner, so both move at the
// same index), and no node is both; at quiescence every addition has
// completed, every node holds the same voters and no learner (each was
// promoted once it caught up), and every node that joined is one of the
// voters (and holds the same metadata as every other: invariant 3's
// convergence covers it).

// maxJoins bounds the nodes that join in one run.
const maxJoins = 2

// joining is the addition of a node in progress: AddNode calls made
// through members until one returns.
type joining struct {
	id   uint64
	key  host.MetadataKey
	call *memberCall
}

// startJoin starts a new node with Cluster.Join and begins adding it.
func (c *sim) startJoin() {
	if c.join != nil || c.remove != nil || c.joins >= maxJoins || len(c.peers) >= maxNodes || c.depth > 0 {
		return
	}
	id := uint64(len(c.peers) + 1)
	c.peers = append(c.peers, id)
	c.joins++
	c.faults.Joins++
	c.event("n%d JOIN starts (peers %v)", id, c.peers)
	n := c.openNode(id, c.net.Endpoint(transport.NodeID(id)), vfs.NewMem(), nil)
	if c.viol != nil {
		return
	}
	c.nodes = append(c.nodes, n)
	c.applyCuts()
	c.nextSeq++
	c.join = &joining{id: id, key: host.MetadataKey{Producer: metaProducer, Seq: c.nextSeq}}
	c.joinAct()
}

// joinAct moves the addition in progress along: the AddNode call in
// flight is stepped, or one is made through a running member. It is
// done once a call returned: the member it went through has applied the
// node's promotion to voter. A call given up at its deadline (the
// member cut off, the learner not caught up yet) is made again, under
// the same key, through whichever member runs then.
func (c *sim) joinAct() {
	j := c.join
	if j == nil || c.viol != nil {
		return
	}
	var members []*node
	for _, n := range c.nodes {
		if n.joined && n.reachable() {
			members = append(members, n)
		}
	}
	v, err, done := c.stepCall(&j.call, j.id, "join", members, func(v *node) (*host.MemberChange, error) {
		return v.eng.StartAddNode(j.key, j.id, v.clk.Now().Add(requestTimeout))
	}, &c.ops.JoinRetries)
	switch {
	case !done:
	case err == nil:
		c.joined(v)
	case errors.Is(err, shard.ErrRetry) || errors.Is(err, shard.ErrOutcomeUnknown) ||
		errors.Is(err, host.ErrNotPromoted) || errors.Is(err, host.ErrMetadataFailed):
		c.ops.JoinCalls++ // called again
	default:
		c.fail(0, "n%d AddNode through n%d failed: %v", j.id, v.id, err)
	}
}

// joined ends the addition: AddNode returned on member v.
func (c *sim) joined(v *node) {
	j := c.join
	c.join = nil
	c.faults.Joined++
	c.node(j.id).joined = true
	c.event("n%d JOINED (applied on n%d, nodes %v)", j.id, v.id, v.meta.Nodes())
}

// checkVoters: n's metadata names exactly the members, voters and
// learners, of the metadata group configuration n has applied, and none
// is both (invariant 8). A member that has applied no configuration yet
// (a joiner before its first snapshot) is not judged.
func (c *sim) checkVoters(n *node) {
	st := n.eng.MetadataStatus()
	if len(st.Voters) == 0 {
		return
	}
	for _, l := range st.Learners {
		if slices.Contains(st.Voters, l) {
			c.fail(8, "n%d's metadata group holds n%d as a voter and a learner (voters %v, learners %v)", n.id, l, st.Voters, st.Learners)
			return
		}
	}
	members := slices.Sorted(slices.Values(append(slices.Clone(st.Voters), st.Learners...)))
	if nodes := n.meta.Nodes(); !slices.Equal(nodes, members) {
		c.fail(8, "n%d's metadata names nodes %v, its metadata group's voters are %v and learners %v", n.id, nodes, st.Voters, st.Learners)
	}
}

// checkMembership: at quiescence every addition and removal has
// completed, and every member's metadata group has the same voters: the
// members — every node that ever ran but those removed (invariant 8).
func (c *sim) checkMembership() {
	if c.viol != nil {
		return
	}
	if j := c.join; j != nil {
		c.fail(8, "at quiescence the addition of n%d has not completed", j.id)
		return
	}
	if r := c.remove; r != nil {
		c.fail(8, "at quiescence the removal of n%d has not completed", r.id)
		return
	}
	want := c.memberIDs()
	for _, n := range c.nodes {
		st := n.eng.MetadataStatus()
		if !slices.Equal(st.Voters, want) {
			c.fail(8, "at quiescence n%d's metadata group has voters %v, want %v (every node that ran but those removed)", n.id, st.Voters, want)
			return
		}
		if len(st.Learners) > 0 {
			c.fail(8, "at quiescence n%d's metadata group still has learners %v: none was promoted", n.id, st.Learners)
			return
		}
	}
}
