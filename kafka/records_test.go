package kafka

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

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
