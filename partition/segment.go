package partition

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/parkway-io/parkway/internal/tail"
	"github.com/parkway-io/parkway/vfs"
)

// Segment files. A segment is <base>.log, its records (see codec.go), and
// <base>.index, a sparse index: one 8-byte entry (offset relative to base
// u32, file position u32, little endian) for the first record starting at
// least indexInterval bytes after the previously indexed record (or after
// position 0, which needs no entry). The rule depends only on the record
// positions, so an index rebuilt by a scan is byte-identical to the one
// written by appends.
//
// <base>.timeindex is the time index kept with it: one 12-byte entry
// (offset relative to base u32, append time i64, little endian) for each
// entry of the offset index, naming the same record. Append times are
// non-decreasing along a partition (Append clamps them), so a search for
// the first message appended at or after t binary-searches it. It is
// derived data like the offset index: written with it and rebuilt by a
// scan when it does not match its offset index entry for entry (for a
// sealed segment, when a search first needs it).

const (
	logExt            = ".log"
	indexExt          = ".index"
	timeIndexExt      = ".timeindex"
	timeEntrySize     = 12
	baseDigits        = 20
	indexInterval     = 4 << 10
	indexEntrySize    = 8
	readChunk         = 32 << 10 // initial read size for Read
	scanChunk         = 1 << 20  // read size for recovery scans
	maxRetainedBuffer = 8 << 20  // larger scratch buffers are dropped
	// appendChunk is about how many bytes of records an Append encodes
	// before it writes them: the scratch buffer stays this small, is
	// reused from append to append and stays in the CPU cache while it
	// is written, where a buffer as large as a big coalesced batch would
	// be a fresh allocation, zeroed and faulted in, every time.
	appendChunk = 1 << 20
	// lendPayload is the payload size from which Append writes a payload
	// from the caller's slice (a vectored write) rather than copying it
	// into its scratch buffer: from there on the copy costs more than a
	// piece of a vectored write does. A chunk then has at most
	// maxLentPieces pieces (two per record, the last one past
	// appendChunk included, and buf's rest), within the 1,024 one
	// pwritev takes.
	lendPayload   = 16 << 10
	maxLentPieces = 2*(appendChunk/lendPayload+1) + 1
	// indexPersistBatch is how many new index entries of the tail an
	// Append leaves unwritten before it writes them (two small writes,
	// to the offset and the time index). The tail's index files are
	// only a cache of what opening the tail rebuilds from its full scan
	// anyway, and a roll and Close write them whole; writing them on
	// every Append was two extra writes per batched produce.
	indexPersistBatch = 256
)

// A chunk's pieces fit one pwritev (IOV_MAX is 1,024 on Linux); this
// fails to compile if appendChunk or lendPayload change so they do not.
const _ = uint(1024 - maxLentPieces)

func segmentName(base uint64, ext string) string {
	return fmt.Sprintf("%0*d%s", baseDigits, base, ext)
}

// parseSegmentName returns the base offset of a "<20 digits>.log" name.
func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, logExt)
	if !ok || len(digits) != baseDigits {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	base, err := strconv.ParseUint(digits, 10, 64)
	return base, err == nil
}

// listSegments returns the sorted base offsets of the segments in the
// partition directory, and those of the offset index files found without
// their segment's log (see findDeletedTail), removing leftover temporary
// files (names starting with ".", from atomic writes a crash interrupted)
// on the way.
func (p *filePartition) listSegments() (bases, indexOnly []uint64, _ error) {
	names, err := p.fs.ReadDir(p.dir)
	if err != nil {
		return nil, nil, err
	}
	var indexes []uint64
	for _, name := range names {
		if strings.HasPrefix(name, ".") {
			_ = p.fs.Remove(filepath.Join(p.dir, name)) // harmless if it stays
			continue
		}
		if base, ok := parseSegmentName(name); ok {
			bases = append(bases, base)
		} else if digits, ok := strings.CutSuffix(name, indexExt); ok {
			if base, ok := parseSegmentName(digits + logExt); ok {
				indexes = append(indexes, base)
			}
		}
	}
	slices.Sort(bases)
	for _, b := range indexes {
		if _, found := slices.BinarySearch(bases, b); !found {
			indexOnly = append(indexOnly, b)
		}
	}
	return bases, indexOnly, nil
}

