package parkway

import (
	"context"
	"time"

	"github.com/parkway-io/parkway/shard"
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
