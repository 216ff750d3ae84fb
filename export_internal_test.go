package parkway

import (
	"context"
	"maps"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Test-only access to a Node's committed metadata, for the external tests
// (package parkway_test) that check a refused call changed nothing.

// MetadataState describes everything committed on a node.
type MetadataState struct {
	Revision uint64
	Streams  []metadata.StreamInfo
	Topics   map[uint32][]metadata.TopicInfo
}

// CommittedState returns n's committed revision, streams and topics.
func CommittedState(n *Node) MetadataState {
	st := MetadataState{Revision: n.meta.Revision(), Streams: n.meta.Streams(), Topics: map[uint32][]metadata.TopicInfo{}}
	for _, s := range st.Streams {
		st.Topics[s.ID] = n.meta.Topics(s.ID)
	}
	return st
}

// KindPartitionRaft is the bus message kind of a partition's raft traffic
// (payload: the sender's incarnation, 8 bytes little-endian, then the
// marshalled raft message), for tests that speak to a Node as a peer.
const KindPartitionRaft = host.KindPartitionRaft

// HeldPartitions returns the partitions materialised on n's shards, with
// their incarnations.
func HeldPartitions(n *Node) map[metadata.Namespace]uint64 {
	held := map[metadata.Namespace]uint64{}
	for _, s := range n.eng.Shards() {
		st, err := s.Inspect(context.Background())
		if err != nil {
			continue
		}
		maps.Copy(held, st.Owned)
	}
	return held
}

// PartitionLeader is the node n believes leads ns's raft group (0: none
// known, or n holds no replica).
func PartitionLeader(n *Node, ns metadata.Namespace) uint64 {
	lead, _ := n.eng.Leader(context.Background(), ns)
	return lead
}

// ApplyMetadata commits cmd through n's metadata (Engine.ApplyMetadata),
// for tests that commit a command only the engine proposes (a re-seed).
func ApplyMetadata(ctx context.Context, n *Node, cmd metadata.Command) (metadata.Result, error) {
	return n.eng.ApplyMetadata(ctx, cmd)
}

// ClusterNodes are the nodes n's committed metadata names.
func ClusterNodes(n *Node) []uint64 { return n.meta.Nodes() }

// EnginePartitions is Admin.Partitions as the engine's metadata describes
// them (namespaces, owner shards, replica ids), for tests that look
// beneath the client API.
func EnginePartitions(ctx context.Context, n *Node, t Topic) ([]metadata.PartitionInfo, error) {
	if _, err := n.Admin().Partitions(ctx, t); err != nil {
		return nil, err
	}
	info, err := n.topicInfo(ctx, t)
	if err != nil {
		return nil, err
	}
	var out []metadata.PartitionInfo
	for p := range uint32(info.Partitions) {
		ns, _ := metadata.NewNamespace(t.Stream.ID, t.ID, p)
		if pi, ok := n.meta.Partition(ns); ok && pi.CreatedRevision >= t.Revision {
			out = append(out, pi)
		}
	}
	return out, nil
}

// MetadataApplied returns the metadata raft log index n applied last (0
// on a single node).
func MetadataApplied(n *Node) uint64 { return n.eng.MetadataApplied() }

// RaftApplied is the raft index n's replica of ns applied last (0: n
// holds no replica of ns).
func RaftApplied(n *Node, ns metadata.Namespace) uint64 {
	for _, s := range n.eng.Shards() {
		st, err := s.Inspect(context.Background())
		if err != nil {
			continue
		}
		if i, ok := st.Applied[ns]; ok {
			return i
		}
	}
	return 0
}

// HibernatedReplicas is how many of n's replicated partitions have their
// follower hibernated (no raft node held).
func HibernatedReplicas(n *Node) int {
	return countShards(n, func(st shard.State) int { return len(st.Hibernated) })
}

// QuiescedReplicas is how many of n's replicated partitions have their
// raft group quiesced (not ticked).
func QuiescedReplicas(n *Node) int {
	return countShards(n, func(st shard.State) int { return len(st.Quiesced) })
}

// countShards sums count over the states of n's shards.
func countShards(n *Node, count func(shard.State) int) int {
	sum := 0
	for _, s := range n.eng.Shards() {
		if st, err := s.Inspect(context.Background()); err == nil {
			sum += count(st)
		}
	}
	return sum
}
