package partition

// Journal codec: the pure encode/decode functions for a journal file (see
// journal.go). Nothing here does I/O.
//
// A journal file is a sequence of frames, one per commit group, with no
// file header. All integers are little endian.
//
//	frame:
//	  pos  size  field
//	    0     4  checksum  CRC-32C (Castagnoli) of bytes [4, 8+length)
//	    4     4  length    bytes of entries that follow (bits 0–30); bit
//	                       31 set: the frame is uncertain (journalUncertain)
//	    8     …  entries, back to back, exactly length bytes
//	entry (one partition's appends in the group):
//	    0     8  namespace
//	    8     8  epoch     the incarnation the records were appended to
//	   16     8  first     the partition offset of the first record
//	   24     4  count     records in the entry (bits 0–30); bit 31 set:
//	                       the partition's layout was not durable when
//	                       the entry was written (journalEntryFresh)
//	   28     4  size      bytes of records that follow
//	   32     …  records   count segment records (codec.go), offsets
//	                       first, first+1, …, each with its own checksum
//
// An entry with count and size 0 (and not fresh) holds no records: it is
// a synced-end mark, saying the partition's log was durable in its own
// files up to first when the frame was written (Journal.Commit writes one
// for each partition it synced directly, whose acknowledged records are
// in no journal entry). A replay treats it as it treats any entry ending
// at first: a log that ends before it lost acknowledged messages, a
// *CorruptError.
//
// The frame checksum covers the length, so a damaged length is caught
// rather than followed. A frame is written by one write and, unless it is
// staged (Journal.Stage: written for FsyncInterval, whose acknowledgement
// needs a file in the page cache, not an fsync), made durable by one
// fsync before the next is written. A frame is uncertain when it was
// written without an fsync, or while frames written without one before it
// were not yet covered by an fsync: a crash may tear any frame from the
// first of those on, in any order. So a frame that runs past the end of
// the file or fails its checksum, or a run of zeros, is a torn tail, and ends the file, when
// every valid frame after it is uncertain (none, usually): had one of
// them been certain, an fsync completed after the damaged frame was
// written, so it was whole. One followed by a certain valid frame, or one
// that passes its checksum but does not decode, is damage a crash cannot
// cause: a *CorruptError.

import (
	"fmt"
	"hash/crc32"
	"math"

	"github.com/parkway-io/parkway/internal/tail"
	"github.com/parkway-io/parkway/metadata"
)

const (
	// journalFrameHeader is the fixed part of a frame.
	journalFrameHeader = 8
	// journalEntryHeader is the fixed part of an entry.
	journalEntryHeader = 32
	// maxJournalFrame bounds a frame's entries, so the length fits its
	// field with room to spare; a larger group is written as several
	// frames (still one write).
	maxJournalFrame = 1 << 30
	// journalUncertain, in a frame's length field, marks an uncertain
	// frame (see the format above).
	journalUncertain = 1 << 31
	// journalEntryFresh, in an entry's count field, marks the entry of a
	// partition whose directory a crash could lose (a deferred partition,
	// see FileStore.BuildDeferred, or one whose layout is not synced yet):
	// its records from its first offset on are all in the journal, so a
	// replay recreates the partition from them (replayPartition).
	journalEntryFresh = 1 << 31
)

// journalEntry is one decoded entry: a partition's records of one group.
type journalEntry struct {
	ns    metadata.Namespace
	epoch uint64
	first uint64
	// fresh: written with journalEntryFresh; uncertain: in an uncertain
	// frame (journalUncertain), which a power loss may have lost.
	fresh, uncertain bool
	msgs             []Message // aliasing the decoded buffer
	path             string    // the journal file, for errors
	pos              int64     // file position of the entry, for errors
}

// appendJournalEntry appends an entry holding recs (count records starting
// at offset first, encoded by appendRecord) to dst.
func appendJournalEntry(dst []byte, ns metadata.Namespace, epoch, first uint64, count int, recs []byte) []byte {
	return appendJournalEntryFresh(dst, ns, epoch, first, count, false, recs)
}

// appendJournalEntryFresh is appendJournalEntry, marking the entry
// journalEntryFresh with fresh.
func appendJournalEntryFresh(dst []byte, ns metadata.Namespace, epoch, first uint64, count int, fresh bool, recs []byte) []byte {
	c := uint32(count)
	if fresh {
		c |= journalEntryFresh
	}
	dst = le.AppendUint64(dst, uint64(ns))
	dst = le.AppendUint64(dst, epoch)
	dst = le.AppendUint64(dst, first)
	dst = le.AppendUint32(dst, c)
	dst = le.AppendUint32(dst, uint32(len(recs)))
	return append(dst, recs...)
}