// hole is a range of offsets [from, to) whose records recovery found
// damaged or missing: a read that reaches it gets err, reads below it are
// served.
type hole struct {
	from, to uint64
	err      *CorruptError
}

type indexEntry struct {
	rel uint32 // offset - segment base
	pos uint32 // file position of the record
}

func appendIndexEntries(dst []byte, es []indexEntry) []byte {
	for _, e := range es {
		dst = le.AppendUint32(dst, e.rel)
		dst = le.AppendUint32(dst, e.pos)
	}
	return dst
}

// appendTimeEntries encodes the time index entries of es, whose append
// times are times.
func appendTimeEntries(dst []byte, es []indexEntry, times []int64) []byte {
	for i, e := range es {
		dst = le.AppendUint32(dst, e.rel)
		dst = le.AppendUint64(dst, uint64(times[i]))
	}
	return dst
}

// segment is one segment of a file partition. Only the tail is written.
// Its files are handles of the store's descriptor budget: opened on
// first use, closed when idle and the budget needs the descriptor.
type segment struct {
	base    uint64
	next    uint64 // offset after the last whole record
	size    int64  // logical size: the end of the last whole record
	logPath string
	log     *handle
	idx     *handle // the tail's index file; nil for older segments
	tidx    *handle // the tail's time index file; nil for older segments

	// maxTS is the largest message timestamp seen by appends and scans
	// (math.MinInt64 for none); it is the segment's newest timestamp once
	// maxTSKnown (every record was seen).
	maxTS      int64
	maxTSKnown bool
	// scanFirstAT is the append time of the first record the last scan
	// read: opening a sealed segment checks the time index's last entry
	// against it.
	scanFirstAT int64
	// maxAT is the largest append time seen by appends and scans
	// (math.MinInt64 for none). Append times never decrease along the
	// log, so once the last record was seen it is the last record's.
	maxAT int64
	// damaged is the damage recovery found in the segment (nil: none).
	// A sealed segment's records before it are served and the offsets
	// from it to the next segment are a hole of its partition; a damaged
	// tail's holes are between whole records (see FileStore.openTail).
	damaged *CorruptError
	// endDamage is what stopped open's scan of a sealed segment before
	// its end (a damaged or cut record, zeros), with nothing whole after
	// it: the offsets from there to the next segment are a hole.
	endDamage *CorruptError
	// synced is set by open when the whole segment is known to be
	// durable: a sealed segment, or a tail that open truncated and
	// fsynced. Only open reads it; afterwards filePartition.synced tracks
	// durability.
	synced bool

	index []indexEntry // in memory, so reads never touch the file
	times []int64      // append time of each index entry's record
	// timesUnknown: times holds placeholders (the time index file was
	// missing or did not match); ensureTimes rebuilds it on first use.
	timesUnknown bool
	// indexRebuilt: read rebuilt the index from a scan (once at most).
	indexRebuilt bool
	// lastResync is the last resync a read needed (see resyncCached).
	lastResync   *resyncResult
	lastIndexed  int64 // position of the last indexed record, 0 if none
	idxPersisted int   // entries of index already in both index files
}

func (s *segment) indexPath() string {
	return strings.TrimSuffix(s.logPath, logExt) + indexExt
}

func (s *segment) timeIndexPath() string {
	return strings.TrimSuffix(s.logPath, logExt) + timeIndexExt
}

// track applies the sparse index rule to the record of offset off at pos.
// Positions or relative offsets beyond uint32 (only in a foreign or
// damaged file) are simply not indexed: reads then start earlier.
func (s *segment) track(off uint64, pos int64, appendTime int64) {
	if pos-s.lastIndexed < indexInterval {
		return
	}
	rel := off - s.base
	if pos > math.MaxUint32 || rel > math.MaxUint32 {
		return
	}
	s.index = append(s.index, indexEntry{rel: uint32(rel), pos: uint32(pos)})
	s.times = append(s.times, appendTime)
	s.lastIndexed = pos
}

// seekTime returns the position and offset to start decoding at to find
// the first record appended at or after t: the last indexed record
// appended before t (every record before it was too), or the start.
func (s *segment) seekTime(t int64) (int64, uint64) {
	i := sort.Search(len(s.times), func(i int) bool { return s.times[i] >= t })
	if i == 0 {
		return 0, s.base
	}
	e := s.index[i-1]
	return int64(e.pos), s.base + uint64(e.rel)
}

