package metadata

import (
	"fmt"
	"time"
)

// Command is a metadata mutation, applied with Store.Apply. The set is
// sealed: the concrete commands are the struct types of this package. They
// are plain values with exported fields only, so a consensus log can
// serialise them in any encoding. Apply also accepts a non-nil pointer to
// any of them.
type Command interface{ isCommand() }

// CreateStream creates a stream named Name at the lowest free stream id.
type CreateStream struct{ Name string }

// DeleteStream deletes a stream with all its topics and partitions.
//
// Revision, in this and every command that names a stream or topic, is
// optional: when not 0 it is the created revision the named stream (here
// and in CreateTopic, StreamRevision) or topic must have, and the command
// fails with ErrStreamNotFound or ErrTopicNotFound wrapping
// ErrStaleRevision if the id now belongs to another incarnation. Ids are
// reused after a delete, so it is what keeps a command meant for a deleted
// stream or topic from acting on the one that took its id.
type DeleteStream struct {
	Stream   uint32
	Revision uint64
}

// CreateTopic creates a topic named Name in Stream, at the lowest free topic
// id of that stream, with partitions 0..Partitions-1. Config is optional:
// its zero value asks for the node's defaults throughout.
type CreateTopic struct {
	Stream     uint32
	Name       string
	Partitions int
	Config     TopicConfig
	// StreamRevision, when not 0, is the stream's created revision (see
	// DeleteStream).
	StreamRevision uint64
}

// DeleteTopic deletes a topic with all its partitions.
type DeleteTopic struct {
	Stream, Topic uint32
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// CreatePartitions appends Count partitions to a topic, with ids following
// its highest.
type CreatePartitions struct {
	Stream, Topic uint32
	Count         int
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// DeletePartitions removes the Count highest-numbered partitions of a topic.
// It leaves at least one (ErrInvalidPartitionCount otherwise), as
// CreateTopic makes none with fewer; a topic restored from a log written
// before this rule may have none.
type DeletePartitions struct {
	Stream, Topic uint32
	Count         int
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// PurgeTopic asks for the messages of every partition of a topic to be
// discarded. The store only records the request (TopicInfo.PurgedRevision)
// and wakes subscribers; the storage layer acts on it.
type PurgeTopic struct {
	Stream, Topic uint32
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// SetTopicConfig replaces a topic's configuration. It always bumps the
// revision and wakes subscribers, even when the configuration is unchanged:
// retention is partition-shaping work for the storage layer.
type SetTopicConfig struct {
	Stream, Topic uint32
	Config        TopicConfig
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// TopicConfig is the per-topic storage configuration. Its zero value means
// "the node's defaults" for every field; a topic stores it as given, and the
// storage layer resolves defaults when it acts on it.
type TopicConfig struct {
	// Fsync is when appends to the topic's partitions are made durable.
	Fsync FsyncPolicy
	// FsyncInterval is the sync period under the FsyncInterval policy;
	// zero means the node's default interval, negative is invalid (like
	// every negative duration here). It is kept, but unused, under the
	// other policies.
	FsyncInterval time.Duration
	// RetentionAge discards messages older than this; zero keeps them
	// (or applies the node's default). Negative is invalid.
	RetentionAge time.Duration
	// RetentionBytes bounds each partition's size; zero means unbounded
	// (or the node's default). Negative is invalid.
	RetentionBytes int64
	// Replicas is the topic's replication factor in a cluster: each of its
	// partitions is a raft group on this many nodes, placed by the
	// metadata (see PartitionInfo.Replicas). Zero means the default,
	// min(DefaultReplicas, the cluster's node count); otherwise it must
	// lie in 1..min(MaxReplicas, node count). A single node takes 0 or 1.
	// A created topic records the factor it resolved to, and the factor
	// cannot change afterwards (SetTopicConfig keeps it when given 0).
	Replicas int
}

// Validate reports a policy this package does not know, or a negative
// duration or size, as ErrInvalidTopicConfig.
func (c TopicConfig) Validate() error {
	switch {
	case c.Fsync > FsyncNever:
		return fmt.Errorf("%w: unknown fsync policy %v", ErrInvalidTopicConfig, c.Fsync)
	case c.FsyncInterval < 0:
		return fmt.Errorf("%w: negative fsync interval %v", ErrInvalidTopicConfig, c.FsyncInterval)
	case c.RetentionAge < 0:
		return fmt.Errorf("%w: negative retention age %v", ErrInvalidTopicConfig, c.RetentionAge)
	case c.RetentionBytes < 0:
		return fmt.Errorf("%w: negative retention bytes %d", ErrInvalidTopicConfig, c.RetentionBytes)
	case c.Replicas < 0 || c.Replicas > MaxReplicas:
		return fmt.Errorf("%w: replication factor %d, want 0 (the default) or 1..%d", ErrInvalidTopicConfig, c.Replicas, MaxReplicas)
	}
	return nil
}

// FsyncPolicy says when a topic's appends are fsynced.
type FsyncPolicy uint8

const (
	// FsyncDefault leaves the choice to the node's default policy.
	FsyncDefault FsyncPolicy = iota
	// FsyncAlways syncs every append before acknowledging it.
	FsyncAlways
	// FsyncInterval syncs periodically, every TopicConfig.FsyncInterval
	// (the node's default interval when that is zero).
	FsyncInterval
	// FsyncNever leaves syncing to the operating system.
	FsyncNever
)

// String returns "default", "always", "interval" or "never", or
// FsyncPolicy(n) for an unknown value.
func (p FsyncPolicy) String() string {
	switch p {
	case FsyncDefault:
		return "default"
	case FsyncAlways:
		return "always"
	case FsyncInterval:
		return "interval"
	case FsyncNever:
		return "never"
	}
	return fmt.Sprintf("FsyncPolicy(%d)", uint8(p))
}

func (CreateStream) isCommand()     {}
func (DeleteStream) isCommand()     {}
func (CreateTopic) isCommand()      {}
func (DeleteTopic) isCommand()      {}
func (CreatePartitions) isCommand() {}
func (DeletePartitions) isCommand() {}
func (PurgeTopic) isCommand()       {}
func (SetTopicConfig) isCommand()   {}
