package partition

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/vfs"
)

// The journal's synced-end mark: how far each journal file was synced,
// recorded outside the journal files.
//
// Why. The journal holds the only durable copy of what the partitions'
// own files lack (journal.go), and the partitions manifest records their
// synced ends only at its rare writes (manifest.go): what was acknowledged
// since is in the journal's frames alone. A journal file cut short, or
// rolled back to an earlier copy of itself, ends on whole frames, or on a
// frame cut off, and from the file alone reads exactly as a crash's torn
// tail: the replay would apply what is left and remove the file, and the
// acknowledged records of the lost frames would be gone without an error,
// their offsets handed out again. No record inside the file can tell (a
// cut removes the frames after it whole), so the fact is kept beside it,
// in the mark file (journal/SYNCED): for each journal file the store keeps,
// how many bytes of it were synced, and the highest journal file number
// ever created. The replay (replayJournals) reports a journal file whose
// frames end before the mark says it was synced as damage, a
// *CorruptError naming the file: it fences every partition held at open
// (none of its lost records' offsets is handed out again) and keeps the
// files, as for any damaged journal file. A journal file ahead of its mark
// is fine: the mark is only ever a lower bound.
//
// How it is kept durable without a flush of its own. Before each fdatasync
// of the journal that follows an earlier synced write, the mark's next
// slot is written with the ends the earlier fdatasyncs made durable — so it
// never claims more than the files hold — and its write to the device is
// started, not waited for (vfs.StartWriteBack: sync_file_range WRITE on
// Linux); the next slot's write first waits for it (WAIT_BEFORE), so it is
// durable with the journal fdatasync after that one at the latest, and
// usually with the one right after it (its block is queued before the
// frame's). So the journal's acknowledgement path pays one more block
// write per group, no flush, and no wait for the block.
//
// Why not wait, as package replica's raft log mark does (vfs.WriteBack):
// waiting makes the mark durable with the very next fdatasync, a lag of
// one synced write rather than two, but it cost about 45 CPU-µs per group
// commit (BenchmarkJournalCommit, RESULTS.md: the thread blocks in the
// syscall), for detection only. Safety does not rest on it: a slot names only ends that
// an fdatasync which has returned made durable, so whenever and in
// whatever order its block reaches the disk — alone, before the frame
// being synced, or not at all — it is never ahead of the journal, and the
// replay never reports a sound journal as cut
// (TestJournalMarkNeverAheadOfTheJournal: a slot naming the frame being
// synced fails it). The wait before the next slot's write is needed
// anyway: both slots share a page, and a page rewritten while its write
// is in flight may reach the disk with the old and new bytes mixed.
// A checkpoint, whose partition fsyncs flush the device anyway, writes the
// mark first and waits for it (vfs.WriteBack), and a clean close
// fdatasyncs it.
//
// The window. The mark lags by up to two synced writes: the frames of the
// last two groups synced before a power loss (or of the last group before
// the last checkpoint) may be recorded only by marks not yet durable. A
// cut of exactly those frames after a power loss reads as a torn tail.
// One synced write of lag is inherent with one flush per write (package
// replica's raft log mark closes it with a second flush, fdatasyncing
// the mark before raft acts on the write): a power loss
// during the flush can make any subset of that write's blocks durable, so
// a record claiming the new end that reached the disk without the frames
// it describes must be read as a torn write; the second is the price of
// not waiting. A process crash keeps the page cache, and the mark with it.
// What it does not catch at all: the mark and the journal rolled back
// together (a whole disk restored from a backup), and a journal file the
// mark does not list (more than journalMarkFiles kept at once, or the
// mark itself lost or damaged: a mark with no valid slot reads as none,
// and is written afresh; verify reports it).
//
// Numbers are never reused. A journal file's number is never handed out
// twice while the mark survives (the replay starts numbering past the
// highest number the mark records, even when it removed every file): a
// file the mark lists is always the file it measured, never a later one of
// the same name, which would be shorter.
//
// # Format
//
// A sync mark file of package syncmark (its slots, checksums, and the
// write-back of a slot are that package's, shared with package replica's
// raft log mark): two slots of journalMarkStride bytes, at byte 0 and at
// journalMarkStride, the valid one with the higher sequence number
// holding. A slot's payload (little endian):
//
//	high   uint64: the highest journal file number created
//	count  uint32: files that follow (at most journalMarkFiles)
//	count × (file number uint64, synced bytes uint64), ascending
//
// in a record that starts with magic journalMarkMagic ("PWJM") and the
// slot's sequence number and ends with its CRC-32C, zeros after it to
// the slot's end.

