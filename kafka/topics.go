package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/parkway-io/parkway"
)

// errUnknownTopicID reports a topic ID that names no live incarnation.
var errUnknownTopicID = errors.New("kafka: unknown topic ID")

// topicID is a topic incarnation's Kafka topic ID (KIP-516): its stream
// id, topic id and created revision. Revisions are global to the
// metadata and never reused, so the ID names one incarnation — a topic
// deleted and recreated under the same name and ids gets another — and
// every node of a cluster derives the same ID. It is never the zero UUID
// (revisions start at 1), which Kafka reads as "no ID".
func topicID(t parkway.Topic) [16]byte {
	var id [16]byte
	binary.BigEndian.PutUint32(id[0:], t.Stream.ID)
	binary.BigEndian.PutUint32(id[4:], t.ID)
	binary.BigEndian.PutUint64(id[8:], t.Revision)
	return id
}

// topicCache resolves Kafka topic names and IDs to handles of the
// listener's stream, creating the stream when missing. A handle is cached
// until a call with it reports its incarnation gone.
type topicCache struct {
	node   *parkway.Node
	stream string

	mu      sync.Mutex
	handle  parkway.Stream
	have    bool
	byName  map[string]parkway.Topic
	byID    map[[16]byte]parkway.Topic
	maxSize int
	// gen counts the changes of the cache and of the topics this
	// listener changed (created, deleted, recreated, grown, or found
	// gone): a consumer group's view of its topics read before the last
	// change is read again (cgView).
	gen uint64
}

func newTopicCache(node *parkway.Node, stream string) *topicCache {
	return &topicCache{node: node, stream: stream, byName: map[string]parkway.Topic{}, byID: map[[16]byte]parkway.Topic{}, maxSize: 100_000}
}

// streamHandle returns the listener's stream, creating it if missing.
func (c *topicCache) streamHandle(ctx context.Context) (parkway.Stream, error) {
	c.mu.Lock()
	if c.have {
		s := c.handle
		c.mu.Unlock()
		return s, nil
	}
	c.mu.Unlock()
	s, err := c.node.Stream(ctx, c.stream)
	if errors.Is(err, parkway.ErrStreamNotFound) {
		s, err = c.node.Admin().CreateStream(ctx, c.stream)
		if errors.Is(err, parkway.ErrStreamExists) {
			s, err = c.node.Stream(ctx, c.stream)
		}
	}
	if err != nil {
		return parkway.Stream{}, err
	}
	c.mu.Lock()
	c.handle, c.have = s, true
	c.mu.Unlock()
	return s, nil
}

func (c *topicCache) remember(t parkway.Topic) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if len(c.byName) >= c.maxSize {
		clear(c.byName)
		clear(c.byID)
	}
	c.byName[t.Name] = t
	c.byID[topicID(t)] = t
}

// forget drops a handle whose incarnation a call found gone (and the
// stream's, when the stream went).
func (c *topicCache) forget(t parkway.Topic, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if cur, ok := c.byName[t.Name]; ok && cur == t {
		delete(c.byName, t.Name)
	}
	delete(c.byID, topicID(t))
	if errors.Is(err, parkway.ErrStreamNotFound) && c.have && c.handle == t.Stream {
		c.have = false
		clear(c.byName)
		clear(c.byID)
	}
}

// generation returns gen (see there).
func (c *topicCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// changed counts a change of a topic the cache keeps handles of (its
// partitions were created).
func (c *topicCache) changed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
}

// lookup returns the live topic named name: from the cache, or the
// metadata (read linearizably).
func (c *topicCache) lookup(ctx context.Context, name string) (parkway.Topic, error) {
	c.mu.Lock()
	t, ok := c.byName[name]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	return c.lookupFresh(ctx, name)
}

// lookupFresh reads the topic from the metadata, bypassing the cache.
func (c *topicCache) lookupFresh(ctx context.Context, name string) (parkway.Topic, error) {
	if name == coordinatorTopic { // internal: no Kafka client sees it
		return parkway.Topic{}, fmt.Errorf("%w: %q", parkway.ErrTopicNotFound, name)
	}
	s, err := c.streamHandle(ctx)
	if err != nil {
		return parkway.Topic{}, err
	}
	t, err := c.node.Topic(ctx, s, name)
	if errors.Is(err, parkway.ErrStreamNotFound) {
		c.forget(parkway.Topic{Stream: s}, err)
		if s, err = c.streamHandle(ctx); err == nil {
			t, err = c.node.Topic(ctx, s, name)
		}
	}
	if err != nil {
		return parkway.Topic{}, err
	}
	c.remember(t)
	return t, nil
}