// seek returns the position and offset to start decoding at to reach from.
func (s *segment) seek(from uint64) (int64, uint64) {
	i := sort.Search(len(s.index), func(i int) bool { return s.base+uint64(s.index[i].rel) > from })
	if i == 0 {
		return 0, s.base
	}
	e := s.index[i-1]
	return int64(e.pos), s.base + uint64(e.rel)
}

// scan walks the records from pos (expected to hold offset off) to end,
// verifying each, raising maxTS and, if index, applying the index rule.
// It stops at end or at an all-zero header (the end of data), returning
// the logical end and the next offset. A damaged or torn record stops it
// with a *CorruptError, and the returned end and next are those of the
// last whole record; any other error is an I/O error. buf is scratch
// space.
func (s *segment) scan(pos int64, off uint64, end int64, buf []byte, index bool) (int64, uint64, []byte, error) {
	first := off
	if want := max(min(scanChunk, end-pos), recordHeaderSize); int64(len(buf)) < want {
		buf = make([]byte, want)
	}
	for pos < end {
		b := buf[:min(int64(len(buf)), end-pos)]
		if _, err := s.log.ReadAt(b, pos); err != nil {
			return pos, off, buf, err
		}
		used := 0
		for used < len(b) {
			at := pos + int64(used)
			h, rn, err := parseRecord(b[used:], s.logPath, at)
			if err == io.EOF {
				return at, off, buf, nil
			}
			if err == errIncomplete {
				if used > 0 {
					break // read on from the start of this record
				}
				need := int64(recordHeaderSize)
				if len(b) >= 8 {
					l, _ := recordLength(b)
					need = int64(l)
				}
				if at+need > end || need <= int64(len(b)) {
					return at, off, buf, corruptf(s.logPath, at, "torn record: %d bytes left", end-at)
				}
				buf = make([]byte, need) // a record larger than the buffer
				break
			}
			if err != nil {
				return at, off, buf, err
			}
			if h.offset != off {
				return at, off, buf, corruptf(s.logPath, at, "record offset %d, expected %d", h.offset, off)
			}
			if off == first {
				s.scanFirstAT = h.appendTime
			}
			if index {
				s.track(off, at, h.appendTime)
			}
			s.maxTS = max(s.maxTS, h.timestamp)
			s.maxAT = max(s.maxAT, h.appendTime)
			off++
			used += rn
		}
		pos += int64(used)
	}
	return pos, off, buf, nil
}

// scanMaxTimestamp reads the whole segment for its newest timestamp.
// The segment is sealed, so anything but whole records up to its size is
// damage (*CorruptError).
func (s *segment) scanMaxTimestamp() (int64, error) {
	s.maxTS = math.MinInt64
	end, next, _, err := s.scan(0, s.base, s.size, nil, false)
	if err == nil && (end != s.size || next != s.next) {
		err = corruptf(s.logPath, end, "records end at byte %d offset %d, expected byte %d offset %d", end, next, s.size, s.next)
	}
	if err != nil {
		return 0, err
	}
	return s.maxTS, nil
}

// read appends to out up to count messages from offset from, which must be
// in [s.base, s.next). Payloads alias freshly allocated read buffers.
//
// A sealed segment's index is loaded from its file, checked at open only
// for what is cheap (see openSealed); an entry damaged in a way those
// checks miss points at no record, or at another one. A read that fails
// right at the position an entry gave rebuilds the segment's index from a
// scan, once, and tries again: damage in the index (derived data) is
// repaired, and only damage in the log is reported.
func (s *segment) read(from uint64, count int, out []Message) ([]Message, error) {
	n := len(out)
	pos, _ := s.seek(from)
	out, err := s.readAt(from, count, out)
	var ce *CorruptError
	// The tail's index and a damaged segment's come from open's scan of
	// the whole file: only a sealed segment's can be wrong.
	sealedIndex := s.idx == nil && s.damaged == nil
	if pos == 0 || !sealedIndex || s.indexRebuilt || !errors.As(err, &ce) || ce.Offset != pos || ce.Path != s.logPath {
		return out, err
	}
	s.indexRebuilt = true
	index, times, last := s.index, s.times, s.lastIndexed
	s.index, s.times, s.lastIndexed = nil, nil, 0
	if _, _, _, serr := s.scan(0, s.base, s.size, nil, true); serr != nil && !errors.Is(serr, ErrCorrupt) {
		s.index, s.times, s.lastIndexed = index, times, last
		return out, err
	}
	// The scan stops at damage in the log, if any: the entries before it
	// are right, and so are the append times it read with them.
	s.timesUnknown = false
	return s.readAt(from, count, out[:n])
}

