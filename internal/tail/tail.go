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
// The rule errs towards "torn" only for records whose own bytes hold a
// sector's worth of zeros, or end in zeros, and are damaged elsewhere; and
// a header whose length was damaged into one that runs past the end reads
// as torn, since nothing in the record can say otherwise. It errs towards
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

// Torn reports whether rec — a log's bytes from a bad record's start, at
// file offset pos, to the end of the file, with nothing whole after it —
// is an incomplete final write. header is the size of the record's fixed
// header; size is the record's length, header included, as the header
// states it (any value when the header is cut or states none).
func Torn(rec []byte, pos int64, header int, size uint64) bool {
	if len(rec) < header || size > uint64(len(rec)) {
		return true // the file ends before the record does
	}
	n := int(max(size, uint64(header)))
	z := len(rec)
	for z > 0 && rec[z-1] == 0 {
		z--
	}
	return stopped(z, n, len(rec)) || zeroSector(rec[:n], pos, n < minChunk)
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
