package kafka

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/klauspost/compress/snappy"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// TestAppendBatchDecodes reads appendBatch's output back with kmsg: two
// batches appended behind other bytes, each with its Length, CRC, header
// fields and records (non-dense offsets, a key, headers, an empty value)
// as a Kafka client reads them.
func TestAppendBatchDecodes(t *testing.T) {
	first := []parkway.Message{
		{Offset: 10, Timestamp: 5_000_000, Key: []byte("k"), Payload: []byte("one"),
			Headers: []parkway.Header{{Key: "h", Value: []byte("v")}, {Key: "e"}}},
		{Offset: 11, Timestamp: 5_003_000},
		{Offset: 14, Timestamp: 5_002_000, Payload: bytes.Repeat([]byte("x"), 300)},
	}
	second := []parkway.Message{{Offset: 15, Timestamp: 6_000_000, Payload: []byte("two")}}
	out := appendBatch([]byte("prefix"), first, 7)
	out = appendBatch(out, second, 8)
	if !bytes.HasPrefix(out, []byte("prefix")) {
		t.Fatalf("the bytes before the batch changed: %q", out[:6])
	}
	rest := out[6:]
	for _, want := range []struct {
		msgs  []parkway.Message
		epoch int32
		maxTS int64
	}{{first, 7, 5_003}, {second, 8, 6_000}} {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(rest); err != nil {
			t.Fatal(err)
		}
		end := batchLengthEnd + int(b.Length)
		if end > len(rest) {
			t.Fatalf("batch Length %d runs past the %d bytes left", b.Length, len(rest))
		}
		if got := crc32.Checksum(rest[batchCRCStart:end], castagnoli); uint32(b.CRC) != got {
			t.Fatalf("CRC %#x, the bytes sum to %#x", uint32(b.CRC), got)
		}
		base := want.msgs[0].Offset
		if b.FirstOffset != int64(base) || b.PartitionLeaderEpoch != want.epoch || b.Magic != 2 ||
			b.LastOffsetDelta != int32(want.msgs[len(want.msgs)-1].Offset-base) || b.NumRecords != int32(len(want.msgs)) ||
			b.FirstTimestamp != want.msgs[0].Timestamp/1000 || b.MaxTimestamp != want.maxTS || b.ProducerID != -1 {
			t.Fatalf("batch header %+v for %d messages from offset %d", b, len(want.msgs), base)
		}
		recs := rest[batchHeaderSize:end]
		for i, m := range want.msgs {
			n, k := binary.Varint(recs)
			if k <= 0 || int(n)+k > len(recs) {
				t.Fatalf("record %d: length %d (%d bytes) with %d bytes left", i, n, k, len(recs))
			}
			var r kmsg.Record
			if err := r.ReadFrom(recs[:k+int(n)]); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			recs = recs[k+int(n):]
			if int64(r.OffsetDelta) != int64(m.Offset-base) || r.TimestampDelta64 != m.Timestamp/1000-b.FirstTimestamp ||
				!bytes.Equal(r.Key, m.Key) || (r.Key == nil) != (m.Key == nil) || !bytes.Equal(r.Value, m.Payload) || r.Value == nil ||
				len(r.Headers) != len(m.Headers) {
				t.Fatalf("record %d reads %+v, want %+v", i, r, m)
			}
			for j, h := range m.Headers {
				if r.Headers[j].Key != h.Key || !bytes.Equal(r.Headers[j].Value, h.Value) {
					t.Fatalf("record %d header %d reads %+v, want %+v", i, j, r.Headers[j], h)
				}
			}
		}
		if len(recs) != 0 {
			t.Fatalf("%d bytes after the last record inside the batch", len(recs))
		}
		rest = rest[end:]
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes after the second batch", len(rest))
	}
}

