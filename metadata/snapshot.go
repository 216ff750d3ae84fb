package metadata

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/btree"
)

// ErrInvalidSnapshot reports a StoreSnapshot that Restore rejects: one that
// no store could have exported (ids out of order or out of range, invalid or
// duplicate names, revisions out of order, an invalid topic config).
var ErrInvalidSnapshot = errors.New("parkway: invalid metadata snapshot")

// StoreSnapshot is a complete, self-contained copy of a store's state: what
// Restore needs to rebuild a store that is indistinguishable from the
// original, in what it reports and in every command it applies from then on.
//
// Slab state is not stored: which id the next stream or topic gets is a pure
// function of which ids are occupied, and those are the listed ones. Owners
// are not stored either: Restore recomputes them with its Config.
type StoreSnapshot struct {
	Revision uint64
	// GroupClock is the store's group clock (see group.go).
	GroupClock int64
	// Nodes are the cluster's nodes, ascending (nil on a single node, and
	// in snapshots of versions before placement: Restore then takes
	// Config.Nodes).
	Nodes []uint64
	// Draining are the nodes being drained (DrainNode), ascending.
	Draining []uint64
	Streams  []StreamSnapshot // by ID, strictly ascending
}

// StreamSnapshot is one stream of a StoreSnapshot.
type StreamSnapshot struct {
	ID              uint32
	Name            string
	CreatedRevision uint64
	Topics          []TopicSnapshot // by ID, strictly ascending
}

// TopicSnapshot is one topic of a StreamSnapshot.
type TopicSnapshot struct {
	ID              uint32
	Name            string
	CreatedRevision uint64
	PurgedRevision  uint64
	Config          TopicConfig
	// Partitions[i] is partition i: ids are dense.
	Partitions []PartitionSnapshot
	// Groups are the topic's consumer groups, by name (their Stream and
	// Topic fields are not stored: DecodeSnapshot and Restore set them
	// from the stream and topic that hold them).
	Groups []GroupInfo
}

// PartitionSnapshot is one partition of a TopicSnapshot.
type PartitionSnapshot struct {
	CreatedRevision uint64
	// Replicas are the partition's replica set, preferred leader first
	// (PartitionInfo.Replicas).
	Replicas []uint64
	// Leaving and Joined are PartitionInfo's: replicas on their way
	// out, and replicas added after creation.
	Leaving, Joined []uint64
	// Generation is PartitionInfo's: the highest replica generation
	// allocated.
	Generation uint64
}

// Export returns a consistent copy of the whole state, taken under one read
// lock. Empty lists are nil.
func (s *Store) Export() StoreSnapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	snap := StoreSnapshot{Revision: s.revision, GroupClock: s.groupClock, Nodes: slices.Clone(s.place.nodes),
		Draining: slices.Clone(s.place.draining)}
	s.streams.Ascend(func(st *stream) bool {
		ss := StreamSnapshot{ID: st.id, Name: st.name, CreatedRevision: st.createdRev}
		st.topics.Ascend(func(t *topic) bool {
			ts := TopicSnapshot{
				ID: t.id, Name: t.name, CreatedRevision: t.createdRev,
				PurgedRevision: t.purgedRev, Config: t.config,
			}
			if len(t.parts) > 0 {
				ts.Partitions = make([]PartitionSnapshot, len(t.parts))
				for i, p := range t.parts {
					ts.Partitions[i] = PartitionSnapshot{CreatedRevision: p.CreatedRevision, Replicas: slices.Clone(p.Replicas),
						Leaving: slices.Clone(p.Leaving), Joined: slices.Clone(p.Joined), Generation: p.Generation}
				}
			}
			for _, name := range slices.Sorted(maps.Keys(t.groups)) {
				ts.Groups = append(ts.Groups, t.groups[name].info(st.id, t.id))
			}
			ss.Topics = append(ss.Topics, ts)
			return true
		})
		snap.Streams = append(snap.Streams, ss)
		return true
	})
	return snap
}

