package partition

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
)

// filePartition is a FileStore partition. segs is never empty; the last
// one is the tail that appends go to.
type filePartition struct {
	store *FileStore
	fs    vfs.FS
	ns    metadata.Namespace
	epoch uint64
	dir   string
	segs  []*segment
	next  uint64
	// start is the first readable offset: the recorded start offset or
	// the first segment's base, whichever is larger.
	start uint64
	// synced is the offset below which every message is durable.
	synced uint64
	// notedEnd is the synced end last passed to the store (noteSynced).
	notedEnd uint64
	// lastAT is the append time of the newest message (math.MinInt64
	// for none): Append never stamps one below it.
	lastAT int64
	// layoutPending: the partition was just built and its layout (the
	// incarnation file, the directories in layout) is not durable yet.
	layout        []string
	layoutGen     uint64 // the change to layout's shared directories (dirSyncs)
	layoutPending bool
	// deferred: built by BuildDeferred and not materialised yet — nothing
	// of the partition is on disk, its records are held behind (wpend)
	// and, once committed, in its journal; tried: a materialisation
	// failed part-way, and the next one starts its directory over.
	deferred, tried bool
	// lodged: the directory of a deferred partition exists for files its
	// owner keeps there (Lodge), or a build found it holding such files:
	// while deferred only the directories in layout (if layoutPending)
	// are the partition's, and a materialisation starts over by removing
	// the partition's own files (removeOwnFiles), never the directory.
	// held: the owner's log holds the partition's appends (Lodge), so a
	// deferred partition keeps them behind while they fit.
	lodged, held bool
	consumers    map[string]uint64
	// consumerSeqs is the sequence number of the last slot of each
	// consumer's offset file (storeConsumerFile), for the consumers whose
	// file's is known; nil until one is.
	consumerSeqs map[string]uint64
	// consumerStaged tracks the consumers' staged stores not yet done
	// (StageConsumerOffset); nil until one is staged.
	consumerStaged map[string]*stagedOffsets
	buf            []byte // append scratch
	idxBuf         []byte // index scratch
	closed         bool
	// broken is set when a failed append could not be rolled back (the
	// file may hold bytes past the logical end; appending over them could
	// leave a stale record that a reopen would resurrect) or when an fsync
	// failed (what is durable is unknown). Every later write returns it.
	broken error
	// holes are the offset ranges recovery found damaged or missing (see
	// FileStore.Build), in offset order: a read that reaches one gets its
	// *CorruptError, reads below it are served.
	holes []hole
	// fenced is set when recovery found the tail segment damaged: the log
	// ends past damage, so appends and skips are refused with it (it
	// wraps the *CorruptError) rather than risk handing out an offset
	// twice. A purge (TruncateBefore(NextOffset)) lifts it: the damaged
	// segment is rolled and deleted, and appends go on at NextOffset.
	fenced error

	// The journal (journal.go), all owned by the partition's goroutine
	// except jseq, which the journal reads under its lock. journal is the
	// Journal the partition joined (nil: none); with stash set, Append
	// copies the records it writes to jpend, which holds [jnext, next):
	// offsets below jnext are durable, in the journal or in the files.
	// jseq is the oldest journal file holding records the partition's
	// files may lack (0: none).
	journal *Journal
	stash   bool
	// staging: the partition's journal entries are written by Stage
	// (Journal.Stage: acknowledged once in the page cache, no fsync),
	// never by Commit. Records its Append writes to its own file are then
	// as safe there as in the journal, so it keeps no copy of them.
	staging bool
	jnext   uint64
	jpend   []byte
	jseq    uint64

	// wpend holds the newest records of the tail that are not written to
	// its file yet (write-behind, see Append): the tail's bytes
	// [tail.size-len(wpend), tail.size). Only a partition in a journal
	// defers writes, and its records reach the journal before they are
	// acknowledged — or a deferred one whose owner's log holds them
	// (held).
	wpend []byte
	// dirtyFile: the tail's file holds records written since its last
	// fsync, so its descriptor is pinned (see handleCache); jpin: it is
	// counted in its journal's pinned members (journal.pinned).
	dirtyFile bool
	jpin      bool

	// mark is the log's end at its last commit point — the open, a
	// successful Commit or Sync — and markBase and markPos the base of
	// the tail then and its size: what a failed Commit takes back
	// (takeBack) is the log past it.
	mark     uint64
	markBase uint64
	markPos  int64
}

// writeBehind bounds the records a journaled partition keeps unwritten
// (wpend). A group commit covering many partitions would otherwise cost
// one write per partition, which the kernel charges per file (a page
// made dirty, the inode's times updated in the filesystem's journal):
// 3–4 µs for a 148-byte record spread over a thousand files against
// under 2 µs over eight, on the machine the partition-count benchmark
// ran on. With write-behind a partition's records are written a page at
// a time. The bound keeps the memory small even with every member of a
// journal holding a full buffer (maxJournalMembers of them between
// checkpoints: 32 MiB).
const writeBehind = 4 << 10

func (p *filePartition) Namespace() metadata.Namespace { return p.ns }

func (p *filePartition) Epoch() uint64 { return p.epoch }

func (p *filePartition) NextOffset() uint64 { return p.next }

func (p *filePartition) StartOffset() uint64 { return p.start }

func (p *filePartition) tail() *segment { return p.segs[len(p.segs)-1] }

// fail marks the partition broken by err and returns the error to report.
func (p *filePartition) fail(what string, err error) error {
	p.broken = fmt.Errorf("%w: partition %v: %s: %w", ErrUnusable, p.ns, what, err)
	return p.broken
}

// createSegment creates the log and index files of a new segment starting
// at base, preallocated when configured, and fsyncs the directory so the
// new files survive a crash (messages synced into them must not lose
// their file).
func (p *filePartition) createSegment(base uint64) (_ *segment, err error) {
	seg := newSegment(p.dir, base)
	defer func() { // seg, not the result: that is nil on error
		if err != nil {
			_ = seg.close()
			_ = removeSegmentFiles(p.fs, seg)
		}
	}()
	if seg.log, err = p.createFile(seg.logPath); err != nil {
		return nil, err
	}
	if seg.idx, err = p.createFile(seg.indexPath()); err != nil {
		return nil, err
	}
	if seg.tidx, err = p.createFile(seg.timeIndexPath()); err != nil {
		return nil, err
	}
	if p.store.cfg.Preallocate {
		if err = preallocate(seg.log, p.store.cfg.SegmentSize); err != nil {
			return nil, err
		}
	}
	// A partition whose layout is pending syncs its directory with it.
	if !p.layoutPending {
		if err = p.fs.SyncDir(p.dir); err != nil {
			return nil, err
		}
	}
	seg.maxTSKnown = true
	return seg, nil
}

