// Package wal is an append-only log of records on a vfs.FS: the write-ahead
// log of parkway's metadata (and anything else small enough to be read
// whole on open).
//
// # Format
//
// A log is one file of back-to-back records, with no file header:
//
//	length  uint32, little endian: the number of data bytes
//	crc     uint32, little endian: CRC-32C (Castagnoli) of the 4 length
//	        bytes followed by the data
//	data    length bytes
//
// The checksum covers the length too, so a corrupt length is caught rather
// than followed. An all-zero header never validates (the CRC-32C of four
// zero bytes is not zero), so zero-filled tails read as garbage, not as
// empty records. Records are numbered: the first has Options.FirstIndex, each
// next one the index after.
//
// # Recovery
//
// Open reads the whole file and validates every record. Whatever follows the
// last valid record is a torn write if no valid record can be found anywhere
// after it and it is an incomplete write by package tail's rule (the one
// every log applies): a record cut short, one that stops part way into
// zeros, one with an unwritten sector. Open truncates it away, so the next
// append lands right behind the last good record. A last record written
// whole and damaged since — a bad checksum over its whole length, or a
// record that checks whole with one bit of its length flipped back — is a
// *CorruptError, and nothing is truncated. Open always syncs the file before returning, so the records
// it found are durable even if a previous process wrote them and died before
// its own sync (they may have been only in the page cache); callers can act
// on what Replay returns. (After a failed fsync, Linux may report later
// fsyncs as successful for pages it dropped; no user-space log can detect
// that, and this one does not try.) If a valid record does
// follow the first bad one, the damage is in the middle of the log: records
// that were once acknowledged would be lost by truncating, so Open refuses
// with a *CorruptError (errors.Is(err, ErrCorrupt)) and changes nothing.
// (A torn final record whose data happens to contain a valid frame is thus
// reported as corruption: Open errs on the side of never dropping a record.)
//
// OpenReadOnly reads a log the same way without repairing anything: a
// torn tail is reported (TornTail), not truncated, and nothing is synced.
//
// # Write failures
//
// Append writes each framed record with one WriteAt at the end of the log.
// If that write fails, the log truncates the file back to its last good
// size; if the truncation fails too, the log is broken. A failed Sync always
// breaks the log: after a failed fsync the kernel may have dropped the dirty
// pages and a retry can report success for data that is gone, so nothing
// written since the last good Sync can be trusted. A broken log refuses
// Append and Sync with an error matching ErrBroken until it is closed and
// reopened (Open then recovers whatever reached the disk).
//
// A Log is not safe for concurrent use.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	torn "github.com/parkway-io/parkway/internal/tail"
	"github.com/parkway-io/parkway/vfs"
)

const (
	// HeaderSize is the size of a record's header.
	HeaderSize = 8
	// DefaultMaxRecordSize is the default bound on a record's data.
	DefaultMaxRecordSize = 16 << 20
)

var (
	// ErrCorrupt reports a log damaged in a way recovery must not repair:
	// a bad record followed by a valid one. The error is a *CorruptError.
	ErrCorrupt = errors.New("wal: corrupt log")
	// ErrBroken reports a log that refuses writes after a failure it could
	// not undo (see the package documentation).
	ErrBroken = errors.New("wal: log broken by an earlier failure")
	// ErrTooLarge reports an Append of more than Options.MaxRecordSize
	// bytes. It does not break the log.
	ErrTooLarge = errors.New("wal: record too large")
	// ErrClosed reports use of a closed log.
	ErrClosed = errors.New("wal: log closed")
	// ErrReadOnly reports an Append or Sync on a log opened with
	// OpenReadOnly.
	ErrReadOnly = errors.New("wal: log opened read-only")
)

// CorruptError locates corruption in a log: a bad record in the middle of
// it (found by Open or Replay), or a record that passes its checksum but
// that its reader cannot use (built by the reader, with Err saying why; see
// ReplayAt).
type CorruptError struct {
	Path   string
	Offset int64 // file offset of the bad record's header
	// Err is why the record is unusable; nil for a record that fails its
	// checksum and is followed by valid ones.
	Err error
}