const (
	journalMarkName   = "SYNCED"
	journalMarkMagic  = 0x4d4a5750 // "PWJM"
	journalMarkStride = 512
	// journalMarkHeader is the payload's fixed part: high and count.
	journalMarkHeader = 8 + 4
	// journalMarkFiles is the most journal files a slot lists: the
	// newest are kept (the journal seldom keeps more than two or three).
	journalMarkFiles = (journalMarkStride - syncmark.Header - journalMarkHeader - 4) / 16
)

// journalMarkFormat is the journal mark's file.
var journalMarkFormat = syncmark.Format[journalMarkSlot]{
	Magic:  journalMarkMagic,
	Stride: journalMarkStride,
	Size:   2 * journalMarkStride,
	Codec:  journalMarkCodec{},
}

// journalMark is what a mark says: its slot's sequence number, the
// highest journal file number created, and the synced end of each
// journal file it lists.
type journalMark struct {
	seq  uint64
	high uint64
	ends map[uint64]int64
}

// journalMarkSlot is one slot's payload.
type journalMarkSlot struct {
	high  uint64
	files []journalEnd // ascending by file
}

// journalEnd is a journal file's synced end.
type journalEnd struct {
	file uint64
	end  int64
}

// journalMarkCodec is the payload's codec.
type journalMarkCodec struct{}

// AppendPayload appends s; only the journalMarkFiles newest files are
// listed.
func (journalMarkCodec) AppendPayload(dst []byte, s journalMarkSlot) []byte {
	files := s.files
	if len(files) > journalMarkFiles {
		files = files[len(files)-journalMarkFiles:]
	}
	dst = binary.LittleEndian.AppendUint64(dst, s.high)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(files)))
	for _, f := range files {
		dst = binary.LittleEndian.AppendUint64(dst, f.file)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(f.end))
	}
	return dst
}

