// Package syncmark keeps a sync mark: a small file beside a log that
// records how far the log was synced, so that a log later found shorter
// than that (cut short, or rolled back to an older copy of itself) is
// told from a torn tail, which reads the same from the log alone.
//
// Two users keep one, each with its own payload (what "how far" means to
// it) and its own reasons, documented where they are: package replica's
// raft log mark (<log>.mark: the log's generation and synced size) and
// package partition's journal mark (journal/SYNCED: each journal file's
// synced end). A third keeps its file's two slots for another end:
// package partition's consumer offset file, a store per slot write. This
// package is the part they share: the file's slots, their checksums,
// which slot wins, and how a slot is written.
//
// # Format
//
// A mark file holds two slots, at byte 0 and at byte Stride, written in
// turn, so that a write torn in one leaves the other whole; the valid
// slot with the higher sequence number holds. A slot's record is (little
// endian):
//
//	magic    uint32: the user's
//	seq      uint64: the slot's sequence number (1, 2, 3, …)
//	payload  the user's (Codec), its length told by its own bytes
//	crc      uint32: CRC-32C (Castagnoli) of the bytes before it
//
// and the rest of the slot, to the next slot or the file's end, is
// zeros. The file is created whole (both slots holding the first record),
// synced and renamed into place, and never changes size after: a slot is
// overwritten in place, which needs no metadata to be read back, so a
// flush of the device covers it without an fsync of the file's own
// (vfs.WriteBacker).
//
// A format may end every slot with its sequence number again
// (Format.SeqTrailer), outside the record: the last bytes a slot's write
// writes. A write torn short of them (a slot of one sector, which a disk
// writes whole or not at all, is torn only by a failed write's first
// bytes reaching the disk) leaves the trailer the slot held before, so a
// slot that fails its checksum while its trailer names a write newer
// than every valid slot's was written to its end and changed since:
// damage of the newest write, which Decode reports (ErrDamagedSlot).
//
// The magic names the payload's format version too: a user whose payload
// changes gives the new version a new magic and lists the earlier ones
// (Format.Older, each with its codec and file size), whose slots still
// decode. A writer writes the current version only, and a file of an
// earlier version's size is written whole again at its first Write (as
// any file not of its size is: File.Write), so a file holds slots of one
// version.
//
// # Writing without a flush
//
// File.Write hands the slot to the device without a flush (WrittenBack:
// vfs.WriteBack, which waits for the write): it is durable with the
// device's next flush, which any fsync on the filesystem issues. Or it
// only starts the write (Started: vfs.StartWriteBack), and the slot is
// durable with the first flush after the next Write, which waits for it
// before it overwrites the file's page (a write in flight would carry a
// mix of the old and new bytes) — a lag of one more flush, for no wait.
// Or it fdatasyncs the slot (Durable).
//
// The users rely on one rule for any of these to be safe: a slot only
// ever names what an fsync that has already returned made durable, so
// whenever the slot reaches the disk, in whatever order with whatever
// else, it is not ahead of the log; what they give up is that it may lag,
// by the synced writes whose flush it missed.
package syncmark

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"

	"github.com/parkway-io/parkway/vfs"
)

// Header is the bytes of a slot's record before its payload: the magic
// and the sequence number.
const Header = 4 + 8

// trailer is the record's checksum.
const trailer = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Codec encodes one user's payload.
type Codec[T any] interface {
	// AppendPayload appends the payload of v to dst.
	AppendPayload(dst []byte, v T) []byte
	// PayloadLen is the length of the payload at the start of b, told
	// by its own bytes (a count); false if b cannot hold a payload (too
	// short, a count out of bounds). b is all the slot holds past the
	// header, hostile: nothing is allocated.
	PayloadLen(b []byte) (int, bool)
	// DecodePayload decodes a payload of PayloadLen's length whose
	// checksum matched; false if its content is invalid.
	DecodePayload(b []byte) (T, bool)
}

// Format is one user's mark file: its magic, where its second slot
// starts, its size, and its payload's codec. Stride bounds the first
// slot's record; Size-Stride the second's. Older lists the earlier
// versions of the format, whose slots are decoded but never written.
type Format[T any] struct {
	Magic  uint32
	Stride int
	Size   int
	Codec  Codec[T]
	Older  []Version[T]
	// SeqTrailer: each slot's last SeqTrailerLen bytes hold its record's
	// sequence number (little endian), after the zeros that follow the
	// record.
	SeqTrailer bool
}

// SeqTrailerLen is the length of a slot's trailer (Format.SeqTrailer).
const SeqTrailerLen = 8

// Version is an earlier version of a Format: the magic its slots start
// with, the codec of their payload, and the size of its files, no larger
// than the current version's (Read reads no more). Its slots sit where
// the current version's do (the same Stride).
type Version[T any] struct {
	Magic uint32
	Size  int
	Codec Codec[T]
}

