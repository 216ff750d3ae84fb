// Package tail is the one rule every log parkway keeps applies, when it
// recovers, to a bad record that nothing whole follows — a segment's last
// record, the shared journal's last frame, a raft log's or the metadata
// log's last record: is it an incomplete final write, which recovery
// truncates, or damage, which recovery reports and never truncates? (A
// bad record with a whole one after it is damage in every log: the whole
// one was written, and acknowledged, after it.)
//
// A crash leaves a write incomplete in a few ways only. The file ends
// before the record does: its header is cut, or the length it states runs
// past the end of the file. The write stopped part way in a file that
// reached further: the record's bytes end in zeros, and so does the file
// from there (a file's new blocks, preallocated space included, read as
// zeros until written). Or some of the sectors the write covered never
// reached the disk: a disk writes a sector whole or not at all, so such a
// sector reads as zeros (etcd's WAL tells torn entries apart the same
// way). Anything else — a record of its whole length that fails its
// checksum, with no unwritten sector and not ending in zeros — was written
// whole and changed afterwards: damage.
//
// One damage is told apart before those: a length field with one bit
// flipped. A length flipped into one that runs past the end of the file
// would read as a write cut short; a record that checks whole (its
// checksum holds) with one bit of its length flipped back was written
// whole, and is damage whatever else the rule would say. A torn write
// leaves a true length over missing bytes, and a stray checksum match
// among the 32 candidates happens about once in 2^27.
//
// The rule errs towards "torn" only for records whose own bytes hold a
// sector's worth of zeros, or end in zeros, and are damaged elsewhere; and
// a header whose length was damaged in more than one bit into one that
// runs past the end reads as torn, since nothing in the record can say
// otherwise. It errs towards
// "damage" for a torn write whose unwritten sectors hold older bytes
// rather than zeros (a region written, not synced, taken back and written
// again before a power loss): the log is then refused, with the error,
// rather than cut.
package tail

import "io"

// SectorSize is the unit a disk writes whole or not at all.
const SectorSize = 512

// minChunk is the smallest run of zeros taken as unwritten: a record that
// starts or ends a few bytes into a sector owns only those bytes of it,
// and a few zero bytes are no evidence of anything.
const minChunk = 8

// Format is what the rule needs of a log's record format.
type Format struct {
	// LengthAt is where a record's length field (4 bytes, little endian)
	// lies in its header.
	LengthAt int
	// Size returns, from the first LengthAt+4 bytes of a record, the size
	// of its fixed header and the record's size, header included, as its
	// length field states it.
	Size func(h []byte) (header int, size uint64)
	// Whole reports whether b starts with a whole record whose checksum
	// holds (b may run past it). It must accept any bytes without
	// panicking, and neither keep nor change b.
	Whole func(b []byte) bool
}

// maxProbe bounds the bytes TornAt reads to check a record with its
// length flipped back: a candidate larger than that is judged by the rest
// of the rule alone.
const maxProbe = 16 << 20

// Torn reports whether rec — a log's bytes from a bad record's start, at
// file offset pos, to the end of the file, with nothing whole after it —
// is an incomplete final write. It is TornAt over rec: a log held in
// memory and a log read from its file are judged by the same code, so
// the same bytes get the same answer however they are read. Torn neither
// keeps nor changes rec.
func Torn(rec []byte, pos int64, f Format) bool {
	torn, _ := TornAt(bytesAt{rec, pos}, pos, pos+int64(len(rec)), f) // a bytesAt never fails
	return torn
}

// bytesAt reads b as the file bytes from pos on.
type bytesAt struct {
	b   []byte
	pos int64
}

func (r bytesAt) ReadAt(p []byte, off int64) (int, error) {
	off -= r.pos
	if off < 0 || off+int64(len(p)) > int64(len(r.b)) {
		return 0, io.ErrUnexpectedEOF // TornAt reads only within [pos, end)
	}
	return copy(p, r.b[off:]), nil
}

