package parkway

import (
	"context"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// TopicConfig is a topic's storage configuration; zero fields take the
// node's defaults (Config.Fsync, Config.FsyncInterval, Config.RetentionAge,
// Config.RetentionBytes).
type TopicConfig = metadata.TopicConfig

// FsyncPolicy says when a topic's appends become durable.
type FsyncPolicy = metadata.FsyncPolicy

// The fsync policies.
const (
	// FsyncDefault takes the node's default (Config.Fsync), which itself
	// defaults to FsyncAlways.
	FsyncDefault = metadata.FsyncDefault
	// FsyncAlways acknowledges a produce only after its batch is fsynced:
	// an acknowledged message survives power loss. Concurrent produces to a
	// partition share one fsync (group commit).
	FsyncAlways = metadata.FsyncAlways
	// FsyncInterval acknowledges after the write and fsyncs within
	// FsyncInterval: on power loss, at most the last interval's
	// acknowledged messages are lost. A process crash loses nothing (the
	// data is in the OS page cache).
	FsyncInterval = metadata.FsyncInterval
	// FsyncNever leaves flushing to the operating system (and to Close).
	FsyncNever = metadata.FsyncNever
)

// TopicOption configures a topic at creation.
type TopicOption func(*TopicConfig)

// WithFsync sets the topic's fsync policy; interval is used by
// FsyncInterval (0 takes the node's default).
func WithFsync(policy FsyncPolicy, interval time.Duration) TopicOption {
	return func(c *TopicConfig) { c.Fsync, c.FsyncInterval = policy, interval }
}

// WithRetention bounds each of the topic's partitions by age and by size
// (0 leaves a bound unset). Retention deletes whole segments, oldest first,
// never the one being written. Age is judged by the messages' producer
// timestamps (Message.Timestamp, as Kafka's CreateTime): a segment goes
// once its newest timestamp is older than age.
func WithRetention(age time.Duration, bytes int64) TopicOption {
	return func(c *TopicConfig) { c.RetentionAge, c.RetentionBytes = age, bytes }
}

// WithReplicas sets the topic's replication factor in a cluster: each
// partition is a raft group on r nodes, placed by the metadata so that
// replicas and preferred leaders spread evenly over the nodes. 0 takes the
// default, min(3, the cluster's node count); r above the node count is
// refused with ErrInvalidTopicConfig. A node holding no replica of a
// partition forwards its requests to one that does. The factor cannot
// change once the topic exists.
func WithReplicas(r int) TopicOption {
	return func(c *TopicConfig) { c.Replicas = r }
}

// SetTopicConfig replaces a topic's storage configuration. The change
// reaches the partitions on the next reconcile pass.
func (n *Node) SetTopicConfig(ctx context.Context, t Topic, cfg TopicConfig) error {
	return n.topicCommand(ctx, t, metadata.SetTopicConfig{Stream: t.Stream.ID, Topic: t.ID, Revision: t.Revision, Config: cfg})
}

// PurgeTopic removes every message of every partition of a topic. Offsets
// are not reused: the partitions continue from where they were, so stored
// consumer offsets stay meaningful.
func (n *Node) PurgeTopic(ctx context.Context, t Topic) error {
	if err := n.begin(ctx); err != nil {
		return err
	}
	info, err := n.topicInfo(ctx, t)
	if err != nil {
		return err
	}
	if err := n.topicCommand(ctx, t, metadata.PurgeTopic{Stream: t.Stream.ID, Topic: t.ID, Revision: t.Revision}); err != nil {
		return err
	}
	for p := range uint32(info.Partitions) {
		if err := n.partitionOp(ctx, shard.OpPurge, t, p, 0); err != nil {
			return fmt.Errorf("purge partition %d: %w", p, err)
		}
	}
	return nil
}

// TruncatePartition makes a partition's messages below offset unreadable
// and deletes the segments holding only such messages.
func (n *Node) TruncatePartition(ctx context.Context, t Topic, part uint32, before uint64) error {
	return n.partitionOp(ctx, shard.OpTruncate, t, part, before)
}

// partitionOp routes a storage operation to a partition's owner.
func (n *Node) partitionOp(ctx context.Context, op shard.Op, t Topic, part uint32, offset uint64) error {
	if err := n.begin(ctx); err != nil {
		return err
	}
	ns, epoch, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return err
	}
	_, err = n.call(ctx, &shard.Request{Op: op, NS: ns, Epoch: epoch, Offset: offset}, t, part)
	return err
}
