package metadata

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/google/btree"
)

const (
	// MaxNameLength is the longest stream or topic name, in bytes. The
	// reference server stores names with a one-byte length prefix.
	MaxNameLength = 255

	// MaxPartitionsPerTopic bounds CreateTopic.Partitions. It is the
	// reference server's limit on the partitions one create command may
	// ask for: it bounds the work, the Result and the wake fan-out of a
	// single commit, where the namespace alone would allow a million.
	// CreatePartitions may still grow a topic up to MaxPartitionID.
	MaxPartitionsPerTopic = 1000
)

// Result describes what a successful Apply did.
type Result struct {
	Revision uint64          // store revision after the command
	Stream   uint32          // id created/affected
	Topic    uint32          // id created/affected (0 for stream commands)
	Created  []PartitionInfo // partitions created, in id order
	Removed  []PartitionInfo // partitions removed, in id order
	// Member and Generation are a group command's member and the group's
	// generation after it (0 for other commands).
	Member, Generation uint64
}

// PartitionInfo describes a committed partition.
type PartitionInfo struct {
	NS                       Namespace
	Stream, Topic, Partition uint32
	// CreatedRevision is the revision of the commit that created the
	// partition: its incarnation, or epoch.
	CreatedRevision uint64
	// Owner is the partition's owner shard, Config.Assign(NS, Config.Shards).
	Owner int
	// Replicas are the replicas of the partition's raft group in a
	// cluster, the preferred leader first (see placement.go); nil on a
	// single node. The slice is shared: never modify it. Each is the
	// replica's raft id, which names its node (internal/raftid: the node
	// id is the low 32 bits; NodeOf): the node id itself for a replica of
	// generation 0, a later generation once the node's replica was
	// re-seeded (ReseedReplica). Leaving and Joined hold raft ids too.
	Replicas []uint64
	// Leaving are nodes a move took off Replicas whose copy may still be
	// a voter of the group: they keep it until the group's leader settles
	// the move (SettleReplicas, see moves.go). Shared, like Replicas.
	Leaving []uint64
	// Joined are the replicas (in Replicas or Leaving) that a move added
	// after the partition was created: they start empty and wait for the
	// leader's snapshot. Shared, like Replicas.
	Joined []uint64
	// Generation is the highest replica generation allocated in the
	// partition (ReseedReplica): 0 until a replica was re-seeded. From
	// then on every replica added gets the next one, so no raft id the
	// group had comes back.
	Generation uint64
}

// StreamInfo describes a committed stream.
type StreamInfo struct {
	ID              uint32
	Name            string
	CreatedRevision uint64
	Topics          int // number of topics
}

// TopicInfo describes a committed topic.
type TopicInfo struct {
	Stream, ID      uint32
	Name            string
	Partitions      int // number of partitions, ids 0..Partitions-1
	CreatedRevision uint64
	// PurgedRevision is the revision of the last PurgeTopic that took
	// effect, 0 if none.
	PurgedRevision uint64
	// Config is the topic's configuration, as last set by CreateTopic or
	// SetTopicConfig.
	Config TopicConfig
}

// Snapshot is a consistent copy of the store's partitions.
type Snapshot struct {
	Revision   uint64
	Partitions []PartitionInfo // sorted by NS ascending
}

type stream struct {
	id         uint32
	name       string
	createdRev uint64
	topics     *btree.BTreeG[*topic] // by id
	topicByID  map[uint32]*topic     // lookups only, never iterated
	topicNames map[string]*topic     // lookups only, never iterated
	topicIDs   slab
}

type topic struct {
	id         uint32
	name       string
	createdRev uint64
	purgedRev  uint64
	config     TopicConfig
	parts      []PartitionInfo   // dense: parts[i].Partition == i
	groups     map[string]*group // consumer groups; iterated sorted
}

type subscription struct {
	ch        chan struct{}
	cancelled atomic.Bool
}

