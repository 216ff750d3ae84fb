package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// Why a record set is refused. Each maps to a Kafka error code
// (recordsErrorCode).
var (
	errCorruptRecords   = errors.New("kafka: corrupt record batch")           // CORRUPT_MESSAGE
	errInvalidRecords   = errors.New("kafka: invalid record batch")           // INVALID_RECORD
	errRecordsTooLarge  = errors.New("kafka: records inflate past the limit") // RECORD_LIST_TOO_LARGE
	errUnsupportedMagic = errors.New("kafka: record format older than v2")    // UNSUPPORTED_FOR_MESSAGE_FORMAT
	errTransactional    = errors.New("kafka: transactional batch")            // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record batch v2 layout: the fixed header is 61 bytes; Length counts
// from PartitionLeaderEpoch (offset 12), the CRC covers from Attributes
// (offset 21) to the end.
const (
	batchHeaderSize = 61
	batchLengthEnd  = 12 // FirstOffset + Length
	batchCRCStart   = 21
	batchMagicAt    = 16
)

// Attribute bits of a record batch.
const (
	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// decodedBatch is one producer batch: its header and its records as
// parkway messages, whose keys, values and headers point into the request
// (or the inflated records), or, decoded to be kept encoded
// (decoder.encoded), the batch as the client sent it.
type decodedBatch struct {
	hdr  kmsg.RecordBatch // Records cleared
	msgs []parkway.Message
	kept *keptBatch
}

// keptBatch is a record batch as its client sent it (compressed or not),
// validated whole: what a node that stores in memory keeps
// (parkway.Encoded, ProduceAsyncEncoded), and what a fetch hands back
// with only the fields the CRC does not cover rewritten (appendKept).
type keptBatch struct {
	// raw is the whole batch: lent, in the request's frame, until the
	// node copies it into memory of its own (Own, which sets owned).
	raw   []byte
	owned atomic.Bool
	n     int
	// maxTS is the newest record timestamp (µs, as the messages get it);
	// largest and total the records' sizes as parkway counts them;
	// inflated the records' size decompressed, the limit Decode inflates
	// them to.
	maxTS          int64
	largest, total int
	inflated       int
}

// keptZstd is the zstd decoder of kept batches' Decode: one of the
// package's, never closed, since a node keeps its batches past the
// listener that took them (the Server's decoder closes with it). A
// batch reaches it validated, inflating to k.inflated, which Decode
// holds it to.
var keptZstd = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxMaxRequestSize))
})

var _ parkway.LentEncoded = (*keptBatch)(nil)

// Bytes and Own make a kept batch a parkway.LentEncoded: the frame it
// is read into is lent to the next produce once the node has copied
// every kept batch of the request (pending.frameFree).
func (k *keptBatch) Bytes() []byte { return k.raw }

func (k *keptBatch) Own(b []byte) {
	k.raw = b
	k.owned.Store(true)
}

func (k *keptBatch) Len() int                           { return k.n }
func (k *keptBatch) Size() int64                        { return int64(len(k.raw)) }
func (k *keptBatch) MessageSizes() (largest, total int) { return k.largest, k.total }
func (k *keptBatch) MaxTimestamp() int64                { return k.maxTS }

// Decode decodes the batch's records into messages of their own (a
// parkway reader's Poll reached them), as they were validated when they
// were produced, into at most the bytes they inflated to then.
func (k *keptBatch) Decode() ([]parkway.Message, error) {
	d := decoder{left: k.inflated}
	if int16(binary.BigEndian.Uint16(k.raw[batchCRCStart:]))&attrCompression == 4 {
		dec, err := keptZstd()
		if err != nil {
			return nil, err
		}
		d.zstd = dec
	}
	b, err := d.decodeBatch(k.raw)
	return b.msgs, err
}

// appendKept appends k to dst as a fetch hands it out: the client's
// bytes, with the base offset the partition gave it and the leader epoch
// of the fetch written into the two header fields the CRC does not cover
// (it covers from the attributes to the end).
func appendKept(dst []byte, k *keptBatch, base uint64, leaderEpoch int32) []byte {
	start := len(dst)
	dst = append(dst, k.raw...)
	binary.BigEndian.PutUint64(dst[start:], base)
	binary.BigEndian.PutUint32(dst[start+batchLengthEnd:], uint32(leaderEpoch))
	return dst
}

