package partition

// Segment codec: the pure encode/decode functions for the records of a
// FileStore segment. Nothing here does I/O.
//
// Two record formats exist. Appends write format 2; format 1 records,
// written before format 2 existed, stay readable (segments, raft logs and
// forwarded batches may hold them). All integers are little endian.
//
// Format 2 (current): bit 31 of the length field is set.
//
//	pos  size  field
//	  0     4  checksum     CRC-32C (Castagnoli) of bytes [4, length)
//	  4     4  length       total record length, this header included, | 1<<31
//	  8     8  offset       the message's partition offset
//	 16    16  id           Message.ID
//	 32     8  timestamp    Message.Timestamp (µs since the Unix epoch, the producer's)
//	 40     8  append time  Message.AppendTime (µs, stamped by the owner at append)
//	 48     4  key len      bytes of key that follow the header
//	 52     4  headers len  bytes of encoded user headers after the key
//	 56     4  payload len  bytes of payload after the headers
//	 60     …  key
//	  …     …  headers      per header: key len u32, key, value len u32, value
//	  …     …  payload
//
// length (without the flag) must equal 60 + key len + headers len +
// payload len, so records are at most 2 GiB − 1.
//
// Format 1 (read only): bit 31 of the length field is clear.
//
//	pos  size  field
//	  0     4  checksum     CRC-32C (Castagnoli) of bytes [4, length)
//	  4     4  length       total record length, this header included
//	  8     8  offset       the message's partition offset
//	 16    16  id           Message.ID
//	 32     8  timestamp    Message.Timestamp (µs since the Unix epoch)
//	 40     4  headers len  bytes of encoded user headers that follow
//	 44     4  payload len  bytes of payload after the headers
//	 48     …  headers      per header: key len u32, key, value len u32, value
//	  …     …  payload
//
// length must equal 48 + headers len + payload len. A format 1 record has
// no key, and decodes with AppendTime equal to its Timestamp: the Node
// stamped Timestamp itself at produce time then, so it is the closest
// record of when the message was appended. (Format 1 records of 2 GiB or
// more would carry bit 31 in their length; the Node never wrote messages
// that large, and they are reported as damage.)
//
// Neither format has a length of 0, so a record header of all zero bytes
// is unambiguous and marks the end of data: it is what the zero-filled
// tail of a preallocated segment looks like.
//
// Checksum choice: the reference server checksums records with 64-bit xxh3.
// We use CRC-32C instead because it is in the standard library (hash/crc32,
// so no third-party dependency) and hardware-accelerated (SSE4.2 on amd64,
// the CRC32 instructions on arm64), which keeps it well below the cost of
// the write it protects. 32 bits is ample to catch torn writes and bit rot
// within one record. The consequence is that segment files are not
// byte-compatible with the reference server's, only the directory layout is.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

const (
	// recordHeaderSize is the fixed part of a format 2 record.
	recordHeaderSize = 60
	// recordHeaderSizeV1 is the fixed part of a format 1 record, the
	// smallest record of either format.
	recordHeaderSizeV1 = 48
	// formatFlag in the length field marks a format 2 record.
	formatFlag = 1 << 31
	// maxRecordSize is the largest encodable record: the length field's
	// 31 bits.
	maxRecordSize = formatFlag - 1
	// headerFieldOverhead is the per-user-header framing (two u32 lengths).
	headerFieldOverhead = 8
)

var (
	le         = binary.LittleEndian
	castagnoli = crc32.MakeTable(crc32.Castagnoli)

	// errIncomplete reports that the input holds only a prefix of a record
	// (everything seen so far is consistent). A caller with more bytes
	// should retry with them; at the end of a file it is a torn record.
	errIncomplete = errors.New("partition: incomplete record")
)

// CorruptError reports data that fails its checksum or cannot be decoded:
// a torn or damaged record in a segment, or a damaged offsets file. It
// carries where the damage is so an operator can inspect the file.
// errors.Is(err, ErrCorrupt) holds for every *CorruptError.
type CorruptError struct {
	// Path is the damaged file ("" when decoding a buffer with no file).
	Path string
	// Offset is the file position (in bytes) of the damaged record, not a
	// message offset.
	Offset int64
	// Err describes the damage.
	Err error
}

// Error implements error.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("%v: %s at byte %d: %v", ErrCorrupt, e.Path, e.Offset, e.Err)
}

// Unwrap returns ErrCorrupt, so errors.Is(err, ErrCorrupt) matches. The
// detail in Err is descriptive only and deliberately not part of the chain.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corruptf(path string, pos int64, format string, args ...any) *CorruptError {
	return &CorruptError{Path: path, Offset: pos, Err: fmt.Errorf(format, args...)}
}