// Store is the committed metadata state machine. All mutation goes through
// Apply; the other methods are read-only. It is safe for concurrent use.
type Store struct {
	cfg Config

	mu       sync.RWMutex
	revision uint64
	streams  *btree.BTreeG[*stream] // by id
	// streamByID (and each stream's topicByID) serve lookups by id: a
	// btree lookup needs a pivot item, which escapes to the heap, and
	// every produce looks its topic up.
	streamByID  map[uint32]*stream // lookups only, never iterated
	streamNames map[string]*stream // lookups only, never iterated
	streamIDs   slab
	// partitions counts the partitions of every topic. A partition is
	// found through its namespace's stream and topic ids (partitionAt):
	// an index of its own, a map of every partition's row, cost each node
	// about 270 bytes per partition (issue 33).
	partitions int
	groupClock int64 // see group.go
	// The members' leases, kept only while leasing (lease.go): no lease
	// starts before leaseFloor; leases orders them by when they are due.
	leasing    bool
	leaseFloor int64
	leases     leaseHeap
	place      placement // the nodes and what they hold
	// changes remembers what the last commits touched (see Changes).
	changes changeLog
	// subs is copy-on-write, in subscribe order: Apply hands the current
	// slice to its notification step after releasing mu.
	subs []*subscription
	// groupSubs are SubscribeGroups' subscribers, copy-on-write too.
	groupSubs []*subscription
	// ann holds the announced commands (see Announce).
	ann announcements
}

// NewStore returns an empty store at revision 0.
func NewStore(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{
		cfg:         cfg,
		streams:     btree.NewG(8, func(a, b *stream) bool { return a.id < b.id }),
		streamByID:  make(map[uint32]*stream),
		streamNames: make(map[string]*stream),
		streamIDs:   newSlab(MaxStreamID),
		place:       newPlacement(cfg.Nodes),
	}, nil
}

// Apply applies one command and returns what it did. A command that fails
// changes nothing: not the state, not the revision, and it wakes no one.
//
// Every successful command bumps the revision by one, except PurgeTopic on a
// topic without partitions, which does nothing. That is the reference
// server's list (create topic / partitions, delete topic / stream /
// partitions, purge when partitions exist) plus CreateStream and
// SetTopicConfig: bumping there too keeps the revision strictly increasing
// per state-changing commit, so a revision names one state, and it costs
// nothing since no partition carries a stream's revision.
//
// CreateTopic and CreatePartitions stamp each new partition with the new
// revision (its CreatedRevision). PurgeTopic records it as the topic's
// PurgedRevision.
//
// Subscribers are woken after the commit, once the lock is released, by
// every partition-shaping command: CreateTopic, DeleteTopic,
// CreatePartitions, DeletePartitions, PurgeTopic (when the topic has
// partitions), SetTopicConfig (retention shapes partitions) and DeleteStream
// (when the stream had partitions).
// CreateStream shapes no partition and wakes no one.
//
// The consumer group commands (CreateGroup, DeleteGroup, JoinGroup,
// LeaveGroup, Heartbeat, CommitGroupOffsets, ExpireMembers — one that
// removes no one is a no-op), AddNode and RemoveNode bump
// the revision too and wake no one: they shape no partition. DrainNode,
// Rebalance and SettleReplicas wake the subscribers when they moved a
// replica; a SettleReplicas with nothing to settle is a no-op that does
// not bump the revision.
func (s *Store) Apply(cmd Command) (Result, error) {
	cmd, ok := deref(cmd)
	if !ok {
		return Result{}, fmt.Errorf("%w: %T", ErrUnknownCommand, cmd)
	}
	s.mu.Lock()
	before := s.revision
	gen, isGroup := s.memberGroupGeneration(cmd)
	res, wake, err := s.apply(cmd)
	if r := rangeOf(cmd, res); err == nil && s.revision != before && r.Lo < r.Hi {
		// Commits that touch no namespace are not recorded: Changes has
		// nothing to report for them, and a busy consumer group's
		// heartbeats must not push partition history out of the ring.
		s.changes.record(s.revision, r)
	}
	var subs []*subscription
	if err == nil && wake {
		subs = s.subs
	}
	if err == nil && isGroup && res.Generation != gen {
		subs = slices.Concat(subs, s.groupSubs)
	}
	s.mu.Unlock()
	for _, sub := range subs {
		if sub.cancelled.Load() {
			continue
		}
		select {
		case sub.ch <- struct{}{}:
		default: // a wake is already pending: coalesce
		}
	}
	return res, err
}