func (e *CorruptError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("wal: corrupt log %s: record at offset %d: %v", e.Path, e.Offset, e.Err)
	}
	return fmt.Sprintf("wal: corrupt log %s: bad record at offset %d is followed by valid records", e.Path, e.Offset)
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns why the record is unusable (nil if the log itself found
// it bad).
func (e *CorruptError) Unwrap() error { return e.Err }

// Options configures a log.
type Options struct {
	// FirstIndex is the index of the log's first record.
	FirstIndex uint64
	// MaxRecordSize bounds a record's data, at most 1<<31; zero means
	// DefaultMaxRecordSize. Open treats a record claiming more as
	// garbage, so it must not shrink between runs.
	MaxRecordSize int
}

// Log is an open log file.
type Log struct {
	path   string
	f      vfs.File
	first  uint64
	max    int
	n      uint64 // records
	size   int64  // bytes of valid records
	broken error  // why writes are refused, or nil
	closed bool
	// readOnly: opened by OpenReadOnly; torn is the size of the tail Open
	// would have truncated away.
	readOnly bool
	torn     int64
	// buf is where Append frames a record: WriteAt does not keep it
	// (io.WriterAt), so it is reused, up to maxKeptBuf.
	buf []byte
	// syncs observes each Sync's fsync in seconds (ObserveSyncs), or nil.
	syncs prometheus.Observer
	// dirty: written (an append, or its cut-off) since the last
	// successful Sync or WriteBack, so WriteBack has something to do.
	dirty bool
}

// ObserveSyncs makes every later Sync observe its fsync's duration in
// seconds on o (nil: none). Durations are wall-clock time: an fsync's
// cost is the device's, which no manual clock advances through.
func (l *Log) ObserveSyncs(o prometheus.Observer) { l.syncs = o }

// maxKeptBuf bounds the framing buffer a Log keeps between appends: a
// large record's buffer is let go rather than held for the log's life.
const maxKeptBuf = 64 << 10

// Create creates a new, empty log at path (failing if something exists
// there) and makes it durable: the file is synced, and so is its directory,
// so the log survives a crash from the moment Create returns. If it fails
// after creating the file, the file may be left behind (empty).
func Create(fs vfs.FS, path string, opts Options) (*Log, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	f, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: create %s: sync: %w", path, err)
	}
	if err := fs.SyncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: create %s: sync directory: %w", path, err)
	}
	return &Log{path: path, f: f, first: opts.FirstIndex, max: opts.max()}, nil
}

// Open opens an existing log and recovers it (see the package
// documentation): a torn tail is truncated away and the truncation synced;
// corruption in the middle is a *CorruptError.
func Open(fs vfs.FS, path string, opts Options) (*Log, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", path, err)
	}
	l := &Log{path: path, f: f, first: opts.FirstIndex, max: opts.max()}
	if err := l.recover(); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// OpenReadOnly opens an existing log for reading only: it validates
// every record as Open does and reports corruption in the middle the same
// way, but it changes nothing — a torn tail is left in place (TornTail
// says how large it is) and nothing is synced. Append and Sync fail with
// ErrReadOnly. It is how offline tools read a log a node would recover.
func OpenReadOnly(fs vfs.FS, path string, opts Options) (*Log, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", path, err)
	}
	l := &Log{path: path, f: f, first: opts.FirstIndex, max: opts.max(), readOnly: true}
	if _, err := l.validate(); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// TornTail returns the offset and size of the bytes after the last valid
// record: what Open truncates away as a torn write. Zero for a log whose
// file ends at a record boundary, and for one opened by Open (it has
// truncated them).
func (l *Log) TornTail() (offset, size int64) {
	if l.torn == 0 {
		return 0, 0
	}
	return l.size, l.torn
}

