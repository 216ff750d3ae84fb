package parkway

import (
	"context"
	"fmt"
)

// ClusterState is a cluster as one node sees it (Node.ClusterState): a
// copy, so the caller may keep and modify it.
type ClusterState struct {
	// Node is the node that answered.
	Node NodeID
	// MetadataLeader is the metadata group's leader as that node last
	// learned it; 0 while none is known (an election under way).
	MetadataLeader NodeID
	// Members are the cluster's nodes, as the committed metadata lists
	// them, in ascending id order.
	Members []MemberState
	// Partitions are every committed partition, in stream, topic and
	// partition id order.
	Partitions []PartitionState
}

// MemberState is one member of a cluster as a node judges it.
type MemberState struct {
	ID NodeID
	// Live is the answering node's liveness judgement: false once nothing
	// at all arrived from the member for Cluster.LivenessTimeout (then its
	// partitions elect leaders among the others), true again at its
	// first message. The answering node is always live.
	Live bool
}

// PartitionState is one partition and its raft group's leader.
type PartitionState struct {
	// Topic is the partition's topic, a handle usable for the client
	// calls; Partition its id within the topic.
	Topic     Topic
	Partition uint32
	// Replicas are the nodes placed to hold it, the preferred leader
	// first.
	Replicas []NodeID
	// Leader is its group's leader as the answering node knows it: known
	// for the partitions it holds a replica of (0 while an election is
	// under way), and 0 for the others.
	Leader NodeID
}

// ClusterState reports the cluster as this node sees it: the members and
// their liveness, the metadata leader and each partition's leader. It is
// read-only and local: it waits for no other node and proposes nothing,
// so it answers during a partition or without a metadata quorum (with
// what this node last learned). It is ErrInvalidArgument on a node that
// is not part of a cluster.
func (n *Node) ClusterState(ctx context.Context) (ClusterState, error) {
	if err := n.begin(ctx); err != nil {
		return ClusterState{}, err
	}
	if !n.eng.Clustered() {
		return ClusterState{}, fmt.Errorf("%w: not a cluster node", ErrInvalidArgument)
	}
	st := n.eng.ClusterStatus()
	out := ClusterState{Node: NodeID(st.Node), MetadataLeader: NodeID(st.MetadataLeader)}
	for _, m := range st.Members {
		out.Members = append(out.Members, MemberState{ID: NodeID(m.ID), Live: m.Live})
	}
	meta := n.eng.Meta()
	// Handles by (stream, topic) id, for this snapshot's partitions.
	topics := make(map[uint64]Topic)
	for _, si := range meta.Streams() {
		s := streamHandle(si)
		for _, ti := range meta.Topics(si.ID) {
			topics[uint64(si.ID)<<32|uint64(ti.ID)] = topicHandle(s, ti)
		}
	}
	for _, p := range meta.Snapshot().Partitions {
		t, ok := topics[uint64(p.Stream)<<32|uint64(p.Topic)]
		if !ok || t.Revision > p.CreatedRevision {
			continue // committed after the walk above, or since replaced
		}
		ps := PartitionState{Topic: t, Partition: p.Partition, Leader: NodeID(st.Leaders[p.NS])}
		for _, r := range p.Replicas {
			ps.Replicas = append(ps.Replicas, NodeID(r))
		}
		out.Partitions = append(out.Partitions, ps)
	}
	return out, nil
}