// deref turns a non-nil pointer command into its value; it reports false for
// nil and for types that are not this package's commands.
func deref(cmd Command) (Command, bool) {
	switch c := cmd.(type) {
	case CreateStream, DeleteStream, CreateTopic, DeleteTopic,
		CreatePartitions, DeletePartitions, PurgeTopic, SetTopicConfig,
		CreateGroup, DeleteGroup, JoinGroup, LeaveGroup, Heartbeat, CommitGroupOffsets, ExpireMembers,
		AddNode, DrainNode, RemoveNode, Rebalance, SettleReplicas, ReseedReplica:
		return c, true
	case *DrainNode:
		if c != nil {
			return *c, true
		}
	case *RemoveNode:
		if c != nil {
			return *c, true
		}
	case *Rebalance:
		if c != nil {
			return *c, true
		}
	case *SettleReplicas:
		if c != nil {
			return *c, true
		}
	case *ReseedReplica:
		if c != nil {
			return *c, true
		}
	case *CreateGroup:
		if c != nil {
			return *c, true
		}
	case *DeleteGroup:
		if c != nil {
			return *c, true
		}
	case *JoinGroup:
		if c != nil {
			return *c, true
		}
	case *LeaveGroup:
		if c != nil {
			return *c, true
		}
	case *Heartbeat:
		if c != nil {
			return *c, true
		}
	case *ExpireMembers:
		if c != nil {
			return *c, true
		}
	case *AddNode:
		if c == nil {
			return nil, false
		}
		return *c, true
	case *CommitGroupOffsets:
		if c != nil {
			return *c, true
		}
	case *CreateStream:
		if c != nil {
			return *c, true
		}
	case *DeleteStream:
		if c != nil {
			return *c, true
		}
	case *CreateTopic:
		if c != nil {
			return *c, true
		}
	case *DeleteTopic:
		if c != nil {
			return *c, true
		}
	case *CreatePartitions:
		if c != nil {
			return *c, true
		}
	case *DeletePartitions:
		if c != nil {
			return *c, true
		}
	case *PurgeTopic:
		if c != nil {
			return *c, true
		}
	case *SetTopicConfig:
		if c != nil {
			return *c, true
		}
	}
	return cmd, false
}

// apply runs one command under the write lock. Each case validates
// everything (and computes everything that can fail) before its first
// mutation, so an error leaves the store untouched.
func (s *Store) apply(cmd Command) (res Result, wake bool, err error) {
	switch c := cmd.(type) {
	case CreateStream:
		return s.createStream(c)
	case DeleteStream:
		return s.deleteStream(c)
	case CreateTopic:
		return s.createTopic(c)
	case DeleteTopic:
		return s.deleteTopic(c)
	case CreatePartitions:
		return s.createPartitions(c)
	case DeletePartitions:
		return s.deletePartitions(c)
	case PurgeTopic:
		return s.purgeTopic(c)
	case SetTopicConfig:
		return s.setTopicConfig(c)
	case CreateGroup:
		return s.createGroup(c)
	case DeleteGroup:
		return s.deleteGroup(c)
	case JoinGroup:
		return s.joinGroup(c)
	case LeaveGroup:
		return s.leaveGroup(c)
	case Heartbeat:
		return s.heartbeat(c)
	case AddNode:
		return s.addNode(c)
	case DrainNode:
		return s.drainNode(c)
	case RemoveNode:
		return s.removeNode(c)
	case Rebalance:
		return s.rebalance(c)
	case SettleReplicas:
		return s.settleReplicas(c)
	case ReseedReplica:
		return s.reseedReplica(c)
	case CommitGroupOffsets:
		return s.commitGroupOffsets(c)
	case ExpireMembers:
		return s.expireMembers(c)
	}
	return Result{}, false, fmt.Errorf("%w: %T", ErrUnknownCommand, cmd)
}

