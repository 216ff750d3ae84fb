package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/vfs"
)

// Disk persists one group member's raft state — the hard state (term,
// vote, commit), the log entries and the latest snapshot — in one
// write-ahead log file on a vfs.FS. Raft's safety rests on it: a member
// that forgets its vote can vote twice in a term, and one that forgets
// entries it acknowledged can undo a quorum, so a restarted member must
// come back with both.
//
// The file is a sequence of records, each a type byte and a protobuf:
// a snapshot, a batch of entries (which replaces every entry at or after
// its first index, as raft's own log does when a leader overwrites an
// uncommitted suffix), or a hard state. Compaction rewrites the file as
// the snapshot, the hard state and the entries after the snapshot, into a
// temporary file renamed over the old one, so a crash leaves either file
// whole.
//
// A Disk is not safe for concurrent use; its Group owns it.
type Disk struct {
	fs   vfs.FS
	path string
	log  *wal.Log
	sync bool
	rec  Recovered
	buf  []byte
	// term and vote of the last hard state saved: see Save.
	term, vote uint64
	syncCommit bool
}

// Recovered is what a Disk held when it was opened.
type Recovered struct {
	Snapshot  *raftpb.Snapshot
	HardState *raftpb.HardState
	Entries   []*raftpb.Entry
}

// empty reports whether nothing was ever persisted.
func (r *Recovered) empty() bool {
	return r.Snapshot.GetMetadata().GetIndex() == 0 && r.HardState.GetTerm() == 0 && len(r.Entries) == 0
}

const (
	recSnapshot byte = iota + 1
	recEntries
	recHardState
)

// maxRecord bounds one record: a snapshot carries a state machine's
// header (a partition's) or a whole metadata store.
const maxRecord = 1 << 30

// ErrCorruptLog reports a raft log that does not decode. The member must
// not join its group with it: it could vote or acknowledge against a
// history it no longer has.
var ErrCorruptLog = errors.New("parkway: raft log corrupt")

// OpenDisk opens the raft log at path, creating it (and its directory) if
// it does not exist. sync makes every Save durable before it returns (the
// FsyncAlways policy); without it the log is synced by Sync and on
// compaction only.
func OpenDisk(fsys vfs.FS, path string, sync bool) (*Disk, error) {
	d := &Disk{fs: fsys, path: path, sync: sync}
	opts := wal.Options{MaxRecordSize: maxRecord}
	l, err := wal.Open(fsys, path, opts)
	if errors.Is(err, fs.ErrNotExist) {
		if err := fsys.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("raft log %s: %w", path, err)
		}
		// A temporary file left by a compaction that crashed before its
		// rename is garbage: the old log was still whole.
		_ = fsys.Remove(tmpPath(path))
		l, err = wal.Create(fsys, path, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("raft log %s: %w", path, err)
	}
	d.log = l
	_ = fsys.Remove(tmpPath(path))
	if err := l.Replay(d.replay); err != nil {
		l.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrCorruptLog, path, err)
	}
	d.term, d.vote = d.rec.HardState.GetTerm(), d.rec.HardState.GetVote()
	return d, nil
}

func tmpPath(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+".tmp")
}

// replay folds one record into d.rec.
func (d *Disk) replay(_ uint64, data []byte) error {
	if len(data) == 0 {
		return errors.New("empty record")
	}
	body := data[1:]
	switch data[0] {
	case recSnapshot:
		s := new(raftpb.Snapshot)
		if err := proto.Unmarshal(body, s); err != nil {
			return err
		}
		d.rec.Snapshot = s
		idx := s.GetMetadata().GetIndex()
		kept := d.rec.Entries[:0]
		for _, e := range d.rec.Entries {
			if e.GetIndex() > idx {
				kept = append(kept, e)
			}
		}
		d.rec.Entries = kept
	case recHardState:
		hs := new(raftpb.HardState)
		if err := proto.Unmarshal(body, hs); err != nil {
			return err
		}
		d.rec.HardState = hs
	case recEntries:
		ents, err := decodeEntries(body)
		if err != nil {
			return err
		}
		if len(ents) == 0 {
			return nil
		}
		first := ents[0].GetIndex()
		// A batch replaces the suffix it overlaps, as in raft's log.
		n := len(d.rec.Entries)
		for n > 0 && d.rec.Entries[n-1].GetIndex() >= first {
			n--
		}
		d.rec.Entries = append(d.rec.Entries[:n], ents...)
	default:
		return fmt.Errorf("unknown record type %d", data[0])
	}
	return nil
}