// Restore builds a store from a snapshot, validating it first: a snapshot no
// store could have exported is rejected with ErrInvalidSnapshot (or the
// error of Config.Validate).
//
// The restored store reports the same Snapshot, Streams, Topics and lookups
// as the exported one and applies every later command identically, slab
// reuse included, provided cfg is the one the original used. Partition
// owners are recomputed with cfg.Assign: restoring with another shard count
// re-assigns every partition (and Restore fails if Assign answers out of
// range). The new store has no subscribers.
func Restore(cfg Config, snap StoreSnapshot) (*Store, error) {
	s, err := NewStore(cfg)
	if err != nil {
		return nil, err
	}
	s.revision = snap.Revision
	s.groupClock = snap.GroupClock
	s.changes.reset(snap.Revision)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSnapshot, fmt.Sprintf(format, args...))
	}
	if snap.Nodes != nil {
		if err := checkNodes(snap.Nodes); err != nil {
			return nil, bad("nodes: %v", err)
		}
		if !slices.IsSorted(snap.Nodes) {
			return nil, bad("nodes not ascending")
		}
		s.place = newPlacement(snap.Nodes)
	}
	for i, n := range snap.Draining {
		if !slices.Contains(snap.Nodes, n) || (i > 0 && n <= snap.Draining[i-1]) {
			return nil, bad("draining nodes %v: not ascending members", snap.Draining)
		}
	}
	s.place.draining = slices.Clone(snap.Draining)
	var streamIDs []uint32
	for i, ss := range snap.Streams {
		switch {
		case ss.ID > MaxStreamID:
			return nil, bad("stream id %d > %d", ss.ID, MaxStreamID)
		case i > 0 && ss.ID <= snap.Streams[i-1].ID:
			return nil, bad("stream ids not ascending: %d after %d", ss.ID, snap.Streams[i-1].ID)
		case ss.CreatedRevision == 0 || ss.CreatedRevision > snap.Revision:
			return nil, bad("stream %d created at revision %d, snapshot at %d", ss.ID, ss.CreatedRevision, snap.Revision)
		}
		if err := validateName("stream", ss.Name); err != nil {
			return nil, bad("stream %d: %v", ss.ID, err)
		}
		if _, dup := s.streamNames[ss.Name]; dup {
			return nil, bad("duplicate stream name %q", ss.Name)
		}
		st := &stream{
			id:         ss.ID,
			name:       ss.Name,
			createdRev: ss.CreatedRevision,
			topics:     btree.NewG(8, func(a, b *topic) bool { return a.id < b.id }),
			topicByID:  make(map[uint32]*topic),
			topicNames: make(map[string]*topic),
		}
		var topicIDs []uint32
		for j, ts := range ss.Topics {
			t, err := s.restoreTopic(snap.Revision, st, ts)
			if err != nil {
				return nil, err
			}
			if j > 0 && ts.ID <= ss.Topics[j-1].ID {
				return nil, bad("stream %d: topic ids not ascending: %d after %d", ss.ID, ts.ID, ss.Topics[j-1].ID)
			}
			if _, dup := st.topicNames[ts.Name]; dup {
				return nil, bad("stream %d: duplicate topic name %q", ss.ID, ts.Name)
			}
			st.topics.ReplaceOrInsert(t)
			st.topicByID[t.id] = t
			st.topicNames[t.name] = t
			s.addPartitions(t.parts)
			topicIDs = append(topicIDs, t.id)
		}
		st.topicIDs = slabOf(MaxTopicID, topicIDs)
		s.streams.ReplaceOrInsert(st)
		s.streamByID[st.id] = st
		s.streamNames[st.name] = st
		streamIDs = append(streamIDs, st.id)
	}
	s.streamIDs = slabOf(MaxStreamID, streamIDs)
	return s, nil
}