func (s *Store) createStream(c CreateStream) (Result, bool, error) {
	if err := validateName("stream", c.Name); err != nil {
		return Result{}, false, err
	}
	if _, ok := s.streamNames[c.Name]; ok {
		return Result{}, false, fmt.Errorf("%w: %q", ErrStreamExists, c.Name)
	}
	id, ok := s.streamIDs.alloc()
	if !ok {
		return Result{}, false, fmt.Errorf("%w: all %d stream ids in use", ErrTooManyStreams, uint64(s.streamIDs.max)+1)
	}
	s.revision++
	st := &stream{
		id:         id,
		name:       c.Name,
		createdRev: s.revision,
		topics:     btree.NewG(8, func(a, b *topic) bool { return a.id < b.id }),
		topicByID:  make(map[uint32]*topic),
		topicNames: make(map[string]*topic),
		topicIDs:   newSlab(MaxTopicID),
	}
	s.streams.ReplaceOrInsert(st)
	s.streamByID[id] = st
	s.streamNames[c.Name] = st
	return Result{Revision: s.revision, Stream: id}, false, nil
}

func (s *Store) deleteStream(c DeleteStream) (Result, bool, error) {
	st, err := s.lookupStreamAt(c.Stream, c.Revision)
	if err != nil {
		return Result{}, false, err
	}
	var removed []PartitionInfo
	st.topics.Ascend(func(t *topic) bool {
		removed = append(removed, t.parts...)
		return true
	})
	s.removePartitions(removed)
	s.streams.Delete(st)
	delete(s.streamByID, st.id)
	delete(s.streamNames, st.name)
	s.streamIDs.release(st.id)
	s.revision++
	return Result{Revision: s.revision, Stream: st.id, Removed: removed}, len(removed) > 0, nil
}

func (s *Store) createTopic(c CreateTopic) (Result, bool, error) {
	st, id, cfg, parts, err := s.planTopic(c)
	if err != nil {
		return Result{}, false, err
	}
	rev := parts[0].CreatedRevision
	// Committed from here on.
	st.topicIDs.alloc()
	s.revision = rev
	t := &topic{id: id, name: c.Name, createdRev: rev, config: cfg, parts: parts}
	st.topics.ReplaceOrInsert(t)
	st.topicByID[id] = t
	st.topicNames[c.Name] = t
	s.addPartitions(parts)
	return Result{Revision: rev, Stream: st.id, Topic: id, Created: slices.Clone(parts)}, true, nil
}

// planTopic validates c against the current state and computes the
// topic id and the partitions it would create, without changing anything:
// createTopic commits the plan, Announce publishes it.
func (s *Store) planTopic(c CreateTopic) (*stream, uint32, TopicConfig, []PartitionInfo, error) {
	st, err := s.lookupStreamAt(c.Stream, c.StreamRevision)
	if err != nil {
		return nil, 0, TopicConfig{}, nil, err
	}
	if err := validateName("topic", c.Name); err != nil {
		return nil, 0, TopicConfig{}, nil, err
	}
	if c.Partitions < 1 || c.Partitions > MaxPartitionsPerTopic {
		return nil, 0, TopicConfig{}, nil, fmt.Errorf("%w: topic %q: %d partitions, want 1..%d",
			ErrInvalidPartitionCount, c.Name, c.Partitions, MaxPartitionsPerTopic)
	}
	if err := c.Config.Validate(); err != nil {
		return nil, 0, TopicConfig{}, nil, fmt.Errorf("%w (topic %q)", err, c.Name)
	}
	if _, ok := st.topicNames[c.Name]; ok {
		return nil, 0, TopicConfig{}, nil, fmt.Errorf("%w: %q in stream %d", ErrTopicExists, c.Name, st.id)
	}
	cfg := c.Config
	if cfg.Replicas, err = s.place.factor(cfg.Replicas); err != nil {
		return nil, 0, TopicConfig{}, nil, fmt.Errorf("%w (topic %q)", err, c.Name)
	}
	id, ok := st.topicIDs.peek()
	if !ok {
		return nil, 0, TopicConfig{}, nil, fmt.Errorf("%w: all %d topic ids of stream %d in use",
			ErrTooManyTopics, uint64(st.topicIDs.max)+1, st.id)
	}
	parts, err := s.newPartitions(st.id, id, 0, c.Partitions, s.revision+1, cfg.Replicas)
	if err != nil {
		return nil, 0, TopicConfig{}, nil, err
	}
	return st, id, cfg, parts, nil
}

