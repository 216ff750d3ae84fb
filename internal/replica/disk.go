package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/internal/syncmark"
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
// whole; each such file starts with its generation (a recGen record).
//
// Beside the file, a sync mark (mark.go) records which generation the
// log is, how many of its bytes were synced (on a Disk synced on every
// Save, every synced write: the mark is fdatasynced after the log before
// Save returns) and the owner's tag
// they hold: a log cut short, or rolled back to an older copy, after it
// was synced ends on whole records like a log whose last write was torn,
// and is refused as ErrCorruptLog rather than recovered as one; and a
// log cut below its tag record still says whose it was (OwnerTag).
//
// A Disk is not safe for concurrent use; its Group owns it.
type Disk struct {
	fs   vfs.FS
	path string
	log  *wal.Log
	sync bool
	rec  Recovered
	// buf holds the records of the write being gathered, recs where each
	// one is in it (add, flushRecs).
	buf  []byte
	recs [][2]int
	// term and vote of the last hard state saved: see Save.
	term, vote uint64
	syncCommit bool
	// held is a hard state that only moved the commit index, saved to a
	// synced Disk and not written yet (see Save); nil if none.
	held *raftpb.HardState
	// File offsets of the records the recovered snapshot and hard state
	// came from, to name them in a corruption error.
	snapOff, hsOff int64
	// syncs observes the log's fsyncs (ObserveSyncs), or nil.
	syncs prometheus.Observer
	// tag is the owner's tag (SetTag), "" if none was written (a string:
	// the sync mark records it, compared on every synced write).
	tag string
	// gen is the log file's generation (mark.go): the recGen record of a
	// file Rewrite wrote, 0 for one it did not.
	gen uint64
	// mark writes the sync mark file; marked is what it says, if
	// hasMark (read or written); noMark holds it back while Rewrite
	// saves into the file not yet renamed into place.
	mark    *syncmark.File[mark]
	marked  mark
	hasMark bool
	noMark  bool
	// slack is what ReadDisk found in the mark that no mark accounts
	// for (MarkSlack).
	slack string
}

// ObserveSyncs makes the log's fsyncs from now on observe their duration
// in seconds on o (nil: none), across rewrites.
func (d *Disk) ObserveSyncs(o prometheus.Observer) {
	d.syncs = o
	d.log.ObserveSyncs(o)
}

// Recovered is what a Disk held when it was opened.
type Recovered struct {
	Snapshot  *raftpb.Snapshot
	HardState *raftpb.HardState
	Entries   []*raftpb.Entry
}

// Empty reports whether nothing was ever persisted: no snapshot, no hard
// state, no entry (a tag alone is not raft state).
func (r Recovered) Empty() bool { return r.empty() }

// empty reports whether nothing was ever persisted.
func (r *Recovered) empty() bool {
	return r.Snapshot.GetMetadata().GetIndex() == 0 && r.HardState.GetTerm() == 0 && len(r.Entries) == 0
}

const (
	recSnapshot byte = iota + 1
	recEntries
	recHardState
	recTag
	// recGen holds the file's generation (mark.go), a uint64: the first
	// record of every file Rewrite writes.
	recGen
)

// MaxTag bounds a Disk's tag (SetTag).
const MaxTag = 64

// maxRecord bounds one record: a snapshot carries a state machine's
// header (a partition's) or a whole metadata store.
const maxRecord = 1 << 30

// ErrCorruptLog reports a raft log that does not decode, or whose records
// contradict each other (a snapshot raft cannot restore, entries with a
// gap, a commit index beyond the last entry). The member must not join its
// group with it: it could vote or acknowledge against a history it no
// longer has. Where the damage is a record, the error also holds a
// *wal.CorruptError naming the file and the record's byte offset.
var ErrCorruptLog = errors.New("parkway: raft log corrupt")

// corrupt reports the record at off as unusable for why.
func (d *Disk) corrupt(off int64, why error) error {
	return fmt.Errorf("%w: %w", ErrCorruptLog, &wal.CorruptError{Path: d.path, Offset: off, Err: why})
}