// validate reads the file and finds its records; a bad record followed by
// a valid one is a *CorruptError. It reports whether a torn tail follows.
func (l *Log) validate() (bool, error) {
	b, err := readAll(l.f)
	if err != nil {
		return false, fmt.Errorf("wal: open %s: %w", l.path, err)
	}
	n, good, tail := scan(b, l.max, nil)
	switch tail {
	case tailCorrupt:
		return false, &CorruptError{Path: l.path, Offset: int64(good)}
	case tailDamaged:
		return false, &CorruptError{Path: l.path, Offset: int64(good), Err: errWrittenWhole}
	}
	l.n, l.size = n, int64(good)
	if tail == tailTorn && l.readOnly {
		l.torn = int64(len(b) - good)
	}
	return tail == tailTorn, nil
}

func (l *Log) recover() error {
	torn, err := l.validate()
	if err != nil {
		return err
	}
	if torn {
		if err := l.f.Truncate(l.size); err != nil {
			return fmt.Errorf("wal: open %s: truncate torn tail at %d: %w", l.path, l.size, err)
		}
	}
	// Sync even with nothing truncated: the records just read may still be
	// only in the page cache (a previous process wrote them and died, or
	// its fsync failed), and a caller acts on what Replay returns.
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("wal: open %s: sync: %w", l.path, err)
	}
	return nil
}

// Path returns the log's path.
func (l *Log) Path() string { return l.path }

// FirstIndex returns the index of the first record.
func (l *Log) FirstIndex() uint64 { return l.first }

// NextIndex returns the index the next Append will get.
func (l *Log) NextIndex() uint64 { return l.first + l.n }

// Len returns the number of records.
func (l *Log) Len() uint64 { return l.n }

// Size returns the log's size in bytes: the end of its last good record.
func (l *Log) Size() int64 { return l.size }

// Err returns why the log is broken, or nil.
func (l *Log) Err() error { return l.broken }

// Append writes one record behind the last and returns its index. The
// record is durable only after a successful Sync.
func (l *Log) Append(data []byte) (uint64, error) { return l.AppendBatch(data) }

// AppendBatch appends each of data as a record, in order, with one
// WriteAt, and returns the index of the first (the next index if data is
// empty). It is Append of each in turn, in one system call: the records
// are framed one by one, so Open reads them as it would have read them
// appended apart, and a torn write leaves a torn tail as a torn Append
// does. A record over Options.MaxRecordSize fails the whole batch, before
// anything is written.
func (l *Log) AppendBatch(data ...[]byte) (uint64, error) {
	if err := l.usable(); err != nil {
		return 0, err
	}
	for _, d := range data {
		if len(d) > l.max {
			return 0, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(d), l.max)
		}
	}
	idx := l.first + l.n
	if len(data) == 0 {
		return idx, nil
	}
	rec := l.buf[:0]
	for _, d := range data {
		rec = appendRecord(rec, d)
	}
	if cap(rec) <= maxKeptBuf {
		l.buf = rec[:0]
	}
	l.dirty = true
	if _, err := l.f.WriteAt(rec, l.size); err != nil {
		werr := fmt.Errorf("wal: append to %s: %w", l.path, err)
		// Cut off whatever part of the records reached the file, so the
		// next append is not written behind an unknown tail.
		if terr := l.f.Truncate(l.size); terr != nil {
			l.broken = errors.Join(werr, fmt.Errorf("wal: truncate %s back to %d: %w", l.path, l.size, terr))
			return 0, fmt.Errorf("%w: %w", ErrBroken, l.broken)
		}
		return 0, werr
	}
	l.n += uint64(len(data))
	l.size += int64(len(rec))
	return idx, nil
}

// Sync makes every appended record durable. A failure breaks the log.
func (l *Log) Sync() error {
	if err := l.usable(); err != nil {
		return err
	}
	var start time.Time
	if l.syncs != nil {
		start = time.Now()
	}
	err := l.f.Sync()
	if l.syncs != nil {
		l.syncs.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		l.broken = fmt.Errorf("wal: sync %s: %w", l.path, err)
		return l.broken
	}
	l.dirty = false
	return nil
}