// Recovered returns what the log held when it was opened. The slices are
// the caller's.
func (d *Disk) Recovered() Recovered { return d.rec }

// SetSync switches per-Save syncing on or off (a topic's fsync policy
// changed).
func (d *Disk) SetSync(sync bool) { d.sync = sync }

// SyncCommit makes a synced Disk sync hard states that only move the
// commit index too. An owner that acts on what it applied before it could
// re-learn the commit after a restart needs it: the metadata group, whose
// store decides at startup which partition directories are orphans.
func (d *Disk) SyncCommit() { d.syncCommit = true }

// Save appends a Ready's snapshot, entries and hard state, in that order,
// so that a torn tail never leaves a hard state committing entries the log
// lacks. When the Disk was opened with sync it syncs, unless all that
// changed is the commit index.
func (d *Disk) Save(snap *raftpb.Snapshot, ents []*raftpb.Entry, hs *raftpb.HardState) error {
	wrote := false
	if snap != nil && snap.GetMetadata().GetIndex() != 0 {
		if err := d.append(recSnapshot, snap); err != nil {
			return err
		}
		wrote = true
	}
	if len(ents) > 0 {
		d.buf = encodeEntries(append(d.buf[:0], recEntries), ents)
		if _, err := d.log.Append(d.buf); err != nil {
			return err
		}
		wrote = true
	}
	if hs != nil && hs.GetTerm() != 0 {
		if err := d.append(recHardState, hs); err != nil {
			return err
		}
		// Only the term and the vote must be durable before raft acts on
		// them (a forgotten vote is a second vote). A commit index that
		// is lost is learned again from the leader, so a hard state that
		// only moved the commit forward is not worth an fsync (raft's
		// MustSync rule).
		if hs.GetTerm() != d.term || hs.GetVote() != d.vote || d.syncCommit {
			wrote = true
		}
		d.term, d.vote = hs.GetTerm(), hs.GetVote()
	}
	if wrote && d.sync {
		return d.log.Sync()
	}
	return nil
}

func (d *Disk) append(typ byte, m proto.Message) error {
	b, err := proto.MarshalOptions{}.MarshalAppend(append(d.buf[:0], typ), m)
	if err != nil {
		return err
	}
	d.buf = b
	_, err = d.log.Append(b)
	return err
}

// Sync makes everything saved so far durable.
func (d *Disk) Sync() error { return d.log.Sync() }

// Size is the log file's size in bytes.
func (d *Disk) Size() int64 { return d.log.Size() }

// Rewrite replaces the log with snap, hs and ents (the entries after the
// snapshot), durably: the new file is written and synced under a
// temporary name, then renamed over the old one and the directory synced.
func (d *Disk) Rewrite(snap *raftpb.Snapshot, hs *raftpb.HardState, ents []*raftpb.Entry) (err error) {
	tmp := tmpPath(d.path)
	_ = d.fs.Remove(tmp)
	nl, err := wal.Create(d.fs, tmp, wal.Options{MaxRecordSize: maxRecord})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			nl.Close()
			_ = d.fs.Remove(tmp)
		}
	}()
	old := d.log
	d.log = nl
	err = d.Save(snap, ents, hs)
	if err == nil {
		err = nl.Sync()
	}
	if err == nil {
		err = d.fs.Rename(tmp, d.path)
	}
	if err == nil {
		err = d.fs.SyncDir(filepath.Dir(d.path))
	}
	if err != nil {
		d.log = old
		return err
	}
	return old.Close()
}

// Close closes the file without syncing it.
func (d *Disk) Close() error { return d.log.Close() }

func encodeEntries(dst []byte, ents []*raftpb.Entry) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(ents)))
	for i := range ents {
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		dst, _ = proto.MarshalOptions{}.MarshalAppend(dst, ents[i])
		binary.LittleEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	}
	return dst
}

func decodeEntries(b []byte) ([]*raftpb.Entry, error) {
	if len(b) < 4 {
		return nil, errors.New("entries record truncated")
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b))/4 {
		return nil, errors.New("entries record claims more entries than it holds")
	}
	ents := make([]*raftpb.Entry, n)
	for i := range ents {
		if len(b) < 4 {
			return nil, errors.New("entries record truncated")
		}
		size := binary.LittleEndian.Uint32(b)
		if uint64(size) > uint64(len(b)-4) {
			return nil, errors.New("entry truncated")
		}
		ents[i] = new(raftpb.Entry)
		if err := proto.Unmarshal(b[4:4+size], ents[i]); err != nil {
			return nil, err
		}
		b = b[4+size:]
	}
	return ents, nil
}
