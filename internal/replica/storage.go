package replica

import (
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// logStorage is the raft log in memory that raft reads (raft.Storage):
// the latest snapshot, the entries after a compaction point and the hard
// state. It is raft.MemoryStorage's log without what every idle replica
// paid for it (issue 33): MemoryStorage keeps a reflective proto.Clone of
// every snapshot it is given (about 330 bytes for a new group's initial
// one, whose ConfState the Group holds already), a dummy entry for the
// compaction point, a mutex and call counters. Here the snapshot is kept
// as its parts, its configuration as given (the Group's own), and the
// compaction point as two numbers.
//
// Nothing stored is modified after it is stored: a configuration or an
// entry is replaced, never changed, so sharing them with raft and the
// Group is safe. Only the Group's owner calls it, as it does raft (no
// lock).
type logStorage struct {
	// hs is the hard state as its numbers (hardState): raft hands it over
	// as a protobuf message of up to four heap objects (the message and a
	// pointer per field), which every idle replica would keep for every
	// garbage collection to mark (issue 33).
	hs hardState
	// The latest snapshot: its index, term, configuration and data (all
	// zero until one is applied).
	snapIndex, snapTerm uint64
	snapConf            *raftpb.ConfState
	snapData            []byte
	// ents[i] is the entry at index offset+1+i; offsetTerm is the term of
	// the entry at offset (compacted away, kept for matching).
	ents               []*raftpb.Entry
	offset, offsetTerm uint64
}

var _ raft.Storage = (*logStorage)(nil)

// hardState is a raft hard state kept as numbers: its term, vote and
// commit index, and which of them the message it came from set (has:
// the hs* bits; 0, none stored), so that the message built again is the
// one stored, field presence included (it is written to disk as it is).
type hardState struct {
	term, vote, commit uint64
	has                uint8
}

const (
	hsStored uint8 = 1 << iota
	hsTerm
	hsVote
	hsCommit
)

// InitialState implements raft.Storage. The hard state is a new message
// each call (nil while none was stored): raft reads it when a node
// starts, and a snapshot written to disk carries it.
func (s *logStorage) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	return s.hs.message(), raftpb.EnsureConfState(s.snapConf), nil
}

// SetHardState saves the current hard state: its numbers, not st, which
// the caller may keep or drop.
func (s *logStorage) SetHardState(st *raftpb.HardState) error {
	s.hs = hardState{term: st.GetTerm(), vote: st.GetVote(), commit: st.GetCommit(), has: hsStored}
	if st.Term != nil {
		s.hs.has |= hsTerm
	}
	if st.Vote != nil {
		s.hs.has |= hsVote
	}
	if st.Commit != nil {
		s.hs.has |= hsCommit
	}
	return nil
}

// message is h as raft's message, or nil when none was stored.
func (h hardState) message() *raftpb.HardState {
	if h.has&hsStored == 0 {
		return nil
	}
	m := &raftpb.HardState{}
	if h.has&hsTerm != 0 {
		m.Term = new(h.term)
	}
	if h.has&hsVote != 0 {
		m.Vote = new(h.vote)
	}
	if h.has&hsCommit != 0 {
		m.Commit = new(h.commit)
	}
	return m
}

func (s *logStorage) lastIndex() uint64 { return s.offset + uint64(len(s.ents)) }

// Entries implements raft.Storage.
func (s *logStorage) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	if lo <= s.offset {
		return nil, raft.ErrCompacted
	}
	if hi > s.lastIndex()+1 {
		panic(fmt.Sprintf("raft log: entries' hi(%d) is out of bound lastindex(%d)", hi, s.lastIndex()))
	}
	if len(s.ents) == 0 {
		return nil, raft.ErrUnavailable
	}
	ents := s.ents[lo-s.offset-1 : hi-s.offset-1]
	// As raft's limitSize: the first entry always, then as many as fit.
	if len(ents) > 0 {
		size := uint64(proto.Size(ents[0]))
		for limit := 1; limit < len(ents); limit++ {
			if size += uint64(proto.Size(ents[limit])); size > maxSize {
				ents = ents[:limit]
				break
			}
		}
	}
	// The full slice expression makes a caller's append copy rather than
	// overwrite the entries after it.
	return ents[:len(ents):len(ents)], nil
}

// Term implements raft.Storage.
func (s *logStorage) Term(i uint64) (uint64, error) {
	switch {
	case i < s.offset:
		return 0, raft.ErrCompacted
	case i == s.offset:
		return s.offsetTerm, nil
	case i > s.lastIndex():
		return 0, raft.ErrUnavailable
	}
	return s.ents[i-s.offset-1].GetTerm(), nil
}