// readAt is read without the index repair. Damage below from (between
// the index entry the read starts at and the offset asked for) does not
// stop it: it looks for the next whole record past the damage (resync)
// and reads on from there if that record is at or below from. Damage at
// or after from ends the read: with the messages before it, or with the
// *CorruptError if there are none.
func (s *segment) readAt(from uint64, count int, out []Message) ([]Message, error) {
	pos, off := s.seek(from)
	want := int64(readChunk)
	for count > 0 && pos < s.size {
		n := min(want, s.size-pos)
		buf := make([]byte, n)
		if _, err := s.log.ReadAt(buf, pos); err != nil {
			if errors.Is(err, io.EOF) {
				return out, corruptf(s.logPath, pos, "file shorter than its logical size %d", s.size)
			}
			return out, err
		}
		want = readChunk
		used := int64(0)
		jumped := false
		for count > 0 && used < int64(len(buf)) {
			at := pos + used
			m, rn, err := decodeRecord(buf[used:], s.logPath, at)
			var damage error
			switch {
			case err == errIncomplete:
				if used == 0 { // a record larger than the chunk
					if len(buf) < 8 {
						damage = corruptf(s.logPath, at, "torn record inside the logical size")
						break
					}
					l, _ := recordLength(buf)
					want = int64(l)
					if want <= int64(len(buf)) || at+want > s.size {
						damage = corruptf(s.logPath, at, "record of %d bytes overruns the logical size %d", want, s.size)
					}
				}
			case err == io.EOF:
				damage = corruptf(s.logPath, at, "end of data inside the logical size %d", s.size)
			case err != nil:
				damage = err
			case m.Offset != off:
				damage = corruptf(s.logPath, at, "record offset %d, expected %d", m.Offset, off)
			}
			if damage != nil {
				if off >= from || !errors.Is(damage, ErrCorrupt) {
					return out, damage
				}
				q, qoff, found, rerr := s.resyncCached(at, off)
				if rerr != nil || !found || qoff > from {
					return out, damage
				}
				pos, off, jumped, want = q, qoff, true, readChunk
				break
			}
			if err == errIncomplete {
				break // read on from the start of this record
			}
			if off >= from {
				out = append(out, m)
				count--
			}
			off++
			used += int64(rn)
		}
		if !jumped {
			pos += used
		}
	}
	return out, nil
}

// resyncCached is resync from at (where the record of offset off is
// damaged) to the segment's end, remembering the last answer: a consumer
// stepping through damaged offsets one read at a time meets the same
// damage from the same index entry each time, and must not pay a scan of
// the rest of the segment each time.
func (s *segment) resyncCached(at int64, off uint64) (int64, uint64, bool, error) {
	if c := s.lastResync; c != nil && c.at == at && c.off == off && c.size == s.size {
		return c.q, c.qoff, c.found, nil
	}
	q, qoff, found, _, err := s.resync(at, off, s.size, nil)
	if err != nil {
		return 0, 0, false, err
	}
	s.lastResync = &resyncResult{at: at, off: off, size: s.size, q: q, qoff: qoff, found: found}
	return q, qoff, found, nil
}

// resyncResult is a resync's answer, kept by resyncCached.
type resyncResult struct {
	at    int64
	off   uint64
	size  int64
	q     int64
	qoff  uint64
	found bool
}

// ensureTimes rebuilds the time index of a sealed segment opened without
// a usable one, by a scan, and writes its file (best effort: the next
// open rebuilds a file that failed to write).
func (s *segment) ensureTimes(fsys vfs.FS) error {
	if !s.timesUnknown {
		return nil
	}
	index, times, last := s.index, s.times, s.lastIndexed
	s.index, s.times, s.lastIndexed = nil, nil, 0
	end, next, _, err := s.scan(0, s.base, s.size, nil, true)
	if err == nil && (end != s.size || next != s.next) {
		err = corruptf(s.logPath, end, "records end at byte %d offset %d, expected byte %d offset %d", end, next, s.size, s.next)
	}
	if err != nil {
		s.index, s.times, s.lastIndexed = index, times, last
		return err
	}
	s.timesUnknown = false
	if f, err := writeWhole(fsys, s.timeIndexPath(), appendTimeEntries(nil, s.index, s.times)); err == nil {
		_ = f.Close()
	}
	return nil
}

