package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// TestProduceAcksZeroAndOne: franz-go producing with acks=0 (no
// response: kgo's promise completes once the request is written) and
// acks=1 (the leader's acknowledgement), idempotence off as both
// require; every record of both reaches the partition, in order per
// producer, and the acks=1 producer's offsets are those the partition
// holds them at. A raw acks=0 produce gets no response on the wire.
func TestProduceAcksZeroAndOne(t *testing.T) {
	f := serve(t, Config{})
	ctx := ctxFor(t)
	const n = 20
	none := f.client(t, kgo.DefaultProduceTopic("acks"), kgo.AllowAutoTopicCreation(),
		kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	for i := range n {
		if err := none.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint("acks0-", i))).FirstErr(); err != nil {
			t.Fatalf("acks=0 produce %d: %v", i, err)
		}
	}
	leader := f.client(t, kgo.DefaultProduceTopic("acks"), kgo.AllowAutoTopicCreation(),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	offsets := map[string]int64{}
	for i := range n {
		v := fmt.Sprint("acks1-", i)
		r, err := leader.ProduceSync(ctx, kgo.StringRecord(v)).First()
		if err != nil {
			t.Fatalf("acks=1 produce %d: %v", i, err)
		}
		offsets[v] = r.Offset
	}
	h, err := f.srv.topics.lookup(ctx, "acks")
	if err != nil {
		t.Fatal(err)
	}
	// On the wire, acks=0 gets no response at all: the next response on
	// the connection is the next request's (correlation id 7, which
	// request checks; the produce's is 6).
	r := dialRaw(t, f.addr)
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, 0, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "acks"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = appendBatch(nil, []parkway.Message{{Timestamp: 1000, Payload: []byte("acks0-raw")}}, -1)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	r.write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, 6))
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	if resp := r.request(av).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions after an acks=0 produce: code %d", resp.ErrorCode)
	}
	// acks=0 is answered before its records land: wait for all 2n+1.
	// (A poll ends at the end of the batch holding its start: read on.)
	var msgs []parkway.Message
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(10 * time.Millisecond) {
		msgs = pollAll(t, f.node, h, 0)
		if len(msgs) >= 2*n+1 || time.Now().After(deadline) {
			break
		}
	}
	if len(msgs) != 2*n+1 {
		t.Fatalf("the partition holds %d records, want %d", len(msgs), 2*n+1)
	}
	next := map[string]int{}
	for _, m := range msgs {
		if string(m.Payload) == "acks0-raw" {
			continue
		}
		var kind string
		var i int
		if _, err := fmt.Sscanf(string(m.Payload), "acks%1s-%d", &kind, &i); err != nil {
			t.Fatalf("record %q: %v", m.Payload, err)
		}
		if i != next[kind] {
			t.Fatalf("acks=%s record %d at offset %d, want record %d", kind, i, m.Offset, next[kind])
		}
		next[kind]++
		if kind == "1" && offsets[string(m.Payload)] != int64(m.Offset) {
			t.Fatalf("%q acknowledged at offset %d, held at %d", m.Payload, offsets[string(m.Payload)], m.Offset)
		}
	}
}

// TestProduceLogAppendTimeBatch: a batch whose attributes say
// LogAppendTime carries its timestamp in MaxTimestamp, for every record
// (their deltas are the producer's and are ignored, as Kafka does).
func TestProduceLogAppendTimeBatch(t *testing.T) {
	f := serve(t, Config{})
	r := dialRaw(t, f.addr)
	const created, appended = 1_700_000_000_000, 1_700_000_123_456
	msgs := []parkway.Message{
		{Offset: 0, Timestamp: created * 1000, Payload: []byte("a")},
		{Offset: 1, Timestamp: (created + 5_000) * 1000, Payload: []byte("b")},
	}
	b := appendBatch(nil, msgs, -1)
	// Attributes and MaxTimestamp, then the CRC over them.
	binary.BigEndian.PutUint16(b[21:], attrLogAppendTime)
	binary.BigEndian.PutUint64(b[35:], appended)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[batchCRCStart:], castagnoli))
	if code := produceRecords(r, "appended", b); code != 0 {
		t.Fatalf("produce: code %d", code)
	}
	h, err := f.srv.topics.lookup(ctxFor(t), "appended")
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.node.Poll(ctxFor(t), h, 0, parkway.AtFirst(), 10)
	if err != nil || len(got.Messages) != 2 {
		t.Fatalf("poll: %d messages (%v)", len(got.Messages), err)
	}
	for _, m := range got.Messages {
		if m.Timestamp != appended*1000 {
			t.Fatalf("record %q at %d µs, want the batch's log append time %d µs", m.Payload, m.Timestamp, int64(appended*1000))
		}
	}
}

