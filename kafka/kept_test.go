package kafka

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// fetchBatches fetches partition 0 of topic from offset in one request
// (no wait) with the given partition budget, and returns the batches of
// the answer, each checked against its CRC.
func fetchBatches(r *raw, topic string, offset int64, budget int32) []kmsg.RecordBatch {
	r.t.Helper()
	req := fetchRequest(topic, offset, budget)
	req.MinBytes, req.MaxBytes = 1, 64<<20
	p := r.request(req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		r.t.Fatalf("fetch: error %d", p.ErrorCode)
	}
	var out []kmsg.RecordBatch
	for b := p.RecordBatches; len(b) > 0; {
		n := batchLengthEnd + int(binary.BigEndian.Uint32(b[8:]))
		var batch kmsg.RecordBatch
		if err := batch.ReadFrom(b[:n]); err != nil {
			r.t.Fatalf("fetched batch: %v", err)
		}
		if crc := crc32.Checksum(b[batchCRCStart:n], castagnoli); crc != uint32(batch.CRC) {
			r.t.Fatalf("fetched batch at %d: CRC %08x, computed %08x", batch.FirstOffset, uint32(batch.CRC), crc)
		}
		out = append(out, batch)
		b = b[n:]
	}
	return out
}

// TestFetchHandsOutKeptBatches: a node in memory keeps each batch a
// Kafka producer sends as it came (snappy-compressed here, with the
// idempotent producer's id), and a fetch hands the stored batches back
// as they are — their compression and producer fields intact — with only
// the base offset and leader epoch written, which the CRC does not cover;
// a fetch from inside a batch gets the whole batch. A franz-go consumer
// reads every record back (from inside a batch too), a parkway Poll gets
// them as messages, and a natively produced message between the batches
// is fetched as a batch of its own.
func TestFetchHandsOutKeptBatches(t *testing.T) {
	f := serve(t, Config{DefaultPartitions: 1})
	ctx := ctxFor(t)
	prod := f.client(t, kgo.DefaultProduceTopic("kept"), kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	var want []string
	produce := func(n int) {
		t.Helper()
		recs := make([]*kgo.Record, n)
		for i := range recs {
			v := fmt.Sprintf("value-%03d", len(want))
			want = append(want, v)
			recs[i] = &kgo.Record{Key: []byte("k"), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(v)}}}
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	produce(5)
	produce(3)
	h, err := f.srv.topics.lookup(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.node.Produce(ctx, h, parkway.PartitionID(0), parkway.Message{Key: []byte("k"), Payload: []byte("value-008"), Headers: []parkway.Header{{Key: "h", Value: []byte("value-008")}}}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "value-008")
	produce(2)

	r := dialRaw(t, f.addr)
	batches := fetchBatches(r, "kept", 0, 1<<20)
	type shape struct {
		first      int64
		n          int32
		codec      int16
		idempotent bool
	}
	wantShapes := []shape{{0, 5, 2, true}, {5, 3, 2, true}, {8, 1, 0, false}, {9, 2, 2, true}}
	if len(batches) != len(wantShapes) {
		t.Fatalf("fetched %d batches, want %d", len(batches), len(wantShapes))
	}
	_, epoch := f.srv.leaderOf(ctx, h, 0)
	for i, b := range batches {
		got := shape{b.FirstOffset, b.NumRecords, b.Attributes & attrCompression, b.ProducerID >= 0}
		if got != wantShapes[i] || b.PartitionLeaderEpoch != epoch {
			t.Fatalf("batch %d: %+v, leader epoch %d; want %+v, epoch %d", i, got, b.PartitionLeaderEpoch, wantShapes[i], epoch)
		}
	}
	if mid := fetchBatches(r, "kept", 6, 1<<20); len(mid) != 3 || mid[0].FirstOffset != 5 {
		t.Fatalf("a fetch from offset 6 began with the batch at %d (%d batches), want the whole batch from 5", mid[0].FirstOffset, len(mid))
	}

	for _, from := range []int64{0, 6} {
		cons := f.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"kept": {0: kgo.NewOffset().At(from)}}))
		for i := int(from); i < len(want); {
			fs := cons.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				t.Fatalf("consume: %v", err)
			}
			fs.EachRecord(func(rec *kgo.Record) {
				if rec.Offset != int64(i) || string(rec.Value) != want[i] || string(rec.Key) != "k" || len(rec.Headers) != 1 || string(rec.Headers[0].Value) != want[i] {
					t.Fatalf("consumed from %d: record %d at offset %d: %q %q %v; want %q", from, i, rec.Offset, rec.Key, rec.Value, rec.Headers, want[i])
				}
				i++
			})
		}
	}

	msgs := pollAll(t, f.node, h, 0)
	if len(msgs) != len(want) {
		t.Fatalf("polled %d messages, want %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		if m.Offset != uint64(i) || string(m.Payload) != want[i] || string(m.Key) != "k" || len(m.Headers) != 1 || string(m.Headers[0].Value) != want[i] {
			t.Fatalf("polled message %d: offset %d %q %q %v; want %q", i, m.Offset, m.Key, m.Payload, m.Headers, want[i])
		}
	}
}

// TestKeptBatchesOutliveTheListener: a node keeps the batches a listener
// took after the listener closes (its zstd decoder with it), and a
// parkway Poll then still decodes them, whatever their codec (the records
// compress well, so the client does compress them).
func TestKeptBatchesOutliveTheListener(t *testing.T) {
	f := serve(t, Config{DefaultPartitions: 1})
	ctx := ctxFor(t)
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
	for i, c := range codecs {
		prod := f.client(t, kgo.DefaultProduceTopic("outlive"), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(c))
		if err := prod.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("codec-%d-%s", i, strings.Repeat("value", 200)))).FirstErr(); err != nil {
			t.Fatalf("produce with codec %d: %v", i, err)
		}
	}
	h, err := f.srv.topics.lookup(ctx, "outlive")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Close(); err != nil {
		t.Fatal(err)
	}
	msgs := pollAll(t, f.node, h, 0)
	if len(msgs) != len(codecs) {
		t.Fatalf("polled %d messages after the listener closed, want %d", len(msgs), len(codecs))
	}
	for i, m := range msgs {
		if want := fmt.Sprintf("codec-%d-%s", i, strings.Repeat("value", 200)); string(m.Payload) != want {
			t.Fatalf("message %d: %.20q..., want %.20q...", i, m.Payload, want)
		}
	}
}