// PayloadLen reads the count: a slot lists at most journalMarkFiles.
func (journalMarkCodec) PayloadLen(b []byte) (int, bool) {
	if len(b) < journalMarkHeader {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(b[8:])
	if n > journalMarkFiles {
		return 0, false
	}
	return journalMarkHeader + 16*int(n), true
}

// DecodePayload checks that the files are ascending, none past the
// highest number, and no end past maxJournalMarkEnd.
func (journalMarkCodec) DecodePayload(b []byte) (journalMarkSlot, bool) {
	s := journalMarkSlot{high: binary.LittleEndian.Uint64(b)}
	n := (len(b) - journalMarkHeader) / 16
	s.files = make([]journalEnd, 0, n)
	var last uint64
	for at := journalMarkHeader; at+16 <= len(b); at += 16 {
		f, size := binary.LittleEndian.Uint64(b[at:]), binary.LittleEndian.Uint64(b[at+8:])
		if f <= last || f > s.high || size > maxJournalMarkEnd {
			return journalMarkSlot{}, false
		}
		s.files = append(s.files, journalEnd{file: f, end: int64(size)})
		last = f
	}
	return s, true
}

// maxJournalMarkEnd bounds a synced end: no journal file is anywhere near
// it, and a larger one is damage.
const maxJournalMarkEnd = 1 << 50

// journalMarkOf is the mark m holds.
func journalMarkOf(m syncmark.Mark[journalMarkSlot]) journalMark {
	jm := journalMark{seq: m.Seq, high: m.V.high, ends: make(map[uint64]int64, len(m.V.files))}
	for _, f := range m.V.files {
		jm.ends[f.file] = f.end
	}
	return jm
}

// journalMarkPath is the mark file of the store's journal.
func (s *FileStore) journalMarkPath() string {
	return filepath.Join(s.journalPath(), journalMarkName)
}

// readJournalMark reads the journal's mark; found is false if there is
// none, or none valid (bad describes that one: a mark with no valid slot
// reads as none, see above). slack is what in the file no slot accounts
// for (syncmark's Slack), for verify.
func readJournalMark(fsys vfs.FS, path string) (m journalMark, found bool, slack string, bad error) {
	sm, found, slack, err := journalMarkFormat.Read(fsys, path)
	if errors.Is(err, syncmark.ErrNoSlot) {
		return journalMark{}, false, "", corruptf(path, 0, "journal mark: %v", err)
	}
	if err != nil || !found {
		return journalMark{}, false, "", err
	}
	return journalMarkOf(sm), true, slack, nil
}

// checkJournalEnd compares a journal file's frames, which end at byte
// end, with what the mark says was synced of it.
func checkJournalEnd(m journalMark, seq uint64, path string, end int64) error {
	if want := m.ends[seq]; int64(end) < want {
		return corruptf(path, end, "the journal file's frames end at byte %d, but %d bytes of it were synced (journal mark %s): its end was cut off or rolled back, acknowledged records are missing", end, want, journalMarkName)
	}
	return nil
}

// noteJournalSynced records that the current journal file is synced up
// to end: the next mark written says so.
func (l *journalLog) noteJournalSynced(seq uint64, end int64) {
	l.markMu.Lock()
	defer l.markMu.Unlock()
	if l.ends[seq] < end {
		l.ends[seq] = end
		l.markDirty = true
	}
}

// syncedEnds returns how far each journal file the mark lists was synced,
// as this process knows it: the ends its fdatasyncs made durable (and, for
// files an earlier process left, what the mark said at open), not the
// lagging on-disk mark.
func (l *journalLog) syncedEnds() map[uint64]int64 {
	l.markMu.Lock()
	defer l.markMu.Unlock()
	return maps.Clone(l.ends)
}

// forgetJournalFiles drops removed journal files from the mark.
func (l *journalLog) forgetJournalFiles(seqs []uint64) {
	l.markMu.Lock()
	defer l.markMu.Unlock()
	for _, seq := range seqs {
		if _, ok := l.ends[seq]; ok {
			delete(l.ends, seq)
			l.markDirty = true
		}
	}
}

// writeMark writes the mark's next slot if anything changed since the
// last one, made durable as sync says (syncmark.Sync): the journal's
// fdatasyncs start its write only (see above), a checkpoint waits for it,
// a clean close fdatasyncs it. The first write in a process opens the
// mark file, creating it whole if it is missing or not of its size
// (syncmark.File).
func (l *journalLog) writeMark(sync syncmark.Sync) error {
	l.markMu.Lock()
	defer l.markMu.Unlock()
	if !l.markDirty {
		return nil
	}
	if !l.mark.Open() && !l.store.journalReady.Load() {
		return nil // no journal file yet: nothing to record
	}
	files := l.markFiles[:0]
	for f, end := range l.ends {
		files = append(files, journalEnd{file: f, end: end})
	}
	slices.SortFunc(files, func(a, b journalEnd) int { return cmp.Compare(a.file, b.file) })
	l.markFiles = files
	if err := l.mark.Write(journalMarkSlot{high: l.store.journalSeq.Load(), files: files}, sync); err != nil {
		return fmt.Errorf("journal mark: %w", err)
	}
	l.markDirty = false
	return nil
}

// closeMark fdatasyncs the mark with what changed since its last slot
// and closes it, if this process wrote it.
func (l *journalLog) closeMark() error {
	l.markMu.Lock()
	open := l.mark.Open()
	l.markMu.Unlock()
	if !open {
		return nil
	}
	err := l.writeMark(syncmark.Durable)
	l.markMu.Lock()
	defer l.markMu.Unlock()
	if cerr := l.mark.Close(); err == nil {
		err = cerr
	}
	return err
}

// JournalSyncedEnds reads the synced-end mark of the journal of the store
// in dir, as a store opening there would: how many bytes of each journal
// file (by number) were synced, as far as the mark records (see
// journal_mark.go; the last synced write may be missing from it). A store
// without a mark, or with none valid, has none. It changes nothing, and
// is for tools that read a data directory offline.
func JournalSyncedEnds(fsys vfs.FS, dir string) (map[uint64]int64, error) {
	m, _, _, err := readJournalMark(fsys, filepath.Join(dir, journalDir, journalMarkName))
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	return maps.Clone(m.ends), nil
}

// JournalFileNumber returns the number of the journal file named name (a
// base name), and whether it is one.
func JournalFileNumber(name string) (uint64, bool) { return parseJournalName(name) }
