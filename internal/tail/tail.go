// Package tail is the one rule every log parkway keeps applies, when it
// recovers, to a bad record that nothing whole follows — a segment's last
// record, the shared journal's last frame, a raft log's or the metadata
// log's last record: is it an incomplete final write, which recovery
// truncates, or damage, which recovery reports and never truncates? (A
// bad record with a whole one after it is damage in every log: the whole
// one was written, and acknowledged, after it.)
//
// A crash leaves a write incomplete in two ways only. The file ends
// before the record does: its header is cut, or the length it states runs
// past the end of the file. Or some of the sectors the write covered
// never reached the disk: a disk writes a sector whole or not at all, and
// a file's new blocks — preallocated space included — read as zeros
// until they are written, so such a sector reads as zeros. Anything else
// — a record of its whole length, with no sector of zeros, that fails its
// checksum or does not decode — was written whole and changed afterwards:
// damage. etcd's WAL tells torn entries apart with the same sector test.
//
// A record whose own bytes hold a sector's worth of zeros and is damaged
// elsewhere reads as torn: the rule errs that way only for such records.
// A header whose length was damaged into one that runs past the end reads
// as torn too: nothing in the record can say otherwise.
package tail

import "io"

// SectorSize is the unit a disk writes whole or not at all.
const SectorSize = 512

// minChunk is the smallest run of zeros taken as an unwritten sector: a
// record that starts or ends a few bytes into a sector owns only those
// bytes of it, and a few zero bytes are no evidence of anything.
const minChunk = 8

// Torn reports whether rec — a log's bytes from a bad record's start, at
// file offset pos, to the end of the file, with nothing whole after it —
// is an incomplete final write. header is the size of the record's fixed
// header; size is the record's length, header included, as the header
// states it (any value when the header is cut or states none).
func Torn(rec []byte, pos int64, header int, size uint64) bool {
	switch {
	case len(rec) < header, size > uint64(len(rec)):
		return true // the file ends before the record does
	case size < uint64(header):
		// No length (zeros, or a length too small to be one): the header
		// itself is judged.
		return zeroSector(rec[:header], pos, header < minChunk)
	}
	return zeroSector(rec[:size], pos, size < minChunk)
}

// TornAt is Torn for a record read from r, from pos to end (the end of
// the file), read in pieces: a damaged length is never trusted to size a
// buffer.
func TornAt(r io.ReaderAt, pos, end int64, header int, size uint64) (bool, error) {
	if end-pos < int64(header) || size > uint64(end-pos) {
		return true, nil
	}
	n := int64(max(size, uint64(header)))
	const piece = 64 << 10 // a multiple of SectorSize: no sector spans two pieces
	buf := make([]byte, min(n, piece))
	for at := pos; at < pos+n; {
		stop := min(pos+n, (at/piece+1)*piece)
		b := buf[:stop-at]
		if _, err := r.ReadAt(b, at); err != nil {
			return false, err
		}
		if zeroSector(b, at, n < minChunk) {
			return true, nil
		}
		at = stop
	}
	return false, nil
}

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