// createFile creates (or empties) the file at path and returns it as a
// handle of the store's descriptor budget, open for now.
func (p *filePartition) createFile(path string) (*handle, error) {
	f, err := p.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	h := p.store.handles.newHandle(path, os.O_RDWR)
	p.store.handles.adopt(h, f)
	return h, nil
}

// removeSegmentFiles deletes a segment's log and indexes; missing files
// are not an error.
func removeSegmentFiles(fsys vfs.FS, s *segment) error {
	var errs []error
	for _, path := range []string{s.logPath, s.indexPath(), s.timeIndexPath()} {
		if err := fsys.Remove(path); err != nil && !isNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// roll seals the tail and starts a new segment at NextOffset. On error the
// old tail stays the tail.
//
// The old tail is fsynced first, even though appends do not sync:
// otherwise the new segment's data could reach the disk before the old
// segment's end, and a crash would leave a torn sealed segment, which a
// reopen reports instead of repairing. That is one fsync per segment. With
// Preallocate, the old tail is also truncated to its size, which releases
// the unused part of its reservation.
func (p *filePartition) roll() error {
	if err := p.materialize(); err != nil {
		return err
	}
	if err := p.flushWrites(false); err != nil {
		return err
	}
	old := p.tail()
	if p.store.cfg.Preallocate {
		_ = old.log.Truncate(old.size) // only frees space; harmless if it fails
	}
	if p.synced < p.next {
		if err := p.syncTail(); err != nil {
			return err
		}
	}
	seg, err := p.createSegment(p.next)
	if err != nil {
		return err
	}
	p.persistIndex(old)
	old.closeIndexes() // the in-memory indexes are authoritative
	committed := p.mark == p.next && p.markBase == old.base
	p.segs = append(p.segs, seg)
	if committed {
		p.setMark() // nothing to take back in the sealed segment
	}
	return nil
}

// persistIndex writes the index entries not yet in the index files (the
// offset index and the time index). It is best effort: the in-memory
// indexes serve reads, and a reopen rebuilds a short index file, so a
// failure only means it is retried next time.
func (p *filePartition) persistIndex(s *segment) {
	if s.idx == nil || s.tidx == nil || s.idxPersisted == len(s.index) {
		return
	}
	from := s.idxPersisted
	b := appendIndexEntries(p.idxBuf[:0], s.index[from:])
	_, err := s.idx.WriteAt(b, int64(from)*indexEntrySize)
	if err == nil {
		b = appendTimeEntries(b[:0], s.index[from:], s.times[from:])
		_, err = s.tidx.WriteAt(b, int64(from)*timeEntrySize)
	}
	if err == nil {
		s.idxPersisted = len(s.index)
	}
	p.idxBuf = b[:0]
}

// closeIndexes closes a sealed segment's index files; its in-memory
// indexes stay authoritative.
func (s *segment) closeIndexes() {
	if s.idx != nil {
		_ = s.idx.close()
		s.idx = nil
	}
	if s.tidx != nil {
		_ = s.tidx.close()
		s.tidx = nil
	}
}

// Append encodes the batch and writes it at the tail's logical end,
// rolling first if the batch would take the tail past SegmentSize. The
// records are encoded into a reused scratch buffer of at most about
// appendChunk bytes and written from it with one write per chunk: a batch
// of small records is one write, and a large batch (a coalesced run of
// 64 KiB payloads can be many MiB) never needs a buffer as large as
// itself. A failed write is truncated away, leaving the partition as it
// was. Append does not fsync (see Sync) unless FileConfig.Sync is set.
func (p *filePartition) Append(msgs []Message) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	if len(msgs) == 0 {
		return 0, ErrEmptyBatch
	}
	if p.broken != nil {
		return 0, p.broken
	}
	if p.fenced != nil {
		return 0, p.fenced
	}
	var total uint64
	for i := range msgs {
		n, ok := recordSize(&msgs[i])
		if !ok {
			return 0, fmt.Errorf("%w: message %d of the batch exceeds %d bytes", ErrTooLarge, i, uint64(maxRecordSize))
		}
		total += uint64(n)
	}
	if total > math.MaxUint32 {
		return 0, fmt.Errorf("%w: batch of %d bytes exceeds %d", ErrTooLarge, total, uint64(math.MaxUint32))
	}
	tail := p.tail()
	if tail.size > 0 && tail.size+int64(total) > p.store.cfg.SegmentSize {
		if err := p.roll(); err != nil {
			return 0, err
		}
		tail = p.tail()
	}
	if (p.stash || p.held && p.deferred) && uint64(len(p.wpend))+total <= writeBehind {
		return p.appendBehind(tail, msgs)
	}
	// A deferred partition holds only what fits behind: these records
	// need its files. (Held by the owner's log, it is written through
	// once materialised, as a partition built by Build is.)
	if err := p.materialize(); err != nil {
		return 0, err
	}
	if err := p.flushWrites(false); err != nil {
		return 0, err
	}
	if p.stash && (p.staging || uint64(len(p.jpend))+total > maxStash) {
		// The partition stops stashing before this batch is copied, as
		// when its stash overflows (stashRecords), in two cases. Staged
		// (Journal.Stage): the journal only carries what is held behind
		// to the page cache before the acknowledgement, and the file holds
		// everything now (flushWrites wrote wpend), this batch included
		// once written; a copy would write every byte twice, so its later
		// appends go to its file and the next Stage has no entry for it
		// (its acknowledgements wait for nothing more). Committed: the
		// batch would overflow the stash; not copied, its large payloads
		// are lent, and the next Commit syncs the partition directly.
		p.stash, p.jpend = false, nil
	}
	f, err := p.openTail(tail)
	if err != nil {
		return 0, err
	}

	first := p.next
	indexLen, lastIndexed := len(tail.index), tail.lastIndexed
	maxTS, lastAT := tail.maxTS, p.lastAT
	pos := tail.size // the file position of the chunk's first byte
	stashed := len(p.jpend)
	buf := slices.Grow(p.buf[:0], int(min(total, appendChunk)))
	// A large payload is not copied into buf: its record's head is, and
	// the chunk is written with one vectored write of buf's pieces and
	// the payloads between them (lent), in file order. Not while the
	// partition stashes: the journal's copy needs every record's bytes
	// in buf.
	var (
		lent  [][]byte // the chunk's pieces, when it lends payloads
		mark  int      // buf[mark:] is not in lent yet
		chunk int      // the chunk's bytes: buf's and the lent payloads'
	)
	write := func() error {
		if lent == nil {
			return writeFull(f, buf, pos)
		}
		if mark < len(buf) {
			lent = append(lent, buf[mark:])
		}
		n, err := vfs.WriteVectorAt(f, lent, pos)
		if err == nil && n != chunk {
			err = io.ErrShortWrite
		}
		clear(lent) // no reference to the caller's payloads is kept
		lent, mark = lent[:0], 0
		return err
	}
	for i := range msgs {
		off := first + uint64(i)
		m := &msgs[i]
		lastAT = stampAppendTime(m, lastAT)
		tail.track(off, pos+int64(chunk), lastAT)
		if len(m.Payload) >= lendPayload && !p.stash {
			at := len(buf)
			buf = appendRecordHead(buf, m, off, lastAT, true)
			if lent == nil {
				lent = make([][]byte, 0, min(2*(len(msgs)-i)+1, maxLentPieces))
			}
			lent = append(lent, buf[mark:], m.Payload)
			mark = len(buf)
			chunk += len(buf) - at + len(m.Payload)
		} else {
			at := len(buf)
			buf = appendRecord(buf, m, off, lastAT)
			chunk += len(buf) - at
		}
		maxTS = max(maxTS, m.Timestamp)
		if chunk >= appendChunk && i < len(msgs)-1 {
			if err = write(); err != nil {
				break
			}
			p.stashRecords(buf)
			pos += int64(chunk)
			buf, chunk = buf[:0], 0
		}
	}
	if err == nil {
		if err = write(); err == nil {
			p.stashRecords(buf)
		}
	}
	if cap(buf) <= maxRetainedBuffer {
		p.buf = buf[:0]
	} else {
		p.buf = nil
	}
	if err = p.closeTail(tail, f, err); err != nil {
		tail.index, tail.times, tail.lastIndexed = tail.index[:indexLen], tail.times[:indexLen], lastIndexed
		if p.stash {
			p.jpend = p.jpend[:stashed] // the failed batch's records are not the partition's
		}
		return 0, err
	}
	tail.size += int64(total)
	tail.next += uint64(len(msgs))
	tail.maxTS = maxTS
	tail.maxAT = max(tail.maxAT, lastAT)
	p.lastAT = lastAT
	p.next = tail.next
	if p.store.cfg.Sync {
		p.synced = p.next // closeTail fsynced; a roll fsyncs what it seals
	} else {
		p.wroteFile()
	}
	if len(tail.index)-tail.idxPersisted >= indexPersistBatch {
		p.persistIndex(tail)
	}
	return first, nil
}

// appendBehind is Append for a partition in a journal whose records fit
// in wpend: they are encoded there and stashed for the journal's next
// entry, and written to the tail's file later (flushWrites): when wpend
// would outgrow writeBehind, and before anything reads the file or syncs
// it (Read, OffsetForTime, a roll, a sync, a checkpoint, Close). Until the
// journal's next Commit they are not acknowledged; after it, the journal
// holds them durably, and a crash that loses wpend loses nothing: the
// replay at the next open appends them to the partition's files. A
// deferred partition whose owner's log holds its records (Lodge) keeps
// them here the same way, the owner re-applying them after a restart.
// Nothing here touches a file, so nothing can fail.
func (p *filePartition) appendBehind(tail *segment, msgs []Message) (uint64, error) {
	first := p.next
	maxTS, lastAT := tail.maxTS, p.lastAT
	from := len(p.wpend)
	pos := tail.size
	for i := range msgs {
		lastAT = stampAppendTime(&msgs[i], lastAT)
		tail.track(first+uint64(i), pos+int64(len(p.wpend)-from), lastAT)
		p.wpend = appendRecord(p.wpend, &msgs[i], first+uint64(i), lastAT)
		maxTS = max(maxTS, msgs[i].Timestamp)
	}
	p.stashRecords(p.wpend[from:])
	tail.size += int64(len(p.wpend) - from)
	tail.next += uint64(len(msgs))
	tail.maxTS = maxTS
	tail.maxAT = max(tail.maxAT, lastAT)
	p.lastAT = lastAT
	p.next = tail.next
	if len(tail.index)-tail.idxPersisted >= indexPersistBatch {
		// The index files never point past what the log file holds. A
		// failed write leaves the records behind (the index is best
		// effort); they are appended all the same.
		if err := p.flushWrites(true); err == nil {
			p.persistIndex(tail)
		}
	}
	return first, nil
}

// flushWrites writes wpend to the tail's file, pinning the tail's
// descriptor until the fsync that covers it, as Append does. A failed
// write (a full disk) is truncated away and its records stay behind, to
// be written by the next flush: they may be acknowledged already (the
// journal holds them), so the caller gets the error (a read, a sync, a
// larger append, each refused as if its own write had failed) and the
// journal keeps its files, but nothing is lost and the partition stays
// usable. A write that cannot be truncated away breaks the partition, as
// in Append. keep retains wpend's buffer for the next records (the
// partition is being appended to); otherwise it is dropped, so idle
// partitions hold no buffer.
func (p *filePartition) flushWrites(keep bool) error {
	if len(p.wpend) == 0 {
		return nil
	}
	if p.broken != nil {
		return p.broken
	}
	if err := p.materialize(); err != nil {
		return err // the records stay behind
	}
	tail := p.tail()
	f, err := tail.log.acquire()
	if err != nil {
		return err // nothing was written
	}
	tail.log.setPinned(true)
	pos := tail.size - int64(len(p.wpend))
	if err = writeFull(f, p.wpend, pos); err != nil {
		// Truncated durably (see closeTail): records held behind may be
		// taken back later (takeBack), which relies on the file not
		// holding them.
		if terr := f.Truncate(pos); terr != nil {
			err = p.fail(fmt.Sprintf("write-behind failed (%v) and could not be rolled back", err), terr)
		} else if serr := f.Sync(); serr != nil {
			err = p.fail(fmt.Sprintf("write-behind failed (%v) and its rollback could not be made durable", err), serr)
		}
		tail.log.release()
		return err
	}
	tail.log.release()
	p.wroteFile()
	if keep {
		p.wpend = p.wpend[:0]
	} else {
		p.wpend = nil
	}
	return nil
}

// wroteFile records that the tail's file holds unsynced records: its
// descriptor is pinned until the fsync, and a member of a journal counts
// towards the journal's checkpoint (Journal.due).
func (p *filePartition) wroteFile() {
	p.dirtyFile = true
	if j := p.journal; j != nil && !p.jpin {
		j.mu.Lock()
		if p.jseq != 0 {
			j.pinned++
			p.jpin = true
		}
		j.mu.Unlock()
	}
}

// fileSynced records that the tail's file holds no unsynced records.
func (p *filePartition) fileSynced() {
	p.dirtyFile = false
	p.noteSynced()
	if j := p.journal; p.jpin && j != nil {
		j.mu.Lock()
		j.unpinLocked(p)
		j.mu.Unlock()
	}
}

// setMark records the log's end as a commit point (see mark): what it
// holds is, or may be, acknowledged.
func (p *filePartition) setMark() {
	tail := p.tail()
	p.mark, p.markBase, p.markPos = p.next, tail.base, tail.size
	p.noteSynced()
}

// commitFailed is the error of a Commit that could not make p's appends
// since its last commit point durable, with err the reason: with gone
// (the journal holds nothing of them that a replay could apply) it takes
// them back (takeBack), and the error wraps ErrRolledBack if that
// worked.
func (p *filePartition) commitFailed(err error, gone bool) error {
	if !gone || p.closed {
		return err
	}
	if terr := p.takeBack(); terr != nil {
		return fmt.Errorf("%w (taking its appends back failed: %w)", err, terr)
	}
	return fmt.Errorf("%w: %w", ErrRolledBack, err)
}

// takeBack removes from the log what was appended since its last commit
// point (mark) — records a failed Commit covered, which nobody
// acknowledged — and makes the removal durable, so that neither a read,
// nor a rebuild in this process, nor a reopen after a crash finds them:
// the log ends at the mark again and the next append gets its offsets.
// Records still held behind (wpend) are dropped; if the tail's file holds
// some, it is truncated to the mark and fsynced (on a full disk a
// truncation frees space, so this works where the append did not). It
// works within the tail only: records past the mark in a sealed segment
// (a roll fsynced them) cannot be taken back, and the partition is
// broken. A failure breaks it too. A partition broken before (its fsync
// failed) stays broken: its owner rebuilds it, and what it committed
// comes back from its files and the journal.
func (p *filePartition) takeBack() error {
	if p.closed {
		return ErrClosed
	}
	if p.next == p.mark {
		return nil
	}
	tail := p.tail()
	if p.markBase != tail.base || p.mark < tail.base || p.mark > p.next || p.markPos > tail.size {
		return p.fail("taking back the appends of a failed commit", errors.New("they reach into a sealed segment"))
	}
	cut := tail.size - p.markPos // the bytes taken back
	if fileEnd := tail.size - int64(len(p.wpend)); p.markPos >= fileEnd {
		// Only held behind: the file never saw them.
		p.wpend = p.wpend[:p.markPos-fileEnd]
	} else {
		p.wpend = p.wpend[:0]
		f, err := tail.log.acquire()
		if err == nil {
			if err = f.Truncate(p.markPos); err == nil {
				if p.store.cfg.Preallocate {
					// The truncation dropped the reservation; taking it
					// again is an optimisation, and a full disk refuses
					// it.
					_ = preallocate(f, p.store.cfg.SegmentSize)
				}
				err = f.Sync()
			}
			tail.log.release()
		}
		if err != nil {
			return p.fail("taking back the appends of a failed commit", err)
		}
		// The fsync covered the whole file: everything below the mark
		// is durable in it now.
		if p.broken == nil {
			tail.log.setPinned(false)
			p.synced = p.mark
			p.fileSynced()
		}
	}
	k := sort.Search(len(tail.index), func(i int) bool { return int64(tail.index[i].pos) >= p.markPos })
	tail.index, tail.times = tail.index[:k], tail.times[:k]
	tail.lastIndexed = 0
	if k > 0 {
		tail.lastIndexed = int64(tail.index[k-1].pos)
	}
	if tail.idxPersisted > k {
		// The index files name records that are gone: cut them, or
		// leave them to the next open, which rebuilds a tail's index
		// that does not match its log.
		tail.idxPersisted = k
		if tail.idx != nil && tail.tidx != nil {
			_ = tail.idx.Truncate(int64(k) * indexEntrySize)
			_ = tail.tidx.Truncate(int64(k) * timeEntrySize)
		}
	}
	if p.stash {
		if p.jnext <= p.mark && int64(len(p.jpend)) >= cut {
			p.jpend = p.jpend[:int64(len(p.jpend))-cut]
		} else {
			p.jpend = p.jpend[:0]
		}
	}
	p.jnext = min(p.jnext, p.mark)
	tail.size, tail.next, p.next = p.markPos, p.mark, p.mark
	p.synced = min(p.synced, p.mark)
	return nil
}

// stashRecords keeps a copy of records just written for the journal's
// next entry (see Commit); an Append that fails takes its chunks back.
func (p *filePartition) stashRecords(b []byte) {
	if !p.stash {
		return
	}
	if len(p.jpend)+len(b) > maxStash {
		// Too much for a journal entry: the next Commit syncs the
		// partition directly instead.
		p.stash, p.jpend = false, nil
		return
	}
	p.jpend = append(p.jpend, b...)
	if j := p.journal; !j.forming.Load() {
		j.forming.Store(true) // a lingering leader of another shard waits for it
	}
}

// writeFull writes b at off, a short write being an error.
func writeFull(f vfs.File, b []byte, off int64) error {
	n, err := f.WriteAt(b, off)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// openTail readies the tail for an Append's writes and returns its file,
// which closeTail releases: with FileConfig.Sync the partition's layout
// is made durable first; without, the tail's descriptor is pinned from
// the write to the fsync that covers it (see handleCache), so the write
// and the fsync go through the same descriptor.
func (p *filePartition) openTail(tail *segment) (vfs.File, error) {
	if p.store.cfg.Sync {
		if err := p.syncLayout(); err != nil {
			return nil, err // the partition is broken: nothing more is appended
		}
	}
	f, err := tail.log.acquire()
	if err != nil {
		return nil, err // nothing was written
	}
	if !p.store.cfg.Sync {
		tail.log.setPinned(true)
	}
	return f, nil
}

// closeTail ends an Append's writes to f, whose outcome is err: it
// fsyncs them with FileConfig.Sync or, when a write or the fsync failed,
// truncates the log back to the tail's logical end, so a failed Append
// leaves nothing behind, and releases f. A failed fsync, or a failed
// write that cannot be truncated away, breaks the partition (see Sync).
func (p *filePartition) closeTail(tail *segment, f vfs.File, err error) error {
	defer tail.log.release()
	var syncErr error
	if err == nil && p.store.cfg.Sync {
		err = p.store.timeSync(f.Sync)
		syncErr = err
	}
	if err == nil {
		return nil
	}
	if terr := f.Truncate(tail.size); terr != nil {
		return p.fail(fmt.Sprintf("append failed (%v) and could not be rolled back", err), terr)
	}
	if syncErr != nil {
		return p.fail("fsync", syncErr)
	}
	// The failed write may have reached the file in part, whole records
	// included: the truncation is made durable, or a crash could bring
	// them back although the append was refused.
	if serr := f.Sync(); serr != nil {
		return p.fail(fmt.Sprintf("append failed (%v) and its rollback could not be made durable", err), serr)
	}
	return err
}

// Sync fsyncs the tail segment if anything was appended since the last
// Sync. Segments sealed since then need nothing: a roll fsyncs the
// segment it seals. The first Sync of a new partition also makes its
// layout durable, concurrently with the tail (see syncLayout). A
// partition in a journal leaves it: its files hold everything now.
func (p *filePartition) Sync() error {
	if err := p.sync(); err != nil {
		return err
	}
	p.leaveJournal()
	p.setMark()
	return nil
}

// leaveJournal takes the partition, whose files hold everything it
// appended, out of its journal.
func (p *filePartition) leaveJournal() {
	if p.journal == nil {
		return
	}
	p.journal.release(p)
	p.journal, p.stash, p.staging, p.jpend = nil, false, false, nil
}

func (p *filePartition) sync() error {
	if p.closed {
		return ErrClosed
	}
	if p.broken != nil {
		return p.broken
	}
	if err := p.flushWrites(false); err != nil {
		return err
	}
	if p.deferred {
		return nil // nothing held, nothing on disk: an empty partition
	}
	if p.layoutPending {
		withTail := p.synced != p.next
		if err := p.syncLayoutWith(withTail); err != nil {
			return err
		}
		if withTail {
			p.tail().log.setPinned(false)
			p.synced = p.next
			p.fileSynced()
		}
	}
	if p.synced == p.next {
		// Nothing to sync; a pin left by an Append that failed and was
		// rolled back covers nothing either.
		p.tail().log.setPinned(false)
		return nil
	}
	return p.syncTail()
}

// syncTail fsyncs the tail and unpins its descriptor. A failed fsync
// breaks the partition; a failed reopen of the tail's file (ErrReopen)
// does not: nothing was synced, and nothing was lost either.
func (p *filePartition) syncTail() error {
	if err := p.flushWrites(false); err != nil {
		return err
	}
	tail := p.tail()
	if err := p.store.timeSync(tail.log.Sync); err != nil {
		if errors.Is(err, ErrReopen) {
			return err
		}
		return p.fail("fsync", err)
	}
	tail.log.setPinned(false)
	p.synced = p.next
	p.fileSynced()
	return nil
}

// syncLayout makes a new partition's layout durable: the incarnation
// file's content and every directory whose entries the build changed (the
// segment files and the incarnation in the partition directory, the
// partition directory in its parent, …; shared parents through the
// store's dirSyncs, once for every partition built since their last
// sync). Everything that syncs data into the partition runs it before it
// returns, so no message is reported durable while it sits in a
// directory a crash could lose.
func (p *filePartition) syncLayout() error { return p.syncLayoutWith(false) }

// syncLayoutWith is syncLayout, and with withTail the tail segment's data
// too. The fsyncs are issued concurrently, each on its own goroutine
// joined before it returns: their order does not matter, since nothing
// that depends on any of them is acknowledged before all have returned
// (a crash in between leaves at most a half-built directory, which the
// next Build starts over, or unacknowledged data), and the filesystem
// folds concurrent fsyncs into few journal commits, where one after
// another they cost one each — the first acknowledgement of a new
// partition pays about one fsync instead of six or seven.
//
// Each directory's fsync holds a descriptor of its own while it runs, so
// the fsyncs running at once are bounded by the descriptors the budget
// has room for (handleCache.room): unbounded, one Sync of a fresh
// partition held the incarnation file and up to one descriptor per
// directory of its layout at once, more than a small budget
// (MinMaxOpenFiles is 4), and took the store past its budget with no
// other operation in flight, whenever the goroutines happened to
// overlap. With a large budget the bound changes nothing.
func (p *filePartition) syncLayoutWith(withTail bool) error {
	if err := p.materialize(); err != nil {
		return err
	}
	if !p.layoutPending {
		return nil
	}
	return p.syncPending(withTail)
}

// syncPending makes the pending layout durable (see syncLayoutWith): the
// incarnation file and the directories in layout, and with withTail the
// tail's data. A deferred partition whose directory was lodged (Lodge)
// has no incarnation file yet: only the directories are synced.
func (p *filePartition) syncPending(withTail bool) error {
	var f vfs.File
	if !p.deferred {
		var err error
		if f, err = p.fs.OpenFile(filepath.Join(p.dir, incarnationFile), os.O_RDWR, 0); err != nil {
			return p.fail("opening the incarnation file", err)
		}
	}
	// Jobs: the incarnation file, the directories, then the tail.
	errs := make([]error, 1+len(p.layout)+1)
	jobs := 1 + len(p.layout)
	var tail *handle
	if withTail {
		tail = p.tail().log
		jobs++
	}
	width := p.store.handles.room(jobs) // after f's open: it holds one already
	fanOut(jobs, width, p.store.cfg.SerialSyncs, func(k int) {
		switch {
		case k == 0:
			if f != nil {
				errs[0] = f.Sync()
			}
		case k <= len(p.layout):
			if d := p.layout[k-1]; within(d, p.dir) {
				errs[k] = p.fs.SyncDir(d)
			} else {
				errs[k] = p.store.dirs.sync(p.fs, d, p.layoutGen)
			}
		default:
			errs[len(errs)-1] = tail.Sync()
		}
	})
	if f != nil {
		if cerr := f.Close(); errs[0] == nil {
			errs[0] = cerr
		}
	}
	if errs[0] != nil {
		return p.fail("fsync of the incarnation file", errs[0])
	}
	for _, err := range errs[1 : len(errs)-1] {
		if err != nil {
			return p.fail("fsync of a new directory", err)
		}
	}
	if err := errs[len(errs)-1]; err != nil {
		if errors.Is(err, ErrReopen) {
			return err // nothing synced, nothing lost: the partition stays usable
		}
		return p.fail("fsync", err)
	}
	p.layoutPending, p.layout = false, nil
	return nil
}

// Size is the sum of the segments' logical sizes.
func (p *filePartition) Size() int64 {
	var n int64
	for _, s := range p.segs {
		n += s.size
	}
	return n
}

// TruncateBefore implements Partition. Purging (offset == NextOffset)
// with messages in the tail first rolls a fresh, empty tail at
// NextOffset, so the old tail can be deleted like any other segment.
func (p *filePartition) TruncateBefore(offset uint64) error {
	if p.closed {
		return ErrClosed
	}
	if p.broken != nil {
		return p.broken
	}
	if offset > p.next {
		return fmt.Errorf("%w: truncate before %d past next offset %d", ErrOffsetOutOfRange, offset, p.next)
	}
	if offset <= p.start {
		return p.dropSegments() // retry a deletion that failed before
	}
	if p.fenced != nil && offset != p.next {
		return p.fenced
	}
	if tail := p.tail(); offset == p.next && tail.next > tail.base {
		if err := p.roll(); err != nil {
			return err
		}
	}
	if err := p.advanceStart(offset); err != nil {
		return err
	}
	if p.fenced != nil {
		// A purge of a damaged partition: the damage is below the start
		// now and its segment sealed (deleted, or deleted by the next
		// open), so appends go on at NextOffset, never reusing one.
		p.fenced, p.holes = nil, nil
	}
	return nil
}

// SkipTo implements Partition. The tail is synced (it becomes a sealed
// segment), the new start is recorded durably — from then on a reopen
// restarts the log empty at offset — and a segment is created at offset;
// the old segments, wholly below the start, are deleted.
func (p *filePartition) SkipTo(offset uint64) error {
	if p.closed {
		return ErrClosed
	}
	if p.broken != nil {
		return p.broken
	}
	if offset <= p.next {
		return p.TruncateBefore(offset)
	}
	if p.fenced != nil {
		return p.fenced
	}
	if err := p.syncLayout(); err != nil {
		return err
	}
	if p.synced < p.next {
		if err := p.syncTail(); err != nil {
			return err
		}
	}
	if err := writeStart(p.fs, p.dir, offset); err != nil {
		return err
	}
	seg, err := p.createSegment(offset)
	if err != nil {
		// The recorded start already skips: a reopen creates the segment.
		return p.fail("creating the segment after skipped offsets", err)
	}
	old := p.tail()
	p.persistIndex(old)
	old.closeIndexes()
	p.segs = append(p.segs, seg)
	p.start, p.next, p.synced = offset, offset, offset
	p.fileSynced()
	p.leaveJournal() // every message is durable, and the offsets moved
	p.setMark()
	return p.dropSegments()
}

// advanceStart records offset as the start durably, then deletes the
// segments wholly below it. The messages below offset are synced first,
// so the recorded start never points past what a crash leaves of the log.
func (p *filePartition) advanceStart(offset uint64) error {
	if err := p.syncLayout(); err != nil {
		return err
	}
	if offset > p.synced {
		if err := p.Sync(); err != nil {
			return err
		}
	}
	if err := writeStart(p.fs, p.dir, offset); err != nil {
		return err
	}
	p.start = offset
	return p.dropSegments()
}

// dropSegments deletes the segments other than the tail that hold only
// messages below start, oldest first, then fsyncs the directory. A
// segment whose files cannot be deleted stays listed (closed: reads never
// reach below start) and is retried next time.
func (p *filePartition) dropSegments() error {
	n := 0
	for n < len(p.segs)-1 && p.segs[n].next <= p.start {
		n++
	}
	if n == 0 {
		return nil
	}
	var err error
	dropped := 0
	for _, s := range p.segs[:n] {
		_ = s.close()
		if err = removeSegmentFiles(p.fs, s); err != nil {
			break
		}
		dropped++
	}
	p.segs = slices.Delete(p.segs, 0, dropped)
	if serr := p.fs.SyncDir(p.dir); err == nil {
		err = serr
	}
	return err
}

// EnforceRetention implements Partition with whole non-active segments as
// the unit. A segment's newest timestamp is the largest message timestamp
// in it (producers set timestamps, so they need not be monotonic); it is
// known from appends and open scans, or found by reading the segment once.
func (p *filePartition) EnforceRetention(olderThanMicros, maxBytes int64) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	if p.broken != nil {
		return 0, p.broken
	}
	sealed := p.segs[:len(p.segs)-1]
	cut := p.start
	i := 0
	for i < len(sealed) && sealed[i].next <= cut {
		i++ // already below start; its deletion failed before
	}
	var ageErr error
	if olderThanMicros != 0 {
		for ; i < len(sealed); i++ {
			ts, err := p.maxTimestamp(sealed[i])
			if err != nil {
				// A damaged segment's newest timestamp is unknown: age
				// stops at it and the damage is reported, but the size
				// bound still holds.
				if !errors.Is(err, ErrCorrupt) {
					return 0, err
				}
				ageErr = err
				break
			}
			if ts >= olderThanMicros {
				break
			}
			cut = max(cut, sealed[i].next)
		}
	}
	if maxBytes > 0 {
		var total int64
		for _, s := range p.segs[i:] {
			total += s.size
		}
		for ; i < len(sealed) && total > maxBytes; i++ {
			total -= sealed[i].size
			cut = max(cut, sealed[i].next)
		}
	}
	if cut <= p.start {
		return 0, errors.Join(p.dropSegments(), ageErr)
	}
	removed := cut - p.start
	if err := p.advanceStart(cut); err != nil {
		return removed, errors.Join(err, ageErr)
	}
	return removed, ageErr
}

// maxTimestamp returns the newest timestamp in s, scanning it if unknown.
func (p *filePartition) maxTimestamp(s *segment) (int64, error) {
	if !s.maxTSKnown {
		ts, err := s.scanMaxTimestamp()
		if err != nil {
			return 0, err
		}
		s.maxTS, s.maxTSKnown = ts, true
	}
	return s.maxTS, nil
}

// Read finds the segment by binary search over the base offsets, seeks
// with its in-memory sparse index, and decodes forward, continuing into
// later segments. Records are checksummed as they are read; damage is a
// *CorruptError.
func (p *filePartition) Read(from uint64, max int) ([]Message, error) {
	if p.closed {
		return nil, ErrClosed
	}
	if from < p.start {
		return nil, fmt.Errorf("%w: offset %d below log start %d", ErrOffsetOutOfRange, from, p.start)
	}
	if max <= 0 || from >= p.next {
		return nil, nil
	}
	count := int(min(uint64(max), p.next-from))
	if p.deferred {
		return p.readBehind(func(m *Message) bool { return m.Offset >= from }, count)
	}
	if err := p.flushWrites(false); err != nil {
		return nil, err
	}
	for _, h := range p.holes {
		if h.to <= from {
			continue
		}
		if h.from <= from {
			return nil, h.err
		}
		count = int(min(uint64(count), h.from-from)) // stop below it
		break
	}
	out := make([]Message, 0, count)
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].base > from }) - 1
	for ; i < len(p.segs) && len(out) < count; i++ {
		seg := p.segs[i]
		if from >= seg.next {
			continue
		}
		var err error
		if out, err = seg.read(from, count-len(out), out); err != nil {
			if len(out) > 0 && errors.Is(err, ErrCorrupt) {
				// The messages below the damage are whole: serve them,
				// and the read that starts at the damage reports it.
				return out, nil
			}
			return nil, err
		}
		from = seg.next
	}
	return out, nil
}