// codec returns the codec of the version whose magic is magic, if any.
func (f *Format[T]) codec(magic uint32) (Codec[T], bool) {
	if magic == f.Magic {
		return f.Codec, true
	}
	for _, v := range f.Older {
		if v.Magic == magic {
			return v.Codec, true
		}
	}
	return nil, false
}

// sizeOK reports whether n is the size of a file of the format, of any
// version.
func (f *Format[T]) sizeOK(n int) bool {
	if n == f.Size {
		return true
	}
	for _, v := range f.Older {
		if v.Size == n {
			return true
		}
	}
	return false
}

// Mark is one slot's content.
type Mark[T any] struct {
	Seq uint64
	V   T
}

// ErrNoSlot is Decode's and Read's answer for a mark file holding no
// valid slot (each torn or damaged).
var ErrNoSlot = errors.New("no valid slot")

// ErrDamagedSlot is Decode's and Read's answer, for a format with
// SeqTrailer, for a mark file whose slot fails its checksum though its
// trailer names a write numbered above every valid slot's: the newest
// slot, written to its end and damaged since (a torn write leaves the
// trailer it replaced, of an older write).
var ErrDamagedSlot = errors.New("a slot fails its checksum but was written whole by the newest write: damage, not a torn write")

// ErrSize is CheckSize's answer for a mark file of no version's size. A
// mark file is created whole under a temporary name, synced, and renamed
// into place, and its slots are written in place, so no write, torn or
// not, changes its size: one cut short (its newer slot gone with the
// cut, the older one still valid) or grown is damage, not a torn write.
var ErrSize = errors.New("not a mark file's size")

// CheckSize reports ErrSize if n, a mark file's size, is no version's.
func (f *Format[T]) CheckSize(n int64) error {
	if n < 0 || n > 1<<30 || !f.sizeOK(int(n)) {
		return fmt.Errorf("%d bytes: %w", n, ErrSize)
	}
	return nil
}

// AppendSlot appends the record of m to dst (without the zeros after
// it), in the current version.
func (f *Format[T]) AppendSlot(dst []byte, m Mark[T]) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, f.Magic)
	dst = binary.LittleEndian.AppendUint64(dst, m.Seq)
	dst = f.Codec.AppendPayload(dst, m.V)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// DecodeSlot decodes the record at the start of b (b ends where the slot
// does), of the current version or an older one (its magic says which);
// n is its length. ok is false for anything but a whole, valid record
// with a sequence number.
func (f *Format[T]) DecodeSlot(b []byte) (m Mark[T], n int, ok bool) {
	if len(b) < Header+trailer {
		return Mark[T]{}, 0, false
	}
	c, ok := f.codec(binary.LittleEndian.Uint32(b))
	if !ok {
		return Mark[T]{}, 0, false
	}
	pl, ok := c.PayloadLen(b[Header:])
	if !ok || pl < 0 || pl > len(b)-Header-trailer {
		return Mark[T]{}, 0, false
	}
	end := Header + pl
	if crc32.Checksum(b[:end], castagnoli) != binary.LittleEndian.Uint32(b[end:]) {
		return Mark[T]{}, 0, false
	}
	seq := binary.LittleEndian.Uint64(b[4:])
	if seq == 0 {
		return Mark[T]{}, 0, false
	}
	v, ok := c.DecodePayload(b[Header:end])
	if !ok {
		return Mark[T]{}, 0, false
	}
	return Mark[T]{Seq: seq, V: v}, end + trailer, true
}

// slot is the bytes of slot i of the file content b, as far as b holds
// them.
func (f *Format[T]) slot(b []byte, i int) []byte {
	at, end := i*f.Stride, f.Size
	if i == 0 {
		end = f.Stride
	}
	if at >= len(b) {
		return nil
	}
	return b[at:min(len(b), end)]
}

// Decode decodes a mark file's content: the valid slot with the highest
// sequence number, or ErrNoSlot; with SeqTrailer, an error wrapping
// ErrDamagedSlot if a slot that fails its checksum was written whole by a
// newer write than that.
func (f *Format[T]) Decode(b []byte) (Mark[T], error) {
	var best Mark[T]
	found := false
	var bad [2]bool
	for i := range 2 {
		m, _, ok := f.DecodeSlot(f.slot(b, i))
		bad[i] = !ok
		if ok && (!found || m.Seq > best.Seq) {
			best, found = m, true
		}
	}
	if !found {
		return Mark[T]{}, ErrNoSlot
	}
	for i := range 2 {
		if seq, ok := f.trailer(b, i); ok && bad[i] && seq > best.Seq {
			return Mark[T]{}, fmt.Errorf("the slot at byte %d (written by write %d, the valid slot's is %d): %w", i*f.Stride, seq, best.Seq, ErrDamagedSlot)
		}
	}
	return best, nil
}