// findTime returns the first offset at or after from (which is in
// [s.base, s.next)) of a record appended at or after t, and false if the
// segment has none. It starts decoding at the time index's hint.
func (s *segment) findTime(t int64, from uint64) (uint64, bool, error) {
	_, off := s.seekTime(t)
	hinted := off > from
	off = max(off, from)
	for off < s.next {
		msgs, err := s.read(off, 256, nil)
		if err != nil {
			return 0, false, err
		}
		if len(msgs) == 0 {
			return 0, false, corruptf(s.logPath, s.size, "no record for offset %d below the segment's end %d", off, s.next)
		}
		if hinted && msgs[0].AppendTime >= t {
			// The time index named a record appended before t and it was
			// not: the index is damaged (a sealed segment's is loaded
			// from its file). Append times never decrease, so a record
			// appended before t proves every earlier one was; without
			// that proof, search from the start.
			hinted, off = false, from
			continue
		}
		hinted = false
		for i := range msgs {
			if msgs[i].AppendTime >= t {
				return msgs[i].Offset, true, nil
			}
		}
		off = msgs[len(msgs)-1].Offset + 1
	}
	return 0, false, nil
}

// timeIndexCurrent reports whether the time index file holds exactly
// s.index and s.times.
func (s *segment) timeIndexCurrent(fsys vfs.FS) (bool, error) {
	have, err := vfs.ReadFile(fsys, s.timeIndexPath())
	if isNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return string(have) == string(appendTimeEntries(nil, s.index, s.times)), nil
}

// loadIndex reads an index file, dropping a torn last entry. A missing
// file yields no entries. exact is false if the file was missing or had a
// torn entry, so it needs rewriting.
func loadIndex(fsys vfs.FS, path string) (es []indexEntry, exact bool, err error) {
	b, err := vfs.ReadFile(fsys, path)
	if isNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	es = make([]indexEntry, len(b)/indexEntrySize)
	for i := range es {
		es[i] = indexEntry{rel: le.Uint32(b[i*indexEntrySize:]), pos: le.Uint32(b[i*indexEntrySize+4:])}
	}
	return es, len(b)%indexEntrySize == 0, nil
}

// loadTimeIndex reads a time index file and returns its append times if
// it matches es entry for entry (nil, false otherwise: missing, torn or
// stale, so it needs rebuilding).
func loadTimeIndex(fsys vfs.FS, path string, es []indexEntry) ([]int64, bool, error) {
	b, err := vfs.ReadFile(fsys, path)
	if isNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if len(b) != len(es)*timeEntrySize {
		return nil, false, nil
	}
	times := make([]int64, len(es))
	for i := range es {
		e := b[i*timeEntrySize:]
		if le.Uint32(e) != es[i].rel {
			return nil, false, nil
		}
		times[i] = int64(le.Uint64(e[4:]))
	}
	return times, true, nil
}

// plausibleIndex checks what can be checked without reading the log:
// entries strictly increasing, spaced by the index rule, inside the file.
func plausibleIndex(es []indexEntry, fileSize int64) bool {
	var prevPos int64
	var prevRel uint32
	for i, e := range es {
		if int64(e.pos)-prevPos < indexInterval || int64(e.pos) >= fileSize || (i > 0 && e.rel <= prevRel) {
			return false
		}
		prevPos, prevRel = int64(e.pos), e.rel
	}
	return true
}

// writeIndexFile replaces the content of the index and time index files
// with s.index and s.times and, if keep is not nil, leaves them open in
// s.idx and s.tidx as handles of keep. The indexes are derived data, so a
// crash halfway is repaired by the next reopen's scan.
func (s *segment) writeIndexFile(fsys vfs.FS, keep *handleCache) error {
	f, err := writeWhole(fsys, s.indexPath(), appendIndexEntries(nil, s.index))
	if err != nil {
		return err
	}
	if s.timesUnknown { // a sealed segment's: never kept open
		return f.Close()
	}
	tf, err := writeWhole(fsys, s.timeIndexPath(), appendTimeEntries(nil, s.index, s.times))
	if err != nil {
		f.Close()
		return err
	}
	s.idxPersisted = len(s.index)
	if keep != nil {
		s.idx = keep.newHandle(s.indexPath(), os.O_RDWR)
		keep.adopt(s.idx, f)
		s.tidx = keep.newHandle(s.timeIndexPath(), os.O_RDWR)
		keep.adopt(s.tidx, tf)
		return nil
	}
	return errors.Join(f.Close(), tf.Close())
}