// TestListOffsetsMaxTimestamp: ListOffsets with timestamp -3 (KIP-734,
// "max timestamp") answers the last record and its timestamp; on an
// empty partition, -1 and -1.
func TestListOffsetsMaxTimestamp(t *testing.T) {
	f := serve(t, Config{})
	r := dialRaw(t, f.addr)
	list := func() kmsg.ListOffsetsResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version = 7
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "maxts"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp = listMaxTimestamp
		lt.Partitions = append(lt.Partitions, lp)
		req.Topics = append(req.Topics, lt)
		return r.request(req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 5, 10_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "maxts", 1, -1
	ct.Topics = append(ct.Topics, rt)
	if resp := r.request(ct).(*kmsg.CreateTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: code %d", resp.Topics[0].ErrorCode)
	}
	if p := list(); p.ErrorCode != 0 || p.Offset != -1 || p.Timestamp != -1 {
		t.Fatalf("empty partition: code %d offset %d timestamp %d, want -1 -1", p.ErrorCode, p.Offset, p.Timestamp)
	}
	h, err := f.srv.topics.lookup(ctxFor(t), "maxts")
	if err != nil {
		t.Fatal(err)
	}
	var last parkway.Message
	for i := range 3 {
		ack, err := f.node.Produce(ctxFor(t), h, parkway.PartitionID(0), parkway.Message{Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		last.Offset = ack.FirstOffset
	}
	b, err := f.node.Poll(ctxFor(t), h, 0, parkway.AtOffset(last.Offset), 1)
	if err != nil || len(b.Messages) != 1 {
		t.Fatalf("poll the last record: %v", err)
	}
	last = b.Messages[0]
	if p := list(); p.ErrorCode != 0 || p.Offset != int64(last.Offset) || p.Timestamp != last.Timestamp/1000 {
		t.Fatalf("max timestamp: code %d offset %d timestamp %d, want %d at %d", p.ErrorCode, p.Offset, p.Timestamp, last.Offset, last.Timestamp/1000)
	}
}

// TestListenAndServe: ListenAndServe listens on Config.Addr, advertises
// the bound address (port 0 asked), serves a client, and returns
// ErrServerClosed after a graceful Shutdown.
func TestListenAndServe(t *testing.T) {
	node, err := parkway.Open(parkway.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	srv, err := NewServer(node, Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	var addr string
	for deadline := time.Now().Add(testTimeout); addr == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ListenAndServe bound no address")
		}
		srv.mu.Lock()
		addr = srv.advertised
		srv.mu.Unlock()
	}
	r := dialRaw(t, addr)
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	if resp := r.request(req).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		t.Fatalf("ApiVersions: code %d, %d keys", resp.ErrorCode, len(resp.ApiKeys))
	}
	_ = r.nc.Close() // Shutdown waits for the connection to end
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("ListenAndServe returned %v, want ErrServerClosed", err)
	}
}

// pollAll reads a partition's messages from its start to its end, poll
// after poll (an in-memory partition answers a poll up to the end of the
// run or the kept batch holding its start).
func pollAll(t *testing.T, node *parkway.Node, h parkway.Topic, part uint32) []parkway.Message {
	t.Helper()
	var out []parkway.Message
	from := parkway.AtFirst()
	for {
		b, err := node.Poll(ctxFor(t), h, part, from, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Messages...)
		if len(b.Messages) == 0 || b.Next >= b.End {
			return out
		}
		from = parkway.AtOffset(b.Next)
	}
}