// recordHeader is the decoded fixed part of a record.
type recordHeader struct {
	checksum   uint32
	length     uint32 // without formatFlag
	offset     uint64
	id         [16]byte
	timestamp  int64
	appendTime int64
	keyLen     uint32
	headersLen uint32
	payloadLen uint32
	// size is the fixed part's size: recordHeaderSize, or
	// recordHeaderSizeV1 for a format 1 record.
	size int
}

// recordLength returns the record length a header claims (flag removed)
// and the fixed size of its format; b holds at least 8 bytes.
func recordLength(b []byte) (uint32, int) {
	l := le.Uint32(b[4:])
	if l&formatFlag != 0 {
		return l &^ formatFlag, recordHeaderSize
	}
	return l, recordHeaderSizeV1
}

// headersSize is the encoded size of hs.
func headersSize(hs []Header) uint64 {
	var n uint64
	for i := range hs {
		n += headerFieldOverhead + uint64(len(hs[i].Key)) + uint64(len(hs[i].Value))
	}
	return n
}

// recordSize is the encoded size of m, or false if it does not fit the
// uint32 length field.
func recordSize(m *Message) (int, bool) {
	n := recordHeaderSize + uint64(len(m.Key)) + headersSize(m.Headers) + uint64(len(m.Payload))
	if n > maxRecordSize {
		return 0, false
	}
	return int(n), true
}

// appendRecord appends the record of m, stamped with offset and
// appendTime (in place of m's own), to dst. m must have passed recordSize.
func appendRecord(dst []byte, m *Message, offset uint64, appendTime int64) []byte {
	return appendRecordHead(dst, m, offset, appendTime, false)
}

// appendRecordHead is appendRecord, or with lent set everything of the
// record but its payload, which must follow it in the file as m.Payload
// itself: the checksum covers the payload either way, read from
// m.Payload, which is not copied (Append writes it from the caller's
// slice with a vectored write).
func appendRecordHead(dst []byte, m *Message, offset uint64, appendTime int64, lent bool) []byte {
	hl := headersSize(m.Headers)
	n := recordHeaderSize + len(m.Key) + int(hl) + len(m.Payload)
	start, grow := len(dst), n
	if lent {
		grow -= len(m.Payload)
	}
	dst = slices.Grow(dst, grow)[:start+recordHeaderSize]
	h := dst[start:]
	// h[0:4], the checksum, is written last.
	le.PutUint32(h[4:], uint32(n)|formatFlag)
	le.PutUint64(h[8:], offset)
	copy(h[16:32], m.ID[:])
	le.PutUint64(h[32:], uint64(m.Timestamp))
	le.PutUint64(h[40:], uint64(appendTime))
	le.PutUint32(h[48:], uint32(len(m.Key)))
	le.PutUint32(h[52:], uint32(hl))
	le.PutUint32(h[56:], uint32(len(m.Payload)))
	dst = append(dst, m.Key...)
	for i := range m.Headers {
		hd := &m.Headers[i]
		dst = le.AppendUint32(dst, uint32(len(hd.Key)))
		dst = append(dst, hd.Key...)
		dst = le.AppendUint32(dst, uint32(len(hd.Value)))
		dst = append(dst, hd.Value...)
	}
	if lent {
		le.PutUint32(dst[start:], crc32.Update(crc32.Checksum(dst[start+4:], castagnoli), castagnoli, m.Payload))
		return dst
	}
	dst = append(dst, m.Payload...)
	le.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// parseRecord validates the record at the start of b (checksum, lengths,
// header framing) without allocating, and returns its header and length.
// path and pos only label errors: pos is b's position in its file.
//
// It returns io.EOF if b starts with an all-zero header (or is empty, or is
// a shorter all-zero run): the end of data. It returns errIncomplete if b
// holds a consistent prefix of a record, and a *CorruptError otherwise. It
// never reads outside b.
func parseRecord(b []byte, path string, pos int64) (recordHeader, int, error) {
	var h recordHeader
	if allZero(b[:min(len(b), recordHeaderSizeV1)]) {
		return h, 0, io.EOF
	}
	h.size = recordHeaderSizeV1
	if len(b) >= 8 {
		var l uint32
		l, h.size = recordLength(b)
		if l < uint32(h.size) {
			return h, 0, corruptf(path, pos, "record length %d below header size %d", l, h.size)
		}
	}
	if len(b) < h.size {
		return h, 0, errIncomplete
	}
	h.checksum = le.Uint32(b[0:])
	h.length, _ = recordLength(b)
	h.offset = le.Uint64(b[8:])
	copy(h.id[:], b[16:32])
	h.timestamp = int64(le.Uint64(b[32:]))
	if h.size == recordHeaderSize {
		h.appendTime = int64(le.Uint64(b[40:]))
		h.keyLen = le.Uint32(b[48:])
		h.headersLen = le.Uint32(b[52:])
		h.payloadLen = le.Uint32(b[56:])
	} else {
		h.appendTime = h.timestamp
		h.headersLen = le.Uint32(b[40:])
		h.payloadLen = le.Uint32(b[44:])
	}
	if want := uint64(h.size) + uint64(h.keyLen) + uint64(h.headersLen) + uint64(h.payloadLen); uint64(h.length) != want {
		return h, 0, corruptf(path, pos, "record length %d, key, header and payload lengths give %d", h.length, want)
	}
	if uint64(len(b)) < uint64(h.length) {
		return h, 0, errIncomplete
	}
	rec := b[:h.length]
	if sum := crc32.Checksum(rec[4:], castagnoli); sum != h.checksum {
		return h, 0, corruptf(path, pos, "checksum %#08x, computed %#08x", h.checksum, sum)
	}
	hs := h.size + int(h.keyLen)
	if _, err := countHeaders(rec[hs : hs+int(h.headersLen)]); err != nil {
		return h, 0, corruptf(path, pos, "headers: %v", err)
	}
	return h, int(h.length), nil
}

// countHeaders validates the framing of encoded headers and counts them.
func countHeaders(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		for range 2 { // key, then value
			if len(b) < 4 {
				return 0, errors.New("truncated length field")
			}
			l := le.Uint32(b)
			b = b[4:]
			if uint64(l) > uint64(len(b)) {
				return 0, fmt.Errorf("field length %d exceeds remaining %d bytes", l, len(b))
			}
			b = b[l:]
		}
		n++
	}
	return n, nil
}