// writeWhole replaces path's content with b and returns it open.
func writeWhole(fsys vfs.FS, path string, b []byte) (vfs.File, error) {
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// close closes the segment's files and gives their descriptors back to
// the budget.
func (s *segment) close() error {
	var errs []error
	if s.idx != nil {
		errs = append(errs, s.idx.close())
		s.idx = nil
	}
	if s.tidx != nil {
		errs = append(errs, s.tidx.close())
		s.tidx = nil
	}
	if s.log != nil {
		errs = append(errs, s.log.close())
		s.log = nil
	}
	return errors.Join(errs...)
}

func newSegment(dir string, base uint64) *segment {
	return &segment{base: base, next: base, logPath: filepath.Join(dir, segmentName(base, logExt)), maxTS: math.MinInt64, maxAT: math.MinInt64}
}

// scanHoles scans the whole segment (of size bytes) like scan, indexing
// it, and on past damage: where the records stop before size, resync
// looks for a whole record after; if there is one, the offsets from the
// stop to it are a hole (the damage, a *CorruptError at the stop's
// position), the record after it is indexed whatever the spacing (a read
// past the hole starts there, never before the damage) and the scan goes
// on from it. It returns the end and next offset of the last whole
// record, the holes, and stop: what is at end if end < size (the
// *CorruptError of a torn or damaged record, or zeros), with nothing
// whole after it. Any other error is an I/O error.
func (s *segment) scanHoles(size int64, buf []byte) (end int64, next uint64, holes []hole, stop *CorruptError, _ []byte, err error) {
	end, next, buf, err = s.scan(0, s.base, size, buf, true)
	for {
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return 0, 0, nil, nil, buf, err
		}
		if end >= size {
			return end, next, holes, nil, buf, nil
		}
		var ce *CorruptError
		if !errors.As(err, &ce) {
			ce = corruptf(s.logPath, end, "zeros where a record should start")
		}
		q, qoff, found, b, rerr := s.resync(end, next, size, buf)
		buf = b
		if rerr != nil {
			return 0, 0, nil, nil, buf, rerr
		}
		if !found {
			return end, next, holes, ce, buf, nil
		}
		ce = corruptf(s.logPath, end, "%v, followed by a whole record (offset %d at byte %d): damage, not a torn write", ce.Err, qoff, q)
		holes = append(holes, hole{from: next, to: qoff, err: ce})
		s.lastIndexed = min(s.lastIndexed, q-indexInterval)
		end, next, buf, err = s.scan(q, qoff, size, buf, true)
	}
}

// scanTail is scanHoles for a log's last segment, with what follows its
// last whole record judged, always, by package tail's rule (every log's):
// an incomplete final write is left after end, for the caller to truncate
// (or, if there are holes, to leave as it is, fenced); a last record
// written whole and damaged since is one more hole, its offset, and the
// log's end is past it (end is then size). Every way a last segment is
// opened — a node's open, a rebuild, a read-only open — judges its final
// record here and only here, whatever damage came before it: a bad record
// earlier in the file changes nothing about whether the last one was
// written whole. Any other error is an I/O error.
func (s *segment) scanTail(size int64, buf []byte) (end int64, next uint64, holes []hole, _ []byte, err error) {
	end, next, holes, stop, buf, err := s.scanHoles(size, buf)
	if err != nil || end >= size {
		return end, next, holes, buf, err
	}
	torn, err := tail.TornAt(s.log, end, size, s.tailFormat())
	if err != nil || torn {
		return end, next, holes, buf, err
	}
	why := "a record fails its checksum"
	if stop != nil {
		why = stop.Err.Error()
	}
	ce := corruptf(s.logPath, end, "%s; it is the last record but was written whole (not cut short, no unwritten sector, or whole with one bit of its length flipped back): damage, not a torn write", why)
	return size, next + 1, append(holes, hole{from: next, to: next + 1, err: ce}), buf, nil
}