// readBehind serves a deferred partition's reads from its records, which
// are all held behind (wpend), without creating its files: up to count
// messages from the first that from accepts on. They alias a copy, as
// wpend is appended to and reused.
func (p *filePartition) readBehind(from func(*Message) bool, count int) ([]Message, error) {
	b := slices.Clone(p.wpend)
	var out []Message
	for used := 0; used < len(b) && len(out) < count; {
		m, n, err := decodeRecord(b[used:], p.tail().logPath, int64(used))
		if err != nil {
			return nil, err
		}
		if len(out) > 0 || from(&m) {
			out = append(out, m)
		}
		used += n
	}
	return out, nil
}

// OffsetForTime finds the first segment whose newest append time reaches
// t, then searches it from its time index's hint.
func (p *filePartition) OffsetForTime(t int64) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	if p.deferred {
		msgs, err := p.readBehind(func(m *Message) bool { return m.AppendTime >= t }, 1)
		if err != nil || len(msgs) == 0 {
			return p.next, err
		}
		return msgs[0].Offset, nil
	}
	if err := p.flushWrites(false); err != nil {
		return 0, err
	}
	for _, seg := range p.segs {
		if seg.next <= p.start || seg.next == seg.base || seg.maxAT < t {
			continue
		}
		if err := seg.ensureTimes(p.fs); err != nil {
			return 0, err
		}
		off, ok, err := seg.findTime(t, max(p.start, seg.base))
		if err != nil || ok {
			return off, err
		}
	}
	return p.next, nil
}