func (s *Store) deleteTopic(c DeleteTopic) (Result, bool, error) {
	st, t, err := s.lookupTopicAt(c.Stream, c.Topic, c.Revision)
	if err != nil {
		return Result{}, false, err
	}
	removed := t.parts
	s.removePartitions(removed)
	st.topics.Delete(t)
	delete(st.topicByID, t.id)
	delete(st.topicNames, t.name)
	st.topicIDs.release(t.id)
	s.revision++
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id, Removed: removed}, true, nil
}

func (s *Store) createPartitions(c CreatePartitions) (Result, bool, error) {
	st, t, parts, err := s.planPartitions(c)
	if err != nil {
		return Result{}, false, err
	}
	rev := parts[0].CreatedRevision
	s.revision = rev
	t.parts = append(t.parts, parts...)
	s.addPartitions(parts)
	t.topicGroupsResized(rev)
	return Result{Revision: rev, Stream: st.id, Topic: t.id, Created: parts}, true, nil
}

// planPartitions validates c against the current state and computes the
// partitions it would create, without changing anything.
func (s *Store) planPartitions(c CreatePartitions) (*stream, *topic, []PartitionInfo, error) {
	st, t, err := s.lookupTopicAt(c.Stream, c.Topic, c.Revision)
	if err != nil {
		return nil, nil, nil, err
	}
	have := len(t.parts)
	if c.Count < 1 {
		return nil, nil, nil, fmt.Errorf("%w: create %d partitions in %d/%d, want >= 1",
			ErrInvalidPartitionCount, c.Count, st.id, t.id)
	}
	if room := MaxPartitionID + 1 - have; c.Count > room {
		return nil, nil, nil, fmt.Errorf("%w: create %d partitions in %d/%d: %d exist, ids stop at %d",
			ErrInvalidPartitionCount, c.Count, st.id, t.id, have, MaxPartitionID)
	}
	parts, err := s.newPartitions(st.id, t.id, uint32(have), c.Count, s.revision+1, t.config.Replicas)
	if err != nil {
		return nil, nil, nil, err
	}
	return st, t, parts, nil
}

func (s *Store) deletePartitions(c DeletePartitions) (Result, bool, error) {
	st, t, err := s.lookupTopicAt(c.Stream, c.Topic, c.Revision)
	if err != nil {
		return Result{}, false, err
	}
	// A topic keeps at least one partition, as CreateTopic makes none
	// with fewer: delete the topic to have none.
	have := len(t.parts)
	if c.Count < 1 || c.Count >= have {
		return Result{}, false, fmt.Errorf("%w: delete %d partitions from %d/%d of %d, want 1..%d (a topic keeps one)",
			ErrInvalidPartitionCount, c.Count, st.id, t.id, have, have-1)
	}
	keep := have - c.Count
	removed := slices.Clone(t.parts[keep:])
	s.removePartitions(removed)
	t.parts = slices.Clip(t.parts[:keep])
	s.revision++
	t.topicGroupsResized(s.revision)
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id, Removed: removed}, true, nil
}

