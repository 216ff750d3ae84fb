package parkway

import (
	"context"
	"errors"
	"fmt"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Admin is a node's administration API: streams, topics and their
// partitions and configuration, consumer groups, the named consumers'
// stored offsets, purge and truncation, listings and descriptions. Reach
// it with Node.Admin; it is safe for concurrent use and valid as long as
// its Node (after Close its calls return ErrClosed).
//
// The lookups a producer needs (Node.Stream, Node.Topic) stay on the
// Node; everything that changes or lists the metadata is here.
type Admin struct{ n *Node }

// Admin returns the node's administration API.
func (n *Node) Admin() *Admin { return &n.admin }

// Shards returns the number of shards.
func (a *Admin) Shards() int {
	return a.n.eng.ShardCount()
}

// CreateStream creates a stream and returns its handle (the stream takes
// the lowest free id).
func (a *Admin) CreateStream(ctx context.Context, name string) (Stream, error) {
	n := a.n
	res, err := n.apply(ctx, metadata.CreateStream{Name: name})
	if err != nil {
		return Stream{}, err
	}
	return Stream{ID: res.Stream, Revision: res.Revision, Name: name, origin: n.origin}, nil
}

// DeleteStream deletes a stream with all its topics and partitions. A
// handle whose stream is already gone is ErrStreamNotFound (wrapping
// ErrStaleHandle): a stream that took its id is never deleted by it.
func (a *Admin) DeleteStream(ctx context.Context, s Stream) error {
	n := a.n
	if err := n.begin(ctx); err != nil {
		return err
	}
	if err := n.liveStream(ctx, s); err != nil {
		return err
	}
	_, err := n.apply(ctx, metadata.DeleteStream{Stream: s.ID, Revision: s.Revision})
	return n.staleCommand(err, s.String())
}

// Streams lists the committed streams in id order.
func (a *Admin) Streams(ctx context.Context) ([]Stream, error) {
	n := a.n
	if err := n.lookup(ctx); err != nil {
		return nil, err
	}
	infos := n.meta.Streams()
	out := make([]Stream, len(infos))
	for i, info := range infos {
		out[i] = n.streamHandle(info)
	}
	return out, nil
}

// CreateTopic creates a topic with partitions partitions in stream s and
// returns its handle. The call returns once the topic is committed; its
// partitions materialise asynchronously, and requests that arrive first
// are parked until they do.
func (a *Admin) CreateTopic(ctx context.Context, s Stream, name string, partitions int, opts ...TopicOption) (Topic, error) {
	n := a.n
	if err := n.begin(ctx); err != nil {
		return Topic{}, err
	}
	if err := n.liveStream(ctx, s); err != nil {
		return Topic{}, err
	}
	var cfg TopicConfig
	for _, o := range opts {
		o(&cfg)
	}
	res, err := n.apply(ctx, metadata.CreateTopic{Stream: s.ID, StreamRevision: s.Revision, Name: name, Partitions: partitions, Config: cfg.engine()})
	if err != nil {
		return Topic{}, n.staleCommand(err, s.String())
	}
	return Topic{Stream: s, ID: res.Topic, Revision: res.Revision, Name: name}, nil
}

// DeleteTopic deletes a topic and its partitions.
func (a *Admin) DeleteTopic(ctx context.Context, t Topic) error {
	n := a.n
	return n.topicCommand(ctx, t, metadata.DeleteTopic{Stream: t.Stream.ID, Topic: t.ID, Revision: t.Revision})
}

// CreatePartitions adds count partitions to a topic (ids continue densely).
func (a *Admin) CreatePartitions(ctx context.Context, t Topic, count int) error {
	n := a.n
	return n.topicCommand(ctx, t, metadata.CreatePartitions{Stream: t.Stream.ID, Topic: t.ID, Revision: t.Revision, Count: count})
}

// DeletePartitions removes count partitions from the tail of a topic. A
// topic keeps at least one: removing all of them (or more) is
// ErrInvalidPartitionCount; DeleteTopic removes a topic whole.
func (a *Admin) DeletePartitions(ctx context.Context, t Topic, count int) error {
	n := a.n
	return n.topicCommand(ctx, t, metadata.DeletePartitions{Stream: t.Stream.ID, Topic: t.ID, Revision: t.Revision, Count: count})
}

// Topics lists stream s's committed topics in id order, or
// ErrStreamNotFound if s is gone.
func (a *Admin) Topics(ctx context.Context, s Stream) ([]Topic, error) {
	n := a.n
	if err := n.lookup(ctx); err != nil {
		return nil, err
	}
	if err := n.liveStream(ctx, s); err != nil {
		return nil, err
	}
	infos := n.meta.Topics(s.ID)
	if err := n.streamAlive(s); err != nil {
		return nil, err
	}
	out := make([]Topic, len(infos))
	for i, info := range infos {
		out[i] = topicHandle(s, info)
	}
	return out, nil
}

// TopicInfo returns topic t's committed state (partition count,
// configuration, last purge).
func (a *Admin) TopicInfo(ctx context.Context, t Topic) (TopicInfo, error) {
	n := a.n
	if err := n.lookup(ctx); err != nil {
		return TopicInfo{}, err
	}
	info, err := n.topicInfo(ctx, t)
	if err != nil {
		return TopicInfo{}, err
	}
	return TopicInfo{Topic: t, Partitions: info.Partitions, PurgedRevision: info.PurgedRevision, Config: topicConfigOf(info.Config)}, nil
}

// Partitions lists the committed partitions of topic t in id order.
func (a *Admin) Partitions(ctx context.Context, t Topic) ([]PartitionInfo, error) {
	n := a.n
	if err := n.lookup(ctx); err != nil {
		return nil, err
	}
	info, err := n.topicInfo(ctx, t)
	if err != nil {
		return nil, err
	}
	out := make([]PartitionInfo, 0, info.Partitions)
	for p := range uint32(info.Partitions) {
		ns, _ := metadata.NewNamespace(t.Stream.ID, t.ID, p)
		if pi, ok := n.meta.Partition(ns); ok && pi.CreatedRevision >= t.Revision {
			out = append(out, partitionInfoOf(t, pi))
		}
	}
	if _, err := n.topicAlive(t); err != nil {
		return nil, err
	}
	return out, nil
}

// SetTopicConfig replaces a topic's storage configuration. The change
// reaches the partitions on the next reconcile pass.
func (a *Admin) SetTopicConfig(ctx context.Context, t Topic, cfg TopicConfig) error {
	n := a.n
	return n.topicCommand(ctx, t, metadata.SetTopicConfig{Stream: t.Stream.ID, Topic: t.ID, Revision: t.Revision, Config: cfg.engine()})
}

// PurgeTopic removes every message of every partition of a topic. Offsets
// are not reused: the partitions continue from where they were, so stored
// consumer offsets stay meaningful.
func (a *Admin) PurgeTopic(ctx context.Context, t Topic) error {
	n := a.n
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
func (a *Admin) TruncatePartition(ctx context.Context, t Topic, part uint32, before uint64) error {
	n := a.n
	return n.partitionOp(ctx, shard.OpTruncate, t, part, before)
}

// CreateGroup creates a consumer group on topic t. Group names follow the
// rules of stream and topic names and are unique per topic.
func (a *Admin) CreateGroup(ctx context.Context, t Topic, name string) error {
	n := a.n
	return n.topicCommand(ctx, t, metadata.CreateGroup{Stream: t.Stream.ID, Topic: t.ID, Name: name, Revision: t.Revision})
}

// DeleteGroup deletes a consumer group with its members and committed
// offsets. Its members' next calls fail with ErrGroupNotFound.
func (a *Admin) DeleteGroup(ctx context.Context, t Topic, name string) error {
	n := a.n
	return n.topicCommand(ctx, t, metadata.DeleteGroup{Stream: t.Stream.ID, Topic: t.ID, Name: name, Revision: t.Revision})
}

// Group returns a consumer group's committed state: members, assignment
// and committed offsets. It is linearizable in a cluster (read barrier).
func (a *Admin) Group(ctx context.Context, t Topic, name string) (GroupInfo, error) {
	n := a.n
	if err := n.lookup(ctx); err != nil {
		return GroupInfo{}, err
	}
	if _, err := n.topicInfo(ctx, t); err != nil {
		return GroupInfo{}, err
	}
	g, ok := n.meta.Group(t.Stream.ID, t.ID, name)
	if !ok {
		return GroupInfo{}, fmt.Errorf("%w: %q on %v", ErrGroupNotFound, name, t)
	}
	return groupInfoOf(t, g), nil
}

// PartitionOffsets returns a partition's start and end offsets and, if
// consumer is not empty, the consumer's stored offset and lag. In a
// cluster it is read from the partition's leader.
func (a *Admin) PartitionOffsets(ctx context.Context, t Topic, part uint32, consumer string) (PartitionOffsets, error) {
	n := a.n
	if err := n.begin(ctx); err != nil {
		return PartitionOffsets{}, err
	}
	if consumer != "" {
		if err := validConsumer(consumer); err != nil {
			return PartitionOffsets{}, err
		}
	}
	ns, epoch, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return PartitionOffsets{}, err
	}
	req := &shard.Request{Op: shard.OpOffsets, NS: ns, Epoch: epoch, Consumer: consumer, FromLeader: true}
	r, err := n.call(ctx, req, t, part)
	if err != nil {
		return PartitionOffsets{}, err
	}
	po := PartitionOffsets{Start: r.Start, End: r.End, Stored: r.Offset, HasStored: r.Found}
	pos := po.Start
	if po.HasStored && po.Stored > pos {
		pos = min(po.Stored, po.End)
	}
	po.Lag = po.End - pos
	return po, nil
}

// StoreOffset records consumer's offset in a partition: the next offset it
// will read. An offset past the partition's end is refused with
// ErrOffsetOutOfRange. One below its start (messages the consumer never
// read were truncated meanwhile) is stored as given: a poll AtConsumer
// resolves it with its reset policy — by default the start — so a
// consumer cannot wedge itself either way. In a cluster a store whose
// outcome is unknown (its leader changed with it in flight) is not sent
// again: the error matches ErrOutcomeUnknown.
func (a *Admin) StoreOffset(ctx context.Context, t Topic, part uint32, consumer string, offset uint64) error {
	n := a.n
	if err := n.begin(ctx); err != nil {
		return err
	}
	if err := validConsumer(consumer); err != nil {
		return err
	}
	ns, epoch, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return err
	}
	req := &shard.Request{Op: shard.OpStoreOffset, NS: ns, Epoch: epoch, Consumer: consumer, Offset: offset}
	_, err = n.call(ctx, req, t, part)
	return err
}