// beginJournalFrame reserves a frame header at the end of dst and returns
// dst and the header's position, for sealJournalFrame.
func beginJournalFrame(dst []byte) ([]byte, int) {
	return append(dst, make([]byte, journalFrameHeader)...), len(dst)
}

// sealJournalFrame fills in the header of the frame that starts at start
// and runs to the end of b.
func sealJournalFrame(b []byte, start int) { sealJournalFrameAs(b, start, false) }

// sealJournalFrameAs is sealJournalFrame, marking the frame
// journalUncertain with uncertain.
func sealJournalFrameAs(b []byte, start int, uncertain bool) {
	length := uint32(len(b) - start - journalFrameHeader)
	if uncertain {
		length |= journalUncertain
	}
	le.PutUint32(b[start+4:], length)
	le.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
}

// decodeJournal decodes the frames of a journal file's content b and
// returns their entries in order. It stops at a torn tail (see the format
// above); damage is a *CorruptError naming path and the byte position.
// The messages alias b. Every count and length is checked against the
// bytes that remain before anything is allocated for it.
func decodeJournal(b []byte, path string) ([]journalEntry, error) {
	out, _, err := decodeJournalTo(b, path)
	return out, err
}

// decodeJournalTo is decodeJournal, also returning where its frames end:
// the length of b, or where a torn tail starts.
func decodeJournalTo(b []byte, path string) ([]journalEntry, int, error) {
	var out []journalEntry
	pos := 0
	for pos < len(b) {
		rest := b[pos:]
		if len(rest) < journalFrameHeader || allZero(rest[:journalFrameHeader]) {
			// A torn header, or the zeros after the data — unless a
			// certain valid frame follows: zeros over frames are damage
			// too.
			if q, ok := certainFrameAfter(b, pos+1); ok {
				return nil, pos, corruptf(path, int64(pos), "zeros where a journal frame should start, followed by a valid one at byte %d", q)
			}
			if finalWrittenWhole(b, pos) {
				return nil, pos, corruptf(path, int64(pos), "a journal frame with no length, written whole (not cut short, no unwritten sector): damage, not a torn write")
			}
			return out, pos, nil
		}
		length := le.Uint32(rest[4:]) &^ journalUncertain
		end := journalFrameHeader + int(min(uint64(length), uint64(len(b))))
		if uint64(length) > uint64(len(rest)-journalFrameHeader) ||
			crc32.Checksum(rest[4:end], castagnoli) != le.Uint32(rest) {
			// Torn or damaged. Torn only if no certain frame follows: a
			// certain frame after it was written, and fsynced, after it
			// was whole and durable.
			if q, ok := certainFrameAfter(b, pos+1); ok {
				return nil, pos, corruptf(path, int64(pos), "damaged journal frame followed by a valid one at byte %d", q)
			}
			// Nothing certain after it: torn only if it is an incomplete
			// write (package tail, the rule every log applies). A frame
			// written whole and damaged since held acknowledged records.
			if finalWrittenWhole(b, pos) {
				return nil, pos, corruptf(path, int64(pos), "the last journal frame fails its checksum but was written whole (not cut short, no unwritten sector, or whole with one bit of its length flipped back): damage, not a torn write")
			}
			return out, pos, nil
		}
		if length == 0 {
			return nil, pos, corruptf(path, int64(pos), "empty journal frame")
		}
		var err error
		from := len(out)
		if out, err = decodeJournalEntries(out, rest[journalFrameHeader:end], path, int64(pos+journalFrameHeader)); err != nil {
			return nil, pos, err
		}
		if le.Uint32(rest[4:])&journalUncertain != 0 {
			for k := from; k < len(out); k++ {
				out[k].uncertain = true
			}
		}
		pos += end
	}
	return out, pos, nil
}

// finalWrittenWhole reports whether the bad frame at pos in b, with no
// certain frame after it, is damage: no
// frame at all follows it (valid uncertain frames after it make it part
// of a torn tail: a crash may tear any of them, in any order), and it is
// not an incomplete write by package tail's rule.
func finalWrittenWhole(b []byte, pos int) bool {
	if _, ok := nextJournalFrame(b, pos+1); ok {
		return false
	}
	return !tail.Torn(b[pos:], int64(pos), journalTailFormat)
}

// journalTailFormat is the journal's frame format, for package tail's
// rule.
var journalTailFormat = tail.Format{
	LengthAt: 4,
	Size: func(h []byte) (int, uint64) {
		return journalFrameHeader, journalFrameHeader + uint64(le.Uint32(h[4:])&^journalUncertain)
	},
	Whole: func(b []byte) bool {
		if len(b) < journalFrameHeader {
			return false
		}
		length := le.Uint32(b[4:]) &^ journalUncertain
		return uint64(length) <= uint64(len(b)-journalFrameHeader) &&
			crc32.Checksum(b[4:journalFrameHeader+int(length)], castagnoli) == le.Uint32(b)
	},
}

