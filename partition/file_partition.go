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

	"github.com/parkway-io/parkway/metadata"
)

// writeAt is the log write; a test seam for failing writes.
var writeAt = (*os.File).WriteAt

// filePartition is a FileStore partition. segs is never empty; the last
// one is the tail that appends go to.
type filePartition struct {
	store     *FileStore
	ns        metadata.Namespace
	epoch     uint64
	dir       string
	segs      []*segment
	next      uint64
	consumers map[string]uint64
	buf       []byte // append scratch
	idxBuf    []byte // index scratch
	closed    bool
	// broken is set when a failed append could not be rolled back, so
	// the file may hold bytes past the logical end; appending over them
	// could leave a stale record that a reopen would resurrect.
	broken error
}

func (p *filePartition) Namespace() metadata.Namespace { return p.ns }

func (p *filePartition) Epoch() uint64 { return p.epoch }

func (p *filePartition) NextOffset() uint64 { return p.next }

func (p *filePartition) tail() *segment { return p.segs[len(p.segs)-1] }

// createSegment creates the log and index files of a new segment starting
// at base, preallocated when configured.
func (p *filePartition) createSegment(base uint64) (seg *segment, err error) {
	seg = newSegment(p.dir, base)
	defer func() {
		if err != nil {
			_ = seg.close()
			_ = os.Remove(seg.logPath)
			_ = os.Remove(seg.indexPath())
		}
	}()
	if seg.log, err = os.OpenFile(seg.logPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
		return nil, err
	}
	if seg.idx, err = os.OpenFile(seg.indexPath(), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
		return nil, err
	}
	if p.store.cfg.Preallocate {
		if err = preallocate(seg.log, p.store.cfg.SegmentSize); err != nil {
			return nil, err
		}
	}
	if p.store.cfg.Sync {
		if err = syncDir(p.dir); err != nil {
			return nil, err
		}
	}
	return seg, nil
}

// roll seals the tail and starts a new segment at NextOffset. On error the
// old tail stays the tail.
//
// The old tail is fsynced first, even without Sync: otherwise the new
// segment's data could reach the disk before the old segment's end, and a
// crash would leave a torn sealed segment, which a reopen reports instead
// of repairing. That is one fsync per segment. With Preallocate, the old
// tail is also truncated to its size, which releases the unused part of its
// reservation.
func (p *filePartition) roll() error {
	old := p.tail()
	if p.store.cfg.Preallocate {
		_ = old.log.Truncate(old.size) // only frees space; harmless if it fails
	}
	if err := old.log.Sync(); err != nil {
		return err
	}
	seg, err := p.createSegment(p.next)
	if err != nil {
		return err
	}
	p.persistIndex(old)
	if old.idx != nil {
		_ = old.idx.Close() // the in-memory index is authoritative
		old.idx = nil
	}
	p.segs = append(p.segs, seg)
	return nil
}

// persistIndex writes the index entries not yet in the index file. It is
// best effort: the in-memory index serves reads, and a reopen rebuilds a
// short index file, so a failure only means it is retried next time.
func (p *filePartition) persistIndex(s *segment) {
	if s.idx == nil || s.idxPersisted == len(s.index) {
		return
	}
	b := appendIndexEntries(p.idxBuf[:0], s.index[s.idxPersisted:])
	if _, err := s.idx.WriteAt(b, int64(s.idxPersisted)*indexEntrySize); err == nil {
		s.idxPersisted = len(s.index)
	}
	p.idxBuf = b[:0]
}

// Append encodes the batch into one buffer and writes it with one write at
// the tail's logical end, rolling first if the batch would take the tail
// past SegmentSize. A failed write (or fsync, with Sync) is truncated
// away, leaving the partition as it was.
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

	first := p.next
	indexLen, lastIndexed := len(tail.index), tail.lastIndexed
	buf := slices.Grow(p.buf[:0], int(total))
	for i := range msgs {
		off := first + uint64(i)
		tail.track(off, tail.size+int64(len(buf)))
		buf = appendRecord(buf, &msgs[i], off)
	}
	if cap(buf) <= maxRetainedBuffer {
		p.buf = buf[:0]
	} else {
		p.buf = nil
	}

	if err := p.writeTail(tail, buf); err != nil {
		tail.index, tail.lastIndexed = tail.index[:indexLen], lastIndexed
		return 0, err
	}
	tail.size += int64(len(buf))
	tail.next += uint64(len(msgs))
	p.next = tail.next
	p.persistIndex(tail)
	return first, nil
}

// writeTail writes buf at the tail's logical end (fsyncing with Sync) or,
// failing, truncates the log back to its logical end.
func (p *filePartition) writeTail(tail *segment, buf []byte) error {
	n, err := writeAt(tail.log, buf, tail.size)
	if err == nil && n != len(buf) {
		err = io.ErrShortWrite
	}
	if err == nil && p.store.cfg.Sync {
		err = tail.log.Sync()
	}
	if err == nil {
		return nil
	}
	if terr := tail.log.Truncate(tail.size); terr != nil {
		p.broken = fmt.Errorf("partition %v unusable: append failed (%w) and could not be rolled back: %w", p.ns, err, terr)
		return p.broken
	}
	return err
}

// Read finds the segment by binary search over the base offsets, seeks
// with its in-memory sparse index, and decodes forward, continuing into
// later segments. Records are checksummed as they are read; damage is a
// *CorruptError.
func (p *filePartition) Read(from uint64, max int) ([]Message, error) {
	if p.closed {
		return nil, ErrClosed
	}
	if start := p.segs[0].base; from < start {
		return nil, fmt.Errorf("%w: offset %d below log start %d", ErrOffsetOutOfRange, from, start)
	}
	if max <= 0 || from >= p.next {
		return nil, nil
	}
	count := int(min(uint64(max), p.next-from))
	out := make([]Message, 0, count)
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].base > from }) - 1
	for ; i < len(p.segs) && len(out) < count; i++ {
		seg := p.segs[i]
		if from >= seg.next {
			continue
		}
		var err error
		if out, err = seg.read(from, count-len(out), out); err != nil {
			return nil, err
		}
		from = seg.next
	}
	return out, nil
}

// StoreConsumerOffset writes the consumer's offset file atomically and
// durably before returning.
func (p *filePartition) StoreConsumerOffset(consumer string, offset uint64) error {
	if p.closed {
		return ErrClosed
	}
	if offset > p.next {
		return fmt.Errorf("%w: consumer offset %d past next offset %d", ErrOffsetOutOfRange, offset, p.next)
	}
	dir := filepath.Join(p.dir, consumersDir)
	if err := writeFileAtomic(dir, consumerFileName(consumer), encodeConsumerOffset(consumer, offset)); err != nil {
		return err
	}
	p.consumers[consumer] = offset
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
// namespace for the next Build or Remove.
func (p *filePartition) Close() error {
	if p.closed {
		return ErrClosed
	}
	p.closed = true
	var errs []error
	if p.broken == nil {
		tail := p.tail()
		p.persistIndex(tail)
		errs = append(errs, tail.log.Sync())
		if tail.idx != nil {
			errs = append(errs, tail.idx.Sync())
		}
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