// decodeRecord decodes the record at the start of b (see parseRecord for
// the errors). The returned payload and header values alias b and are
// capped, so appending to them cannot overwrite b, and so does the message
// key; header keys are copied into strings. An empty payload, key or value
// decodes as nil, no headers as nil.
func decodeRecord(b []byte, path string, pos int64) (Message, int, error) {
	h, n, err := parseRecord(b, path, pos)
	if err != nil {
		return Message{}, 0, err
	}
	m := Message{Offset: h.offset, ID: h.id, Timestamp: h.timestamp, AppendTime: h.appendTime}
	at := h.size
	if h.keyLen > 0 {
		k := b[at : at+int(h.keyLen)]
		m.Key = k[:len(k):len(k)]
		at += int(h.keyLen)
	}
	hb := b[at : at+int(h.headersLen)]
	if len(hb) > 0 {
		m.Headers = decodeHeaders(hb)
	}
	if h.payloadLen > 0 {
		p := b[at+int(h.headersLen) : n]
		m.Payload = p[:len(p):len(p)]
	}
	return m, n, nil
}

// decodeHeaders decodes headers already validated by countHeaders.
func decodeHeaders(b []byte) []Header {
	count, err := countHeaders(b)
	if err != nil || count == 0 {
		return nil
	}
	hs := make([]Header, count)
	for i := range hs {
		kl := le.Uint32(b)
		hs[i].Key = string(b[4 : 4+kl])
		b = b[4+kl:]
		vl := le.Uint32(b)
		if vl > 0 {
			hs[i].Value = b[4 : 4+vl : 4+vl]
		}
		b = b[4+vl:]
	}
	return hs
}

// decodeRecords decodes consecutive records from b, which is expected to
// hold whole records up to its end or up to an all-zero header (end of
// data). A trailing partial record is a torn write and reported as a
// *CorruptError, as is any damaged record; pos is b's file position, used
// with path to label errors. It returns the messages decoded before the
// end or the error, and the number of bytes they occupy.
func decodeRecords(b []byte, path string, pos int64) ([]Message, int, error) {
	return appendRecords(nil, b, path, pos)
}

// appendRecords is decodeRecords appending the messages to out.
func appendRecords(out []Message, b []byte, path string, pos int64) ([]Message, int, error) {
	used := 0
	for used < len(b) {
		m, n, err := decodeRecord(b[used:], path, pos+int64(used))
		switch {
		case err == io.EOF:
			return out, used, nil
		case err == errIncomplete:
			return out, used, corruptf(path, pos+int64(used), "torn record: %d bytes left", len(b)-used)
		case err != nil:
			return out, used, err
		}
		out = append(out, m)
		used += n
	}
	return out, used, nil
}
