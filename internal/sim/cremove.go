package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
)

// Nodes removed mid-run (Config.Faults.Remove). A member of a cluster of
// four or more is removed the way Engine.RemoveNode removes one, through
// another running member:
//
//  1. drain: the DrainNode command (Engine.ProposeMetadata) re-places
//     every replica the node holds on the other nodes; proposed again
//     under the same key when its answer has not come within the
//     engine's forward timeout, through whichever member runs then, and
//     abandoned when the metadata refuses it (metadata.ErrNotEnoughNodes:
//     some topic's replication factor needs the node);
//  2. wait: each moved partition's group leader adds the new replica
//     (which is sent a snapshot and fetches the partition log), removes
//     the old one and settles the move (SettleReplicas); the driver waits
//     until a member's metadata reports no replica left on the node —
//     for as long as that takes, with every fault going on;
//  3. leave: the metadata group's membership change carrying RemoveNode
//     (Engine.ProposeRemoveNode), proposed again like the drain.
//
// Once a member applied the removal, the node is closed and leaves the
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

// removing is the removal of a node in progress.
type removing struct {
	id    uint64
	phase uint8
	// The two commands' keys, each fixed for the whole removal so that a
	// proposal made again is deduplicated.
	drainKey, leaveKey host.MetadataKey
	// p is the proposal of the current step (the drain, then the
	// removal); answer is the drain's outcome on the member it went
	// through.
	p      resend
	answer <-chan host.MetadataResult
	// drainRev is the metadata revision of a member that had applied the
	// drain: one past it that names no id applied the removal (one that
	// names none before it may just not have applied the addition).
	drainRev uint64
}

const (
	removeDrain uint8 = iota
	removeWait
	removeLeave
)

// startRemove picks a member and begins removing it.
func (c *csim) startRemove() {
	if c.remove != nil || c.join != nil || c.depth > 0 || len(c.nodes) <= minMembers {
		return
	}
	n := c.nodes[c.rng.IntN(len(c.nodes))]
	c.faults.Removes++
	c.nextSeq++
	drain := host.MetadataKey{Producer: metaProducer, Seq: c.nextSeq}
	c.nextSeq++
	leave := host.MetadataKey{Producer: metaProducer, Seq: c.nextSeq}
	c.remove = &removing{id: n.id, drainKey: drain, leaveKey: leave, p: c.newResend(n.id, "drain")}
	c.event("n%d REMOVE starts (members %v, down %v)", n.id, c.memberIDs(), n.down)
	c.removeAct()
}

// removers are the members a removal of id can go through: running,
// added, not id itself.
func (c *csim) removers(id uint64) []*cnode {
	var out []*cnode
	for _, n := range c.nodes {
		if n.id != id && n.joined && n.reachable() {
			out = append(out, n)
		}
	}
	return out
}

// removeAct moves the removal in progress along. It waits while a slow
// build's nested steps run (the node closed could be the one building)
// and while a failover is checked (the node closed could be the one that
// crashed).
func (c *csim) removeAct() {
	r := c.remove
	if r == nil || c.viol != nil || c.depth > 0 || c.calming() || c.failover != nil {
		return
	}
	switch r.phase {
	case removeDrain:
		c.removeDrainAct(r)
	case removeWait:
		for _, v := range c.removers(r.id) {
			if _, held := v.meta.Moving(r.id); held == 0 && slices.Contains(v.meta.Draining(), r.id) {
				r.phase = removeLeave
				c.event("n%d drained: no replica left (seen on n%d)", r.id, v.id)
				c.removeLeaveAct(r)
				return
			}
		}
	case removeLeave:
		c.removeLeaveAct(r)
	}
}

// drained moves the removal on to waiting for the moves: v's metadata
// held the drain at revision rev.
func (c *csim) drained(r *removing, v *cnode, rev uint64) {
	r.phase, r.p, r.drainRev = removeWait, c.newResend(r.id, "removal"), rev
	c.event("n%d DRAINING (applied on n%d, revision %d)", r.id, v.id, rev)
	c.removeAct()
}

func (c *csim) removeDrainAct(r *removing) {
	if r.p.d.InFlight() {
		select {
		case res := <-r.answer:
			switch {
			case res.Err == nil:
				c.drained(r, r.p.via, res.Result.Revision)
			case errors.Is(res.Err, metadata.ErrNotEnoughNodes):
				c.faults.RemovesRefused++
				c.event("n%d REMOVE refused: %v", r.id, res.Err)
				c.remove = nil
			default:
				c.resendLater(&r.p, res.Err)
			}
			return
		default:
		}
	}
	draining := func(v *cnode) bool { return slices.Contains(v.meta.Draining(), r.id) }
	done, v := c.resendStep(&r.p, draining, c.removers(r.id), &c.ops.RemoveRetries)
	if done != nil {
		c.drained(r, done, done.meta.Revision())
		return
	}
	if v == nil {
		return
	}
	ch, err := v.eng.ProposeMetadata(r.drainKey, metadata.DrainNode{Node: r.id})
	if err != nil {
		c.event("n%d drain proposed through n%d: %v", r.id, v.id, err)
		c.resendLater(&r.p, err)
		return
	}
	r.answer = ch
	c.proposedThrough(&r.p, v)
}

func (c *csim) removeLeaveAct(r *removing) {
	applied := func(v *cnode) bool { return c.appliedRemoval(r, v) }
	done, v := c.resendStep(&r.p, applied, c.removers(r.id), &c.ops.RemoveRetries)
	if done != nil {
		c.removed(r, done)
		return
	}
	if v == nil {
		return
	}
	// A member whose metadata lags behind the drain refuses the removal
	// as busy (ErrNodeBusy) and proposes nothing: try again later.
	if err := v.eng.ProposeRemoveNode(r.leaveKey, r.id); err != nil {
		c.event("n%d removal proposed through n%d: %v", r.id, v.id, err)
		c.resendLater(&r.p, err)
		return
	}
	c.proposedThrough(&r.p, v)
}

// appliedRemoval reports whether v's metadata holds the removal of r.id.
func (c *csim) appliedRemoval(r *removing, v *cnode) bool {
	return v.meta.Revision() > r.drainRev && !slices.Contains(v.meta.Nodes(), r.id)
}

// removed ends the removal: member v has applied it. The removed node is
// closed, as a host closes it once RemoveNode returns.
func (c *csim) removed(r *removing, v *cnode) {
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
	c.nodes = slices.DeleteFunc(c.nodes, func(m *cnode) bool { return m == n })
	c.gone = append(c.gone, n)
	c.applyCuts()
}

// heldBy describes, as the first member's metadata has them, the
// partitions holding a replica on node id.
func (c *csim) heldBy(id uint64) string {
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