// decoder inflates and decodes record batches within a byte limit.
type decoder struct {
	zstd *zstd.Decoder // shared; DecodeAll is safe for concurrent use
	// left is how many bytes the request's records may still inflate
	// to: what one request makes the server hold is bounded.
	left int
	// bufs, when set, lends the buffers batches are decoded into (snappy
	// and zstd batches inflate into them, uncompressed ones are copied
	// out of the request frame into them); inflated lists them (and
	// those made afresh), for recycle.
	bufs     *bufPool
	inflated [][]byte
	// encoded decodes each batch to be kept as it came (decodedBatch.kept):
	// its records are validated, their sizes counted, and no message is
	// made; what they inflated into goes back to bufs at once.
	encoded bool
}

// recycle gives the buffers the decoded records point into back to
// d.bufs. Only once nothing reads those records again: the produce
// calls it when every append it started was acknowledged and none was
// kept (ProduceAsyncGive: the node copied the payloads by then).
func (d *decoder) recycle() {
	for _, b := range d.inflated {
		d.bufs.put(b)
	}
	d.inflated = nil
}

// borrow returns an empty buffer to inflate into, lent by d.bufs.
func (d *decoder) borrow() []byte {
	if d.bufs == nil {
		return nil
	}
	return d.bufs.get()
}