// restoreTopic validates and builds one topic of stream st.
func (s *Store) restoreTopic(rev uint64, st *stream, ts TopicSnapshot) (*topic, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: topic %d/%d: %s", ErrInvalidSnapshot, st.id, ts.ID, fmt.Sprintf(format, args...))
	}
	switch {
	case ts.ID > MaxTopicID:
		return nil, bad("id > %d", MaxTopicID)
	case ts.CreatedRevision <= st.createdRev || ts.CreatedRevision > rev:
		return nil, bad("created at revision %d, its stream at %d, snapshot at %d", ts.CreatedRevision, st.createdRev, rev)
	case ts.PurgedRevision != 0 && (ts.PurgedRevision <= ts.CreatedRevision || ts.PurgedRevision > rev):
		return nil, bad("purged at revision %d, created at %d, snapshot at %d", ts.PurgedRevision, ts.CreatedRevision, rev)
	case len(ts.Partitions) > MaxPartitionID+1:
		return nil, bad("%d partitions, ids stop at %d", len(ts.Partitions), MaxPartitionID)
	}
	if err := validateName("topic", ts.Name); err != nil {
		return nil, bad("%v", err)
	}
	if err := ts.Config.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	t := &topic{
		id: ts.ID, name: ts.Name, createdRev: ts.CreatedRevision,
		purgedRev: ts.PurgedRevision, config: ts.Config,
	}
	if len(ts.Partitions) > 0 {
		t.parts = make([]PartitionInfo, len(ts.Partitions))
	}
	prev := ts.CreatedRevision
	for i, ps := range ts.Partitions {
		// Partitions are appended after the highest id and removed from
		// the tail, so creation revisions never decrease with the id.
		if ps.CreatedRevision < prev || ps.CreatedRevision > rev {
			return nil, bad("partition %d created at revision %d, after %d, snapshot at %d", i, ps.CreatedRevision, prev, rev)
		}
		prev = ps.CreatedRevision
		if err := checkReplicas(ps.Replicas, s.place.nodes); err != nil {
			return nil, bad("partition %d: %v", i, err)
		}
		if len(s.place.nodes) > 0 && len(ps.Replicas) != ts.Config.Replicas {
			return nil, bad("partition %d: %d replicas, the topic's factor is %d", i, len(ps.Replicas), ts.Config.Replicas)
		}
		if err := checkMoves(ps, s.place.nodes); err != nil {
			return nil, bad("partition %d: %v", i, err)
		}
		parts, err := s.newPartitions(st.id, ts.ID, uint32(i), 1, ps.CreatedRevision, 0)
		if err != nil {
			return nil, err
		}
		parts[0].Replicas = slices.Clone(ps.Replicas)
		parts[0].Leaving = slices.Clone(ps.Leaving)
		parts[0].Joined = slices.Clone(ps.Joined)
		parts[0].Generation = ps.Generation
		t.parts[i] = parts[0]
	}
	for i, gi := range ts.Groups {
		if i > 0 && gi.Name <= ts.Groups[i-1].Name {
			return nil, bad("group names not ascending: %q after %q", gi.Name, ts.Groups[i-1].Name)
		}
		g, err := restoreGroup(rev, st.id, t, gi)
		if err != nil {
			return nil, bad("%v", err)
		}
		if t.groups == nil {
			t.groups = make(map[string]*group, len(ts.Groups))
		}
		t.groups[gi.Name] = g
	}
	if len(ts.Groups) > MaxGroupsPerTopic {
		return nil, bad("%d groups, at most %d", len(ts.Groups), MaxGroupsPerTopic)
	}
	return t, nil
}