// OpenDisk opens the raft log at path, creating it (and its directory) if
// it does not exist. sync makes every Save durable before it returns (the
// FsyncAlways policy); without it the log is synced by Sync and on
// compaction only.
func OpenDisk(fsys vfs.FS, path string, sync bool) (*Disk, error) {
	d := &Disk{fs: fsys, path: path, sync: sync}
	opts := wal.Options{MaxRecordSize: maxRecord}
	l, err := wal.Open(fsys, path, opts)
	if errors.Is(err, fs.ErrNotExist) {
		// A sync mark without its log: the log, synced, is gone.
		if _, serr := fsys.Stat(markPath(path)); serr == nil {
			return nil, d.corrupt(0, fmt.Errorf("raft log missing, but its sync mark %s says it was synced", markPath(path)))
		}
		if err := fsys.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("raft log %s: %w", path, err)
		}
		// A temporary file left by a compaction that crashed before its
		// rename is garbage: the old log was still whole.
		_ = fsys.Remove(tmpPath(path))
		l, err = wal.Create(fsys, path, opts)
	}
	if err != nil {
		if errors.Is(err, wal.ErrCorrupt) {
			return nil, fmt.Errorf("%w: %w", ErrCorruptLog, err)
		}
		return nil, fmt.Errorf("raft log %s: %w", path, err)
	}
	d.log = l
	_ = fsys.Remove(tmpPath(path))
	if err := d.load(); err != nil {
		return nil, err
	}
	if err := d.openMark(); err != nil {
		d.log.Close()
		return nil, err
	}
	return d, nil
}

// openMark checks the recovered log against its sync mark (mark.go) and
// records in the mark what the log now holds (Open synced it): durably
// on a synced Disk, as after every synced write, since raft may
// acknowledge what the log holds as soon as it is open (a process that
// crashed keeps its unsynced writes in the page cache, and Open synced
// them). Nothing is written when the mark already says as much.
func (d *Disk) openMark() error {
	m, found, _, err := readMark(d.fs, d.path)
	if err != nil {
		return d.markDamage(err)
	}
	if found {
		if err := d.checkMark(m.V); err != nil {
			return err
		}
		d.marked, d.hasMark = m.V, true
	}
	d.mark = markFormat.Writer(d.fs, markPath(d.path), m.Seq)
	if err := d.writeMark(d.sync); err != nil {
		d.mark.Close()
		return err
	}
	return nil
}

// markDamage is the error of a mark that cannot be read: a mark with no
// valid slot, or cut short, is damage (the log it vouches for is not
// trusted), reported as the log's.
func (d *Disk) markDamage(err error) error {
	if errors.Is(err, syncmark.ErrNoSlot) || errors.Is(err, syncmark.ErrSize) {
		return d.corrupt(0, err)
	}
	return fmt.Errorf("raft log %s: %w", d.path, err)
}

