package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// FuzzDecodeBatches feeds arbitrary record sets to the record-batch
// decoder: it must refuse or decode, never panic, and never inflate past
// its limit. Decoding to keep the batches as they came (a node in
// memory) must agree: the same verdict, and kept batches that decode
// (keptBatch.Decode, a native reader's) to the same messages, whose
// sizes they counted, and that a fetch hands out with a valid CRC.
func FuzzDecodeBatches(f *testing.F) {
	rec := kmsg.Record{Key: []byte("k"), Value: []byte("v"), Headers: []kmsg.Header{{Key: "h", Value: []byte("x")}}}
	one := rec.AppendTo(nil)[1:]
	recs := append(binary.AppendVarint(nil, int64(len(one))), one...)
	f.Add(batch(0, recs, 1, false))
	f.Add(append(batch(0, recs, 1, false), batch(0, recs, 1, false)...))
	f.Add(batch(0, recs, 1, true))
	f.Add(idemBatch(7, 0, 3, 4))
	f.Add([]byte{})
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<20))
	if err != nil {
		f.Fatal(err)
	}
	defer dec.Close()
	const limit = 1 << 20
	f.Fuzz(func(t *testing.T, records []byte) {
		d := decoder{zstd: dec, left: limit}
		batches, err := d.decodeBatches(records)
		var pool bufPool
		kd := decoder{zstd: dec, left: limit, encoded: true, bufs: &pool}
		kept, kerr := kd.decodeBatches(bytes.Clone(records))
		if (err == nil) != (kerr == nil) {
			t.Fatalf("decoding messages: %v; decoding to keep: %v", err, kerr)
		}
		if err != nil {
			if recordsErrorCode(err) == 0 || recordsErrorCode(kerr) == 0 {
				t.Fatalf("error %v (%v) maps to no error code", err, kerr)
			}
			return
		}
		if d.left < 0 || kd.left < 0 {
			t.Fatalf("inflated past the limit: %d, %d left", d.left, kd.left)
		}
		for i, b := range batches {
			if int32(len(b.msgs)) != b.hdr.NumRecords {
				t.Fatalf("%d messages decoded of %d", len(b.msgs), b.hdr.NumRecords)
			}
			k := kept[i].kept
			msgs, err := k.Decode()
			if err != nil || len(msgs) != len(b.msgs) || k.Len() != len(msgs) {
				t.Fatalf("kept batch %d decodes to %d messages (%v), want %d", i, len(msgs), err, len(b.msgs))
			}
			largest, total := 0, 0
			for j := range msgs {
				m, w := &msgs[j], &b.msgs[j]
				if m.Timestamp != w.Timestamp || !bytes.Equal(m.Key, w.Key) || !bytes.Equal(m.Payload, w.Payload) || len(m.Headers) != len(w.Headers) {
					t.Fatalf("kept batch %d, message %d: %+v, want %+v", i, j, m, w)
				}
				size := parkway.MessageSize(m)
				largest, total = max(largest, size), total+size
			}
			if gl, gt := k.MessageSizes(); gl != largest || gt != total {
				t.Fatalf("kept batch %d counted sizes %d, %d; its messages' are %d, %d", i, gl, gt, largest, total)
			}
			out := appendKept(nil, k, 1<<40, 7)
			var hdr kmsg.RecordBatch
			if err := hdr.ReadFrom(out); err != nil || hdr.FirstOffset != 1<<40 || hdr.PartitionLeaderEpoch != 7 || uint32(hdr.CRC) != crc32.Checksum(out[batchCRCStart:], castagnoli) {
				t.Fatalf("kept batch %d as fetched: %+v, %v", i, hdr, err)
			}
		}
	})
}