// restoreGroup validates and builds one group of topic t.
func restoreGroup(rev uint64, streamID uint32, t *topic, gi GroupInfo) (*group, error) {
	if err := validateName("group", gi.Name); err != nil {
		return nil, err
	}
	switch {
	case gi.CreatedRevision <= t.createdRev || gi.CreatedRevision > rev:
		return nil, fmt.Errorf("group %q created at revision %d, its topic at %d, snapshot at %d", gi.Name, gi.CreatedRevision, t.createdRev, rev)
	case gi.GenerationRevision < gi.CreatedRevision || gi.GenerationRevision > rev:
		return nil, fmt.Errorf("group %q: generation revision %d outside [%d, %d]", gi.Name, gi.GenerationRevision, gi.CreatedRevision, rev)
	case gi.NextMember == 0:
		return nil, fmt.Errorf("group %q: next member id 0", gi.Name)
	case len(gi.Members) > MaxMembersPerGroup:
		return nil, fmt.Errorf("group %q: %d members, at most %d", gi.Name, len(gi.Members), MaxMembersPerGroup)
	case len(gi.Partitions) != len(t.parts):
		return nil, fmt.Errorf("group %q: %d partitions, its topic has %d", gi.Name, len(gi.Partitions), len(t.parts))
	}
	g := &group{
		name: gi.Name, stream: streamID, topic: t.id, topicRev: t.createdRev,
		createdRev: gi.CreatedRevision, generation: gi.Generation,
		genRev: gi.GenerationRevision, nextMember: gi.NextMember,
		members: make(map[uint64]*member, len(gi.Members)),
		parts:   slices.Clone(gi.Partitions),
	}
	for i, m := range gi.Members {
		switch {
		case m.ID == 0 || m.ID >= gi.NextMember:
			return nil, fmt.Errorf("group %q: member id %d outside [1, %d)", gi.Name, m.ID, gi.NextMember)
		case i > 0 && m.ID <= gi.Members[i-1].ID:
			return nil, fmt.Errorf("group %q: member ids not ascending: %d after %d", gi.Name, m.ID, gi.Members[i-1].ID)
		case m.SessionTimeout < MinSessionTimeout || m.SessionTimeout > MaxSessionTimeout:
			return nil, fmt.Errorf("group %q: member %d: session timeout %v", gi.Name, m.ID, m.SessionTimeout)
		}
		if m.Name != "" {
			if err := validateName("member", m.Name); err != nil {
				return nil, fmt.Errorf("group %q: %w", gi.Name, err)
			}
		}
		g.members[m.ID] = &member{g: g, id: m.ID, name: m.Name, timeout: m.SessionTimeout, lastSeen: m.LastSeen}
		g.order = append(g.order, m.ID)
	}
	g.reindex()
	for i, p := range g.parts {
		if _, ok := g.members[p.Holder]; p.Holder != 0 && !ok {
			return nil, fmt.Errorf("group %q: partition %d held by unknown member %d", gi.Name, i, p.Holder)
		}
		if p.Since > g.generation {
			return nil, fmt.Errorf("group %q: partition %d held since generation %d, group at %d", gi.Name, i, p.Since, g.generation)
		}
		if !p.Committed && p.Offset != 0 {
			return nil, fmt.Errorf("group %q: partition %d: offset %d not committed", gi.Name, i, p.Offset)
		}
		if _, ok := g.members[p.Next]; p.Next != 0 && (!ok || p.Next == p.Holder || p.Holder == 0 || p.NextSince > g.generation || p.NextSince < p.Since) {
			return nil, fmt.Errorf("group %q: partition %d held by %d since generation %d, moving to %d since %d (group at %d)",
				gi.Name, i, p.Holder, p.Since, p.Next, p.NextSince, g.generation)
		}
		if p.Next == 0 && p.NextSince != 0 {
			return nil, fmt.Errorf("group %q: partition %d moving nowhere since generation %d", gi.Name, i, p.NextSince)
		}
	}
	return g, nil
}

// slabOf returns the slab whose occupied ids are exactly ids (ascending,
// each <= max). Since the representation is canonical, it equals the slab of
// any history that left those ids occupied.
func slabOf(max uint32, ids []uint32) slab {
	s := newSlab(max)
	for _, id := range ids {
		for hole := s.next; hole < uint64(id); hole++ {
			s.free.ReplaceOrInsert(uint32(hole))
		}
		s.next = uint64(id) + 1
	}
	return s
}