// LastIndex implements raft.Storage.
func (s *logStorage) LastIndex() (uint64, error) { return s.lastIndex(), nil }

// FirstIndex implements raft.Storage.
func (s *logStorage) FirstIndex() (uint64, error) { return s.offset + 1, nil }

// Snapshot implements raft.Storage. raft puts the snapshot in a message
// to a peer; it gets a copy, as MemoryStorage gives (snapshots are rare).
func (s *logStorage) Snapshot() (*raftpb.Snapshot, error) {
	return proto.Clone(s.latest()).(*raftpb.Snapshot), nil
}

// latest is the latest snapshot, as MemoryStorage keeps it: every
// metadata field present. It shares the configuration and data.
func (s *logStorage) latest() *raftpb.Snapshot {
	return raftpb.EnsureSnapshot(&raftpb.Snapshot{Data: s.snapData, Metadata: &raftpb.SnapshotMetadata{
		Index: new(s.snapIndex), Term: new(s.snapTerm), ConfState: s.snapConf}})
}

// ApplySnapshot replaces the log with snap, whose configuration and data
// are kept as given: the caller must not modify them afterwards.
func (s *logStorage) ApplySnapshot(snap *raftpb.Snapshot) error {
	md := raftpb.EnsureSnapshot(snap).GetMetadata()
	if s.snapIndex != 0 && s.snapIndex >= md.GetIndex() {
		return raft.ErrSnapOutOfDate
	}
	s.snapIndex, s.snapTerm, s.snapConf, s.snapData = md.GetIndex(), md.GetTerm(), md.GetConfState(), snap.GetData()
	s.ents, s.offset, s.offsetTerm = nil, md.GetIndex(), md.GetTerm()
	return nil
}

// CreateSnapshot records a snapshot at index i (at most the last index)
// of configuration cs and state data, and returns a copy of it.
func (s *logStorage) CreateSnapshot(i uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error) {
	if i <= s.snapIndex {
		return nil, raft.ErrSnapOutOfDate
	}
	if i > s.lastIndex() {
		panic(fmt.Sprintf("raft log: snapshot %d is out of bound lastindex(%d)", i, s.lastIndex()))
	}
	term, err := s.Term(i)
	if err != nil {
		return nil, err
	}
	// As MemoryStorage builds it, to the byte (a Disk writes it): the
	// configuration is cs as given, or else the last snapshot's.
	conf := raftpb.EnsureConfState(s.snapConf)
	if cs != nil {
		conf = proto.Clone(cs).(*raftpb.ConfState)
	}
	s.snapIndex, s.snapTerm, s.snapConf, s.snapData = i, term, conf, data
	// Not latest(): raft's EnsureSnapshot would add the fields cs lacks,
	// which MemoryStorage's copy does not have either.
	return proto.Clone(&raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{
		Index: new(i), Term: new(term), ConfState: conf}}).(*raftpb.Snapshot), nil
}

// Compact drops the entries before compactIndex, which must be at most
// the last index.
func (s *logStorage) Compact(compactIndex uint64) error {
	if compactIndex <= s.offset {
		return raft.ErrCompacted
	}
	if compactIndex > s.lastIndex() {
		panic(fmt.Sprintf("raft log: compact %d is out of bound lastindex(%d)", compactIndex, s.lastIndex()))
	}
	term, err := s.Term(compactIndex)
	if err != nil {
		return err
	}
	// A new slice, not the old one resliced: slices Entries returned may
	// still share the old array.
	s.ents = append([]*raftpb.Entry(nil), s.ents[compactIndex-s.offset:]...)
	s.offset, s.offsetTerm = compactIndex, term
	return nil
}

// Append adds entries to the log, replacing any entries from the first
// one's index on. The entries must follow the log without a gap.
func (s *logStorage) Append(entries []*raftpb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	first := s.offset + 1
	if last := entries[0].GetIndex() + uint64(len(entries)) - 1; last < first {
		return nil // all compacted already
	}
	if first > entries[0].GetIndex() {
		entries = entries[first-entries[0].GetIndex():]
	}
	at := entries[0].GetIndex() - first // where entries[0] goes in s.ents
	switch {
	case uint64(len(s.ents)) > at:
		// The full slice expression keeps the entries replaced, which a
		// slice Entries returned may still hold, from being overwritten.
		s.ents = append(s.ents[:at:at], entries...)
	case uint64(len(s.ents)) == at:
		s.ents = append(s.ents, entries...)
	default:
		panic(fmt.Sprintf("raft log: missing log entry [last: %d, append at: %d]", s.lastIndex(), entries[0].GetIndex()))
	}
	return nil
}