// TestFetchEncodingAllocations pins the fetch path's allocations, which
// were a third of a catching-up consumer's broker CPU: a batch of a
// thousand small records is written into its destination grown once
// (not into a records buffer grown by doubling, then copied), and a
// fetch response of a megabyte of batches is framed into a buffer grown
// once (not from nothing by doubling). Allocation counts, not times:
// deterministic.
func TestFetchEncodingAllocations(t *testing.T) {
	msgs := make([]parkway.Message, 1000)
	for i := range msgs {
		msgs[i] = parkway.Message{Offset: uint64(i), Timestamp: int64(i) * 1000, Payload: bytes.Repeat([]byte{byte(i)}, 100)}
	}
	// The destination and the scratch buffer of one record's encoding.
	if n := testing.AllocsPerRun(20, func() { appendBatch(nil, msgs, 0) }); n > 2+raceAllocs {
		t.Errorf("appendBatch of 1,000 records: %.0f allocations, want %d", n, 2+raceAllocs)
	}
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = 12
	for range 2 {
		topic := kmsg.NewFetchResponseTopic()
		topic.Topic = "t"
		for p := range 2 {
			part := kmsg.NewFetchResponseTopicPartition()
			part.Partition = int32(p)
			part.RecordBatches = make([]byte, 256<<10)
			topic.Partitions = append(topic.Partitions, part)
		}
		resp.Topics = append(resp.Topics, topic)
	}
	h := reqHeader{key: int16(kmsg.Fetch), version: 12, flexible: true}
	if n := testing.AllocsPerRun(20, func() { appendResponse(nil, h, resp) }); n > 1+raceAllocs {
		t.Errorf("framing a 1 MiB fetch response: %.0f allocations, want %d", n, 1+raceAllocs)
	}
}

// TestBufPool: a fetch's buffers are recycled once its response is
// encoded and none is left in the response; buffers too small to be
// worth keeping are not kept.
func TestBufPool(t *testing.T) {
	var b bufPool
	b.put(make([]byte, 10, minPooled-1))
	if got := b.get(); got != nil {
		t.Fatalf("a %d-byte buffer was kept", cap(got))
	}
	resp := kmsg.NewPtrFetchResponse()
	topic := kmsg.NewFetchResponseTopic()
	part := kmsg.NewFetchResponseTopicPartition()
	part.RecordBatches = make([]byte, 100, 1<<20)
	topic.Partitions = append(topic.Partitions, part)
	resp.Topics = append(resp.Topics, topic)
	b.recycleFetch(resp)
	if p := resp.Topics[0].Partitions[0]; p.RecordBatches != nil {
		t.Fatalf("the recycled response still holds %d bytes of batches", len(p.RecordBatches))
	}
	if raceAllocs > 0 {
		return // under the race detector sync.Pool drops a random part of what it is given
	}
	if got := b.get(); cap(got) != 1<<20 || len(got) != 0 {
		t.Fatalf("got a buffer of %d/%d bytes, want the recycled 0/%d", len(got), cap(got), 1<<20)
	}
}

