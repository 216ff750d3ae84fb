package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Nodes removed mid-run (Config.Faults.Remove). A member of a cluster of
// four or more is removed by Engine.RemoveNode's own steps
// (Engine.StartRemoveNode, stepped on another running member's manual
// engine; a call that fails, or whose member crashes, is made again
// through another), after a read barrier:
//
//  1. drain: the DrainNode command re-places every replica the node
//     holds on the other nodes, through the metadata apply-and-retry
//     (host.AskDriver); the removal is abandoned when the metadata
//     refuses it (metadata.ErrNotEnoughNodes: some topic's replication
//     factor needs the node);
//  2. wait: each moved partition's group leader adds the new replica
//     (which is sent a snapshot and fetches the partition log), removes
//     the old one and settles the move (SettleReplicas); the call waits
//     until its member's metadata reports no replica left on the node,
//     and the next call on from where the last stood — for as long as
//     that takes, with every fault going on;
//  3. leave: the metadata group's membership change carrying RemoveNode,
//     proposed again under the same key until it applies (the membership
//     resend, host.ResendDriver).
//
// Once the call returned, the node is closed and leaves the
// simulation: nothing reaches it any more, clients homed on it see it
// down, and every check from then on is over the remaining members. The
// node being removed may crash, stop or be cut off meanwhile like any
// other.
//
// What the moves must keep is checked by the invariants that see them:
// no acknowledged write lost, whichever replicas hold the partition when
// it is read (invariant 3, over the final placement); a node drops its
// copy only once its metadata no longer names it a member of the
// partition's group (invariant 3, at the removal); an acknowledgement
// needs a linked majority of one of the group's configurations during
// the move (invariant 3, checkAckQuorum); at quiescence no move is left
// and each partition is owned by exactly its final replicas (invariant
// 7); the removed node is in no member's metadata or voters (invariant 8).

// minMembers is the fewest members a removal leaves: network partitions
// and crashes need three to leave a majority somewhere.
const minMembers = 3

// removing is the removal of a node in progress: RemoveNode calls made
// through other members until one returns.
type removing struct {
	id uint64
	// The two commands' keys, each fixed for the whole removal so that a
	// proposal made again, by the same call or the next, is deduplicated.
	drainKey, leaveKey host.MetadataKey
	call               *memberCall
	calls              int // the calls made so far
}

// startRemove picks a member and begins removing it.
func (c *sim) startRemove() {
	if c.remove != nil || c.join != nil || c.depth > 0 || len(c.nodes) <= minMembers {
		return
	}
	n := c.nodes[c.rng.IntN(len(c.nodes))]
	c.faults.Removes++
	c.nextSeq++
	drain := host.MetadataKey{Producer: metaProducer, Seq: c.nextSeq}
	c.nextSeq++
	leave := host.MetadataKey{Producer: metaProducer, Seq: c.nextSeq}
	c.remove = &removing{id: n.id, drainKey: drain, leaveKey: leave}
	c.event("n%d REMOVE starts (members %v, down %v)", n.id, c.memberIDs(), n.down)
	c.removeAct()
}

// removers are the members a removal of id can go through: running,
// added, not id itself.
func (c *sim) removers(id uint64) []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.id != id && n.joined && n.reachable() {
			out = append(out, n)
		}
	}
	return out
}

// removeAct moves the removal in progress along: the RemoveNode call in
// flight is stepped, or one is made through another running member. It
// waits while a slow build's nested steps run (the node closed could be
// the one building) and while a failover is checked (the node closed
// could be the one that crashed). A call given up at its deadline (the
// member cut off, the moves not done yet) is made again through
// whichever member runs then: it carries on where the cluster stands.
func (c *sim) removeAct() {
	r := c.remove
	if r == nil || c.viol != nil || c.depth > 0 || c.calming() || c.failover != nil {
		return
	}
	started := r.call == nil
	v, err, done := c.stepCall(&r.call, r.id, "removal", c.removers(r.id), func(v *node) (*host.MemberChange, error) {
		return v.eng.StartRemoveNode(r.drainKey, r.leaveKey, r.id, v.clk.Now().Add(requestTimeout))
	}, &c.ops.RemoveRetries)
	if started && r.call != nil {
		r.calls++
	}
	switch {
	case !done:
	case err == nil:
		c.removed(r, v)
	case errors.Is(err, metadata.ErrNotEnoughNodes):
		c.faults.RemovesRefused++
		c.event("n%d REMOVE refused: %v", r.id, err)
		c.remove = nil
	case errors.Is(err, shard.ErrRetry) || errors.Is(err, shard.ErrOutcomeUnknown) ||
		errors.Is(err, host.ErrMetadataFailed) || errors.Is(err, metadata.ErrNodeBusy):
		c.ops.RemoveCalls++ // called again
	default:
		c.fail(0, "n%d RemoveNode through n%d failed: %v", r.id, v.id, err)
	}
}

// removed ends the removal: RemoveNode returned on member v. The removed node is
// closed, as a host closes it once RemoveNode returns.
func (c *sim) removed(r *removing, v *node) {
	c.remove = nil
	c.faults.Removed++
	c.event("n%d REMOVED (applied on n%d, nodes %v)", r.id, v.id, v.meta.Nodes())
	n := c.node(r.id)
	if n == nil {
		c.fail(0, "n%d removed twice", r.id)
		return
	}
	c.abandon(n)
	n.inj.dead = true // what its shutdown writes reaches nothing anyone checks
	_ = n.ep.Close()
	clear(n.waits)
	n.waits = n.waits[:0]
	if !n.down {
		c.oldMetrics = append(c.oldMetrics, n.m) // a crash recorded them already
		c.noteForwardRefusals(n)
	}
	if err := n.eng.Close(); err != nil {
		c.event("n%d close: %v", n.id, err)
	}
	n.down, n.stopped, n.restartAt = true, false, time.Time{}
	c.nodes = slices.DeleteFunc(c.nodes, func(m *node) bool { return m == n })
	c.gone = append(c.gone, n)
	c.applyCuts()
}

// heldBy describes, as the first member's metadata has them, the
// partitions holding a replica on node id.
func (c *sim) heldBy(id uint64) string {
	var out []string
	for _, p := range c.nodes[0].meta.Snapshot().Partitions {
		if len(p.Replicas) == 0 || !p.Holds(id) {
			continue
		}
		var seen []string
		for _, m := range p.Members() {
			n := c.node(m)
			if n == nil || n.down || int(p.Owner) >= len(n.shards) {
				continue
			}
			lead, err := n.shards[p.Owner].Leader(c.ctx, p.NS)
			st, _ := n.shards[p.Owner].Inspect(c.ctx)
			seen = append(seen, fmt.Sprintf("n%d sees n%d (%v, epoch %d, quiesced %v)", m, lead, errString(err),
				st.Owned[p.NS], slices.Contains(st.Quiesced, p.NS)))
		}
		out = append(out, fmt.Sprintf("%v@%d replicas %v leaving %v joined %v, leaders: %s",
			p.NS, p.CreatedRevision, p.Replicas, p.Leaving, p.Joined, strings.Join(seen, ", ")))
	}
	return fmt.Sprintf("n%d holds %d partitions: %s", id, len(out), strings.Join(out, "; "))
}