// tailFormat is the segment's record format, for package tail's rule.
func (s *segment) tailFormat() tail.Format {
	return tail.Format{
		LengthAt: 4,
		Size: func(h []byte) (int, uint64) {
			l, hs := recordLength(h)
			return hs, uint64(l)
		},
		Whole: func(b []byte) bool {
			_, n, err := parseRecord(b, s.logPath, 0)
			return err == nil && n > 0
		},
	}
}

// resync looks past damage for the next record: the first position q in
// (from, end) where a whole record starts (both formats) whose checksum
// holds and whose offset could follow the damaged record's, off: at least
// off and at most off + (q-from)/recordHeaderSizeV1, since every record in
// between takes at least that many bytes. It returns q and the record's
// offset, or found false if nothing after from is a record: what follows
// the last whole record is then a torn final write (or zeros), not damage.
//
// It is how recovery tells the two apart (see FileStore.Build). The
// record format has no sync marker, so every position is a candidate; the
// cheap checks (length within the file, the field lengths adding up to
// it, a plausible offset) reject garbage and zeros before a checksum is
// computed, so the scan costs about one pass over the bytes after from,
// once, at open. A candidate's checksum is computed over the file in
// pieces, never by allocating its claimed length, and the checksums
// computed are bounded by a few times the bytes scanned: a file crafted so
// that many candidates pass the cheap checks with huge lengths is a
// *CorruptError (the caller does not open the log) rather than a scan
// quadratic in the file's size. buf is scratch space.
func (s *segment) resync(from int64, off uint64, end int64, buf []byte) (q int64, qoff uint64, found bool, _ []byte, err error) {
	// A window of scanChunk bytes, or the whole region if smaller (then
	// read at once: a header never straddles the window's end).
	if want := min(scanChunk, max(end-from, 0)); int64(len(buf)) < want {
		buf = make([]byte, want)
	}
	var crcBuf []byte
	budget := 4*(end-from) + 64<<20 // bytes of candidates' checksums
	w := from + 1                   // the window's file position
	for w+recordHeaderSizeV1 <= end {
		n := min(int64(len(buf)), end-w)
		last := w+n == end
		b := buf[:n]
		if _, err := s.log.ReadAt(b, w); err != nil {
			return 0, 0, false, buf, err
		}
		next := w + n // where the next window starts unless a header straddles this one's end
		for i := int64(0); w+i+recordHeaderSizeV1 <= end; i++ {
			if i+8 > n {
				next = w + i
				break
			}
			l, hs := recordLength(b[i:])
			at := w + i
			if l < uint32(hs) || at+int64(l) > end {
				continue
			}
			if i+int64(hs) > n {
				if last {
					continue // cannot happen: at+hs <= at+l <= end
				}
				next = at
				break
			}
			h := b[i:]
			o := le.Uint64(h[8:])
			if o < off || o-off > uint64(at-from)/recordHeaderSizeV1 {
				continue
			}
			var sum uint64
			if hs == recordHeaderSize {
				sum = uint64(hs) + uint64(le.Uint32(h[48:])) + uint64(le.Uint32(h[52:])) + uint64(le.Uint32(h[56:]))
			} else {
				sum = uint64(hs) + uint64(le.Uint32(h[40:])) + uint64(le.Uint32(h[44:]))
			}
			if sum != uint64(l) {
				continue
			}
			if budget -= int64(l); budget < 0 {
				return 0, 0, false, buf, corruptf(s.logPath, from, "damaged or torn record, and too many candidate records after it to tell which")
			}
			var crc uint32
			if i+int64(l) <= n {
				crc = crc32.Checksum(b[i+4:i+int64(l)], castagnoli)
			} else {
				if crcBuf == nil {
					crcBuf = make([]byte, 64<<10)
				}
				crc = crc32.Update(0, castagnoli, b[i+4:n])
				for p := w + n; p < at+int64(l); {
					c := crcBuf[:min(int64(len(crcBuf)), at+int64(l)-p)]
					if _, err := s.log.ReadAt(c, p); err != nil {
						return 0, 0, false, buf, err
					}
					crc = crc32.Update(crc, castagnoli, c)
					p += int64(len(c))
				}
			}
			if crc == le.Uint32(h) {
				return at, o, true, buf, nil
			}
		}
		if last || next <= w {
			break
		}
		w = next
	}
	return 0, 0, false, buf, nil
}
