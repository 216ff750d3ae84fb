package host

import (
	"errors"
	"fmt"

	"github.com/parkway-io/parkway/metadata"
)

// ProposeAddNode is AddNode's proposal for a manual engine, whose driver
// does the waiting that AddNode does: it proposes, through this node's
// metadata group member, the membership change that adds node to the
// metadata group, carrying the AddNode command under key, and handles
// what the proposal made ready. It returns once raft took the proposal.
// The change applies when it commits — on this node, when Meta().Nodes()
// names node — or never: raft drops a change proposed while another is
// in flight, and a proposal is lost with its leader. So the driver
// proposes again under the same key after a bounded wait
// (ForwardTimeout, as AddNode does); a second commit of the same change
// is a no-op, its command a duplicate. An error wrapping shard.ErrRetry
// means that no leader is known or that the member is down: propose
// again after a pause.
func (e *Engine) ProposeAddNode(key MetadataKey, node uint64) error {
	return e.proposeMembership(key, true, node, metadata.AddNode{Node: node})
}

// ProposeRemoveNode is ProposeAddNode for RemoveNode's last step: the
// membership change that removes node from the metadata group, carrying
// the RemoveNode command. As RemoveNode does, the driver proposes it once
// the node holds no replica (Meta().Moving(node) reports none held, after
// a DrainNode command); it applies when Meta().Nodes() no longer names
// node.
func (e *Engine) ProposeRemoveNode(key MetadataKey, node uint64) error {
	return e.proposeMembership(key, false, node, metadata.RemoveNode{Node: node})
}

func (e *Engine) proposeMembership(key MetadataKey, add bool, node uint64, cmd metadata.Command) error {
	switch {
	case e.cl == nil:
		return errNotClustered
	case !e.cfg.Manual:
		return errNotManual
	case node == 0:
		return fmt.Errorf("%w: node id 0", metadata.ErrInvalidNode)
	}
	data, err := encodeMetaCommand(key, cmd)
	if err != nil {
		return err
	}
	m := e.cl.meta
	if err := m.proposeConfChange(add, node, data); err != nil {
		return err
	}
	return m.process()
}

// errNotManual refuses a manual engine's step method on a started engine,
// whose metadata member belongs to its metadata goroutine.
var errNotManual = errors.New("parkway: a step method of a manual engine called on a started one")