// TornAt is the rule for a record read from r, from pos to end (the end of
// the file), read in pieces: a damaged length is never trusted to size a
// buffer (the bytes a candidate length needs are read only if the file
// holds them, and at most maxProbe of them). Torn is TornAt over bytes.
func TornAt(r io.ReaderAt, pos, end int64, f Format) (bool, error) {
	if end-pos < int64(f.LengthAt+4) {
		return true, nil
	}
	var h [64]byte
	hb := h[:min(int64(len(h)), end-pos)]
	if _, err := r.ReadAt(hb, pos); err != nil {
		return false, err
	}
	if need := probeSize(hb, end-pos, f); need > 0 {
		// A candidate may claim fewer bytes than its own length field
		// spans; the flip needs the field whole (the check above made sure
		// the file holds it).
		b := make([]byte, max(need, int64(f.LengthAt+4)))
		if _, err := r.ReadAt(b, pos); err != nil {
			return false, err
		}
		if lengthFlipped(b, f) {
			return false, nil
		}
	}
	header, size := f.Size(hb)
	if end-pos < int64(header) || size > uint64(end-pos) {
		return true, nil
	}
	n := int64(max(size, uint64(header)))
	const piece = 64 << 10 // a multiple of SectorSize: no sector spans two pieces
	buf := make([]byte, min(end-pos, piece))
	z := int64(0) // just past the last byte that is not zero, from pos
	for at := pos; at < end; {
		stop := min(end, (at/piece+1)*piece)
		b := buf[:stop-at]
		if _, err := r.ReadAt(b, at); err != nil {
			return false, err
		}
		if at < pos+n && zeroSector(b[:min(int64(len(b)), pos+n-at)], at, n < minChunk) {
			return true, nil
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != 0 {
				z = at - pos + int64(i) + 1
				break
			}
		}
		at = stop
	}
	return stopped(z, n, end-pos), nil
}

// flip flips one bit of the length field of the record header h.
func flip(h []byte, f Format, bit int) {
	l := h[f.LengthAt : f.LengthAt+4]
	l[bit/8] ^= 1 << (bit % 8)
}

// probeSize is the bytes, of the avail a file holds from a record's
// start (whose first bytes are h), that the record's candidates with one
// bit of the length flipped need: the largest that fits, or 0 if none
// does.
func probeSize(h []byte, avail int64, f Format) int64 {
	var need int64
	for bit := range 32 {
		flip(h, f, bit)
		header, size := f.Size(h)
		flip(h, f, bit)
		if size >= uint64(header) && size <= uint64(min(avail, maxProbe)) {
			need = max(need, int64(size))
		}
	}
	return need
}

// lengthFlipped reports whether rec starts with a whole record once one
// bit of its length field is flipped: a record written whole whose
// length was damaged since.
func lengthFlipped(rec []byte, f Format) bool {
	for bit := range 32 {
		flip(rec, f, bit)
		whole := f.Whole(rec)
		flip(rec, f, bit)
		if whole {
			return true
		}
	}
	return false
}

// stopped reports whether a record of n bytes, in a file that has total
// bytes from the record's start and only zeros after the first z of them,
// is a write that stopped part way: the zeros start inside the record and
// run for at least minChunk bytes (or everything is zeros).
func stopped[T int | int64](z, n, total T) bool { return z == 0 || z < n && total-z >= minChunk }

// zeroSector reports whether a part of b (at file offset pos) that lies in
// one sector is all zeros: at least minChunk bytes of it, or, for a record
// smaller than that (small), all of it.
func zeroSector(b []byte, pos int64, small bool) bool {
	for len(b) > 0 {
		n := min(int64(len(b)), SectorSize-pos%SectorSize)
		if (n >= minChunk || small) && allZero(b[:n]) {
			return true
		}
		b, pos = b[n:], pos+n
	}
	return false
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