// trailer returns slot i's trailer (SeqTrailer), if b holds it.
func (f *Format[T]) trailer(b []byte, i int) (uint64, bool) {
	s := f.slot(b, i)
	end := f.Size - i*f.Stride
	if i == 0 {
		end = f.Stride
	}
	if !f.SeqTrailer || len(s) != end || end < SeqTrailerLen {
		return 0, false
	}
	return binary.LittleEndian.Uint64(s[end-SeqTrailerLen:]), true
}

// Slack describes what in a mark file's content b no mark accounts for —
// a slot that fails its checksum (a write of it torn, or damage), bytes
// after a slot's record that are not zero, a file not of its size (of
// any version's) — or "" if none. A reader uses the valid slot all the
// same; offline tools report it.
func (f *Format[T]) Slack(b []byte) string {
	if !f.sizeOK(len(b)) {
		return fmt.Sprintf("%d bytes, not %d", len(b), f.Size)
	}
	for i := range 2 {
		s := f.slot(b, i)
		m, n, ok := f.DecodeSlot(s)
		if !ok {
			return fmt.Sprintf("the slot at byte %d fails its checksum", i*f.Stride)
		}
		if seq, ok := f.trailer(b, i); ok {
			if seq != m.Seq {
				return fmt.Sprintf("the slot at byte %d ends in write number %d, not its record's %d", i*f.Stride, seq, m.Seq)
			}
			s = s[:len(s)-SeqTrailerLen]
		}
		for k, c := range s[n:] {
			if c != 0 {
				return fmt.Sprintf("byte %d, after the slot's record, is not zero", i*f.Stride+n+k)
			}
		}
	}
	return ""
}

// Read reads the mark file at path: found is false if there is none; a
// file with no valid slot is an error wrapping ErrNoSlot. slack is
// Slack's.
func (f *Format[T]) Read(fsys vfs.FS, path string) (m Mark[T], found bool, slack string, err error) {
	file, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Mark[T]{}, false, "", nil
	}
	if err != nil {
		return Mark[T]{}, false, "", err
	}
	defer file.Close()
	// One byte more than a mark file holds, to see one that is longer.
	b := make([]byte, f.Size+1)
	n, err := file.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Mark[T]{}, false, "", err
	}
	m, err = f.Decode(b[:n])
	if err != nil {
		return Mark[T]{}, false, "", fmt.Errorf("sync mark %s of %d bytes: %w", path, n, err)
	}
	return m, true, f.Slack(b[:n]), nil
}

// Sync is how File.Write makes a slot durable.
type Sync int

const (
	// WrittenBack: written back, waited for (vfs.WriteBack), durable with
	// the device's next flush.
	WrittenBack Sync = iota
	// Started: written back without waiting (vfs.StartWriteBack), durable
	// with the first flush after the next Write (or Close) waited for it.
	Started
	// Durable: fdatasynced.
	Durable
)

// File writes a mark file's slots in turn.
type File[T any] struct {
	format *Format[T]
	fs     vfs.FS
	path   string
	f      vfs.File // nil until the first Write
	seq    uint64
	buf    []byte
	// started: the last slot's write was started, not waited for.
	started bool
}

// Writer returns the writer of the mark file at path whose last slot
// (read by Read, 0 if none) has sequence number seq. Nothing is opened
// until the first Write.
func (f *Format[T]) Writer(fsys vfs.FS, path string, seq uint64) *File[T] {
	return &File[T]{format: f, fs: fsys, path: path, seq: seq}
}

// Seq is the sequence number of the last slot written (or read).
func (w *File[T]) Seq() uint64 { return w.seq }

// Open reports whether the file is open (written in this process).
func (w *File[T]) Open() bool { return w.f != nil }

// Write records v in the file's next slot, then makes it durable as sync
// says (see Sync). The first Write opens the file; one missing, or not of
// its size, is first written whole instead (both slots holding v),
// synced, and renamed into place, so that a mark file that exists always
// holds a valid slot.
func (w *File[T]) Write(v T, sync Sync) error {
	f := w.format
	m := Mark[T]{Seq: w.seq + 1, V: v}
	b, _, err := f.appendSpan(w.buf[:0], m)
	if err != nil {
		return fmt.Errorf("sync mark %s: %w", w.path, err)
	}
	w.buf = b
	if w.f == nil {
		created, err := w.open(m)
		if err != nil {
			return fmt.Errorf("sync mark %s: %w", w.path, err)
		}
		if created {
			w.seq = m.Seq
			return nil
		}
	}
	if err := w.wait(); err != nil {
		return err
	}
	if _, err := w.f.WriteAt(b, int64(m.Seq%2)*int64(f.Stride)); err != nil {
		return fmt.Errorf("sync mark %s: %w", w.path, err)
	}
	switch sync {
	case Started:
		err = vfs.StartWriteBack(w.f)
	case Durable:
		err = vfs.Datasync(w.f)
	default:
		err = vfs.WriteBack(w.f)
	}
	if err != nil {
		return fmt.Errorf("sync mark %s: %w", w.path, err)
	}
	w.seq, w.started = m.Seq, sync == Started
	return nil
}