// Snapshot encoding
//
//	version     1 byte (6 when a partition re-seeded a replica, else 5; 5
//	            is 6 without each partition's replica generation; 4 is
//	            the same as 5 without the member each group
//	            partition moves to, 3 also without the draining nodes and
//	            each partition's leaving and joined replicas, 2 also
//	            without the nodes and replicas, 1 also without the group
//	            clock and groups)
//	revision    uvarint
//	group clock varint (version 2 on)
//	nodes       (version 3) uvarint count, then each uvarint
//	draining    (version 4) uvarint count, then each uvarint
//	streams     uvarint count, then each:
//	  id, name, created revision, topics: uvarint count, then each:
//	    id, name, created revision, purged revision, config (version 3:
//	    then its replication factor, varint),
//	    partitions: uvarint count, then each partition's created revision
//	      (version 3: then its replicas, uvarint count, then each uvarint;
//	      version 4: then its leaving and its joined replicas, the same;
//	      version 6: then its replica generation, uvarint)
//	    groups (version 2): uvarint count, then each:
//	      name, created revision, generation, generation revision,
//	      next member, members: uvarint count, then each:
//	        id, name, session timeout, last seen
//	      partitions: uvarint count, then each:
//	        holder, since, offset, committed (1 byte, 0 or 1), then
//	        (version 5) next, next since
//	crc         4 bytes little endian, CRC-32C (Castagnoli) of all the above
//
// with the field encodings of commands (see EncodeCommand). Decoding is
// structural (lengths, varints, checksum, no trailing bytes); Restore checks
// the meaning.
const (
	snapshotVersion1 = 1
	snapshotVersion2 = 2
	snapshotVersion3 = 3
	snapshotVersion4 = 4
	snapshotVersion5 = 5
	// snapshotVersion adds the partitions' replica generations. It is
	// written only when one is not 0, so a cluster that never re-seeded
	// a replica writes what versions before replica ids read.
	snapshotVersion = 6
)

// The smallest encodings of a list element, which bound a list's length
// by the bytes that remain: a stream is an id, a name length, a revision
// and a topic count; a topic an id, a name length, two revisions, a
// config (a byte and three varints) and a partition count; a partition a
// revision.
const (
	minStreamSize    = 4
	minTopicSize     = 9
	minPartitionSize = 1
	minGroupSize     = 7
	minMemberSize    = 4
	minGroupPartSize = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeSnapshot encodes a snapshot. It does not validate it (Restore
// does) and cannot fail today; the error is for future formats.
func EncodeSnapshot(snap StoreSnapshot) ([]byte, error) {
	ver := byte(snapshotVersion5)
	if reseeded(snap) {
		ver = snapshotVersion
	}
	e := encoder{b: []byte{ver}, replicas: true}
	e.uvarint(snap.Revision)
	e.varint(snap.GroupClock)
	e.ids(snap.Nodes)
	e.ids(snap.Draining)
	e.uvarint(uint64(len(snap.Streams)))
	for _, ss := range snap.Streams {
		e.uvarint(uint64(ss.ID))
		e.str(ss.Name)
		e.uvarint(ss.CreatedRevision)
		e.uvarint(uint64(len(ss.Topics)))
		for _, ts := range ss.Topics {
			e.uvarint(uint64(ts.ID))
			e.str(ts.Name)
			e.uvarint(ts.CreatedRevision)
			e.uvarint(ts.PurgedRevision)
			e.config(ts.Config)
			e.uvarint(uint64(len(ts.Partitions)))
			for _, p := range ts.Partitions {
				e.uvarint(p.CreatedRevision)
				e.ids(p.Replicas)
				e.ids(p.Leaving)
				e.ids(p.Joined)
				if ver >= snapshotVersion {
					e.uvarint(p.Generation)
				}
			}
			e.uvarint(uint64(len(ts.Groups)))
			for _, g := range ts.Groups {
				e.str(g.Name)
				e.uvarint(g.CreatedRevision)
				e.uvarint(g.Generation)
				e.uvarint(g.GenerationRevision)
				e.uvarint(g.NextMember)
				e.uvarint(uint64(len(g.Members)))
				for _, m := range g.Members {
					e.uvarint(m.ID)
					e.str(m.Name)
					e.varint(int64(m.SessionTimeout))
					e.varint(m.LastSeen)
				}
				e.uvarint(uint64(len(g.Partitions)))
				for _, p := range g.Partitions {
					e.uvarint(p.Holder)
					e.uvarint(p.Since)
					e.uvarint(p.Offset)
					if p.Committed {
						e.byte(1)
					} else {
						e.byte(0)
					}
					e.uvarint(p.Next)
					e.uvarint(p.NextSince)
				}
			}
		}
	}
	return binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b, castagnoli)), nil
}

