package parkway

import (
	"context"
	"fmt"

	"github.com/parkway-io/parkway/transport"
)

// Cluster is a node's cluster API: membership (AddNode, RemoveNode),
// placement (Rebalance) and what the node knows of the cluster (Leader,
// State). Reach it with Node.Cluster; its calls other than State answer
// ErrInvalidArgument on a node opened without Config.Cluster.
type Cluster struct{ n *Node }

// Cluster returns the node's cluster API.
func (n *Node) Cluster() *Cluster { return &n.cluster }

// AddNode adds a node to the cluster at runtime. The node must be running
// (Open with ClusterConfig.Join, its own ID, and Peers naming it and nodes it
// can reach) and reachable through this node's bus. It becomes a member
// of the metadata raft group — one membership change at a time — and
// receives the cluster's metadata; topics and partitions created from
// then on are placed over it too. Existing partitions keep their
// replicas until Rebalance moves some of them onto it. AddNode returns
// once this node applied the change; adding a member again is a no-op.
func (c *Cluster) AddNode(ctx context.Context, id transport.NodeID) error {
	n := c.n
	if err := n.begin(ctx); err != nil {
		return err
	}
	return publicError(n.eng.AddNode(ctx, uint64(id)))
}

// RemoveNode removes a node from the cluster while the cluster serves.
// Every replica the node holds first moves to the other nodes: each
// partition's raft group adds its new replica — which receives a
// snapshot of the partition's state and fetches its log — and only then
// removes the old one, so the group never has fewer replicas than its
// replication factor and no acknowledged write is lost. Then the node
// leaves the metadata group. RemoveNode returns once this node applied
// the removal; the removed node serves nothing more and can be closed
// (it may be down already: its replicas are rebuilt from the others — as
// long as each of its groups keeps a quorum without it; a single-replica
// partition on a dead node cannot move, and RemoveNode waits for it until
// ctx ends).
// Removing a node that is not a member is a no-op. It fails with
// ErrNotEnoughNodes when a topic's replication factor needs the node, and
// with ErrInvalidNode when id is this node (remove a node through another
// member: the node removed may never learn that its removal committed).
// Moving the data takes as long as it takes: bound the call with ctx,
// and call it again after an interruption — it carries on from where the
// cluster stands.
//
// The bus is not told: on a TCP bus, once RemoveNode has returned, call
// TCPBus.RemovePeer(id) on each remaining member's bus, which closes the
// removed node's connections and refuses its frames from then on (as
// AddPeer on every member admitted it before AddNode).
func (c *Cluster) RemoveNode(ctx context.Context, id transport.NodeID) error {
	n := c.n
	if err := n.begin(ctx); err != nil {
		return err
	}
	return publicError(n.eng.RemoveNode(ctx, uint64(id)))
}

// Rebalance spreads the partitions' replicas and their preferred leaders
// evenly over the cluster's nodes, moving replicas as RemoveNode does
// (add the new one, then remove the old one), for example onto nodes
// added with AddNode. Leadership follows the preferred leaders. It
// returns once every move has settled; the cluster serves throughout.
func (c *Cluster) Rebalance(ctx context.Context) error {
	n := c.n
	if err := n.begin(ctx); err != nil {
		return err
	}
	return publicError(n.eng.Rebalance(ctx))
}

// Leader returns the node that leads a partition's raft group, as this
// node sees it (0 while no leader is known). It is ErrInvalidArgument on a
// node that is not part of a cluster.
func (c *Cluster) Leader(ctx context.Context, t Topic, part uint32) (transport.NodeID, error) {
	n := c.n
	if err := n.begin(ctx); err != nil {
		return 0, err
	}
	if !n.eng.Clustered() {
		return 0, fmt.Errorf("%w: not a cluster node", ErrInvalidArgument)
	}
	ns, _, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return 0, err
	}
	lead, err := n.eng.Leader(ctx, ns)
	return transport.NodeID(lead), err
}

// State reports the cluster as this node sees it: the members and
// their liveness, the metadata leader and each partition's leader. It is
// read-only and local: it waits for no other node and proposes nothing,
// so it answers during a partition or without a metadata quorum (with
// what this node last learned). It is ErrInvalidArgument on a node that
// is not part of a cluster.
func (c *Cluster) State(ctx context.Context) (ClusterState, error) {
	n := c.n
	if err := n.begin(ctx); err != nil {
		return ClusterState{}, err
	}
	if !n.eng.Clustered() {
		return ClusterState{}, fmt.Errorf("%w: not a cluster node", ErrInvalidArgument)
	}
	st := n.eng.ClusterStatus()
	out := ClusterState{Node: transport.NodeID(st.Node), MetadataLeader: transport.NodeID(st.MetadataLeader)}
	for _, m := range st.Members {
		out.Members = append(out.Members, MemberState{ID: transport.NodeID(m.ID), Live: m.Live})
	}
	meta := n.eng.Meta()
	// Handles by (stream, topic) id, for this snapshot's partitions.
	topics := make(map[uint64]Topic)
	for _, si := range meta.Streams() {
		s := n.streamHandle(si)
		for _, ti := range meta.Topics(si.ID) {
			topics[uint64(si.ID)<<32|uint64(ti.ID)] = topicHandle(s, ti)
		}
	}
	for _, p := range meta.Snapshot().Partitions {
		t, ok := topics[uint64(p.Stream)<<32|uint64(p.Topic)]
		if !ok || t.Revision > p.CreatedRevision {
			continue // committed after the walk above, or since replaced
		}
		ps := PartitionState{Topic: t, Partition: p.Partition, Leader: transport.NodeID(st.Leaders[p.NS])}
		for _, r := range p.Replicas {
			ps.Replicas = append(ps.Replicas, transport.NodeID(r))
		}
		out.Partitions = append(out.Partitions, ps)
	}
	return out, nil
}