// ConsumerOffset returns consumer's stored offset in a partition and
// whether one is stored.
func (a *Admin) ConsumerOffset(ctx context.Context, t Topic, part uint32, consumer string) (uint64, bool, error) {
	n := a.n
	if err := n.begin(ctx); err != nil {
		return 0, false, err
	}
	if err := validConsumer(consumer); err != nil {
		return 0, false, err
	}
	ns, epoch, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return 0, false, err
	}
	req := &shard.Request{Op: shard.OpGetOffset, NS: ns, Epoch: epoch, Consumer: consumer, FromLeader: true}
	r, err := n.call(ctx, req, t, part)
	if err != nil {
		return 0, false, err
	}
	return r.Offset, r.Found, nil
}

// DeleteConsumerOffset removes consumer's stored offset in a partition
// and reports whether one was stored: a replicated write, like
// StoreOffset, so every replica forgets it and a later ConsumerOffset
// reports none (a poll AtConsumer then starts by its reset policy).
// Removing an offset that is not stored is no error.
func (a *Admin) DeleteConsumerOffset(ctx context.Context, t Topic, part uint32, consumer string) (bool, error) {
	n := a.n
	if err := n.begin(ctx); err != nil {
		return false, err
	}
	if err := validConsumer(consumer); err != nil {
		return false, err
	}
	ns, epoch, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return false, err
	}
	req := &shard.Request{Op: shard.OpDeleteOffset, NS: ns, Epoch: epoch, Consumer: consumer}
	r, err := n.call(ctx, req, t, part)
	return r.Found, err
}

// DeleteConsumer removes consumer's stored offsets in every partition of
// every topic of stream s (a Kafka listener's DeleteGroups), one
// partition at a time, and returns how many it removed. It stops at the
// first error; what it removed until then stays removed, and a retry
// removes the rest.
func (a *Admin) DeleteConsumer(ctx context.Context, s Stream, consumer string) (int, error) {
	if err := validConsumer(consumer); err != nil {
		return 0, err
	}
	topics, err := a.Topics(ctx, s)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, t := range topics {
		parts, err := a.Partitions(ctx, t)
		if errors.Is(err, ErrTopicNotFound) {
			continue // deleted meanwhile: its offsets went with it
		}
		if err != nil {
			return removed, err
		}
		for _, p := range parts {
			found, err := a.DeleteConsumerOffset(ctx, t, p.Partition, consumer)
			if errors.Is(err, ErrTopicNotFound) || errors.Is(err, ErrPartitionNotFound) {
				continue
			}
			if err != nil {
				return removed, err
			}
			if found {
				removed++
			}
		}
	}
	return removed, nil
}