// StoreConsumerOffset writes the consumer's offset file atomically and
// durably before returning.
func (p *filePartition) StoreConsumerOffset(consumer string, offset uint64) error {
	write, done, err := p.StageConsumerOffset(consumer, offset)
	if err == nil && write != nil {
		err = write()
		done(err)
	}
	return err
}

// StageConsumerOffset implements OffsetStager. A consumer's store whose
// file is a sync mark is staged: its next slot's record is made here and
// the file opened (so the write lands in this file even if it is replaced
// or removed meanwhile); write overwrites the slot in place, fdatasyncs
// it and closes the file, and done makes the offset the one reads see
// (p.consumers holds durable offsets only: a read never sees an offset a
// crash may take back). Another store is done at once
// (storeConsumerFile): the first, which creates the file, one converting
// a single record, and the first after a failed one, which reads the
// file's last slot.
func (p *filePartition) StageConsumerOffset(consumer string, offset uint64) (write func() error, done func(error), err error) {
	if p.closed {
		return nil, nil, ErrClosed
	}
	if offset > p.next {
		return nil, nil, fmt.Errorf("%w: consumer offset %d past next offset %d", ErrOffsetOutOfRange, offset, p.next)
	}
	if err := p.syncLayout(); err != nil {
		return nil, nil, err
	}
	path := filepath.Join(p.dir, consumersDir, consumerFileName(consumer))
	seq, known := p.consumerSeqs[consumer]
	if known && seq > 0 {
		// The slots' numbers only grow: a staged write that fails
		// leaves the next store's number above whatever it left.
		m := syncmark.Mark[consumerMark]{Seq: seq + 1, V: consumerMark{offset: offset, name: consumer}}
		if write, err := consumerMarkFormat.Stage(p.fs, path, m); err == nil {
			p.consumerSeqs[consumer] = seq + 1
			return write, p.stagedOffset(consumer, offset), nil
		}
		// The file is not what the slots were counted for: stored at
		// once, below, after reading its last slot.
		known = false
	}
	// A store done at once overtakes the staged ones still unwritten:
	// their offsets, older, must not replace it when they are done.
	p.fenceStagedOffsets(consumer)
	seq, err = storeConsumerFile(p.fs, path, consumer, offset, seq, known)
	if err != nil {
		// The file's last slot is read again at the next store: a
		// failed write may have left a newer one than seq.
		delete(p.consumerSeqs, consumer)
		return nil, nil, err
	}
	if p.consumerSeqs == nil {
		p.consumerSeqs = make(map[string]uint64)
	}
	p.consumerSeqs[consumer] = seq
	p.consumers[consumer] = offset
	return nil, nil, nil
}