// FuzzReadRecord holds the in-place record walk the produce path trusts
// (record.read: no kmsg.Record, no copy) to kmsg's full parse of a
// record, the length prefix bounding it as decodeBatch bounds it: the
// same verdict on every input, and on an accepted record the same
// fields, the same headers (nextHeader) and the same bytes after it.
func FuzzReadRecord(f *testing.F) {
	full := kmsg.Record{TimestampDelta64: -3, OffsetDelta: 2, Key: []byte("key"), Value: []byte("value"),
		Headers: []kmsg.Header{{Key: "h1", Value: []byte("x")}, {Key: "", Value: nil}}}
	null := kmsg.Record{TimestampDelta64: math.MaxInt64}
	for _, r := range []kmsg.Record{full, null} {
		one := r.AppendTo(nil)[1:]
		enc := append(binary.AppendVarint(nil, int64(len(one))), one...)
		f.Add(enc)
		f.Add(append(enc, enc...))
		f.Add(enc[:len(enc)-1])
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0})                   // a length of 5 bytes past the end
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00})                // a 6-byte varint
	f.Add([]byte{0x14, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0}) // a key length past 32 bits
	f.Add([]byte{0x0c, 0, 0, 0, 0x01, 0, 0x03, 0, 0, 0, 0, 0})       // a null key, a header count past the end
	f.Fuzz(func(t *testing.T, data []byte) {
		var r record
		rest, ok := r.read(data)
		var want kmsg.Record
		length, k := binary.Varint(data)
		wantOK := k > 0 && length >= 0 && length <= int64(len(data)-k) && want.ReadFrom(data[:k+int(length)]) == nil
		if ok != wantOK {
			t.Fatalf("walk accepts: %v; kmsg accepts: %v (%+v)", ok, wantOK, want)
		}
		if !ok {
			return
		}
		if len(rest) != len(data)-k-int(length) {
			t.Fatalf("walk leaves %d bytes, kmsg's record leaves %d", len(rest), len(data)-k-int(length))
		}
		sameField := func(what string, got, want []byte) {
			t.Helper()
			if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
				t.Fatalf("%s %q (nil %v), kmsg %q (nil %v)", what, got, got == nil, want, want == nil)
			}
		}
		if r.tsDelta != want.TimestampDelta64 || r.offsetDelta != want.OffsetDelta {
			t.Fatalf("deltas %d, %d; kmsg %d, %d", r.tsDelta, r.offsetDelta, want.TimestampDelta64, want.OffsetDelta)
		}
		sameField("key", r.key, want.Key)
		sameField("value", r.value, want.Value)
		if r.nHeaders != len(want.Headers) {
			t.Fatalf("%d headers, kmsg %d", r.nHeaders, len(want.Headers))
		}
		size, hs := 0, r.headers
		for _, h := range want.Headers {
			var key, value []byte
			key, value, hs = nextHeader(hs)
			if string(key) != h.Key {
				t.Fatalf("header key %q, kmsg %q", key, h.Key)
			}
			sameField("header value", value, h.Value)
			size += len(key) + len(value)
		}
		if len(hs) != 0 || size != r.headerBytes {
			t.Fatalf("headers: %d bytes left, %d counted, %d read", len(hs), r.headerBytes, size)
		}
	})
}

