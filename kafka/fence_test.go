package kafka

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

func fetchByID(r *raw, id [16]byte) int16 {
	r.t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes, req.SessionEpoch = 13, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.TopicID = id
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	resp := r.request(req).(*kmsg.FetchResponse)
	if resp.ErrorCode != 0 {
		r.t.Fatalf("fetch: top-level code %d", resp.ErrorCode)
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}

func produceByID(r *raw, id [16]byte, records []byte) int16 {
	r.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 13, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.TopicID = id
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return r.request(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
}

// TestBehaviour29TopicIDFence: a Kafka topic ID names one incarnation.
// After the topic is deleted and recreated under the same name (and, as
// slab ids are reused, the same ids) a Fetch, Produce or Metadata naming
// the old ID is refused with UNKNOWN_TOPIC_ID — even while the listener
// still holds the old handle — and nothing reaches the new topic.
func TestBehaviour29TopicIDFence(t *testing.T) {
	f := serve(t, Config{DisableAutoCreate: true})
	ctx := ctxFor(t)
	adm := kadm.NewClient(f.client(t))
	created, err := adm.CreateTopics(ctx, 1, -1, nil, "fenced")
	if err != nil || created["fenced"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, created["fenced"].Err)
	}
	oldID := [16]byte(created["fenced"].ID)
	r := dialRaw(t, f.addr)
	if code := fetchByID(r, oldID); code != 0 {
		t.Fatalf("fetch by the live ID: code %d", code)
	}
	// Delete and recreate through the node itself: the listener's cache
	// still maps the old ID to the old handle.
	old, err := f.srv.topics.lookup(ctx, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.node.Admin().DeleteTopic(ctx, old); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	recreated, err := f.node.Admin().CreateTopic(ctx, old.Stream, "fenced", 1)
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if recreated.ID != old.ID {
		t.Fatalf("the recreated topic took id %d, not the old one's %d: the test needs the ids reused", recreated.ID, old.ID)
	}
	newID := topicID(recreated)
	if newID == oldID {
		t.Fatal("the recreated topic has the old topic ID")
	}

	if code := fetchByID(r, oldID); code != 100 {
		t.Fatalf("fetch by the old ID: code %d, want UNKNOWN_TOPIC_ID (100)", code)
	}
	rec := kmsg.Record{Value: []byte("stale")}
	one := rec.AppendTo(nil)[1:]
	recs := append(binary.AppendVarint(nil, int64(len(one))), one...)
	if code := produceByID(r, oldID, batch(0, recs, 1, false)); code != 100 {
		t.Fatalf("produce by the old ID: code %d, want UNKNOWN_TOPIC_ID (100)", code)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	mt := kmsg.NewMetadataRequestTopic()
	mt.TopicID = oldID
	md.Topics = append(md.Topics, mt)
	if got := r.request(md).(*kmsg.MetadataResponse); got.Topics[0].ErrorCode != 100 {
		t.Fatalf("metadata by the old ID: code %d, want UNKNOWN_TOPIC_ID (100)", got.Topics[0].ErrorCode)
	}
	if b, err := f.node.Poll(ctx, recreated, 0, parkway.AtFirst(), 10); err != nil || len(b.Messages) != 0 {
		t.Fatalf("the new incarnation holds %d messages (%v), want none", len(b.Messages), err)
	}

	// The new ID is served.
	if code := produceByID(r, newID, batch(0, recs, 1, false)); code != 0 {
		t.Fatalf("produce by the new ID: code %d", code)
	}
	if code := fetchByID(r, newID); code != 0 {
		t.Fatalf("fetch by the new ID: code %d", code)
	}
}

// idemBatch is a one-record batch of producer (pid, epoch) at seq.
func idemBatch(pid int64, epoch int16, seq int32, n int32) []byte {
	var recs []byte
	for i := range n {
		rec := kmsg.Record{OffsetDelta: i, Value: []byte("v")}
		one := rec.AppendTo(nil)[1:]
		recs = append(binary.AppendVarint(recs, int64(len(one))), one...)
	}
	b := kmsg.RecordBatch{
		Length: int32(batchHeaderSize - batchLengthEnd + len(recs)), Magic: 2,
		LastOffsetDelta: n - 1, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq, NumRecords: n, Records: recs,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[batchCRCStart:], castagnoli))
	return out
}

func produceBase(r *raw, topic string, records []byte) (int16, int64) {
	r.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	p := r.request(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset
}

// TestIdempotentSequences: a retried batch is answered with its first
// offset and not appended again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an
// older epoch is INVALID_PRODUCER_EPOCH; transactions are refused.
func TestIdempotentSequences(t *testing.T) {
	f := serve(t, Config{})
	r := dialRaw(t, f.addr)
	init := kmsg.NewPtrInitProducerIDRequest()
	init.Version = 4
	ip := r.request(init).(*kmsg.InitProducerIDResponse)
	if ip.ErrorCode != 0 || ip.ProducerID <= 0 || ip.ProducerEpoch != 0 {
		t.Fatalf("InitProducerID: %+v", ip)
	}
	pid := ip.ProducerID
	for _, c := range []struct {
		what       string
		epoch      int16
		seq, n     int32
		code       int16
		wantOffset int64
	}{
		{"first batch", 0, 0, 2, 0, 0},
		{"its retry", 0, 0, 2, 0, 0},
		{"next batch", 0, 2, 3, 0, 2},
		{"a gap", 0, 9, 1, 45, -1},
		{"the first batch again", 0, 0, 2, 0, 0},
		{"the second batch again", 0, 2, 3, 0, 2},
		{"a new epoch not from 0", 1, 5, 1, 45, -1},
		{"a new epoch from 0", 1, 0, 1, 0, 5},
		{"the old epoch", 0, 5, 1, 47, -1},
	} {
		code, base := produceBase(r, "idem", idemBatch(pid, c.epoch, c.seq, c.n))
		if code != c.code || code == 0 && base != c.wantOffset {
			t.Fatalf("%s: code %d offset %d, want code %d offset %d", c.what, code, base, c.code, c.wantOffset)
		}
	}
	h, err := f.srv.topics.lookup(ctxFor(t), "idem")
	if err != nil {
		t.Fatal(err)
	}
	if po, err := f.node.Admin().PartitionOffsets(ctxFor(t), h, 0, ""); err != nil || po.End != 6 {
		t.Fatalf("the partition ends at %d (%v), want 6: no retry appended twice", po.End, err)
	}

	txn := kmsg.NewPtrInitProducerIDRequest()
	txn.Version = 4
	id := "txn"
	txn.TransactionalID = &id
	if got := r.request(txn).(*kmsg.InitProducerIDResponse); got.ErrorCode != 53 {
		t.Fatalf("a transactional InitProducerID: code %d, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53)", got.ErrorCode)
	}
}