// decodeBatches splits a produce's record set into batches and decodes
// each. Every length is checked against the bytes left before it is used;
// every batch's CRC is verified; a compressed batch is inflated into at
// most d.left bytes (a zip bomb is refused at the limit, not after).
func (d *decoder) decodeBatches(records []byte) ([]decodedBatch, error) {
	if len(records) == 0 {
		return nil, fmt.Errorf("%w: no records", errInvalidRecords)
	}
	var out []decodedBatch
	for len(records) > 0 {
		if len(records) < batchLengthEnd {
			return nil, fmt.Errorf("%w: %d trailing bytes", errCorruptRecords, len(records))
		}
		length := int32(binary.BigEndian.Uint32(records[8:]))
		if length < batchHeaderSize-batchLengthEnd || int64(length) > int64(len(records)-batchLengthEnd) {
			return nil, fmt.Errorf("%w: batch length %d, %d bytes left", errCorruptRecords, length, len(records)-batchLengthEnd)
		}
		raw := records[:batchLengthEnd+int(length)]
		records = records[len(raw):]
		if raw[batchMagicAt] != 2 {
			return nil, fmt.Errorf("%w: magic %d", errUnsupportedMagic, raw[batchMagicAt])
		}
		b, err := d.decodeBatch(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func (d *decoder) decodeBatch(raw []byte) (decodedBatch, error) {
	var b decodedBatch
	if err := b.hdr.ReadFrom(raw); err != nil {
		return b, fmt.Errorf("%w: %v", errCorruptRecords, err)
	}
	if crc := crc32.Checksum(raw[batchCRCStart:], castagnoli); crc != uint32(b.hdr.CRC) {
		return b, fmt.Errorf("%w: CRC %08x, computed %08x", errCorruptRecords, uint32(b.hdr.CRC), crc)
	}
	attrs := b.hdr.Attributes
	if attrs&attrTransactional != 0 || attrs&attrControl != 0 {
		return b, fmt.Errorf("%w: attributes %#x", errTransactional, attrs)
	}
	n := b.hdr.NumRecords
	if n <= 0 || b.hdr.LastOffsetDelta != n-1 {
		return b, fmt.Errorf("%w: %d records, last offset delta %d", errInvalidRecords, n, b.hdr.LastOffsetDelta)
	}
	codec := attrs & attrCompression
	data, err := d.inflate(codec, b.hdr.Records)
	if err != nil {
		return b, err
	}
	if d.bufs != nil && (codec == 0 && !d.encoded || codec == 2 || codec == 4) {
		if d.encoded {
			// Only read here: the buffer serves the next batch.
			defer d.bufs.put(data)
		} else {
			d.inflated = append(d.inflated, data)
		}
	}
	b.hdr.Records = nil
	// Each record takes at least 7 bytes (length, attributes, timestamp
	// and offset deltas, key and value lengths, header count): a count
	// the bytes cannot hold is refused before the slice is made.
	if int64(n) > int64(len(data))/7 {
		return b, fmt.Errorf("%w: %d records in %d bytes", errCorruptRecords, n, len(data))
	}
	var kept *keptBatch
	if d.encoded {
		kept = &keptBatch{n: int(n), inflated: len(data)}
	} else {
		b.msgs = make([]parkway.Message, n)
	}
	for i := range int(n) {
		var r record
		var ok bool
		if data, ok = r.read(data); !ok {
			return b, fmt.Errorf("%w: record %d: framing past the record's or the batch's end", errCorruptRecords, i)
		}
		if int(r.offsetDelta) != i {
			return b, fmt.Errorf("%w: record %d has offset delta %d", errInvalidRecords, i, r.offsetDelta)
		}
		ms := b.hdr.FirstTimestamp + r.tsDelta
		if attrs&attrLogAppendTime != 0 {
			ms = b.hdr.MaxTimestamp
		}
		if ms < 0 || ms > math.MaxInt64/1000 {
			return b, fmt.Errorf("%w: record %d: timestamp %d ms", errInvalidRecords, i, ms)
		}
		// A zero timestamp would be replaced by the node's clock; the
		// epoch itself is stamped 1 µs in.
		ts := max(ms*1000, 1)
		if kept != nil {
			// Only counted: the record stays in the batch's bytes.
			size := parkway.MessageSize(&parkway.Message{Key: r.key, Payload: r.value}) + r.nHeaders*headerOverhead + r.headerBytes
			kept.largest, kept.total = max(kept.largest, size), kept.total+size
			kept.maxTS = max(kept.maxTS, ts)
			continue
		}
		m := &b.msgs[i]
		m.Timestamp, m.Key, m.Payload = ts, r.key, r.value
		if r.nHeaders > 0 {
			m.Headers = make([]parkway.Header, r.nHeaders)
			for j, hs := 0, r.headers; j < r.nHeaders; j++ {
				var k []byte
				k, m.Headers[j].Value, hs = nextHeader(hs)
				m.Headers[j].Key = string(k)
			}
		}
	}
	if len(data) != 0 {
		return b, fmt.Errorf("%w: %d bytes after the last record", errCorruptRecords, len(data))
	}
	if kept != nil {
		// Lent: the node copies the batch out of the request frame
		// (which holds every partition's batches) as it keeps it, into
		// memory of the partition's (keptBatch.Own), so what it keeps
		// keeps nothing else alive.
		kept.raw = raw
		b.kept = kept
	}
	return b, nil
}

// headerOverhead is what each header adds to a message's size besides
// its key and value (parkway.MessageSize's framing of one header): a kept
// batch's records are counted without making their headers.
var headerOverhead = parkway.MessageSize(&parkway.Message{Headers: make([]parkway.Header, 1)})

// record is one record of a batch, read in place: its fields point into
// the batch's (inflated) records, nothing is copied or allocated. Its
// framing is what kmsg.Record.ReadFrom accepts, byte for byte (the
// fuzz target FuzzReadRecord holds the two to the same verdicts and
// fields), so a kept batch is refused or taken exactly as a batch
// decoded into messages is.
type record struct {
	tsDelta     int64
	offsetDelta int32
	key, value  []byte // nil for a negative (null) length
	// headers are the headers' encoding, nHeaders of them (each a key and
	// a value, varint-length-prefixed), already walked; headerBytes is
	// their keys' and values' bytes.
	headers     []byte
	nHeaders    int
	headerBytes int
}

// read reads the record at the start of data into r and returns what
// follows it, or false when the record's framing does not hold: its
// length prefix (a varint, like every length and delta, of at most 5
// bytes, 10 for the timestamp delta) past the bytes left, or a field past
// the record's length. Bytes after the last header and before the
// record's end are ignored, as kmsg ignores them.
func (r *record) read(data []byte) ([]byte, bool) {
	length, n := varint32(data)
	if n <= 0 || length < 0 || int64(length) > int64(len(data)-n) {
		return nil, false
	}
	body, rest := data[n:n+int(length)], data[n+int(length):]
	if len(body) < 1 { // attributes
		return nil, false
	}
	body = body[1:]
	var ok bool
	if r.tsDelta, n = varint64(body); n <= 0 {
		return nil, false
	}
	body = body[n:]
	if r.offsetDelta, n = varint32(body); n <= 0 {
		return nil, false
	}
	body = body[n:]
	if r.key, body, ok = varintBytes(body); !ok {
		return nil, false
	}
	if r.value, body, ok = varintBytes(body); !ok {
		return nil, false
	}
	count, n := varint32(body)
	// Each header takes at least a byte: a count the bytes left cannot
	// hold is refused before it is walked (as kmsg refuses it).
	if n <= 0 || int64(count) > int64(len(body)-n) {
		return nil, false
	}
	body = body[n:]
	r.headers, r.nHeaders, r.headerBytes = body, max(int(count), 0), 0
	for range r.nHeaders {
		var k, v []byte
		if k, body, ok = varintBytes(body); !ok {
			return nil, false
		}
		if v, body, ok = varintBytes(body); !ok {
			return nil, false
		}
		r.headerBytes += len(k) + len(v)
	}
	r.headers = r.headers[:len(r.headers)-len(body)]
	return rest, true
}

// nextHeader returns the first header of hs, headers a record's read
// walked, and the headers after it.
func nextHeader(hs []byte) (key, value, rest []byte) {
	key, hs, _ = varintBytes(hs)
	value, hs, _ = varintBytes(hs)
	return key, value, hs
}

// varintBytes reads a varint-length-prefixed field: nil for a negative
// length (Kafka's null), and false when the length is not a varint or
// passes the bytes left. The field's capacity ends with it.
func varintBytes(b []byte) (field, rest []byte, ok bool) {
	l, n := varint32(b)
	switch {
	case n <= 0:
		return nil, nil, false
	case l < 0:
		return nil, b[n:], true
	case int64(l) > int64(len(b)-n):
		return nil, nil, false
	}
	return b[n : n+int(l) : n+int(l)], b[n+int(l):], true
}

// varint32 decodes a zigzag varint of at most 5 bytes whose value fits
// 32 bits, as Kafka's (and kmsg's) Varint: n is the bytes read, or 0 when
// b ends first or the encoding is longer or larger.
func varint32(b []byte) (v int32, n int) {
	x, n := shortUvarint(b)
	if n == 0 {
		x, n = uvarint(b, 5, 0x0f)
	}
	return int32(uint32(x)>>1) ^ -int32(x&1), n
}

// varint64 decodes a zigzag varint of at most 10 bytes whose value fits
// 64 bits, as Kafka's Varlong: n is 0 when b ends first or the encoding is
// longer or larger.
func varint64(b []byte) (v int64, n int) {
	x, n := shortUvarint(b)
	if n == 0 {
		x, n = uvarint(b, 10, 0x01)
	}
	return int64(x>>1) ^ -int64(x&1), n
}

// shortUvarint decodes an unsigned varint of one or two bytes, the
// lengths and deltas of most records (below 8,192 once zigzagged), which
// fit every width: n is 0 when b does not start with one, and the caller
// reads it with uvarint's limits. Two bytes hold 14 bits, so neither
// width's last-byte check can apply.
func shortUvarint(b []byte) (x uint64, n int) {
	if len(b) == 0 {
		return 0, 0
	}
	if c := b[0]; c < 0x80 {
		return uint64(c), 1
	}
	if len(b) > 1 && b[1] < 0x80 {
		return uint64(b[0]&0x7f) | uint64(b[1])<<7, 2
	}
	return 0, 0
}

// uvarint decodes an unsigned varint of at most size bytes, whose last
// byte, if it comes to that, holds at most last (the bits that still fit
// the value's width): n is 0 when b ends first or the encoding does not
// fit.
func uvarint(b []byte, size int, last byte) (x uint64, n int) {
	for i := range min(len(b), size) {
		c := b[i]
		if i == size-1 {
			if c > last {
				return 0, 0
			}
			return x | uint64(c)<<(7*i), size
		}
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return x, i + 1
		}
	}
	return 0, 0
}

// inflate decompresses a batch's records with the codec its attributes
// name, into at most d.left bytes, and charges what it produced to d.left.
func (d *decoder) inflate(codec int16, src []byte) ([]byte, error) {
	var (
		out []byte
		err error
	)
	switch codec {
	case 0:
		// Not compressed: the bytes are the request frame's, which holds
		// every partition's batches. They are copied into a buffer of the
		// batch's own (one copy of the batch, not one per record), so a
		// batch the node keeps (ProduceAsyncGive) keeps only its own bytes
		// alive, never the frame and the other partitions' records with
		// it: a partition's retention would otherwise not free them.
		// Decoded to be kept encoded, the records are only read.
		out = src
		if !d.encoded {
			out = append(d.borrow(), src...)
		}
	case 1:
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(src)); err == nil {
			out, err = readLimited(zr, d.left)
		}
	case 2:
		out, err = d.unsnappy(src)
	case 3:
		out, err = readLimited(lz4.NewReader(bytes.NewReader(src)), d.left)
	case 4:
		// The decoder refuses a frame whose content or window would pass
		// its memory limit (the request limit); the check below then
		// applies the request's own remaining allowance.
		out, err = d.zstd.DecodeAll(src, d.borrow())
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrFrameSizeExceeded) {
			return nil, fmt.Errorf("%w: zstd", errRecordsTooLarge)
		}
	default:
		return nil, fmt.Errorf("%w: compression codec %d", errCorruptRecords, codec)
	}
	if err != nil {
		if errors.Is(err, errRecordsTooLarge) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: codec %d: %v", errCorruptRecords, codec, err)
	}
	if len(out) > d.left {
		return nil, fmt.Errorf("%w: %d bytes", errRecordsTooLarge, len(out))
	}
	d.left -= len(out)
	return out, nil
}