// DecodeSnapshot decodes what EncodeSnapshot produced. Anything else,
// including a checksum mismatch, is rejected with a *DecodeError; it never
// panics. Empty lists decode as nil.
func DecodeSnapshot(b []byte) (StoreSnapshot, error) {
	if len(b) < 5 {
		return StoreSnapshot{}, &DecodeError{What: "snapshot", Offset: len(b), Reason: "too short"}
	}
	body := b[:len(b)-4]
	if want, got := binary.LittleEndian.Uint32(b[len(b)-4:]), crc32.Checksum(body, castagnoli); want != got {
		return StoreSnapshot{}, &DecodeError{What: "snapshot", Offset: len(body),
			Reason: fmt.Sprintf("checksum %#08x, want %#08x", got, want)}
	}
	d := decoder{b: body, what: "snapshot"}
	ver := d.byte()
	if ver < snapshotVersion1 || ver > snapshotVersion {
		d.failAt(0, "unknown version "+strconv.Itoa(int(ver)))
	}
	d.replicas = ver >= snapshotVersion3
	snap := StoreSnapshot{Revision: d.uvarint()}
	if ver >= snapshotVersion2 {
		snap.GroupClock = d.varint()
	}
	if ver >= snapshotVersion3 {
		snap.Nodes = d.ids(MaxNodes)
	}
	if ver >= snapshotVersion4 {
		snap.Draining = d.ids(MaxNodes)
	}
	n := d.count(minStreamSize)
	if n > 0 {
		snap.Streams = make([]StreamSnapshot, 0, n)
	}
	for range n {
		ss := StreamSnapshot{ID: d.u32(), Name: d.str(), CreatedRevision: d.uvarint()}
		nt := d.count(minTopicSize)
		if nt > 0 {
			ss.Topics = make([]TopicSnapshot, 0, nt)
		}
		for range nt {
			ts := TopicSnapshot{
				ID: d.u32(), Name: d.str(), CreatedRevision: d.uvarint(),
				PurgedRevision: d.uvarint(), Config: d.config(),
			}
			np := d.count(minPartitionSize)
			if np > 0 {
				ts.Partitions = make([]PartitionSnapshot, np)
			}
			for i := range np {
				ts.Partitions[i].CreatedRevision = d.uvarint()
				if ver >= snapshotVersion3 {
					ts.Partitions[i].Replicas = d.ids(MaxReplicas)
				}
				if ver >= snapshotVersion4 {
					ts.Partitions[i].Leaving = d.ids(MaxReplicas)
					ts.Partitions[i].Joined = d.ids(MaxReplicas)
				}
				if ver >= snapshotVersion {
					ts.Partitions[i].Generation = d.uvarint()
				}
			}
			if ver >= snapshotVersion2 {
				ts.Groups = d.groups(ver >= snapshotVersion5)
				// Not stored: a group's place is where it is encoded,
				// and the decoded snapshot must equal what Export
				// returns for the store it restores.
				for i := range ts.Groups {
					ts.Groups[i].Stream, ts.Groups[i].Topic = ss.ID, ts.ID
				}
			}
			ss.Topics = append(ss.Topics, ts)
			if d.err != nil {
				break
			}
		}
		snap.Streams = append(snap.Streams, ss)
		if d.err != nil {
			break
		}
	}
	if ver == snapshotVersion && d.err == nil && !reseeded(snap) {
		// Version 6 is written only for a replica generation not 0:
		// one encoding per state.
		d.failAt(0, "version 6 without a replica generation (not canonical)")
	}
	if err := d.finish(); err != nil {
		return StoreSnapshot{}, err
	}
	return snap, nil
}

// reseeded reports whether a partition of snap re-seeded a replica (a
// replica generation not 0).
func reseeded(snap StoreSnapshot) bool {
	for _, ss := range snap.Streams {
		for _, ts := range ss.Topics {
			for _, p := range ts.Partitions {
				if p.Generation != 0 {
					return true
				}
			}
		}
	}
	return false
}