// ReadDisk opens the raft log at path for reading only, as offline tools
// do: it validates and replays every record exactly as OpenDisk does and
// refuses the same damage with the same errors, but changes nothing — a
// missing log is an error (fs.ErrNotExist) rather than created, a torn
// tail is left in place (TornTail), a compaction's temporary file is not
// removed. The Disk refuses Save; Close it when done.
func ReadDisk(fsys vfs.FS, path string) (*Disk, error) {
	d := &Disk{fs: fsys, path: path}
	l, err := wal.OpenReadOnly(fsys, path, wal.Options{MaxRecordSize: maxRecord})
	if err != nil {
		if errors.Is(err, wal.ErrCorrupt) {
			return nil, fmt.Errorf("%w: %w", ErrCorruptLog, err)
		}
		return nil, fmt.Errorf("raft log %s: %w", path, err)
	}
	d.log = l
	if err := d.load(); err != nil {
		return nil, err
	}
	m, found, slack, err := readMark(fsys, path)
	d.slack = slack
	if err == nil && found {
		err = d.checkMark(m.V)
	} else if err != nil {
		err = d.markDamage(err)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return d, nil
}

// MarkSlack describes, for a Disk opened by ReadDisk, what in its sync
// mark no mark accounts for — a slot that fails its checksum (a torn
// write of the mark, or damage: OpenDisk reads the other slot), stray
// bytes — or "" if nothing; a missing mark is not slack.
func (d *Disk) MarkSlack() string { return d.slack }

// TornTail returns the offset and size of the bytes after the last whole
// record of a Disk opened by ReadDisk: what OpenDisk truncates away as a
// torn write (zero if none).
func (d *Disk) TornTail() (offset, size int64) { return d.log.TornTail() }

// Path is the raft log's path.
func (d *Disk) Path() string { return d.path }

// load replays the opened log into d.rec and checks what raft requires of
// it; on error the log is closed.
func (d *Disk) load() error {
	l := d.log
	path := d.path
	if err := l.ReplayAt(d.replay); err != nil {
		l.Close()
		if errors.Is(err, ErrCorruptLog) {
			return err
		}
		return fmt.Errorf("%w: %s: %w", ErrCorruptLog, path, err)
	}
	// The commit index must name an entry the log holds (or the
	// snapshot): raft panics on one beyond it. Save writes entries before
	// the hard state that commits them, so no torn write leaves this.
	if hs := d.rec.HardState; hs != nil {
		if last := d.lastIndex(); hs.GetCommit() > last {
			l.Close()
			return d.corrupt(d.hsOff, fmt.Errorf("hard state commits index %d beyond the last entry %d", hs.GetCommit(), last))
		}
	}
	d.term, d.vote = d.rec.HardState.GetTerm(), d.rec.HardState.GetVote()
	return nil
}

func tmpPath(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+".tmp")
}

// lastIndex is the index of the last entry recovered, or of the snapshot
// when no entry follows it.
func (d *Disk) lastIndex() uint64 {
	if n := len(d.rec.Entries); n > 0 {
		return d.rec.Entries[n-1].GetIndex()
	}
	return d.rec.Snapshot.GetMetadata().GetIndex()
}

// replay folds the record at off into d.rec, refusing one that passed its
// checksum but does not decode or contradicts the records before it.
func (d *Disk) replay(_ uint64, off int64, data []byte) error {
	if err := d.replayRecord(off, data); err != nil {
		return d.corrupt(off, err)
	}
	return nil
}

func (d *Disk) replayRecord(off int64, data []byte) error {
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
		if err := checkSnapshotMeta(s, nil); err != nil {
			return err
		}
		d.rec.Snapshot, d.snapOff = s, off
		// As raft's restore does: the entries after the snapshot stay only
		// if the log holds the snapshot's last entry (same index and
		// term); otherwise the snapshot replaced the whole log.
		idx, term := s.GetMetadata().GetIndex(), s.GetMetadata().GetTerm()
		kept := d.rec.Entries[:0]
		if i := slices.IndexFunc(d.rec.Entries, func(e *raftpb.Entry) bool { return e.GetIndex() == idx }); i >= 0 && d.rec.Entries[i].GetTerm() == term {
			kept = append(kept, d.rec.Entries[i+1:]...)
		}
		clear(d.rec.Entries[len(kept):])
		d.rec.Entries = kept
	case recHardState:
		hs := new(raftpb.HardState)
		if err := proto.Unmarshal(body, hs); err != nil {
			return err
		}
		if hs.GetTerm() > maxTerm || hs.GetCommit() > maxIndex {
			return fmt.Errorf("hard state term %d commit %d out of range", hs.GetTerm(), hs.GetCommit())
		}
		d.rec.HardState, d.hsOff = hs, off
	case recEntries:
		ents, err := decodeEntries(body)
		if err != nil {
			return err
		}
		return d.replayEntries(ents)
	case recTag:
		if len(body) == 0 || len(body) > MaxTag {
			return fmt.Errorf("tag of %d bytes", len(body))
		}
		d.tag = string(body)
	case recGen:
		if len(body) != 8 {
			return fmt.Errorf("generation of %d bytes", len(body))
		}
		d.gen = binary.LittleEndian.Uint64(body)
	default:
		return fmt.Errorf("unknown record type %d", data[0])
	}
	return nil
}

