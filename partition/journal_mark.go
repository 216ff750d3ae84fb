package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

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
// never claims more than the files hold — and handed to the device
// without a flush (vfs.WriteBack: sync_file_range on Linux, the write of
// one block): the fdatasync that follows, the journal's own, flushes the
// device and makes the mark durable with the frame. So the journal's
// acknowledgement path pays one more block write per group and no flush.
// A checkpoint, whose partition fsyncs flush the device anyway, writes the
// mark first too, and a clean close fdatasyncs it.
//
// The window. The mark lags by one synced write: the frames of the last
// group synced before a power loss (or before the last checkpoint) are
// recorded only by the mark written before the next one. A cut of exactly
// those frames after a power loss reads as a torn tail — the same window
// package replica's raft log mark leaves, for the same reason: with one
// flush per write, a power loss during the flush can make any subset of
// that write's blocks durable, so a record claiming the new end that
// reached the disk without the frames it describes must be read as a
// torn write. A process crash keeps the page cache, and the mark with it.
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
// Two slots of journalMarkStride bytes, at byte 0 and at
// journalMarkStride, written in turn, so that a write torn in one leaves
// the other whole; the valid slot with the higher sequence number holds
// (little endian):
//
//	magic  uint32, journalMarkMagic ("PWJM")
//	seq    uint64: the slot's sequence number (1, 2, 3, …)
//	high   uint64: the highest journal file number created
//	count  uint32: files that follow (at most journalMarkFiles)
//	count × (file number uint64, synced bytes uint64), ascending
//	crc    uint32: CRC-32C (Castagnoli) of the bytes before it
//
// The file is created whole (both slots holding the first mark), synced
// and renamed into place, and never changes size after: a slot is
// overwritten in place, which needs no metadata to be read back, so the
// next flush covers it.

const (
	journalMarkName   = "SYNCED"
	journalMarkMagic  = 0x4d4a5750 // "PWJM"
	journalMarkStride = 512
	journalMarkHeader = 4 + 8 + 8 + 4
	// journalMarkFiles is the most journal files a slot lists: the
	// newest are kept (the journal seldom keeps more than two or three).
	journalMarkFiles = (journalMarkStride - journalMarkHeader - 4) / 16
)

// journalMark is one slot's content.
type journalMark struct {
	seq  uint64
	high uint64
	// ends maps a journal file to the bytes of it that were synced.
	ends map[uint64]int64
}

// encodeJournalMark encodes m as a slot (at most journalMarkStride
// bytes). Only the journalMarkFiles newest files are listed.
func encodeJournalMark(m journalMark) []byte {
	b, _ := appendJournalMark(nil, nil, m)
	return b
}

// appendJournalMark appends the slot of m to dst, sorting its files in
// scratch; it returns both for reuse.
func appendJournalMark(dst []byte, scratch []uint64, m journalMark) ([]byte, []uint64) {
	files := scratch[:0]
	for f := range m.ends {
		files = append(files, f)
	}
	slices.Sort(files)
	listed := files
	if len(listed) > journalMarkFiles {
		listed = listed[len(listed)-journalMarkFiles:]
	}
	b := dst
	b = binary.LittleEndian.AppendUint32(b, journalMarkMagic)
	b = binary.LittleEndian.AppendUint64(b, m.seq)
	b = binary.LittleEndian.AppendUint64(b, m.high)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(listed)))
	for _, f := range listed {
		b = binary.LittleEndian.AppendUint64(b, f)
		b = binary.LittleEndian.AppendUint64(b, uint64(m.ends[f]))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[len(dst):], castagnoli)), files
}

// decodeJournalMarkSlot decodes the slot at the start of b; ok is false
// for anything but a whole, valid slot. Every count is checked against
// the slot's size before anything is allocated.
func decodeJournalMarkSlot(b []byte) (m journalMark, ok bool) {
	if len(b) < journalMarkHeader+4 || binary.LittleEndian.Uint32(b) != journalMarkMagic {
		return journalMark{}, false
	}
	n := binary.LittleEndian.Uint32(b[20:])
	if n > journalMarkFiles {
		return journalMark{}, false
	}
	end := journalMarkHeader + 16*int(n)
	if len(b) < end+4 || crc32.Checksum(b[:end], castagnoli) != binary.LittleEndian.Uint32(b[end:]) {
		return journalMark{}, false
	}
	m = journalMark{seq: binary.LittleEndian.Uint64(b[4:]), high: binary.LittleEndian.Uint64(b[12:]), ends: make(map[uint64]int64, n)}
	if m.seq == 0 {
		return journalMark{}, false
	}
	var last uint64
	for at := journalMarkHeader; at < end; at += 16 {
		f, size := binary.LittleEndian.Uint64(b[at:]), binary.LittleEndian.Uint64(b[at+8:])
		if f <= last || f > m.high || size > maxJournalMarkEnd {
			return journalMark{}, false
		}
		m.ends[f], last = int64(size), f
	}
	return m, true
}

// maxJournalMarkEnd bounds a synced end: no journal file is anywhere near
// it, and a larger one is damage.
const maxJournalMarkEnd = 1 << 50

// errNoJournalMark is decodeJournalMark's answer for bytes holding no
// valid slot.
var errNoJournalMark = errors.New("no valid slot")