// certainFrameAfter finds the first position at or after from where a
// whole, certain frame starts (see journalUncertain): after a damaged
// frame or zeros, uncertain frames can be the kept part of a torn tail.
func certainFrameAfter(b []byte, from int) (int, bool) {
	for {
		q, ok := nextJournalFrame(b, from)
		if !ok || le.Uint32(b[q+4:])&journalUncertain == 0 {
			return q, ok
		}
		from = q + 1
	}
}

// nextJournalFrame finds the first position at or after from where a
// whole frame with a valid checksum starts. Cheap checks of the header
// and of the first entry's come before the checksum, so a scan over
// garbage computes few checksums.
func nextJournalFrame(b []byte, from int) (int, bool) {
	for q := from; q+journalFrameHeader+journalEntryHeader <= len(b); q++ {
		r := b[q:]
		length := le.Uint32(r[4:]) &^ journalUncertain
		if length < journalEntryHeader || uint64(length) > uint64(len(r)-journalFrameHeader) {
			continue
		}
		e := r[journalFrameHeader:]
		count, size := le.Uint32(e[24:])&^journalEntryFresh, le.Uint32(e[28:])
		if checkNamespace(metadata.Namespace(le.Uint64(e))) != nil || count == 0 && size != 0 ||
			uint64(size) > uint64(length)-journalEntryHeader || uint64(count) > uint64(size)/recordHeaderSizeV1 {
			continue
		}
		if crc32.Checksum(r[4:journalFrameHeader+int(length)], castagnoli) == le.Uint32(r) {
			return q, true
		}
	}
	return 0, false
}

// decodeJournalEntries decodes the entries of one frame (b, at file
// position base) and appends them to out.
func decodeJournalEntries(out []journalEntry, b []byte, path string, base int64) ([]journalEntry, error) {
	at := 0
	for at < len(b) {
		pos := base + int64(at)
		if len(b)-at < journalEntryHeader {
			return nil, corruptf(path, pos, "journal entry header needs %d bytes, %d left in the frame", journalEntryHeader, len(b)-at)
		}
		h := b[at:]
		e := journalEntry{
			ns:    metadata.Namespace(le.Uint64(h)),
			epoch: le.Uint64(h[8:]),
			first: le.Uint64(h[16:]),
			path:  path,
			pos:   pos,
		}
		count, size := le.Uint32(h[24:]), le.Uint32(h[28:])
		e.fresh, count = count&journalEntryFresh != 0, count&^journalEntryFresh
		if err := checkNamespace(e.ns); err != nil {
			return nil, corruptf(path, pos, "journal entry: %v", err)
		}
		avail := len(b) - at - journalEntryHeader
		if uint64(size) > uint64(avail) {
			return nil, corruptf(path, pos, "journal entry of %d bytes, %d left in the frame", size, avail)
		}
		// Every record takes at least the smallest header: a count the
		// bytes cannot hold is refused before the slice is allocated. A
		// synced-end mark holds no record, and is never fresh.
		if count == 0 && size == 0 && !e.fresh {
			out = append(out, e)
			at += journalEntryHeader
			continue
		}
		if count == 0 || uint64(count) > uint64(size)/recordHeaderSizeV1 {
			return nil, corruptf(path, pos, "journal entry claims %d records in %d bytes", count, size)
		}
		if e.first > math.MaxUint64-uint64(count) {
			return nil, corruptf(path, pos, "journal entry offsets %d + %d overflow", e.first, count)
		}
		recs := h[journalEntryHeader : journalEntryHeader+int(size)]
		e.msgs = make([]Message, 0, count)
		used := 0
		for used < len(recs) {
			m, n, err := decodeRecord(recs[used:], path, pos+journalEntryHeader+int64(used))
			if err != nil {
				return nil, corruptf(path, pos+journalEntryHeader+int64(used), "journal record: %v", err)
			}
			if want := e.first + uint64(len(e.msgs)); m.Offset != want || len(e.msgs) == int(count) {
				return nil, corruptf(path, pos+journalEntryHeader+int64(used),
					"journal record %d of %d has offset %d, want %d", len(e.msgs), count, m.Offset, want)
			}
			e.msgs = append(e.msgs, m)
			used += n
		}
		if len(e.msgs) != int(count) {
			return nil, corruptf(path, pos, "journal entry claims %d records, holds %d", count, len(e.msgs))
		}
		out = append(out, e)
		at += journalEntryHeader + int(size)
	}
	return out, nil
}

// journalFileName is the name of journal file seq.
func journalFileName(seq uint64) string { return fmt.Sprintf("%020d%s", seq, journalExt) }