// replayEntries folds a batch of entries into d.rec. A batch replaces the
// suffix of the log it overlaps, as in raft's log; it must continue the
// log (or the snapshot) without a gap and without terms going back, or
// raft would panic on the result. Entries at or below the snapshot are
// covered by it and dropped.
func (d *Disk) replayEntries(ents []*raftpb.Entry) error {
	snap := d.rec.Snapshot.GetMetadata()
	if snap != nil {
		i := 0
		for i < len(ents) && ents[i].GetIndex() <= snap.GetIndex() {
			i++
		}
		ents = ents[i:]
	}
	if len(ents) == 0 {
		return nil
	}
	first := ents[0].GetIndex()
	var prevTerm uint64
	switch have := d.rec.Entries; {
	case len(have) > 0 && first > have[0].GetIndex():
		last := have[len(have)-1].GetIndex()
		if first > last+1 {
			return fmt.Errorf("entries from index %d leave a gap after index %d", first, last)
		}
		prevTerm = have[first-have[0].GetIndex()-1].GetTerm()
	case snap != nil:
		if first != snap.GetIndex()+1 {
			return fmt.Errorf("entries from index %d leave a gap after the snapshot at %d", first, snap.GetIndex())
		}
		prevTerm = snap.GetTerm()
	}
	if first == 0 {
		return errors.New("entry at index 0")
	}
	if err := checkEntries(ents, first-1, prevTerm); err != nil {
		return err
	}
	// Entries a Group cannot apply would fail it on every restart.
	if err := checkEntryKinds(ents, true); err != nil {
		return err
	}
	n := len(d.rec.Entries)
	for n > 0 && d.rec.Entries[n-1].GetIndex() >= first {
		n--
	}
	clear(d.rec.Entries[n:])
	d.rec.Entries = append(d.rec.Entries[:n], ents...)
	return nil
}

// Tag returns the tag the log was last given (SetTag), nil if none.
func (d *Disk) Tag() []byte {
	if d.tag == "" {
		return nil
	}
	return []byte(d.tag)
}