func (s *Store) purgeTopic(c PurgeTopic) (Result, bool, error) {
	st, t, err := s.lookupTopicAt(c.Stream, c.Topic, c.Revision)
	if err != nil {
		return Result{}, false, err
	}
	if len(t.parts) == 0 {
		// Nothing to purge: no bump, no wake (as the reference server).
		return Result{Revision: s.revision, Stream: st.id, Topic: t.id}, false, nil
	}
	s.revision++
	t.purgedRev = s.revision
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id}, true, nil
}

func (s *Store) setTopicConfig(c SetTopicConfig) (Result, bool, error) {
	st, t, err := s.lookupTopicAt(c.Stream, c.Topic, c.Revision)
	if err != nil {
		return Result{}, false, err
	}
	if err := c.Config.Validate(); err != nil {
		return Result{}, false, fmt.Errorf("%w (topic %d/%d)", err, st.id, t.id)
	}
	cfg := c.Config
	switch cfg.Replicas {
	case 0:
		cfg.Replicas = t.config.Replicas
	case t.config.Replicas:
	default:
		return Result{}, false, fmt.Errorf("%w: topic %d/%d: the replication factor is %d and cannot change to %d",
			ErrInvalidTopicConfig, st.id, t.id, t.config.Replicas, cfg.Replicas)
	}
	s.revision++
	t.config = cfg
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id}, true, nil
}

// newPartitions builds partitions first..first+count-1 of a topic at
// revision rev, each placed on replicas nodes, without touching the store
// (the placement counts them when addPartitions commits them). It only
// reads the store, so it may run under the read lock (Announce plans with
// it).
func (s *Store) newPartitions(streamID, topicID, first uint32, count int, rev uint64, replicas int) ([]PartitionInfo, error) {
	parts := make([]PartitionInfo, count)
	// The next partition's choice sees the ones chosen before it: they
	// are counted in a copy of the placement.
	var pl *placement
	if replicas > 0 && len(s.place.nodes) > 0 {
		c := s.place.clone()
		pl = &c
	}
	for i := range parts {
		id := first + uint32(i)
		ns, err := NewNamespace(streamID, topicID, id)
		if err != nil {
			return nil, err // unreachable: callers bound every id
		}
		owner := s.cfg.Assign(ns, s.cfg.Shards)
		if owner < 0 || owner >= s.cfg.Shards {
			return nil, fmt.Errorf("parkway: Config.Assign(%v, %d) = %d, want 0..%d",
				ns, s.cfg.Shards, owner, s.cfg.Shards-1)
		}
		parts[i] = PartitionInfo{
			NS: ns, Stream: streamID, Topic: topicID, Partition: id,
			CreatedRevision: rev, Owner: owner,
		}
		if pl != nil {
			parts[i].Replicas = pl.place(ns, replicas)
			pl.add(parts[i])
		}
	}
	return parts, nil
}

// addPartitions counts parts, which their topic holds, in the store.
func (s *Store) addPartitions(parts []PartitionInfo) {
	for _, p := range parts {
		s.place.add(p)
	}
	s.partitions += len(parts)
}

// removePartitions takes parts, which their topic no longer holds, out
// of the store's counts.
func (s *Store) removePartitions(parts []PartitionInfo) {
	for _, p := range parts {
		s.place.remove(p)
	}
	s.partitions -= len(parts)
}

// partitionAt locates the committed partition with namespace ns: two map
// lookups by its stream and topic ids, then its topic's dense slice.
func (s *Store) partitionAt(ns Namespace) (partitionRef, bool) {
	st, ok := s.streamByID[ns.Stream()]
	if !ok {
		return partitionRef{}, false
	}
	t, ok := st.topicByID[ns.Topic()]
	if !ok {
		return partitionRef{}, false
	}
	i := int(ns.Partition())
	if i >= len(t.parts) || t.parts[i].NS != ns {
		return partitionRef{}, false
	}
	return partitionRef{t, i}, true
}

// partition returns the committed partition with namespace ns.
func (s *Store) partition(ns Namespace) (PartitionInfo, bool) {
	r, ok := s.partitionAt(ns)
	if !ok {
		return PartitionInfo{}, false
	}
	return r.t.parts[r.i], true
}