// decodeJournalMark decodes a mark file's content: the valid slot with
// the highest sequence number.
func decodeJournalMark(b []byte) (journalMark, error) {
	var best journalMark
	found := false
	for _, at := range []int{0, journalMarkStride} {
		if at >= len(b) {
			break
		}
		if m, ok := decodeJournalMarkSlot(b[at:min(len(b), at+journalMarkStride)]); ok && (!found || m.seq > best.seq) {
			best, found = m, true
		}
	}
	if !found {
		return journalMark{}, errNoJournalMark
	}
	return best, nil
}

// journalMarkPath is the mark file of the store's journal.
func (s *FileStore) journalMarkPath() string {
	return filepath.Join(s.journalPath(), journalMarkName)
}

// readJournalMark reads the journal's mark; found is false if there is
// none, or none valid (bad describes that one: a mark with no valid slot
// reads as none, see above).
func readJournalMark(fsys vfs.FS, path string) (m journalMark, found bool, bad error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if isNotExist(err) {
		return journalMark{}, false, nil
	}
	if err != nil {
		return journalMark{}, false, err
	}
	defer f.Close()
	b := make([]byte, 2*journalMarkStride)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return journalMark{}, false, err
	}
	m, err = decodeJournalMark(b[:n])
	if err != nil {
		return journalMark{}, false, corruptf(path, 0, "journal mark of %d bytes: %v", n, err)
	}
	return m, true, nil
}

// journalMarkSlack describes what in a mark file's content b no mark
// accounts for — a slot that fails its checksum (a write of it torn, or
// damage), bytes after a slot's record that are not zero, a file not of
// its size — or "" if none. The node reads the valid slot all the same;
// verify reports it.
func journalMarkSlack(b []byte) string {
	if len(b) != 2*journalMarkStride {
		return fmt.Sprintf("%d bytes, not %d", len(b), 2*journalMarkStride)
	}
	for _, at := range []int{0, journalMarkStride} {
		slot := b[at : at+journalMarkStride]
		m, ok := decodeJournalMarkSlot(slot)
		if !ok {
			return fmt.Sprintf("the slot at byte %d fails its checksum", at)
		}
		end := journalMarkHeader + 16*len(m.ends) + 4
		for i, c := range slot[end:] {
			if c != 0 {
				return fmt.Sprintf("byte %d, after the slot's record, is not zero", at+end+i)
			}
		}
	}
	return ""
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
// last one: handed to the device (vfs.WriteBack) to be durable with the
// next flush, or with durable fdatasynced. The first write in a process
// opens the mark file, creating it whole if it is missing or not of its
// size.
func (l *journalLog) writeMark(durable bool) error {
	l.markMu.Lock()
	defer l.markMu.Unlock()
	if !l.markDirty {
		return nil
	}
	if l.markFile == nil && !l.store.journalReady.Load() {
		return nil // no journal file yet: nothing to record
	}
	m := journalMark{seq: l.markSeq + 1, high: l.store.journalSeq.Load(), ends: l.ends}
	var slot []byte
	slot, l.markFiles = appendJournalMark(l.markBuf[:0], l.markFiles, m)
	// Written whole, zeros after the record: every byte of the file is
	// accounted for (journalMarkSlack).
	for len(slot) < journalMarkStride {
		slot = append(slot, 0)
	}
	l.markBuf = slot
	created := false
	if l.markFile == nil {
		var err error
		if created, err = l.openMark(slot); err != nil {
			return fmt.Errorf("journal mark: %w", err)
		}
	}
	if !created {
		if _, err := l.markFile.WriteAt(slot, int64(m.seq%2)*journalMarkStride); err != nil {
			return fmt.Errorf("journal mark: %w", err)
		}
		sync := vfs.WriteBack
		if durable {
			sync = vfs.Datasync
		}
		if err := sync(l.markFile); err != nil {
			return fmt.Errorf("journal mark: %w", err)
		}
	}
	l.markSeq, l.markDirty = m.seq, false
	return nil
}

// openMark opens the mark file, first writing it whole (both slots
// holding slot, synced, renamed into place: created) unless it is there
// at its size. The journal directory exists (the current file is in it).
func (l *journalLog) openMark(slot []byte) (created bool, err error) {
	s := l.store
	path := s.journalMarkPath()
	fi, err := s.fs.Stat(path)
	switch {
	case err == nil && fi.Size() == 2*journalMarkStride:
	case err == nil || isNotExist(err):
		b := make([]byte, 2*journalMarkStride)
		copy(b, slot)
		copy(b[journalMarkStride:], slot)
		if err := vfs.WriteFileAtomic(s.fs, path, b); err != nil {
			return false, err
		}
		created = true
	default:
		return false, err
	}
	f, err := s.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	l.markFile = f
	return created, nil
}

// closeMark fdatasyncs the mark with what changed since its last slot
// and closes it, if this process wrote it.
func (l *journalLog) closeMark() error {
	l.markMu.Lock()
	open := l.markFile != nil
	l.markMu.Unlock()
	if !open {
		return nil
	}
	err := l.writeMark(true)
	l.markMu.Lock()
	defer l.markMu.Unlock()
	if l.markFile != nil {
		if cerr := l.markFile.Close(); err == nil {
			err = cerr
		}
		l.markFile = nil
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
	m, _, err := readJournalMark(fsys, filepath.Join(dir, journalDir, journalMarkName))
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	return maps.Clone(m.ends), nil
}

// JournalFileNumber returns the number of the journal file named name (a
// base name), and whether it is one.
func JournalFileNumber(name string) (uint64, bool) { return parseJournalName(name) }