// SetTag records tag (1 to MaxTag bytes) in the log, and keeps it there
// across Rewrite: what the owner binds the log to. A replicated
// partition's owner tags its raft log with the partition's incarnation,
// so that the log itself tells which incarnation it belongs to — a
// second record of the incarnation file's, which a repair trusts when
// that file is damaged: raft state kept under the wrong incarnation could
// elect a member with another group's log. The record is synced with the
// next synced Save (or Sync).
func (d *Disk) SetTag(tag []byte) error {
	if len(tag) == 0 || len(tag) > MaxTag {
		return fmt.Errorf("raft log %s: tag of %d bytes", d.path, len(tag))
	}
	if err := d.writeHeld(); err != nil {
		return err
	}
	if _, err := d.log.Append(append([]byte{recTag}, tag...)); err != nil {
		return err
	}
	d.tag = string(tag)
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
//
// A hard state that only moved the commit index is held back instead of
// written, and written before whatever is saved next (or by Sync or
// Close), unless SyncCommit asked for it or it comes with a snapshot.
// Durability is the same — it would not have been synced — and a commit
// index that is lost is learned again from the leader. Two things are
// saved by it:
//   - the file is never left with writes that no fsync covers: a file
//     kept under a descriptor budget (the partition store's) stays pinned
//     open while it holds unsynced writes, and every idle replicated
//     partition whose last Ready moved only the commit would otherwise
//     keep its raft log's descriptor;
//   - a write on the acknowledgement path: a leader's Ready that commits
//     its last entry carries that hard state, saved before the entry is
//     applied and answered, and a follower's carries it beside the next
//     entries, saved before its acknowledgement is sent. Held, it goes
//     into the file with the next entries.
//
// Everything one Save writes goes in one write (wal.Log.AppendBatch): a
// held hard state and the entries after it cost one system call, not two
// (issue 33: R1, one producer waiting for each ack on three nodes, paid
// two writes of the raft log per replica and message).
func (d *Disk) Save(snap *raftpb.Snapshot, ents []*raftpb.Entry, hs *raftpb.HardState) error {
	hasSnap := snap != nil && snap.GetMetadata().GetIndex() != 0
	hasHS := hs != nil && hs.GetTerm() != 0
	if !hasSnap && len(ents) == 0 && !hasHS {
		return nil // nothing to save: a held hard state stays held
	}
	var hold *raftpb.HardState // this Save's hard state, held back
	if hasHS && !d.syncCommit && !hasSnap && hs.GetTerm() == d.term && hs.GetVote() == d.vote {
		if len(ents) == 0 {
			d.held = hs
			return nil
		}
		hold, hasHS = hs, false
	}
	// A hard state held before goes first: it commits only entries already
	// in the file, so the file reads as if it had been written when saved.
	// One held now may commit the entries saved with it, so it waits.
	d.buf, d.recs = d.buf[:0], d.recs[:0]
	if d.held != nil {
		if err := d.add(recHardState, d.held); err != nil {
			return err
		}
	}
	wrote := false
	if hasSnap {
		if err := d.add(recSnapshot, snap); err != nil {
			return err
		}
		wrote = true
	}
	if len(ents) > 0 {
		at := len(d.buf)
		d.buf = encodeEntries(append(d.buf, recEntries), ents)
		d.recs = append(d.recs, [2]int{at, len(d.buf)})
		wrote = true
	}
	if hasHS {
		if err := d.add(recHardState, hs); err != nil {
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
	}
	if err := d.flushRecs(); err != nil {
		return err
	}
	d.held = hold
	if hasHS {
		d.term, d.vote = hs.GetTerm(), hs.GetVote()
	}
	if wrote && d.sync {
		return d.syncLog()
	}
	return nil
}

// syncLog syncs the log, then records in its sync mark what is now
// durable (mark.go). A Disk synced on every Save fdatasyncs the mark
// before it returns: what raft acts on once Save returns (an
// acknowledgement, a vote, a leader counting its own copy) must be
// vouched for by a durable mark, or a power loss and a cut of exactly
// that write would read as a torn tail — a second flush per synced
// write. An unsynced Disk's Sync (an interval policy: nothing waited for
// it) only writes the mark back, durable with the next flush.
func (d *Disk) syncLog() error {
	if err := d.log.Sync(); err != nil {
		return err
	}
	if d.noMark {
		return nil
	}
	return d.writeMark(d.sync)
}

// add marshals m as a record of type typ behind the records d.buf holds
// for the next flushRecs.
func (d *Disk) add(typ byte, m proto.Message) error {
	at := len(d.buf)
	b, err := proto.MarshalOptions{}.MarshalAppend(append(d.buf, typ), m)
	if err != nil {
		return err
	}
	d.buf = b
	d.recs = append(d.recs, [2]int{at, len(b)})
	return nil
}

// flushRecs appends the records add and Save gathered in d.buf, with one
// write.
func (d *Disk) flushRecs() error {
	var data [4][]byte // at most a held hard state, a snapshot, entries and a hard state
	if len(d.recs) > len(data) {
		return fmt.Errorf("parkway: raft log: %d records in one save", len(d.recs))
	}
	for i, r := range d.recs {
		data[i] = d.buf[r[0]:r[1]]
	}
	_, err := d.log.AppendBatch(data[:len(d.recs)]...)
	return err
}

// writeHeld appends the held hard state, if any.
func (d *Disk) writeHeld() error {
	if d.held == nil {
		return nil
	}
	d.buf, d.recs = d.buf[:0], d.recs[:0]
	if err := d.add(recHardState, d.held); err != nil {
		return err
	}
	if err := d.flushRecs(); err != nil {
		return err
	}
	d.held = nil
	return nil
}

// Sync makes everything saved so far durable.
func (d *Disk) Sync() error {
	if err := d.writeHeld(); err != nil {
		return err
	}
	return d.syncLog()
}

// WriteBack hands everything written to the log to the device, without
// the cache flush an fsync adds (wal.Log.WriteBack): for a Disk that is
// not synced on every Save (an interval-policy partition's), whose file
// would otherwise hold unsynced writes — and its descriptor, pinned under
// the partition store's budget — until its next Sync. A held hard state
// stays held: it is not in the file, so it pins nothing. The sync mark is
// not written: a writeback is not a sync.
func (d *Disk) WriteBack() error { return d.log.WriteBack() }

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
	old, held := d.log, d.held
	nl.ObserveSyncs(d.syncs)
	// hs is the group's whole hard state, at least as new as a held one.
	// The new file is the next generation: its mark is written once it is
	// renamed into place (a mark naming it before would make the old file
	// look rolled back after a crash).
	d.log, d.held, d.noMark = nl, nil, true
	defer func() { d.noMark = false }()
	_, err = nl.Append(binary.LittleEndian.AppendUint64([]byte{recGen}, d.gen+1))
	if err == nil && d.tag != "" {
		_, err = nl.Append(append([]byte{recTag}, d.tag...))
	}
	if err == nil {
		err = d.Save(snap, ents, hs)
	}
	if err == nil {
		err = nl.Sync()
	}
	if err == nil {
		err = d.fs.Rename(tmp, d.path)
	}
	if err != nil {
		d.log, d.held = old, held
		nl.Close()
		_ = d.fs.Remove(tmp)
		return err
	}
	// Renamed: the new file is the log at the path, so it takes the
	// appends from now on even if the directory sync fails (appends to the
	// replaced file would never be read again).
	d.gen++
	err = d.fs.SyncDir(filepath.Dir(d.path))
	if cerr := old.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Fdatasynced, not left to the next flush: the file this
		// generation replaced is still whole on disk, and a rollback to
		// it is caught only once the mark names the new one.
		d.noMark = false
		err = d.writeMark(true)
	}
	return err
}

