package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
)

// Nodes joining mid-run (Config.Faults.Join). A new node starts as a host
// starts one that joins a running cluster — an engine with Cluster.Join
// on an empty disk, its Peers the nodes running then and itself — and is
// added through a running member the way Engine.AddNode adds it: the
// membership change of the metadata group that carries the AddNode
// command (Engine.ProposeAddNode, the manual engine's form of AddNode's
// proposal), proposed again under the same key when the member has not
// applied it within the engine's forward timeout, through whichever
// member is running then. The joiner receives the metadata as a snapshot
// from the metadata leader; partitions created from then on are placed
// over it too (invariant 7 checks every build against the placement).
// Every fault reaches it as any other node, before and after it is
// added; clients use it once a member has applied its addition.
//
// Invariant 8 checks membership: after every action, every running
// node's metadata names exactly the voters of the metadata group's
// configuration it has applied (the AddNode command travels inside the
// change, so both move at the same index); at quiescence every addition
// has completed, every node holds the same voters, and every node that
// joined is one of them (and holds the same metadata as every other:
// invariant 3's convergence covers it).

// maxJoins bounds the nodes that join in one run.
const maxJoins = 2

// joining is the addition of a node in progress.
type joining struct {
	id  uint64
	key host.MetadataKey
	// via is the member the last proposal went through; proposed is set
	// while that proposal may still apply (until the forward timeout).
	via        *cnode
	proposed   bool
	proposedAt time.Time
	retryAt    time.Time
	pause      time.Duration
}

// startJoin starts a new node with Cluster.Join and begins adding it.
func (c *csim) startJoin() {
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

// joinAct moves the addition in progress along: it is done once the
// member it was last proposed through has applied it (AddNode returns
// then); a proposal not applied within the forward timeout is made
// again, through a member running then, and a refused one after a pause
// (doubling, clamped), as AddNode does.
func (c *csim) joinAct() {
	j := c.join
	if j == nil || c.viol != nil {
		return
	}
	now := c.clk.Now()
	if j.proposed {
		if v := c.cur(j.via); v.reachable() && slices.Contains(v.meta.Nodes(), j.id) {
			c.joined(v)
			return
		}
		if now.Before(j.proposedAt.Add(forwardTicks * c.cfg.TickInterval)) {
			return
		}
		j.proposed = false
		c.ops.JoinRetries++
		c.event("n%d join not applied after %d ticks: propose again", j.id, forwardTicks)
	}
	if now.Before(j.retryAt) {
		return
	}
	var members []*cnode
	for _, n := range c.nodes {
		if n.joined && n.reachable() {
			members = append(members, n)
		}
	}
	if len(members) == 0 {
		c.joinRetryLater(fmt.Errorf("no member running"))
		return
	}
	v := members[c.rng.IntN(len(members))]
	if slices.Contains(v.meta.Nodes(), j.id) {
		c.joined(v)
		return
	}
	var err error
	if BreakJoinCommand.Load() {
		_, err = v.eng.ProposeMetadata(j.key, metadata.AddNode{Node: j.id})
	} else {
		err = v.eng.ProposeAddNode(j.key, j.id)
	}
	if err != nil {
		c.event("n%d join proposed through n%d: %v", j.id, v.id, err)
		c.joinRetryLater(err)
		return
	}
	j.via, j.proposed, j.proposedAt, j.pause = v, true, now, 0
	c.event("n%d join proposed through n%d", j.id, v.id)
}

func (c *csim) joinRetryLater(err error) {
	j := c.join
	j.pause = min(max(2*j.pause, retryMin), retryMax)
	j.retryAt = c.clk.Now().Add(j.pause)
	c.event("n%d join retry in %v: %v", j.id, j.pause, err)
}

// joined ends the addition: member v has applied it.
func (c *csim) joined(v *cnode) {
	j := c.join
	c.join = nil
	c.faults.Joined++
	c.node(j.id).joined = true
	c.event("n%d JOINED (applied on n%d, nodes %v)", j.id, v.id, v.meta.Nodes())
}

// checkVoters: n's metadata names exactly the voters of the metadata
// group configuration n has applied (invariant 8). A member that has
// applied no configuration yet (a joiner before its first snapshot) is
// not judged.
func (c *csim) checkVoters(n *cnode) {
	voters := n.eng.MetadataStatus().Voters
	if len(voters) == 0 {
		return
	}
	nodes := n.meta.Nodes()
	if !slices.Equal(nodes, voters) {
		c.fail(8, "n%d's metadata names nodes %v, its metadata group's voters are %v", n.id, nodes, voters)
	}
}

// checkMembership: at quiescence every addition and removal has
// completed, and every member's metadata group has the same voters: the
// members — every node that ever ran but those removed (invariant 8).
func (c *csim) checkMembership() {
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
		if got := n.eng.MetadataStatus().Voters; !slices.Equal(got, want) {
			c.fail(8, "at quiescence n%d's metadata group has voters %v, want %v (every node that ran but those removed)", n.id, got, want)
			return
		}
	}
}