// readLimited reads r to its end, failing once it yields more than limit
// bytes: the output is never allowed to grow past the limit.
func readLimited(r io.Reader, limit int) ([]byte, error) {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if n > int64(limit) {
		return nil, fmt.Errorf("%w: more than %d bytes", errRecordsTooLarge, limit)
	}
	return buf.Bytes(), nil
}

// xerialMagic starts a snappy stream in the xerial framing the Java
// client writes: the magic, two 4-byte versions, then chunks each
// prefixed with its 4-byte length. Other clients (franz-go, librdkafka by
// default) send one raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

func (d *decoder) unsnappy(src []byte) ([]byte, error) {
	if !bytes.HasPrefix(src, xerialMagic) {
		return d.snappyBlock(d.borrow(), src)
	}
	if len(src) < 16 {
		return nil, fmt.Errorf("%w: short xerial header", errCorruptRecords)
	}
	src = src[16:]
	out := d.borrow()
	for len(src) > 0 {
		if len(src) < 4 {
			return nil, fmt.Errorf("%w: short xerial chunk", errCorruptRecords)
		}
		n := binary.BigEndian.Uint32(src)
		if int64(n) > int64(len(src)-4) {
			return nil, fmt.Errorf("%w: xerial chunk of %d bytes, %d left", errCorruptRecords, n, len(src)-4)
		}
		var err error
		if out, err = d.snappyBlock(out, src[4:4+n]); err != nil {
			return nil, err
		}
		src = src[4+n:]
	}
	return out, nil
}

