package parkway

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/parkway-io/parkway/metadata"
)

// ErrNotReady reports that a node does not yet serve everything it holds
// (see Ready).
var ErrNotReady = errors.New("parkway: node not ready")

// Ready reports whether the node serves everything it holds: its
// metadata is applied (in a cluster, this member has applied the metadata
// group's log up to what the leader had committed when asked, which needs
// a leader) and every partition the metadata places on this node is
// materialised on its shard and not fenced. It answers nil when ready,
// an error matching ErrNotReady that says what is missing when not,
// and ErrClosed on a closed node. A readiness probe calls it (parkway
// serve's /readyz); it costs a read barrier in a cluster and a look at
// every shard's partitions.
func (n *Node) Ready(ctx context.Context) error {
	if err := n.begin(ctx); err != nil {
		return err
	}
	if n.eng.Clustered() {
		if err := n.eng.ReadBarrier(ctx); err != nil {
			return fmt.Errorf("%w: metadata not applied: %w", ErrNotReady, err)
		}
	}
	states, err := n.eng.Inspect(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	self := n.eng.NodeID()
	missing, fenced := 0, 0
	var first metadata.Namespace
	for _, p := range n.meta.Snapshot().Partitions {
		if n.eng.Clustered() && !slices.Contains(metadata.NodesOf(p.Replicas), self) {
			continue
		}
		if p.Owner >= len(states) {
			continue // not this node's shard count: cannot be one of its partitions
		}
		st := states[p.Owner]
		switch {
		case st.Owned[p.NS] != p.CreatedRevision:
			if missing == 0 {
				first = p.NS
			}
			missing++
		case slices.Contains(st.Failed, p.NS):
			fenced++
		}
	}
	switch {
	case missing > 0:
		return fmt.Errorf("%w: %d partitions not materialised yet (%v first)", ErrNotReady, missing, first)
	case fenced > 0:
		return fmt.Errorf("%w: %d partitions fenced after a failed fsync, to be rebuilt", ErrNotReady, fenced)
	}
	return nil
}