// lookupID returns the live topic whose incarnation id names, or
// errUnknownTopicID: an ID of a deleted incarnation is refused even when
// a topic of the same name and ids lives now.
func (c *topicCache) lookupID(ctx context.Context, id [16]byte) (parkway.Topic, error) {
	c.mu.Lock()
	t, ok := c.byID[id]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	all, err := c.all(ctx)
	if err != nil {
		return parkway.Topic{}, err
	}
	for _, t := range all {
		if topicID(t) == id {
			return t, nil
		}
	}
	return parkway.Topic{}, fmt.Errorf("%w: %x", errUnknownTopicID, id)
}

// all lists the stream's live topics (and caches them).
func (c *topicCache) all(ctx context.Context) ([]parkway.Topic, error) {
	s, err := c.streamHandle(ctx)
	if err != nil {
		return nil, err
	}
	ts, err := c.node.Admin().Topics(ctx, s)
	if errors.Is(err, parkway.ErrStreamNotFound) {
		c.forget(parkway.Topic{Stream: s}, err)
		if s, err = c.streamHandle(ctx); err == nil {
			ts, err = c.node.Admin().Topics(ctx, s)
		}
	}
	if err != nil {
		return nil, err
	}
	ts = slices.DeleteFunc(ts, func(t parkway.Topic) bool { return t.Name == coordinatorTopic })
	for _, t := range ts {
		c.remember(t)
	}
	return ts, nil
}

// create creates a topic; one that exists already is returned as
// parkway.ErrTopicExists.
func (c *topicCache) create(ctx context.Context, name string, partitions int, opts ...parkway.TopicOption) (parkway.Topic, error) {
	if name == coordinatorTopic {
		return parkway.Topic{}, fmt.Errorf("%w: %q is the listener's internal topic", parkway.ErrInvalidName, name)
	}
	s, err := c.streamHandle(ctx)
	if err != nil {
		return parkway.Topic{}, err
	}
	t, err := c.node.Admin().CreateTopic(ctx, s, name, partitions, opts...)
	if errors.Is(err, parkway.ErrStreamNotFound) {
		c.forget(parkway.Topic{Stream: s}, err)
		if s, err = c.streamHandle(ctx); err == nil {
			t, err = c.node.Admin().CreateTopic(ctx, s, name, partitions, opts...)
		}
	}
	if err != nil {
		return parkway.Topic{}, err
	}
	c.remember(t)
	return t, nil
}

// ensure returns the topic named name, creating it with the defaults
// when it is missing and auto-creation is on: Kafka's
// auto.create.topics.enable. A produce right after the creation is parked
// at the partition's owner until the partition lands (the barrier).
func (s *Server) ensure(ctx context.Context, name string, create bool) (parkway.Topic, error) {
	t, err := s.topics.lookup(ctx, name)
	if err == nil || !create || s.cfg.DisableAutoCreate || !errors.Is(err, parkway.ErrTopicNotFound) {
		return t, err
	}
	if !validTopicName(name) {
		return parkway.Topic{}, fmt.Errorf("%w: %q", parkway.ErrInvalidName, name)
	}
	t, err = s.topics.create(ctx, name, s.cfg.DefaultPartitions, s.defaultReplicas()...)
	if errors.Is(err, parkway.ErrTopicExists) { // created meanwhile by another client
		return s.topics.lookupFresh(ctx, name)
	}
	if err == nil {
		s.log.Info("auto-created topic", "topic", name, "partitions", s.cfg.DefaultPartitions)
	}
	return t, err
}

func (s *Server) defaultReplicas() []parkway.TopicOption {
	if s.cfg.DefaultReplicationFactor > 0 {
		return []parkway.TopicOption{parkway.WithReplicas(s.cfg.DefaultReplicationFactor)}
	}
	return nil
}