// Replace makes the store's state snap's, in place, and wakes its
// subscribers: a replica that lagged behind its group's compacted log is
// sent the leader's state whole, and the shards and reconcilers holding
// this store must see it. snap must not be older than the store (the
// revision never goes back); an invalid snapshot changes nothing.
func (s *Store) Replace(snap StoreSnapshot) error {
	r, err := Restore(s.cfg, snap)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if snap.Revision < s.revision {
		rev := s.revision
		s.mu.Unlock()
		return fmt.Errorf("%w: snapshot at revision %d is older than the store's %d", ErrInvalidSnapshot, snap.Revision, rev)
	}
	s.revision, s.streams, s.streamByID, s.streamNames, s.streamIDs, s.partitions = r.revision, r.streams, r.streamByID, r.streamNames, r.streamIDs, r.partitions
	s.groupClock = r.groupClock
	s.place = r.place
	s.changes.reset(s.revision)
	if s.leasing {
		s.rebuildLeases() // the new members get a session from the floor
	}
	subs := s.subs
	s.mu.Unlock()
	for _, sub := range subs {
		if sub.cancelled.Load() {
			continue
		}
		select {
		case sub.ch <- struct{}{}:
		default:
		}
	}
	return nil
}

// EncodeGroupSnapshot is a replicated metadata group's snapshot: the keys
// of its deduplication table, oldest first, then the encoded store. The
// table is replicated state — a replica that forgot it would apply a
// re-proposed command the others skip — so it travels with the store.
func EncodeGroupSnapshot(keys [][2]uint64, snap StoreSnapshot) ([]byte, error) {
	enc, err := EncodeSnapshot(snap)
	if err != nil {
		return nil, err
	}
	b := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+16*len(keys)+len(enc)), uint32(len(keys)))
	for _, k := range keys {
		b = binary.LittleEndian.AppendUint64(b, k[0])
		b = binary.LittleEndian.AppendUint64(b, k[1])
	}
	return append(b, enc...), nil
}

// DecodeGroupSnapshot decodes what EncodeGroupSnapshot encoded.
func DecodeGroupSnapshot(b []byte) ([][2]uint64, StoreSnapshot, error) {
	if len(b) < 4 {
		return nil, StoreSnapshot{}, fmt.Errorf("%w: group snapshot truncated", ErrInvalidSnapshot)
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(len(b)) < 16*uint64(n) {
		return nil, StoreSnapshot{}, fmt.Errorf("%w: group snapshot truncated", ErrInvalidSnapshot)
	}
	keys := make([][2]uint64, n)
	for i := range keys {
		keys[i] = [2]uint64{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
		b = b[16:]
	}
	snap, err := DecodeSnapshot(b)
	return keys, snap, err
}

// groups decodes a topic's groups; every list is sized only after its
// count was checked against the bytes that remain.
func (d *decoder) groups(moving bool) []GroupInfo {
	n := d.count(minGroupSize)
	if n == 0 {
		return nil
	}
	out := make([]GroupInfo, 0, n)
	for range n {
		g := GroupInfo{Name: d.str(), CreatedRevision: d.uvarint(), Generation: d.uvarint(),
			GenerationRevision: d.uvarint(), NextMember: d.uvarint()}
		if nm := d.count(minMemberSize); nm > 0 {
			g.Members = make([]MemberInfo, nm)
			for i := range g.Members {
				g.Members[i] = MemberInfo{ID: d.uvarint(), Name: d.str(),
					SessionTimeout: time.Duration(d.varint()), LastSeen: d.varint()}
			}
		}
		if np := d.count(minGroupPartSize); np > 0 {
			g.Partitions = make([]GroupPartition, np)
			for i := range g.Partitions {
				p := GroupPartition{Holder: d.uvarint(), Since: d.uvarint(), Offset: d.uvarint()}
				at := d.off
				switch d.byte() {
				case 0:
				case 1:
					p.Committed = true
				default:
					d.failAt(at, "committed flag not 0 or 1")
				}
				if moving {
					p.Next, p.NextSince = d.uvarint(), d.uvarint()
				}
				g.Partitions[i] = p
			}
		}
		out = append(out, g)
		if d.err != nil {
			break
		}
	}
	return out
}