// stagedOffsets counts a consumer's staged stores not yet done, and
// fences those staged before a store done at once or a removal of the
// consumer's offset (fenceStagedOffsets): they are done in the order they
// were staged, so a done store makes its offset the durable one unless it
// was fenced.
type stagedOffsets struct {
	staged uint64 // stores staged, ever
	done   uint64 // of those, done
	fence  uint64 // the stores numbered up to fence are fenced
}

// stagedOffset records a staged store of offset and returns its done.
func (p *filePartition) stagedOffset(consumer string, offset uint64) func(error) {
	if p.consumerStaged == nil {
		p.consumerStaged = make(map[string]*stagedOffsets)
	}
	st := p.consumerStaged[consumer]
	if st == nil {
		st = &stagedOffsets{}
		p.consumerStaged[consumer] = st
	}
	st.staged++
	n := st.staged
	return func(err error) {
		if p.closed || p.consumerStaged[consumer] != st {
			return
		}
		st.done++
		if err == nil && n > st.fence {
			// A failed write leaves the previous durable offset
			// readable: a crash may keep it.
			p.consumers[consumer] = offset
		}
		if st.done == st.staged {
			delete(p.consumerStaged, consumer)
		}
	}
}

// fenceStagedOffsets fences the consumer's staged stores not yet done.
func (p *filePartition) fenceStagedOffsets(consumer string) {
	if st := p.consumerStaged[consumer]; st != nil {
		st.fence = st.staged
	}
}