func (s *Store) lookupStream(id uint32) (*stream, error) {
	st, ok := s.streamByID[id]
	if !ok {
		return nil, fmt.Errorf("%w: stream %d", ErrStreamNotFound, id)
	}
	return st, nil
}

// lookupStreamAt is lookupStream that also requires the stream's created
// revision to be rev, when rev is not 0.
func (s *Store) lookupStreamAt(id uint32, rev uint64) (*stream, error) {
	st, err := s.lookupStream(id)
	if err != nil {
		return nil, err
	}
	if rev != 0 && st.createdRev != rev {
		return nil, fmt.Errorf("%w: %w: stream %d is at revision %d, not %d", ErrStreamNotFound, ErrStaleRevision, id, st.createdRev, rev)
	}
	return st, nil
}

// lookupTopicAt is lookupTopic that also requires the topic's created
// revision to be rev, when rev is not 0.
func (s *Store) lookupTopicAt(streamID, topicID uint32, rev uint64) (*stream, *topic, error) {
	st, t, err := s.lookupTopic(streamID, topicID)
	if err != nil {
		return nil, nil, err
	}
	if rev != 0 && t.createdRev != rev {
		return nil, nil, fmt.Errorf("%w: %w: topic %d in stream %d is at revision %d, not %d",
			ErrTopicNotFound, ErrStaleRevision, topicID, streamID, t.createdRev, rev)
	}
	return st, t, nil
}

func (s *Store) lookupTopic(streamID, topicID uint32) (*stream, *topic, error) {
	st, err := s.lookupStream(streamID)
	if err != nil {
		return nil, nil, err
	}
	t, ok := st.topicByID[topicID]
	if !ok {
		return nil, nil, fmt.Errorf("%w: topic %d in stream %d", ErrTopicNotFound, topicID, streamID)
	}
	return st, t, nil
}

// ValidateName checks a stream, topic, group or member name: 1 to
// MaxNameLength bytes of UTF-8 without control characters, or
// ErrInvalidName. kind names the kind in the error.
func ValidateName(kind, name string) error { return validateName(kind, name) }

func validateName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty %s name", ErrInvalidName, kind)
	case len(name) > MaxNameLength:
		return fmt.Errorf("%w: %s name is %d bytes, at most %d", ErrInvalidName, kind, len(name), MaxNameLength)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s name %q is not valid UTF-8", ErrInvalidName, kind, name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s name %q contains control character %U", ErrInvalidName, kind, name, r)
		}
	}
	return nil
}

// Revision returns the current revision.
func (s *Store) Revision() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.revision
}

// Partition returns the committed partition with namespace ns. It is two
// O(1) map lookups.
func (s *Store) Partition(ns Namespace) (PartitionInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.partition(ns)
}

// LivePartition returns the committed incarnation of the partition with
// namespace ns when its topic is the incarnation created at revision
// topicRevision and named name: what a client call checks of its handle
// on every produce, read under one lock where Revision, Partition and
// Topic take three. ok is false otherwise, and the caller learns why
// from those (the topic gone or renamed, the partition missing, the
// store behind the handle).
func (s *Store) LivePartition(ns Namespace, topicRevision uint64, name string) (rev uint64, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.revision < topicRevision {
		return 0, false
	}
	r, ok := s.partitionAt(ns)
	if !ok || r.t.createdRev != topicRevision || r.t.name != name {
		return 0, false
	}
	return r.t.parts[r.i].CreatedRevision, true
}

// CreatedRevision returns the committed incarnation of the partition with
// namespace ns. It is two O(1) map lookups.
func (s *Store) CreatedRevision(ns Namespace) (uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.partition(ns)
	return p.CreatedRevision, ok
}

// Stream returns the stream with the given id.
func (s *Store) Stream(id uint32) (StreamInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.streamByID[id]
	if !ok {
		return StreamInfo{}, false
	}
	return st.info(), true
}