// FuzzProcess feeds arbitrary request frames to the request dispatcher
// over an in-memory node: each is refused (the connection would close) or
// answered with a response that encodes, never a panic.
func FuzzProcess(f *testing.F) {
	node, err := parkway.Open(parkway.Config{Shards: 1})
	if err != nil {
		f.Fatal(err)
	}
	defer node.Close()
	srv, err := NewServer(node, Config{MaxRequestSize: 1 << 20, RequestTimeout: 50 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()

	formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	name := "fuzz"
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = &name
	md.Topics = append(md.Topics, mt)
	md.AllowAutoTopicCreation = true
	pr := kmsg.NewPtrProduceRequest()
	pr.Version, pr.Acks = 9, -1
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = name
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = idemBatch(5, 0, 0, 2)
	rt.Partitions = append(rt.Partitions, rp)
	pr.Topics = append(pr.Topics, rt)
	fr := kmsg.NewPtrFetchRequest()
	fr.Version, fr.MaxBytes, fr.SessionEpoch = 12, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = name
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 7
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = name
	lt.Partitions = append(lt.Partitions, kmsg.NewListOffsetsRequestTopicPartition())
	lo.Topics = append(lo.Topics, lt)
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version = 7
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "made", 2, -1
	ct.Topics = append(ct.Topics, ctt)
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "g"
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Version, oc.Group, oc.Generation = 8, "g", -1
	oct := kmsg.NewOffsetCommitRequestTopic()
	oct.Topic = name
	oct.Partitions = append(oct.Partitions, kmsg.NewOffsetCommitRequestTopicPartition())
	oc.Topics = append(oc.Topics, oct)
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Version, of.Group = 7, "g"
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID = 4, "g", "m"
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Version = 4
	dcr := kmsg.NewDescribeConfigsRequestResource()
	dcr.ResourceType, dcr.ResourceName = kmsg.ConfigResourceTypeTopic, name
	dc.Resources = append(dc.Resources, dcr)
	sh := kmsg.NewPtrSASLHandshakeRequest()
	sh.Version, sh.Mechanism = 1, "PLAIN"
	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Version, dg.Groups = 2, []string{"g", "other"}
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "g"
	odt := kmsg.NewOffsetDeleteRequestTopic()
	odt.Topic = name
	odt.Partitions = append(odt.Partitions, kmsg.NewOffsetDeleteRequestTopicPartition())
	od.Topics = append(od.Topics, odt)
	oe := kmsg.NewPtrOffsetForLeaderEpochRequest()
	oe.Version = 4
	oet := kmsg.NewOffsetForLeaderEpochRequestTopic()
	oet.Topic = name
	oep := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	oep.CurrentLeaderEpoch, oep.LeaderEpoch = 0, 0
	oet.Partitions = append(oet.Partitions, oep)
	oe.Topics = append(oe.Topics, oet)
	fs := kmsg.NewPtrFetchRequest() // a new fetch session
	fs.Version, fs.MaxBytes, fs.SessionEpoch = 13, 1<<20, 0
	fst := kmsg.NewFetchRequestTopic()
	fst.Topic = name
	fst.Partitions = append(fst.Partitions, kmsg.NewFetchRequestTopicPartition())
	fs.Topics = append(fs.Topics, fst)
	fi := kmsg.NewPtrFetchRequest() // an incremental fetch of session 1, forgetting a partition
	fi.Version, fi.MaxBytes, fi.SessionID, fi.SessionEpoch = 12, 1<<20, 1, 1
	ff := kmsg.NewFetchRequestForgottenTopic()
	ff.Topic, ff.Partitions = name, []int32{0, 1}
	fi.ForgottenTopics = append(fi.ForgottenTopics, ff)
	// KIP-848: a join, a heartbeat owning a partition, a leave, a
	// describe, and a member's commit (OffsetCommit v9).
	cj := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	cj.Version, cj.Group, cj.MemberID, cj.MemberEpoch, cj.RebalanceTimeoutMillis = 1, "cg", "member-1", 0, 60_000
	cj.SubscribedTopicNames, cj.Topics = []string{name}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	uniform := uniformAssignor
	cj.ServerAssignor = &uniform
	ch := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	ch.Version, ch.Group, ch.MemberID, ch.MemberEpoch = 1, "cg", "member-1", 2
	ch.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: [16]byte{0, 0, 0, 1, 0, 0, 0, 1}, Partitions: []int32{0, 1}}}
	cl := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	cl.Version, cl.Group, cl.MemberID, cl.MemberEpoch = 1, "cg", "member-1", -1
	cd := kmsg.NewPtrConsumerGroupDescribeRequest()
	cd.Version, cd.Groups = 1, []string{"cg", "g"}
	oc9 := kmsg.NewPtrOffsetCommitRequest()
	oc9.Version, oc9.Group, oc9.MemberID, oc9.Generation = 9, "cg", "member-1", 1
	oc9.Topics = oc.Topics
	for _, req := range []kmsg.Request{md, pr, fr, lo, ct, av, kmsg.NewPtrInitProducerIDRequest(), kmsg.NewPtrDeleteTopicsRequest(),
		fc, oc, of, hb, dc, sh, kmsg.NewPtrListGroupsRequest(), kmsg.NewPtrDescribeGroupsRequest(), dg, od, oe, fs, fi,
		cj, ch, cl, cd, oc9} {
		f.Add(formatter.AppendRequest(nil, req, 1)[4:])
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p, err := srv.process(ctx, frame, "/fuzz", srv.newSession())
		if err != nil {
			if !errors.Is(err, errMalformed) && !errors.Is(err, errUnknownKey) && !errors.Is(err, errUnsupportedVersion) && !errors.Is(err, errUnauthenticated) {
				t.Fatalf("refused with an unclassified error: %v", err)
			}
			return
		}
		resp := p.finish(ctx)
		if resp == nil {
			t.Fatal("no response")
		}
		out := appendResponse(nil, p.hdr, resp)
		if int(binary.BigEndian.Uint32(out)) != len(out)-4 {
			t.Fatal("the response's size prefix does not match its length")
		}
	})
}