// appendSpan appends the bytes of m's slot to dst: its record, then zeros
// to the slot's end, so that every byte of the file is accounted for
// (Slack), whatever an earlier, longer record left there, and the
// trailer last (SeqTrailer). rec is the record's length.
func (f *Format[T]) appendSpan(dst []byte, m Mark[T]) (b []byte, rec int, err error) {
	span := f.Stride
	if m.Seq%2 == 1 {
		span = f.Size - f.Stride
	}
	return f.appendSlotSpan(dst, m, span)
}

// appendSlotSpan is appendSpan for a slot of span bytes.
func (f *Format[T]) appendSlotSpan(dst []byte, m Mark[T], span int) (b []byte, rec int, err error) {
	b = f.AppendSlot(dst, m)
	rec = len(b) - len(dst)
	room := min(f.Stride, f.Size-f.Stride)
	if f.SeqTrailer {
		room -= SeqTrailerLen
		span -= SeqTrailerLen
	}
	if rec > room {
		return nil, 0, fmt.Errorf("a record of %d bytes does not fit its slot", rec)
	}
	for len(b)-len(dst) < span {
		b = append(b, 0)
	}
	if f.SeqTrailer {
		b = binary.LittleEndian.AppendUint64(b, m.Seq)
	}
	return b, rec, nil
}

// Stage prepares the write of m to its slot of the mark file at path,
// which must exist at its size (else an error matching fs.ErrNotExist or
// ErrSize), for a writer that makes it durable on another goroutine: the
// file is opened now, and write overwrites the slot, fdatasyncs it and
// closes the file, so it writes the file that was there at Stage even if
// it was replaced since. m.Seq must be above every slot the file holds.
// The writes of one file must run one at a time (a page rewritten while
// its write is in flight may reach the disk with old and new bytes
// mixed), in the order they were staged, each exactly once (it closes
// the file).
func (f *Format[T]) Stage(fsys vfs.FS, path string, m Mark[T]) (write func() error, err error) {
	b, _, err := f.appendSpan(nil, m)
	if err != nil {
		return nil, fmt.Errorf("sync mark %s: %w", path, err)
	}
	file, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := file.Stat()
	if err == nil && fi.Size() != int64(f.Size) {
		err = fmt.Errorf("%d bytes: %w", fi.Size(), ErrSize)
	}
	if err != nil {
		_ = file.Close()
		return nil, fmt.Errorf("sync mark %s: %w", path, err)
	}
	at := int64(m.Seq%2) * int64(f.Stride)
	return func() error {
		_, err := file.WriteAt(b, at)
		if err == nil {
			err = vfs.Datasync(file)
		}
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sync mark %s: %w", path, err)
		}
		return nil
	}, nil
}

// wait waits for the last slot's write if it was only started: a page
// under write-back is not rewritten.
func (w *File[T]) wait() error {
	if !w.started {
		return nil
	}
	if err := vfs.WaitWriteBack(w.f); err != nil {
		return fmt.Errorf("sync mark %s: %w", w.path, err)
	}
	w.started = false
	return nil
}

// open opens the file for writing, first writing it whole with m in
// both slots (created) unless it is there at its size.
func (w *File[T]) open(m Mark[T]) (created bool, err error) {
	f := w.format
	fi, err := w.fs.Stat(w.path)
	switch {
	case err == nil && fi.Size() == int64(f.Size):
	case err == nil || errors.Is(err, fs.ErrNotExist):
		b, _, err := f.appendSlotSpan(make([]byte, 0, f.Size), m, f.Stride)
		if err == nil {
			b, _, err = f.appendSlotSpan(b, m, f.Size-f.Stride)
		}
		if err != nil {
			return false, err
		}
		if err := vfs.WriteFileAtomic(w.fs, w.path, b); err != nil {
			return false, err
		}
		created = true
	default:
		return false, err
	}
	if w.f, err = w.fs.OpenFile(w.path, os.O_RDWR, 0); err != nil {
		return false, err
	}
	return created, nil
}

// Close closes the file if it is open, first waiting for a slot's write
// that was only started. It does not sync it.
func (w *File[T]) Close() error {
	if w.f == nil {
		return nil
	}
	err := w.wait()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f, w.started = nil, false
	return err
}