// StreamByName returns the stream with the given name (case-sensitive).
func (s *Store) StreamByName(name string) (StreamInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.streamNames[name]
	if !ok {
		return StreamInfo{}, false
	}
	return st.info(), true
}

// Streams returns every stream, in id order.
func (s *Store) Streams() []StreamInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]StreamInfo, 0, s.streams.Len())
	s.streams.Ascend(func(st *stream) bool {
		out = append(out, st.info())
		return true
	})
	return out
}

// Topic returns topic `topic` of stream `stream`.
func (s *Store) Topic(stream, topic uint32) (TopicInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, t, err := s.lookupTopic(stream, topic)
	if err != nil {
		return TopicInfo{}, false
	}
	return t.info(st.id), true
}

// TopicByName returns the topic of the stream with the given name
// (case-sensitive).
func (s *Store) TopicByName(stream uint32, name string) (TopicInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, err := s.lookupStream(stream)
	if err != nil {
		return TopicInfo{}, false
	}
	t, ok := st.topicNames[name]
	if !ok {
		return TopicInfo{}, false
	}
	return t.info(st.id), true
}

// Topics returns the topics of a stream, in id order; nil if the stream does
// not exist.
func (s *Store) Topics(stream uint32) []TopicInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, err := s.lookupStream(stream)
	if err != nil {
		return nil
	}
	out := make([]TopicInfo, 0, st.topics.Len())
	st.topics.Ascend(func(t *topic) bool {
		out = append(out, t.info(st.id))
		return true
	})
	return out
}

// Snapshot returns a consistent copy of the revision and every committed
// partition, taken under one read lock. Partitions are sorted by NS
// ascending: walking streams, topics and partitions in id order yields
// exactly that order, because the namespace packs the ids high to low.
func (s *Store) Snapshot() Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	parts := make([]PartitionInfo, 0, s.partitions)
	s.streams.Ascend(func(st *stream) bool {
		st.topics.Ascend(func(t *topic) bool {
			parts = append(parts, t.parts...)
			return true
		})
		return true
	})
	return Snapshot{Revision: s.revision, Partitions: parts}
}

// Subscribe returns a channel of capacity 1 that receives a value after every
// partition-shaping commit (create/delete stream with partitions,
// create/delete topic, create/delete partitions, purge, set topic config).
// Sends never block:
// while a value is pending, further commits coalesce into it, so a receiver
// must treat a wake as "re-read the store", not as one event. Subscribers are
// woken in subscribe order, after Apply has released the store's lock; no
// goroutine is started.
//
// cancel unsubscribes and is idempotent. The channel is never closed; a
// commit racing with cancel may still leave one value in it.
func (s *Store) Subscribe() (wake <-chan struct{}, cancel func()) {
	return subscribe(&s.mu, &s.subs)
}

// subscribe adds a subscription to *list, guarded by mu, and returns its
// channel and its idempotent cancel. The list is copied on write: a
// notifier may be iterating the old slice.
func subscribe(mu sync.Locker, list *[]*subscription) (<-chan struct{}, func()) {
	sub := &subscription{ch: make(chan struct{}, 1)}
	mu.Lock()
	*list = append(*list, sub)
	mu.Unlock()
	var once sync.Once
	return sub.ch, func() {
		once.Do(func() {
			sub.cancelled.Store(true)
			mu.Lock()
			defer mu.Unlock()
			i := slices.Index(*list, sub)
			*list = slices.Concat((*list)[:i], (*list)[i+1:])
		})
	}
}

func (st *stream) info() StreamInfo {
	return StreamInfo{ID: st.id, Name: st.name, CreatedRevision: st.createdRev, Topics: st.topics.Len()}
}

func (t *topic) info(streamID uint32) TopicInfo {
	return TopicInfo{
		Stream: streamID, ID: t.id, Name: t.name, Partitions: len(t.parts),
		CreatedRevision: t.createdRev, PurgedRevision: t.purgedRev, Config: t.config,
	}
}