// snappyBlock appends one snappy block's content to dst, refusing a block
// whose stated length passes what is left of the limit before decoding.
func (d *decoder) snappyBlock(dst, block []byte) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return nil, err
	}
	if n > d.left-len(dst) {
		return nil, fmt.Errorf("%w: snappy block of %d bytes", errRecordsTooLarge, n)
	}
	// Decoded straight into dst's spare room: decoding into a buffer of
	// its own and appending that copied every batch twice (the largest
	// cost of a produce after the partition's own copy, in the kafka
	// bench command's profile).
	grow := n
	if d.bufs != nil {
		// Grown to at least what bufPool keeps, so that the buffer goes
		// back to it: a batch smaller than that (most of a busy
		// producer's) otherwise inflated into a fresh, zeroed buffer
		// every time, a fifth of a produce's CPU in the kafka bench
		// command's profile. Without a pool the buffer is the records'
		// own, kept with them: no bigger than they are.
		grow = max(n, minPooled-len(dst))
	}
	dst = slices.Grow(dst, grow)
	out, err := snappy.Decode(dst[len(dst):len(dst)+n], block)
	if err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, fmt.Errorf("snappy block decoded to %d bytes, stated %d", len(out), n)
	}
	return dst[:len(dst)+n], nil
}

// recordsErrorCode is the Kafka error code of a refused record set.
func recordsErrorCode(err error) int16 {
	switch {
	case errors.Is(err, errRecordsTooLarge):
		return 18 // RECORD_LIST_TOO_LARGE
	case errors.Is(err, errUnsupportedMagic):
		return 43 // UNSUPPORTED_FOR_MESSAGE_FORMAT
	case errors.Is(err, errTransactional):
		return 53 // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
	case errors.Is(err, errInvalidRecords):
		return 87 // INVALID_RECORD
	}
	return 2 // CORRUPT_MESSAGE
}

