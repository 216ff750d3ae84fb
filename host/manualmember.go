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
	switch {
	case e.cl == nil:
		return errNotClustered
	case !e.cfg.Manual:
		return errNotManual
	case node == 0:
		return fmt.Errorf("%w: node id 0", metadata.ErrInvalidNode)
	}
	data, err := encodeMetaCommand(key, metadata.AddNode{Node: node})
	if err != nil {
		return err
	}
	m := e.cl.meta
	if err := m.proposeConfChange(true, node, data); err != nil {
		return err
	}
	return m.process()
}

// errNotManual refuses a manual engine's step method on a started engine,
// whose metadata member belongs to its metadata goroutine.
var errNotManual = errors.New("parkway: a step method of a manual engine called on a started one")