// TestConsumeLargeFetches: two consumers at once catch up megabytes
// (fetches of batches and frames large enough to be recycled, taken by
// the other connection's next fetch) and each reads every record as it
// was produced, exactly once.
func TestConsumeLargeFetches(t *testing.T) {
	f := serve(t, Config{DefaultPartitions: 2})
	const topic, n = "large", 8000
	prod := f.client(t, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(kgo.NoCompression()))
	value := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 512) }
	for i := range n {
		prod.Produce(ctxFor(t), &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: value(i)}, nil)
	}
	if err := prod.Flush(ctxFor(t)); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for c := range errs {
		cons := f.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		wg.Go(func() {
			seen := make(map[int]bool, n)
			ctx := ctxFor(t)
			for len(seen) < n && ctx.Err() == nil {
				fs := cons.PollFetches(ctx)
				if es := fs.Errors(); len(es) > 0 && ctx.Err() == nil {
					errs[c] = es[0].Err
					return
				}
				for _, r := range fs.Records() {
					i, err := strconv.Atoi(string(r.Key))
					if err != nil || seen[i] || !bytes.Equal(r.Value, value(i)) {
						errs[c] = fmt.Errorf("record %q at %d/%d: seen %v, value intact %v", r.Key, r.Partition, r.Offset, seen[i], bytes.Equal(r.Value, value(i)))
						return
					}
					seen[i] = true
				}
			}
			if len(seen) < n {
				errs[c] = fmt.Errorf("read %d of %d records", len(seen), n)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestDecoderRecyclesInflated: the buffer a snappy batch inflates into
// is listed for recycling and lent again once recycled; a decoder
// without a pool (the fuzz target's) lists nothing.
func TestDecoderRecyclesInflated(t *testing.T) {
	msgs := make([]parkway.Message, 1000)
	for i := range msgs {
		msgs[i] = parkway.Message{Offset: uint64(i), Timestamp: 1000, Payload: bytes.Repeat([]byte{byte(i)}, 100)}
	}
	records := appendBatch(nil, msgs, 0)[batchHeaderSize:]
	raw := batch(2, snappy.Encode(nil, records), int32(len(msgs)), false)

	var pool bufPool
	d := decoder{left: 1 << 30, bufs: &pool}
	bs, err := d.decodeBatches(raw)
	if err != nil || len(bs) != 1 || len(bs[0].msgs) != len(msgs) || !bytes.Equal(bs[0].msgs[999].Payload, msgs[999].Payload) {
		t.Fatalf("decoded %d batches (%v)", len(bs), err)
	}
	if len(d.inflated) != 1 || len(d.inflated[0]) != len(records) {
		t.Fatalf("%d inflated buffers listed, want the batch's one of %d bytes", len(d.inflated), len(records))
	}
	d.recycle()
	if d.inflated != nil {
		t.Fatal("recycle left the buffers listed")
	}
	if raceAllocs == 0 { // under the race detector sync.Pool drops a random part of what it is given
		if got := pool.get(); cap(got) < len(records) {
			t.Fatalf("the pool lends %d bytes, want the recycled buffer of at least %d", cap(got), len(records))
		}
	}
	plain := decoder{left: 1 << 30}
	if _, err := plain.decodeBatches(raw); err != nil || plain.inflated != nil {
		t.Fatalf("a decoder without a pool listed %d buffers (%v)", len(plain.inflated), err)
	}
}

// TestConcurrentCompressedProducesIntact: four producers at once send
// large snappy batches, whose inflated buffers are recycled between
// their requests once acknowledged; a consumer reads every record as it
// was produced.
func TestConcurrentCompressedProducesIntact(t *testing.T) {
	f := serve(t, Config{DefaultPartitions: 2})
	const topic, n = "compressed", 3000
	value := func(p, i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("%d-%d;", p, i)), 100) }
	const producers = 4
	var wg sync.WaitGroup
	errs := make([]error, producers)
	for p := range errs {
		prod := f.client(t, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(kgo.SnappyCompression()))
		wg.Go(func() {
			for i := range n {
				prod.Produce(ctxFor(t), &kgo.Record{Key: []byte(fmt.Sprintf("%d-%d", p, i)), Value: value(p, i)}, nil)
			}
			errs[p] = prod.Flush(ctxFor(t))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	cons := f.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	for _, r := range consume(t, cons, producers*n) {
		var p, i int
		if _, err := fmt.Sscanf(string(r.Key), "%d-%d", &p, &i); err != nil || seen[string(r.Key)] || !bytes.Equal(r.Value, value(p, i)) {
			t.Fatalf("record %q at %d/%d: seen before %v, value intact %v", r.Key, r.Partition, r.Offset, seen[string(r.Key)], err == nil && bytes.Equal(r.Value, value(p, i)))
		}
		seen[string(r.Key)] = true
	}
	if len(seen) != producers*n {
		t.Fatalf("read %d distinct records, want %d", len(seen), producers*n)
	}
}

// TestDecoderCopiesUncompressedBatch: an uncompressed batch's records are
// decoded from a copy of the batch's own, never from the request frame,
// which holds every partition's batches: a batch an in-memory node keeps
// must not keep the frame (and the other partitions' records) alive. The
// copy is lent by the pool and listed for recycling like an inflated
// batch's buffer.
func TestDecoderCopiesUncompressedBatch(t *testing.T) {
	msgs := []parkway.Message{{Timestamp: 1000, Payload: []byte("one")}, {Offset: 1, Timestamp: 1000, Payload: []byte("two")}}
	raw := appendBatch(nil, msgs, 0)
	var pool bufPool
	d := decoder{left: 1 << 20, bufs: &pool}
	bs, err := d.decodeBatches(raw)
	if err != nil || len(bs) != 1 || string(bs[0].msgs[1].Payload) != "two" {
		t.Fatalf("decoded %d batches (%v)", len(bs), err)
	}
	for i, m := range bs[0].msgs {
		p := unsafe.Pointer(unsafe.SliceData(m.Payload))
		if uintptr(p) >= uintptr(unsafe.Pointer(&raw[0])) && uintptr(p) < uintptr(unsafe.Pointer(&raw[0]))+uintptr(len(raw)) {
			t.Fatalf("record %d's payload points into the request's bytes", i)
		}
	}
	if len(d.inflated) != 1 {
		t.Fatalf("%d buffers listed for recycling, want the batch's copy", len(d.inflated))
	}
}

// TestBadBatchesRefused: each malformed batch is refused with its Kafka
// error code by the record walk, both decoding into messages (a node on
// disk) and decoding to keep the batch as it came (a node in memory, the
// walk in place), and by an in-memory node's listener on the wire; a
// well-formed batch with null keys and values and headers is taken.
func TestBadBatchesRefused(t *testing.T) {
	rec := func(r kmsg.Record) []byte {
		one := r.AppendTo(nil)[1:]
		return append(binary.AppendVarint(nil, int64(len(one))), one...)
	}
	mk := func(firstTS int64, n int32, recs ...[]byte) []byte {
		b := kmsg.RecordBatch{
			Length: int32(batchHeaderSize - batchLengthEnd + len(bytes.Join(recs, nil))), Magic: 2,
			LastOffsetDelta: n - 1, FirstTimestamp: firstTS, MaxTimestamp: firstTS,
			ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: n, Records: bytes.Join(recs, nil),
		}
		out := b.AppendTo(nil)
		binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[batchCRCStart:], castagnoli))
		return out
	}
	v := []byte("a value of some bytes")
	r0 := rec(kmsg.Record{OffsetDelta: 0, Value: v})
	r1 := rec(kmsg.Record{OffsetDelta: 1, Value: v})
	badCRC := mk(0, 1, r0)
	badCRC[len(badCRC)-1] ^= 1
	// A record whose length prefix claims one byte more than it has.
	long := append(binary.AppendVarint(nil, int64(len(r0))), r0[1:]...)
	// A key length that is continuation bytes up to the record's end.
	endless := append([]byte{0, 0, 0}, bytes.Repeat([]byte{0xff}, 8)...) // attributes, deltas, the key's "length"
	endless = append(binary.AppendVarint(nil, int64(len(endless))), endless...)
	headersPast := rec(kmsg.Record{Value: v})
	headersPast[len(headersPast)-1] = 0x7e // header count 63, no byte left
	for _, c := range []struct {
		name  string
		batch []byte
		code  int16
	}{
		{"bad CRC", badCRC, 2},
		{"count larger than the records", mk(0, 2, r0), 2},
		{"count larger than the bytes", mk(0, 100, r0), 2},
		{"record length past the end", mk(0, 1, long), 2},
		{"length varint that never ends", mk(0, 1, bytes.Repeat([]byte{0xff}, 20)), 2},
		{"key length varint that never ends", mk(0, 1, endless), 2},
		{"header count past the record", mk(0, 1, headersPast), 2},
		{"bytes after the last record", mk(0, 1, r0, []byte{0, 0}), 2},
		{"offset deltas out of order", mk(0, 2, r1, r0), 87},
		{"timestamp delta overflow", mk(1<<62, 1, rec(kmsg.Record{TimestampDelta64: math.MaxInt64, Value: v})), 87},
		{"timestamp past microseconds", mk(math.MaxInt64/1000, 1, rec(kmsg.Record{TimestampDelta64: 1, Value: v})), 87},
		{"null key and value, headers", mk(5, 2, rec(kmsg.Record{Key: nil, Value: nil, Headers: []kmsg.Header{{Key: "h", Value: nil}}}),
			rec(kmsg.Record{OffsetDelta: 1, Key: []byte("k"), Value: v, Headers: []kmsg.Header{{Key: "", Value: []byte("x")}, {Key: "h2", Value: v}}})), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, encoded := range []bool{false, true} {
				d := decoder{left: 1 << 20, encoded: encoded}
				_, err := d.decodeBatches(bytes.Clone(c.batch))
				code := int16(0)
				if err != nil {
					code = recordsErrorCode(err)
				}
				if code != c.code {
					t.Fatalf("kept as sent %v: code %d (%v), want %d", encoded, code, err, c.code)
				}
			}
		})
	}
	f := serve(t, Config{})
	r := dialRaw(t, f.addr)
	if code := produceRecords(r, "walk", mk(0, 1, r0)); code != 0 {
		t.Fatalf("a good batch: code %d", code)
	}
	if !f.node.KeepsEncoded() {
		t.Fatal("the node does not keep batches as sent: the wire cases would not reach the walk")
	}
	for _, c := range []struct {
		name  string
		batch []byte
		code  int16
	}{
		{"record length past the end", mk(0, 1, long), 2},
		{"length varint that never ends", mk(0, 1, bytes.Repeat([]byte{0xff}, 20)), 2},
		{"offset deltas out of order", mk(0, 2, r1, r0), 87},
		{"timestamp delta overflow", mk(1<<62, 1, rec(kmsg.Record{TimestampDelta64: math.MaxInt64, Value: v})), 87},
	} {
		if code := produceRecords(r, "walk", c.batch); code != c.code {
			t.Errorf("%s on the wire: code %d, want %d", c.name, code, c.code)
		}
	}
}

// TestProduceFrameReusable: once a produce's frame is free
// (pending.frameFree) nothing points into it, and the connection lends
// it to the next produce (readFrame): the frame is overwritten as soon as
// it is free after each produce, and a fetch still hands back every
// record as sent — on a node in memory (batches kept as sent: the frame
// is free once the response is computed, the node having copied them)
// and on disk (decoded into messages: free once processed), each
// uncompressed and snappy-compressed.
func TestProduceFrameReusable(t *testing.T) {
	for _, disk := range []bool{false, true} {
		cfg := parkway.Config{Shards: 1}
		if disk {
			cfg.DataDir = t.TempDir()
		}
		node, err := parkway.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := NewServer(node, Config{DefaultPartitions: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t)
		formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("t"))
		process := func(req kmsg.Request) kmsg.Response {
			t.Helper()
			frame := formatter.AppendRequest(nil, req, 1)[4:]
			p, err := srv.process(ctx, frame, "/t", srv.newSession())
			if err != nil {
				t.Fatal(err)
			}
			// The next produce's bytes, as soon as the connection would
			// lend it the frame.
			overwrite := func() {
				for i := range frame {
					frame[i] = 0xa5
				}
			}
			if lent := !p.frameFree(); lent != !disk && req.Key() == int16(kmsg.Produce) {
				t.Fatalf("disk %v: the frame lent to the node: %v", disk, lent)
			} else if !lent {
				overwrite()
				return p.finish(ctx)
			}
			resp := p.finish(ctx)
			if !p.frameFree() {
				t.Fatalf("disk %v: the frame is not free once the produce is acknowledged", disk)
			}
			overwrite()
			return resp
		}
		var want []string
		for i, attrs := range []int16{0, 2, 0, 2} {
			var recs []byte
			for j := range int32(3) {
				v := fmt.Sprintf("disk %v, batch %d, record %d", disk, i, j)
				want = append(want, v)
				one := (&kmsg.Record{OffsetDelta: j, Key: []byte("k"), Value: []byte(v),
					Headers: []kmsg.Header{{Key: "h", Value: []byte(v)}}}).AppendTo(nil)[1:]
				recs = append(binary.AppendVarint(recs, int64(len(one))), one...)
			}
			if attrs == 2 {
				recs = snappy.Encode(nil, recs)
			}
			req := kmsg.NewPtrProduceRequest()
			req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = "reuse"
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = batch(attrs, recs, 3, false)
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			if code := process(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
				t.Fatalf("disk %v, produce %d: code %d", disk, i, code)
			}
		}
		if got := node.KeepsEncoded(); got == disk {
			t.Fatalf("disk %v: the node keeps batches as sent: %v", disk, got)
		}
		fetched := process(fetchRequest("reuse", 0, 1<<20)).(*kmsg.FetchResponse).Topics[0].Partitions[0]
		d := decoder{left: 1 << 20}
		batches, err := d.decodeBatches(fetched.RecordBatches)
		if err != nil {
			t.Fatalf("disk %v: fetched batches: %v (code %d)", disk, err, fetched.ErrorCode)
		}
		var got []string
		for _, b := range batches {
			for _, m := range b.msgs {
				if string(m.Key) != "k" || len(m.Headers) != 1 || string(m.Headers[0].Value) != string(m.Payload) {
					t.Fatalf("disk %v: fetched %+v", disk, m)
				}
				got = append(got, string(m.Payload))
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("disk %v: fetched %q, want %q", disk, got, want)
		}
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		if err := node.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSmallBatchInflatesIntoPooledBuffer: a snappy batch smaller than
// what bufPool keeps, decoded to be kept as sent, inflates into a buffer
// the pool takes back (one of at least minPooled bytes), so the next
// batch's inflate allocates nothing.
func TestSmallBatchInflatesIntoPooledBuffer(t *testing.T) {
	msgs := []parkway.Message{{Timestamp: 1000, Payload: bytes.Repeat([]byte("v"), 100)}}
	records := appendBatch(nil, msgs, 0)[batchHeaderSize:]
	raw := batch(2, snappy.Encode(nil, records), 1, false)
	if raceAllocs == 0 { // under the race detector sync.Pool drops a random part of what it is given
		var pool bufPool
		d := decoder{left: 1 << 20, encoded: true, bufs: &pool}
		if _, err := d.decodeBatches(raw); err != nil {
			t.Fatal(err)
		}
		if got := pool.get(); cap(got) < minPooled {
			t.Fatalf("the pool lends %d bytes after a %d-byte inflate, want its buffer of at least %d", cap(got), len(records), minPooled)
		}
	}
}

// TestReadFramePoolsProduceFramesOnly: a produce's frame is read into a
// buffer of the server's pool (at least minPooled bytes, so the pool
// keeps it), and a buffer given back is lent to the next produce; any
// other request's frame is its own, of its size, never lent by the pool.
func TestReadFramePoolsProduceFramesOnly(t *testing.T) {
	formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("t"))
	pr := kmsg.NewPtrProduceRequest()
	pr.Version = 9
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	produce, metadata := formatter.AppendRequest(nil, pr, 1)[4:], formatter.AppendRequest(nil, md, 2)[4:]
	c := &conn{s: &Server{}}
	r := bufio.NewReader(bytes.NewReader(slices.Concat(produce, metadata, produce)))
	frame, pooled, err := c.readFrame(r, len(produce))
	if err != nil || !pooled || !bytes.Equal(frame, produce) || cap(frame) < minPooled {
		t.Fatalf("produce: pooled %v, %d bytes of %d (%v)", pooled, len(frame), cap(frame), err)
	}
	c.s.frames.put(frame)
	other, pooled, err := c.readFrame(r, len(metadata))
	if err != nil || pooled || !bytes.Equal(other, metadata) || cap(other) != len(metadata) {
		t.Fatalf("metadata: pooled %v, %d bytes of %d (%v)", pooled, len(other), cap(other), err)
	}
	again, pooled, err := c.readFrame(r, len(produce))
	if err != nil || !pooled || !bytes.Equal(again, produce) {
		t.Fatalf("second produce: pooled %v (%v)", pooled, err)
	}
	// Under the race detector sync.Pool drops a random part of what it
	// is given.
	if raceAllocs == 0 && unsafe.SliceData(again) != unsafe.SliceData(frame) {
		t.Fatal("the second produce's frame is not the buffer given back")
	}
}

// TestShortVarintsAsKafka holds the walk's one- and two-byte fast path
// (shortUvarint) to the general decoder, whose limits FuzzReadRecord holds
// to kmsg's: every input of one and two bytes, alone and followed by a
// byte, with and without a continuation bit, decodes to the same value and
// length through varint32 and varint64 as through uvarint with Kafka's
// widths, and to what encoding/binary reads where both accept it.
func TestShortVarintsAsKafka(t *testing.T) {
	check := func(b []byte) {
		t.Helper()
		x, n := uvarint(b, 5, 0x0f)
		if v, m := varint32(b); m != n || n > 0 && v != int32(uint32(x)>>1)^-int32(x&1) {
			t.Fatalf("varint32(%x) = %d, %d; want %d bytes of %d", b, v, m, n, x)
		}
		x, n = uvarint(b, 10, 0x01)
		if v, m := varint64(b); m != n || n > 0 && v != int64(x>>1)^-int64(x&1) {
			t.Fatalf("varint64(%x) = %d, %d; want %d bytes of %d", b, v, m, n, x)
		}
		if v, m := binary.Varint(b); m > 0 && m <= 2 {
			if got, k := varint64(b); k != m || got != v {
				t.Fatalf("varint64(%x) = %d, %d; encoding/binary %d, %d", b, got, k, v, m)
			}
		}
	}
	check(nil)
	for i := range 256 {
		check([]byte{byte(i)})
		for j := range 256 {
			check([]byte{byte(i), byte(j)})
			check([]byte{byte(i), byte(j), 0x01})
			check([]byte{byte(i), byte(j), 0x81})
		}
	}
}