// FuzzSCRAM feeds arbitrary client-first and client-final messages to
// the SCRAM server: each is refused or accepted, never a panic, and a
// final message is only accepted with the right proof (which a fuzzer
// cannot forge).
func FuzzSCRAM(f *testing.F) {
	creds, err := NewStaticCredentials(map[string]string{"alice": "wonderland"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("n,,n=alice,r=abc"), []byte("c=biws,r=abc,p=AAAA"))
	f.Add([]byte("y,a=alice,n=alice,r=x"), []byte("c=eSxhPWFsaWNlLA==,r=x,p="))
	f.Add([]byte("n,,n=al=2Cice,r="), []byte(",p="))
	f.Fuzz(func(t *testing.T, first, final []byte) {
		x, _, err := startSCRAM(context.Background(), creds, MechanismSCRAMSHA256, first)
		if err != nil {
			return
		}
		if _, err := x.finish(final); err == nil {
			t.Fatalf("a fuzzed proof was accepted: %q", final)
		}
	})
}

// FuzzDecodeGroupLog: a group log record is read from a partition any
// holder of the stream could write to. Decoding never panics, and a
// record that decodes encodes back to the same bytes (one form per
// record: nothing read is silently dropped or reinterpreted).
func FuzzDecodeGroupLog(f *testing.F) {
	for _, r := range []*logRecord{
		{kind: logMarker},
		{kind: logDelete},
		{kind: logGroup, group: logGroupState{generation: 3, protocolType: "consumer", protocol: "cooperative-sticky", leader: "m-1",
			members: []logMember{{id: "m-1", clientID: "c", clientHost: "/127.0.0.1", sessionMs: 10_000, rebalanceMs: 60_000, metadata: []byte{0, 1}, assignment: []byte("a")}}}},
		{kind: logCommit, commits: []logOffset{{tp: topicPart{"t", 2}, revision: 7, offset: 42}}},
		{kind: logCommitMeta, commits: []logOffset{{tp: topicPart{"t", 2}, revision: 7, offset: 42, metadata: "m"}, {tp: topicPart{"u", 0}, revision: 1, offset: 0}}},
		{kind: logForget, forgets: []topicPart{{"t", 0}, {"u", 1}}},
		{kind: logConsumer, consumer: logConsumerState{epoch: 5, targetEpoch: 5,
			topics: []logCTopic{{name: "t", id: [16]byte{1, 2}, parts: 3}},
			members: []logCMember{
				{id: "a", clientID: "c", clientHost: "/127.0.0.1", rebalanceMs: 60_000, epoch: 5, prevEpoch: 3, topics: []string{"t"},
					target: []topicPart{{"t", 0}, {"t", 1}}, assigned: []logAssigned{{tp: topicPart{"t", 0}, epoch: 3}}, revoking: []logAssigned{{tp: topicPart{"t", 2}, epoch: 2}}},
				{id: "b", epoch: 4, topics: []string{"t"}, target: []topicPart{{"t", 2}}},
			}}},
		{kind: logConsumer},
		{kind: logCGroup, consumer: logConsumerState{epoch: 7, targetEpoch: 6, topics: []logCTopic{{name: "t", id: [16]byte{1, 2}, parts: 3}}}},
		{kind: logCGroup},
		{kind: logCSubscribe, member: logCMember{id: "a", clientID: "c", clientHost: "/127.0.0.1", rebalanceMs: 60_000, topics: []string{"t", "u"}}},
		{kind: logCTarget, member: logCMember{id: "a", target: []topicPart{{"t", 0}, {"u", 1}}}},
		{kind: logCCurrent, member: logCMember{id: "a", epoch: 5, prevEpoch: 3,
			assigned: []logAssigned{{tp: topicPart{"t", 0}, epoch: 3}}, revoking: []logAssigned{{tp: topicPart{"t", 2}, epoch: 2}}}},
		{kind: logCGone, member: logCMember{id: "a"}},
	} {
		f.Add(encodeForFuzz(f, r))
	}
	f.Add([]byte{groupLogVersion, byte(logCommit), 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{groupLogVersion, byte(logGroup), 0, 0, 0, 1, 0xff, 0xff})
	f.Add([]byte{groupLogVersion, byte(logConsumer), 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0xff, 0xff})
	f.Add([]byte{groupLogVersion2, byte(logCCurrent), 0, 1, 'a', 0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{groupLogVersion, byte(logCTarget), 0, 1, 'a', 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeLogRecord(b)
		if err != nil {
			if !errors.Is(err, errGroupLog) {
				t.Fatalf("error %v does not match errGroupLog", err)
			}
			return
		}
		if again := encodeForFuzz(t, r); !bytes.Equal(again, b) {
			t.Fatalf("record %x decodes and encodes to %x", b, again)
		}
		// A consumer group's record applies to what a coordinator holds
		// of the group, and what that rebuilds, without a panic.
		var o groupOffsets
		o.by = map[topicPart]committed{}
		o.apply(r, 1)
		if o.consumer != nil {
			c := newCoordinator(time.Second, 10*time.Second)
			g := c.consumerGroupOf("g", 0, o.consumer, time.Unix(1000, 0))
			consumerDelta(g, o.consumer)
		}
	})
}

// encodeForFuzz encodes r; a whole consumer group record (version 1),
// which the listener no longer writes, as the listener wrote it then.
func encodeForFuzz(t testing.TB, r *logRecord) []byte {
	t.Helper()
	var b []byte
	var err error
	if r.kind == logConsumer {
		b, err = encodeConsumerV1(&r.consumer)
	} else {
		b, err = encodeLogRecord(r)
	}
	if err != nil {
		t.Fatalf("a decoded record does not encode: %v", err)
	}
	return b
}

// encodeConsumerV1 writes a whole consumer group record as the listener
// wrote it before version 2 (grouplog.go): its old logs hold them.
func encodeConsumerV1(g *logConsumerState) ([]byte, error) {
	long := func(s string) bool { return len(s) > math.MaxUint16 }
	if len(g.members) > math.MaxUint16 {
		return nil, fmt.Errorf("%w: too many members", errGroupLog)
	}
	// Its head is an epoch record's body.
	b, err := appendCGroup([]byte{groupLogVersion, byte(logConsumer)}, &logConsumerState{epoch: g.epoch, targetEpoch: g.targetEpoch, topics: g.topics})
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(g.members)))
	for _, m := range g.members {
		if long(m.id) || long(m.clientID) || long(m.clientHost) || len(m.topics) > math.MaxUint16 {
			return nil, fmt.Errorf("%w: a member field is too long", errGroupLog)
		}
		b = appendString(b, m.id)
		b = appendString(b, m.clientID)
		b = appendString(b, m.clientHost)
		b = binary.BigEndian.AppendUint32(b, m.rebalanceMs)
		b = binary.BigEndian.AppendUint32(b, uint32(m.epoch))
		b = binary.BigEndian.AppendUint32(b, uint32(m.prevEpoch))
		b = binary.BigEndian.AppendUint16(b, uint16(len(m.topics)))
		for _, t := range m.topics {
			if long(t) {
				return nil, fmt.Errorf("%w: a topic name is too long", errGroupLog)
			}
			b = appendString(b, t)
		}
		if b, err = appendParts(b, m.target, nil); err != nil {
			return nil, err
		}
		if b, err = appendHeld(b, &m); err != nil {
			return nil, err
		}
	}
	return b, nil
}
