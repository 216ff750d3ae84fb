package parkway

import "github.com/parkway-io/parkway/transport"

// ClusterState is a cluster as one node sees it (Cluster.State): a
// copy, so the caller may keep and modify it.
type ClusterState struct {
	// Node is the node that answered.
	Node transport.NodeID
	// MetadataLeader is the metadata group's leader as that node last
	// learned it; 0 while none is known (an election under way).
	MetadataLeader transport.NodeID
	// Members are the cluster's nodes, as the committed metadata lists
	// them, in ascending id order.
	Members []MemberState
	// Partitions are every committed partition, in stream, topic and
	// partition id order.
	Partitions []PartitionState
}

// MemberState is one member of a cluster as a node judges it.
type MemberState struct {
	ID transport.NodeID
	// Live is the answering node's liveness judgement: false once nothing
	// at all arrived from the member for ClusterConfig.LivenessTimeout (then its
	// partitions elect leaders among the others), true again at its
	// first message. The answering node is always live.
	Live bool
	// Learner is set while the member is a learner of the metadata raft
	// group, as the answering node last applied the group's configuration:
	// added by AddNode, receiving the metadata but voting in nothing until
	// it has caught up and the metadata leader promotes it.
	Learner bool
}

// PartitionState is one partition and its raft group's leader.
type PartitionState struct {
	// Topic is the partition's topic, a handle usable for the client
	// calls; Partition its id within the topic.
	Topic     Topic
	Partition uint32
	// Replicas are the nodes placed to hold it, the preferred leader
	// first.
	Replicas []transport.NodeID
	// Leader is its group's leader as the answering node knows it: known
	// for the partitions it holds a replica of (0 while an election is
	// under way), and 0 for the others.
	Leader transport.NodeID
}