// WriteBack hands every appended record to the device and waits for the
// write, without the device's cache flush (vfs.WriteBack): the records
// are durable with the device's next flush, the next Sync's at the
// latest. It does nothing for a log not written since its last Sync or
// WriteBack. What it is for: a file under a descriptor budget stays
// pinned open while it holds writes no fsync or writeback covered (the
// partition store's, see partition.FileConfig.MaxOpenFiles), and this
// releases the pin at the cost of a write, not a flush. A failure breaks
// the log, as Sync's does: the pages that failed may be lost, and a later
// fsync need not report it.
func (l *Log) WriteBack() error {
	if err := l.usable(); err != nil {
		return err
	}
	if !l.dirty {
		return nil
	}
	if err := vfs.WriteBack(l.f); err != nil {
		l.broken = fmt.Errorf("wal: write back %s: %w", l.path, err)
		return l.broken
	}
	l.dirty = false
	return nil
}

func (l *Log) usable() error {
	switch {
	case l.closed:
		return ErrClosed
	case l.readOnly:
		return ErrReadOnly
	case l.broken != nil:
		return fmt.Errorf("%w: %w", ErrBroken, l.broken)
	}
	return nil
}

// Replay reads the log's records from the file and calls fn with each, in
// order, stopping at the first error fn returns (which Replay returns). The
// data slice is fn's to keep. It reads what was appended, synced or not; a
// record that no longer validates is a *CorruptError.
func (l *Log) Replay(fn func(index uint64, data []byte) error) error {
	return l.ReplayAt(func(index uint64, _ int64, data []byte) error { return fn(index, data) })
}

// ReplayAt is Replay that also passes each record's file offset (of its
// header), so a reader that finds a record it cannot use — it passes the
// checksum but does not decode, or contradicts the records before it — can
// report it as a *CorruptError naming the file and the offset.
func (l *Log) ReplayAt(fn func(index uint64, offset int64, data []byte) error) error {
	if l.closed {
		return ErrClosed
	}
	b, err := readAt(l.f, l.size)
	if err != nil {
		return fmt.Errorf("wal: replay %s: %w", l.path, err)
	}
	var ferr error
	off := 0
	n, good, _ := scan(b, l.max, func(i uint64, data []byte) bool {
		ferr = fn(l.first+i, int64(off), data)
		off += HeaderSize + len(data)
		return ferr == nil
	})
	if ferr != nil {
		return ferr
	}
	if n != l.n || int64(good) != l.size {
		return &CorruptError{Path: l.path, Offset: int64(good)}
	}
	return nil
}

// Close closes the file. It does not sync.
func (l *Log) Close() error {
	if l.closed {
		return ErrClosed
	}
	l.closed = true
	return l.f.Close()
}

func (o Options) check() error {
	if o.MaxRecordSize < 0 || int64(o.MaxRecordSize) > 1<<31 {
		return fmt.Errorf("wal: MaxRecordSize %d out of range 0..%d", o.MaxRecordSize, int64(1)<<31)
	}
	return nil
}

func (o Options) max() int {
	if o.MaxRecordSize == 0 {
		return DefaultMaxRecordSize
	}
	return o.MaxRecordSize
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends data, framed, to dst. The header is built in dst
// itself: a local array handed to crc32 would escape to the heap.
func appendRecord(dst, data []byte) []byte {
	at := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(data)))
	crc := crc32.Update(crc32.Checksum(dst[at:at+4], castagnoli), castagnoli, data)
	dst = binary.LittleEndian.AppendUint32(dst, crc)
	return append(dst, data...)
}