// Close closes the file without syncing it. A held hard state is
// written first, so a process that stops cleanly keeps its commit index
// as it keeps every other unsynced write.
func (d *Disk) Close() error {
	werr := d.writeHeld()
	var merr error
	if d.mark != nil {
		merr = d.mark.Close()
	}
	return errors.Join(werr, d.log.Close(), merr)
}

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

// minEntrySize is the smallest encoding of an entry with an index and a
// term (a tag byte and a varint byte each).
const minEntrySize = 4

func decodeEntries(b []byte) ([]*raftpb.Entry, error) {
	if len(b) < 4 {
		return nil, errors.New("entries record truncated")
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	// Every entry Save writes has an index and a term, so it takes at
	// least minEntrySize bytes with its length: a count beyond that is
	// refused before anything is allocated for it.
	if uint64(n) > uint64(len(b))/(4+minEntrySize) {
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
		if size < minEntrySize {
			return nil, fmt.Errorf("entry of %d bytes cannot hold an index and a term", size)
		}
		ents[i] = new(raftpb.Entry)
		if err := proto.Unmarshal(b[4:4+size], ents[i]); err != nil {
			return nil, err
		}
		b = b[4+size:]
	}
	return ents, nil
}

// PrefixTag returns the tag (SetTag) that the valid prefix of the raft
// log at path holds — the last tag record before the first record that
// fails its checksum, if any — or nil if that prefix holds none. It is
// for a log ReadDisk refuses as damaged (a record in its middle, its sync
// mark cut or rolled back): the damage makes its raft state unusable,
// but a tag written before it, whole and checksummed, still says whose
// log it was. Which records the damage hid is unknown, so a later tag
// may have been lost; a log's owner tags it once, when it opens it.
func PrefixTag(fsys vfs.FS, path string) ([]byte, error) {
	var tag []byte
	err := wal.ScanPrefix(fsys, path, wal.Options{MaxRecordSize: maxRecord}, func(_ uint64, data []byte) bool {
		if len(data) > 1 && data[0] == recTag && len(data)-1 <= MaxTag {
			tag = data[1:]
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("raft log %s: %w", path, err)
	}
	return tag, nil
}
