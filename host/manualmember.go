package host

import (
	"errors"
	"fmt"
	"slices"

	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/metadata"
)

// ProposeAddNode is AddNode's proposal for a manual engine, whose driver
// does the waiting that AddNode does: it proposes, through this node's
// metadata group member, the membership change that adds node to the
// metadata group as a learner, carrying the AddNode command under key,
// and handles what the proposal made ready. It returns once raft took
// the proposal. The change applies when it commits — on this node, when
// Meta().Nodes() names node — or never: raft drops a change proposed
// while another is in flight, and a proposal is lost with its leader. So
// the driver proposes again under the same key after a bounded wait
// (ForwardTimeout, as AddNode does); a second commit of the same change
// is a no-op, its command a duplicate (and a learner's addition that
// finds the node promoted already changes nothing). An error wrapping
// shard.ErrRetry means that no leader is known or that the member is
// down: propose again after a pause. The promotion to voter is the
// metadata leader's, on a TickMetadata once the learner has caught up
// (MetadataStatus: Voters then names it, Learners no longer).
func (e *Engine) ProposeAddNode(key MetadataKey, node uint64) error {
	if err := e.manualMembership(node); err != nil {
		return err
	}
	return e.proposeVoters(key, true, node, metadata.AddNode{Node: node})
}

// manualMembership checks what both manual membership proposals need: a
// manual clustered engine, and a node id.
func (e *Engine) manualMembership(node uint64) error {
	switch {
	case e.cl == nil:
		return errNotClustered
	case !e.cfg.Manual:
		return errNotManual
	case raftid.CheckNode(node) != nil:
		return fmt.Errorf("%w: %w", metadata.ErrInvalidNode, raftid.CheckNode(node))
	}
	return nil
}

// proposeVoters proposes the metadata group's membership change of node
// carrying cmd under key, and handles what the proposal made ready.
func (e *Engine) proposeVoters(key MetadataKey, add bool, node uint64, cmd metadata.Command) error {
	data, err := encodeMetaCommand(key, cmd)
	if err != nil {
		return err
	}
	return memberPort{e.cl.meta}.propose(metaOp{change: node, remove: !add, data: data, reply: make(chan MetadataResult, 1)})
}

// ProposeRemoveNode is the last step of RemoveNode for a manual engine,
// whose driver does the draining and the waiting RemoveNode does: it
// proposes, through this node's metadata group member, the membership
// change that removes node from the metadata group, carrying the
// RemoveNode command under key. The node must be drained first
// (metadata.DrainNode applied here, and no replica left on it:
// Meta().Moving(node) reports none held); otherwise ProposeRemoveNode
// fails with metadata.ErrNodeBusy and proposes nothing, because a
// removal whose command the metadata then refused would still take the
// node out of the group's voters, and the metadata would name a node the
// group no longer has. A node cannot remove itself (it may never learn
// that its removal committed). The change applies when Meta().Nodes() no
// longer names node; as with ProposeAddNode, the driver proposes again
// under the same key after ForwardTimeout, and after a pause on an error
// wrapping shard.ErrRetry.
func (e *Engine) ProposeRemoveNode(key MetadataKey, node uint64) error {
	if err := e.manualMembership(node); err != nil {
		return err
	}
	if err := e.cl.notSelf(node); err != nil {
		return err
	}
	if err := e.removable(node); err != nil {
		return err
	}
	return e.proposeVoters(key, false, node, metadata.RemoveNode{Node: node})
}

// removable refuses the removal of a node not drained yet: DrainNode
// applied here, and no replica left on it.
func (e *Engine) removable(node uint64) error {
	if !slices.Contains(e.meta.Draining(), node) {
		return fmt.Errorf("%w: node %d is not drained (DrainNode first)", metadata.ErrNodeBusy, node)
	}
	if _, held := e.meta.Moving(node); held > 0 {
		return fmt.Errorf("%w: node %d still holds replicas of %d partitions", metadata.ErrNodeBusy, node, held)
	}
	return nil
}

// errNotManual refuses a manual engine's step method on a started engine,
// whose metadata member belongs to its metadata goroutine.
var errNotManual = errors.New("parkway: a step method of a manual engine called on a started one")