// clampConsumers brings the consumer offsets past the log's end (a crash
// lost appends that were never acknowledged, yet a consumer stored an
// offset over them under a lax fsync policy) back to NextOffset: those
// offsets will be given to new messages the consumer never saw. Build
// runs it once the log is whole, its journal records applied.
func (p *filePartition) clampConsumers() {
	for name, off := range p.consumers {
		if off > p.next {
			p.consumers[name] = p.next
		}
	}
}

// DeleteConsumerOffset removes the consumer's offset file and makes the
// removal durable (the directory's fsync) before returning.
func (p *filePartition) DeleteConsumerOffset(consumer string) error {
	if p.closed {
		return ErrClosed
	}
	if _, ok := p.consumers[consumer]; !ok {
		return nil
	}
	dir := filepath.Join(p.dir, consumersDir)
	if err := p.fs.Remove(filepath.Join(dir, consumerFileName(consumer))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := p.fs.SyncDir(dir); err != nil {
		return err
	}
	delete(p.consumers, consumer)
	delete(p.consumerSeqs, consumer)
	p.fenceStagedOffsets(consumer)
	return nil
}

func (p *filePartition) ConsumerOffset(consumer string) (uint64, bool, error) {
	if p.closed {
		return 0, false, ErrClosed
	}
	off, ok := p.consumers[consumer]
	return off, ok, nil
}

// Close persists the tail's index, fsyncs the tail so a clean shutdown
// loses nothing even without Sync, closes every file and releases the
// namespace for the next Build or Remove. A deferred partition whose
// owner's log holds its records (Lodge) is not materialised for them:
// the owner's log keeps them, and re-applies them to the partition the
// next Build opens (see Lodger); only the directories it lodged in are
// made durable, as a clean shutdown makes a partition's layout.
func (p *filePartition) Close() error {
	if p.closed {
		return ErrClosed
	}
	p.closed = true
	var errs []error
	durable := false
	heldOnly := p.deferred && p.held
	if p.broken == nil && !heldOnly {
		errs = append(errs, p.flushWrites(false))
	}
	if p.deferred && (len(p.wpend) == 0 || heldOnly) {
		// Never materialised, and empty or held by its owner's log:
		// nothing of its own to make durable, and nothing on disk to
		// close. A later Build starts it afresh (in the directory its
		// owner's log keeps, see lodgedPartition).
		var err error
		if p.lodged && p.layoutPending && p.broken == nil {
			err = p.syncPending(false) // syncLayout would materialise it
		}
		p.wpend = nil
		if j := p.journal; j != nil {
			j.release(p)
			p.journal, p.stash, p.jpend = nil, false, nil
		}
		p.store.release(p.ns)
		return err
	}
	if p.broken == nil && !p.deferred {
		errs = append(errs, p.syncLayout())
		tail := p.tail()
		p.persistIndex(tail)
		if p.synced < p.next {
			errs = append(errs, tail.log.Sync())
		}
		durable = errors.Join(errs...) == nil
	}
	// A partition still deferred could not create its files: what it
	// holds is in the journal only, and stays there (Journal.lost).
	if j := p.journal; j != nil {
		if durable {
			j.release(p)
		} else {
			j.lost(p) // its journal records stay for the next open
		}
		p.journal, p.stash, p.jpend = nil, false, nil
	}
	if p.broken == nil && !p.deferred {
		tail := p.tail()
		// The index files are derived data: synced if still open (a
		// clean shutdown then reopens without rebuilding them), not
		// reopened for it.
		errs = append(errs, tail.idx.syncIfOpen(), tail.tidx.syncIfOpen())
	}
	errs = append(errs, p.closeFiles())
	p.store.release(p.ns)
	return errors.Join(errs...)
}

func (p *filePartition) closeFiles() error {
	var errs []error
	for _, s := range p.segs {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

// WritesRefused implements WriteFenced.
func (p *filePartition) WritesRefused() error { return p.fenced }

// Damage implements Damaged: the first hole recovery found, whose error
// every read that reaches it returns (nil once a purge or truncation put
// it below the start).
func (p *filePartition) Damage() error {
	for _, h := range p.holes {
		if h.to > p.start {
			return h.err
		}
	}
	return nil
}

// Location implements Located.
//
// The filesystem is the store's (FileConfig.FS) under its descriptor
// budget: files opened there count in FileConfig.MaxOpenFiles, and are
// closed when idle and reopened on their next use as segment files are
// (see storeFS for the rules).
//
// A deferred partition (BuildDeferred) is materialised first: what is
// kept in its directory needs the directory. If that fails the directory
// is returned all the same; files created there by others make a
// half-built directory, which the partition's next Build starts over.
func (p *filePartition) Location() (vfs.FS, string) {
	_ = p.materialize()
	return p.store.located, p.dir
}

// Deferred implements Deferred.
func (p *filePartition) Deferred() bool { return p.deferred }

// Lodge implements Lodger.
//
// A deferred partition gets its directory, and the directories above it
// that are missing, with none of its own files: its owner's log — a
// replicated partition's raft log — is the one file on the path to its
// first acknowledgement (DESIGN behaviour 32). The directories it
// created are its pending layout, made durable here with durable, or
// else by the partition's first Sync with the files materialize creates
// there. A failed MkdirAll leaves the directories it made pending, to
// be tried again; a failed fsync breaks the partition, as a failed
// layout sync does.
func (p *filePartition) Lodge(durable bool) (vfs.FS, string, error) {
	if p.closed {
		return nil, "", ErrClosed
	}
	if p.broken != nil {
		return nil, "", p.broken
	}
	if !p.deferred {
		if durable {
			if err := p.syncLayout(); err != nil {
				return nil, "", err
			}
		}
		return p.store.located, p.dir, nil
	}
	if !p.lodged {
		// The directories whose entries change: the new ones and the
		// deepest one that existed, as for a fresh build (and those an
		// earlier attempt made, which exist now).
		layout := p.store.ancestors(p.dir, true)
		if p.layoutPending {
			layout = unionDirs(p.layout, layout)
		}
		p.setLayout(layout, true)
		if err := p.fs.MkdirAll(p.dir, 0o755); err != nil {
			return nil, "", err
		}
		p.lodged = true
	}
	p.held = true
	if durable && p.layoutPending {
		if err := p.syncPending(false); err != nil {
			return nil, "", err
		}
	}
	return p.store.located, p.dir, nil
}

// setLayout makes layout the partition's pending layout, its shared
// directories marked as changed now (fresh) or as holding entries that
// may not be durable (a directory found on disk), see dirSyncs.
func (p *filePartition) setLayout(layout []string, fresh bool) {
	var shared []string
	for _, d := range layout {
		if !within(d, p.dir) {
			shared = append(shared, d)
		}
	}
	p.layout, p.layoutPending = layout, true
	if fresh {
		p.layoutGen = p.store.dirs.mark(shared)
	} else {
		p.layoutGen = p.store.dirs.markExisting(shared)
	}
}