// appendBatch appends msgs (dense or not, in offset order) as one record
// batch v2, uncompressed, with CreateTime timestamps in milliseconds.
//
// A fetch response is mostly these bytes, so they are written once: dst
// is grown once to a bound of the batch's size (and the scratch buffer
// of one record's encoding is made once), the header is encoded by
// kmsg with no records (it appends Records raw), each record follows it
// directly, and the header's Length is set once the records' size is
// known. Building the records in a slice of their own, grown by doubling,
// and then copying them behind the header cost a fetch of small records
// about a third of the broker's CPU.
func appendBatch(dst []byte, msgs []parkway.Message, leaderEpoch int32) []byte {
	base := msgs[0].Offset
	first := msgs[0].Timestamp / 1000
	maxTS := first
	size, largest := batchHeaderSize, 0
	for i := range msgs {
		maxTS = max(maxTS, msgs[i].Timestamp/1000)
		n := recordSizeBound(&msgs[i])
		size, largest = size+n, max(largest, n)
	}
	batch := kmsg.RecordBatch{
		FirstOffset:          int64(base),
		PartitionLeaderEpoch: leaderEpoch,
		Magic:                2,
		LastOffsetDelta:      int32(msgs[len(msgs)-1].Offset - base),
		FirstTimestamp:       first,
		MaxTimestamp:         maxTS,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(msgs)),
	}
	start := len(dst)
	dst = batch.AppendTo(slices.Grow(dst, size))
	var rec kmsg.Record
	scratch := make([]byte, 0, largest) // each record's encoding, before its length
	for i := range msgs {
		m := &msgs[i]
		rec = kmsg.Record{
			TimestampDelta64: m.Timestamp/1000 - first, OffsetDelta: int32(m.Offset - base),
			Key: m.Key, Value: m.Payload,
		}
		rec.TimestampDelta = int32(rec.TimestampDelta64)
		if len(m.Headers) > 0 {
			rec.Headers = make([]kmsg.Header, len(m.Headers))
			for j, h := range m.Headers {
				rec.Headers[j] = kmsg.Header{Key: h.Key, Value: h.Value}
			}
		}
		if rec.Value == nil {
			rec.Value = []byte{} // parkway keeps no null value: an empty one
		}
		// The record's length prefix counts what follows it: encode with a
		// zero length (one byte), then prefix the body with its length.
		scratch = rec.AppendTo(scratch[:0])
		body := scratch[1:]
		dst = binary.AppendVarint(dst, int64(len(body)))
		dst = append(dst, body...)
	}
	binary.BigEndian.PutUint32(dst[start+8:], uint32(len(dst)-start-batchLengthEnd))
	crc := crc32.Checksum(dst[start+batchCRCStart:], castagnoli)
	binary.BigEndian.PutUint32(dst[start+17:], crc)
	return dst
}

// recordSizeBound bounds the encoded size of m as a record of a batch:
// its bytes, and at most binary.MaxVarintLen64 for each varint (the
// length prefix, attributes, timestamp and offset deltas, key and value
// lengths, header count, and each header's two lengths).
func recordSizeBound(m *parkway.Message) int {
	n := len(m.Key) + len(m.Payload) + 7*binary.MaxVarintLen64
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value) + 2*binary.MaxVarintLen64
	}
	return n
}
