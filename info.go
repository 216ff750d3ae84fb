package parkway

import (
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// TopicConfig is a topic's storage configuration (CreateTopic's options,
// Admin.SetTopicConfig); zero fields take the node's defaults
// (Config.Fsync, Config.FsyncInterval, Config.RetentionAge,
// Config.RetentionBytes).
type TopicConfig struct {
	// Fsync is when appends to the topic's partitions are made durable.
	Fsync FsyncPolicy
	// FsyncInterval is the loss window of the FsyncInterval policy (0:
	// the node's default); kept, but unused, under the other policies.
	FsyncInterval time.Duration
	// RetentionAge discards messages older than this, by their producer
	// timestamps (0 keeps them, or applies the node's default).
	RetentionAge time.Duration
	// RetentionBytes bounds each partition's size (0: unbounded, or the
	// node's default).
	RetentionBytes int64
	// Replicas is the topic's replication factor in a cluster (see
	// WithReplicas); 0 takes the default. It cannot change once the topic
	// exists: SetTopicConfig keeps it when given 0.
	Replicas int
}

func (c TopicConfig) engine() metadata.TopicConfig {
	return metadata.TopicConfig{Fsync: metadata.FsyncPolicy(c.Fsync), FsyncInterval: c.FsyncInterval,
		RetentionAge: c.RetentionAge, RetentionBytes: c.RetentionBytes, Replicas: c.Replicas}
}

func topicConfigOf(c metadata.TopicConfig) TopicConfig {
	return TopicConfig{Fsync: FsyncPolicy(c.Fsync), FsyncInterval: c.FsyncInterval,
		RetentionAge: c.RetentionAge, RetentionBytes: c.RetentionBytes, Replicas: c.Replicas}
}

// FsyncPolicy says when a topic's appends become durable.
type FsyncPolicy uint8

// The fsync policies.
const (
	// FsyncDefault takes the node's default (Config.Fsync), which itself
	// defaults to FsyncAlways.
	FsyncDefault FsyncPolicy = FsyncPolicy(metadata.FsyncDefault)
	// FsyncAlways acknowledges a produce only after its batch is fsynced:
	// an acknowledged message survives power loss. Concurrent produces to a
	// partition share one fsync (group commit).
	FsyncAlways FsyncPolicy = FsyncPolicy(metadata.FsyncAlways)
	// FsyncInterval acknowledges after the write and fsyncs within
	// FsyncInterval: on power loss, at most the last interval's
	// acknowledged messages are lost. A process crash loses nothing (the
	// data is in the OS page cache).
	FsyncInterval FsyncPolicy = FsyncPolicy(metadata.FsyncInterval)
	// FsyncNever leaves flushing to the operating system (and to Close).
	FsyncNever FsyncPolicy = FsyncPolicy(metadata.FsyncNever)
)

// String returns "default", "always", "interval" or "never".
func (p FsyncPolicy) String() string { return metadata.FsyncPolicy(p).String() }

// TopicInfo is a topic's committed state (Admin.TopicInfo).
type TopicInfo struct {
	// Topic is the topic's handle.
	Topic Topic
	// Partitions is the partition count: ids 0..Partitions-1.
	Partitions int
	// PurgedRevision is the revision of the last PurgeTopic that took
	// effect, 0 if none.
	PurgedRevision uint64
	// Config is the topic's configuration, as last set by CreateTopic or
	// SetTopicConfig, with the replication factor it resolved to.
	Config TopicConfig
}

// PartitionInfo is a committed partition (Admin.Partitions).
type PartitionInfo struct {
	// Topic is the partition's topic; Partition its id in the topic.
	Topic     Topic
	Partition uint32
	// CreatedRevision is the revision of the commit that created the
	// partition: its incarnation (a partition deleted and added again
	// gets a new one).
	CreatedRevision uint64
	// Replicas are the nodes holding the partition in a cluster, the
	// preferred leader first; nil on a single node.
	Replicas []transport.NodeID
}

func partitionInfoOf(t Topic, p metadata.PartitionInfo) PartitionInfo {
	return PartitionInfo{Topic: t, Partition: p.Partition, CreatedRevision: p.CreatedRevision, Replicas: nodeIDs(p.Replicas)}
}

func nodeIDs(ids []uint64) []transport.NodeID {
	if ids == nil {
		return nil
	}
	out := make([]transport.NodeID, len(ids))
	for i, id := range ids {
		out[i] = transport.NodeID(metadata.NodeOf(id)) // a replica's raft id names its node
	}
	return out
}

// GroupInfo is a consumer group's committed state (Admin.Group): its
// members, who holds which partition, and the group's committed offsets.
type GroupInfo struct {
	// Topic is the group's topic; Name the group's name.
	Topic Topic
	Name  string
	// Generation counts the group's rebalances.
	Generation uint64
	// Members are the live members, by id.
	Members []MemberInfo
	// Partitions[i] is partition i's holder and committed offset.
	Partitions []GroupPartition
}

// MemberInfo is one member of a group.
type MemberInfo struct {
	// ID is the member's id in the group (Member.ID); Name its
	// MemberConfig.Name.
	ID             uint64
	Name           string
	SessionTimeout time.Duration
	// LastSeen is when its last logged join or commit was applied, on
	// the group's clock. A heartbeat that changes nothing is not logged:
	// the session is a lease the metadata leader keeps in memory.
	LastSeen time.Time
}

// GroupPartition is one partition of a group.
type GroupPartition struct {
	// Holder is the member holding the partition (0: none); Since the
	// generation from which it has held it.
	Holder uint64
	Since  uint64
	// Offset is the group's committed offset (the next to read), when
	// Committed.
	Offset    uint64
	Committed bool
	// Moving, when not 0, is the member the partition is moving to: Holder
	// keeps it until it releases it (Assignment.Revoking).
	Moving uint64
}

// Member returns the member with the given id.
func (g GroupInfo) Member(id uint64) (MemberInfo, bool) {
	for _, m := range g.Members {
		if m.ID == id {
			return m, true
		}
	}
	return MemberInfo{}, false
}

// Assigned returns the partitions member holds, ascending.
func (g GroupInfo) Assigned(member uint64) []uint32 {
	var out []uint32
	for i, p := range g.Partitions {
		if member != 0 && p.Holder == member {
			out = append(out, uint32(i))
		}
	}
	return out
}

func groupInfoOf(t Topic, g metadata.GroupInfo) GroupInfo {
	out := GroupInfo{Topic: t, Name: g.Name, Generation: g.Generation,
		Members: make([]MemberInfo, len(g.Members)), Partitions: make([]GroupPartition, len(g.Partitions))}
	for i, m := range g.Members {
		out.Members[i] = MemberInfo{ID: m.ID, Name: m.Name, SessionTimeout: m.SessionTimeout, LastSeen: time.Unix(0, m.LastSeen)}
	}
	for i, p := range g.Partitions {
		out.Partitions[i] = GroupPartition{Holder: p.Holder, Since: p.Since, Offset: p.Offset, Committed: p.Committed, Moving: p.Next}
	}
	return out
}