// decodeRecord decodes the record at the start of b: its data and its
// framed size, or ok false if b does not start with a valid record.
func decodeRecord(b []byte, max int) (data []byte, size int, ok bool) {
	if len(b) < HeaderSize {
		return nil, 0, false
	}
	n := binary.LittleEndian.Uint32(b[:4])
	if uint64(n) > uint64(max) || uint64(n) > uint64(len(b)-HeaderSize) {
		return nil, 0, false
	}
	end := HeaderSize + int(n)
	crc := crc32.Update(crc32.Checksum(b[:4], castagnoli), castagnoli, b[HeaderSize:end])
	if crc != binary.LittleEndian.Uint32(b[4:8]) {
		return nil, 0, false
	}
	return b[HeaderSize:end:end], end, true
}

type tailKind int

const (
	tailClean   tailKind = iota // b ends at a record boundary
	tailTorn                    // an incomplete final write after the last valid record (tail.Torn)
	tailCorrupt                 // a bad record followed, somewhere, by a valid one
	tailDamaged                 // a bad final record written whole (not tail.Torn)
)

// errWrittenWhole is why a bad final record is damage.
var errWrittenWhole = errors.New("the last record fails its checksum but was written whole (not cut short, no unwritten sector, or whole with one bit of its length flipped back): damage, not a torn write")

// scan walks the records of b, calling fn (if not nil) with each record's
// position and data until fn returns false. It returns the number of valid
// records, the offset just past the last of them, and what follows. It never
// panics, whatever b holds.
func scan(b []byte, max int, fn func(i uint64, data []byte) bool) (n uint64, good int, tail tailKind) {
	for good < len(b) {
		data, size, ok := decodeRecord(b[good:], max)
		if !ok {
			break
		}
		if fn != nil && !fn(n, data) {
			return n, good, tailClean
		}
		n++
		good += size
	}
	if good == len(b) {
		return n, good, tailClean
	}
	// The record at good is bad. If a valid record starts anywhere after
	// it, the damage is in the middle.
	for off := good + 1; off+HeaderSize <= len(b); off++ {
		if _, _, ok := decodeRecord(b[off:], max); ok {
			return n, good, tailCorrupt
		}
	}
	// Nothing whole after it: torn only if it is an incomplete write
	// (package tail, the rule every log applies).
	if torn.Torn(b[good:], int64(good), tailFormat(max)) {
		return n, good, tailTorn
	}
	return n, good, tailDamaged
}

// tailFormat is the record format, for package tail's rule, of a log
// whose records hold at most max bytes of data.
func tailFormat(max int) torn.Format {
	return torn.Format{
		LengthAt: 0,
		Size: func(h []byte) (int, uint64) {
			return HeaderSize, HeaderSize + uint64(binary.LittleEndian.Uint32(h))
		},
		Whole: func(b []byte) bool {
			_, _, ok := decodeRecord(b, max)
			return ok
		},
	}
}

// readAll reads the whole file.
func readAll(f vfs.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return readAt(f, fi.Size())
}

// readAt reads the first size bytes of f.
func readAt(f vfs.File, size int64) ([]byte, error) {
	if size < 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("file size %d out of range", size)
	}
	b := make([]byte, size)
	if size == 0 {
		return b, nil
	}
	n, err := f.ReadAt(b, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return nil, err
	}
	return b, nil
}

// ScanPrefix reads the file at path, which need not be a whole log, and
// calls fn with each record of its valid prefix, in order: the records
// from the start up to the first one that fails its checksum or does not
// fit, whatever follows (damage, a torn tail), until fn returns false.
// Every record fn sees passed its checksum, so a damaged log still says
// what its first records held (a raft log's tag: whose log it is). The
// data slices are fn's to keep.
func ScanPrefix(fs vfs.FS, path string, opts Options, fn func(index uint64, data []byte) bool) error {
	if err := opts.check(); err != nil {
		return err
	}
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("wal: open %s: %w", path, err)
	}
	defer f.Close()
	b, err := readAll(f)
	if err != nil {
		return fmt.Errorf("wal: open %s: %w", path, err)
	}
	scan(b, opts.max(), func(i uint64, data []byte) bool { return fn(opts.FirstIndex+i, data) })
	return nil
}
