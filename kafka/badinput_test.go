package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/parkway-io/parkway"
)

// raw is a plain TCP connection to the listener, for bytes no client
// library would send.
type raw struct {
	t  testing.TB
	nc net.Conn
}

func dialRaw(t testing.TB, addr string) *raw {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &raw{t: t, nc: nc}
}

// createTopic creates topic name with parts partitions of rf replicas
// through CreateTopics v5, failing the test on any error code.
func (r *raw) createTopic(name string, parts int32, rf int16) {
	r.t.Helper()
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 5, 60_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, parts, rf
	ct.Topics = append(ct.Topics, rt)
	if resp := r.request(ct).(*kmsg.CreateTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		r.t.Fatalf("CreateTopics %s: code %d", name, resp.Topics[0].ErrorCode)
	}
}

func (r *raw) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// request sends req with correlation id 7 and decodes the response.
func (r *raw) request(req kmsg.Request) kmsg.Response {
	r.t.Helper()
	r.write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, 7))
	body := r.read()
	if got := int32(binary.BigEndian.Uint32(body)); got != 7 {
		r.t.Fatalf("correlation id %d, want 7", got)
	}
	body = body[4:]
	if req.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) {
		body = body[1:] // the response header's empty tags
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		r.t.Fatalf("decoding the %s response: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

// read reads one response frame (without its size prefix).
func (r *raw) read() []byte {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(testTimeout))
	var size [4]byte
	if _, err := io.ReadFull(r.nc, size[:]); err != nil {
		r.t.Fatalf("reading a response: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r.nc, body); err != nil {
		r.t.Fatalf("reading a response body: %v", err)
	}
	return body
}

// expectClosed checks that the server closes the connection without
// answering.
func (r *raw) expectClosed() {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(testTimeout))
	n, err := r.nc.Read(make([]byte, 1))
	if n != 0 || err == nil {
		r.t.Fatalf("read %d bytes (%v), want the connection closed", n, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		r.t.Fatal("the connection stayed open")
	}
}

func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// batch builds a record batch v2 around records (already compressed as
// attrs says), with a correct CRC unless badCRC.
func batch(attrs int16, records []byte, n int32, badCRC bool) []byte {
	b := kmsg.RecordBatch{
		Length: int32(batchHeaderSize - batchLengthEnd + len(records)), Magic: 2, Attributes: attrs,
		LastOffsetDelta: n - 1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: n, Records: records,
	}
	out := b.AppendTo(nil)
	crc := crc32.Checksum(out[batchCRCStart:], castagnoli)
	if badCRC {
		crc++
	}
	binary.BigEndian.PutUint32(out[17:], crc)
	return out
}

// produceRecords sends a Produce v9 of one partition's records and returns
// the partition's error code.
func produceRecords(r *raw, topic string, records []byte) int16 {
	r.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := r.request(req).(*kmsg.ProduceResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

// hostileInput is one request no well-behaved client sends, each on a
// connection of its own, and the check of the listener's answer: a closed
// connection (closed names the reason counted) or an error code.
type hostileInput struct {
	name   string
	closed string // the reason counted for the close; "" when answered
	send   func(t *testing.T, r *raw, topic string)
}

// hostileInputs are the malformed, oversized and inflating requests of
// behaviour 30, for a listener with a MaxRequestSize of 64 KiB and a
// RequestTimeout of a second; those that carry records produce to topic.
func hostileInputs() []hostileInput {
	rec := kmsg.Record{Value: []byte("v")}
	one := rec.AppendTo(nil)[1:]
	recs := append(binary.AppendVarint(nil, int64(len(one))), one...)
	in := []hostileInput{
		{"oversize frame", "size", func(t *testing.T, r *raw, _ string) {
			r.write(binary.BigEndian.AppendUint32(nil, 64<<10+1)) // no body: the size alone is refused
			r.expectClosed()
		}},
		{"negative size", "size", func(t *testing.T, r *raw, _ string) {
			r.write([]byte{0xff, 0xff, 0xff, 0xff})
			r.expectClosed()
		}},
		{"garbage frame", "malformed", func(t *testing.T, r *raw, _ string) {
			r.write(frame([]byte("\x7f\x7f this is not a Kafka request")))
			r.expectClosed()
		}},
		{"unknown API key", "unknown_key", func(t *testing.T, r *raw, _ string) {
			r.write(frame([]byte{0x03, 0xe8, 0, 0, 0, 0, 0, 1, 0xff, 0xff})) // key 1000, v0, corr 1, null client id
			r.expectClosed()
		}},
		{"served key not served", "unknown_key", func(t *testing.T, r *raw, _ string) {
			req := kmsg.NewPtrDescribeACLsRequest()
			req.Version = 1
			r.write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 1))
			r.expectClosed()
		}},
		{"served key at a version below those served", "unsupported_version", func(t *testing.T, r *raw, _ string) {
			// Produce v2 carries message sets, not record batches: kmsg
			// knows its schema, the listener does not serve it.
			req := kmsg.NewPtrProduceRequest()
			req.Version, req.Acks, req.TimeoutMillis = 2, -1, 5000
			r.write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 1))
			r.expectClosed()
		}},
		{"served key at a version past those served", "unsupported_version", func(t *testing.T, r *raw, _ string) {
			// Metadata v99: no body schema exists for it; the header alone.
			r.write(frame([]byte{0, 3, 0, 99, 0, 0, 0, 1, 0xff, 0xff}))
			r.expectClosed()
		}},
		{"truncated request", "malformed", func(t *testing.T, r *raw, _ string) {
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 12
			name := "a-topic-name"
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = &name
			req.Topics = append(req.Topics, mt)
			full := kmsg.NewRequestFormatter().AppendRequest(nil, req, 1)
			cut := full[4 : len(full)-6]
			r.write(frame(cut))
			r.expectClosed()
		}},
		{"request trickled", "read", func(t *testing.T, r *raw, _ string) {
			r.write([]byte{0, 0, 0, 100, 0}) // 1 of 100 bytes, then nothing
			r.expectClosed()                 // by RequestTimeout
		}},
		{"unsupported ApiVersions", "", func(t *testing.T, r *raw, _ string) {
			req := kmsg.NewPtrApiVersionsRequest()
			req.Version = 99
			// The header alone (key, version, correlation id, null client
			// id): a version the server does not know has no body format.
			r.write(frame(kmsg.NewRequestFormatter().AppendRequest(nil, req, 7)[4 : 4+10]))
			body := r.read()
			resp := kmsg.NewPtrApiVersionsResponse()
			resp.Version = 0
			if err := resp.ReadFrom(body[4:]); err != nil {
				t.Fatalf("decoding: %v", err)
			}
			if resp.ErrorCode != errUnsupportedVersionCode || len(resp.ApiKeys) != len(served) {
				t.Fatalf("ApiVersions v99: code %d with %d keys, want %d with %d", resp.ErrorCode, len(resp.ApiKeys), errUnsupportedVersionCode, len(served))
			}
			// The connection stays usable.
			ok := kmsg.NewPtrApiVersionsRequest()
			ok.Version = 3
			ok.ClientSoftwareName, ok.ClientSoftwareVersion = "raw", "1"
			if got := r.request(ok).(*kmsg.ApiVersionsResponse); got.ErrorCode != 0 {
				t.Fatalf("ApiVersions v3 after: code %d", got.ErrorCode)
			}
		}},
		{"bad CRC", "", func(t *testing.T, r *raw, topic string) {
			if code := produceRecords(r, topic, batch(0, recs, 1, true)); code != 2 {
				t.Fatalf("bad CRC: code %d, want CORRUPT_MESSAGE (2)", code)
			}
		}},
		{"lengths that do not add up", "", func(t *testing.T, r *raw, topic string) {
			b := batch(0, recs, 1, false)
			binary.BigEndian.PutUint32(b[8:], uint32(len(b))) // claims 12 bytes more than there are
			if code := produceRecords(r, topic, b); code != 2 {
				t.Fatalf("long batch length: code %d, want CORRUPT_MESSAGE (2)", code)
			}
			if code := produceRecords(r, topic, batch(0, recs, 3, false)); code != 2 {
				t.Fatalf("3 records claimed, 1 sent: code %d, want CORRUPT_MESSAGE (2)", code)
			}
		}},
	}
	// A compressed batch of zeros, small enough to pass the 64 KiB
	// request limit and inflating far past it, in each codec: refused at
	// the limit (snappy compresses zeros only about 21:1).
	bombs := map[int16]func([]byte) []byte{
		1: func(b []byte) []byte {
			var z bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
			_, _ = zw.Write(b)
			_ = zw.Close()
			return z.Bytes()
		},
		2: func(b []byte) []byte { // xerial framing: chunks of 1 MiB
			out := append([]byte{}, xerialMagic...)
			out = append(out, 0, 0, 0, 1, 0, 0, 0, 1)
			for len(b) > 0 {
				n := min(len(b), 1<<20)
				c := snappy.Encode(nil, b[:n])
				out = binary.BigEndian.AppendUint32(out, uint32(len(c)))
				out = append(out, c...)
				b = b[n:]
			}
			return out
		},
		3: func(b []byte) []byte {
			var z bytes.Buffer
			zw := lz4.NewWriter(&z)
			_ = zw.Apply(lz4.CompressionLevelOption(lz4.Level9))
			_, _ = zw.Write(b)
			_ = zw.Close()
			return z.Bytes()
		},
		4: func(b []byte) []byte {
			zw, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
			defer zw.Close()
			return zw.EncodeAll(b, nil)
		},
	}
	for codec := int16(1); codec <= 4; codec++ {
		compress := bombs[codec]
		in = append(in, hostileInput{fmt.Sprintf("zip bomb %s", []string{"", "gzip", "snappy", "lz4", "zstd"}[codec]), "", func(t *testing.T, r *raw, topic string) {
			size := 8 << 20
			if codec == 2 {
				size = 1 << 20
			}
			bomb := compress(make([]byte, size))
			if len(bomb) > 60<<10 {
				t.Fatalf("the bomb is %d bytes compressed, over the request limit", len(bomb))
			}
			if code := produceRecords(r, topic, batch(codec, bomb, 1000, false)); code != 18 {
				t.Fatalf("zip bomb: code %d, want RECORD_LIST_TOO_LARGE (18)", code)
			}
		}})
	}
	return in
}

// TestBehaviour30HostileInput: every malformed, oversized or inflating
// request gets a Kafka error code or a closed connection, within the
// request limit, never a panic; and the listener serves well-formed
// clients afterwards.
func TestBehaviour30HostileInput(t *testing.T) {
	f := serve(t, Config{MaxRequestSize: 64 << 10, RequestTimeout: time.Second, MaxConnections: 8})
	for _, h := range hostileInputs() {
		t.Run(h.name, func(t *testing.T) {
			h.send(t, dialRaw(t, f.addr), "hostile")
			if h.closed != "" {
				f.expectClosedFor(t, h.closed)
			}
		})
	}
	t.Run("connection limit", func(t *testing.T) {
		f.waitConnections(t, 0) // the subtests' connections are gone
		var conns []*raw
		for range 8 {
			r := dialRaw(t, f.addr)
			ok := kmsg.NewPtrApiVersionsRequest()
			r.request(ok) // admitted and served
			conns = append(conns, r)
		}
		over := dialRaw(t, f.addr)
		over.expectClosed()
		_ = conns[0].nc.Close()
	})

	// Nothing of the above reached the log, and a real client is served.
	cl := f.client(t, kgo.DefaultProduceTopic("hostile"), kgo.AllowAutoTopicCreation())
	if err := waitFor(func() error { return cl.ProduceSync(ctxFor(t), kgo.StringRecord("fine")).FirstErr() }); err != nil {
		t.Fatalf("produce after the hostile input: %v", err)
	}
	h, err := f.srv.topics.lookup(ctxFor(t), "hostile")
	if err != nil {
		t.Fatalf("lookup: %v", err)
	}
	b, err := f.node.Poll(ctxFor(t), h, 0, parkway.AtFirst(), 100)
	if err != nil || len(b.Messages) != 1 || string(b.Messages[0].Payload) != "fine" {
		t.Fatalf("the log holds %d messages (%v), want only the well-formed one", len(b.Messages), err)
	}
}

// expectClosedFor checks the server counted one more connection closed
// for reason than before the subtest's: the refusal was the reason, not
// a timeout.
func (f *fixture) expectClosedFor(t *testing.T, reason string) {
	t.Helper()
	if got := testutil.ToFloat64(f.srv.metrics.closed.WithLabelValues(reason)); got < 1 {
		t.Fatalf("no connection closed for %q", reason)
	}
	f.srv.metrics.closed.Reset()
}

// waitConnections waits until the server holds n connections.
func (f *fixture) waitConnections(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		f.srv.mu.Lock()
		got := len(f.srv.conns)
		f.srv.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %d connections, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFor retries f until it succeeds or the test timeout passes: for a
// client whose connection slot frees asynchronously.
func waitFor(f func() error) error {
	deadline := time.Now().Add(testTimeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBehaviour30HostileInputLosesNoAcknowledged: records produced and
// acknowledged; then every hostile input of TestBehaviour30HostileInput
// thrown at the same listener on connections of their own (those that
// carry records at the same topic and partition) while the producer's
// next records are in flight; then a consumer on a new connection reads
// every acknowledged record exactly once, at its acknowledged offset and
// in order, and the partitions end where the last acknowledgement says:
// nothing of the hostile input was appended, nothing acknowledged lost.
func TestBehaviour30HostileInputLosesNoAcknowledged(t *testing.T) {
	f := serve(t, Config{MaxRequestSize: 64 << 10, RequestTimeout: time.Second})
	ctx := ctxFor(t)
	const topic, parts, perPhase = "acked", 2, 200
	adm := kadm.NewClient(f.client(t))
	if res, err := adm.CreateTopics(ctx, parts, -1, nil, topic); err != nil || res[topic].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res[topic].Err)
	}
	prod := f.client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var mu sync.Mutex
	acked := map[int32]map[int64]string{}
	var failed []error
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			r := &kgo.Record{Value: []byte(fmt.Sprintf("r%04d", i)), Partition: int32(i % parts)}
			prod.Produce(ctx, r, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, err)
					return
				}
				if acked[r.Partition] == nil {
					acked[r.Partition] = map[int64]string{}
				}
				if prev, dup := acked[r.Partition][r.Offset]; dup {
					failed = append(failed, fmt.Errorf("offset %d/%d acknowledged for %s and %s", r.Partition, r.Offset, prev, r.Value))
				}
				acked[r.Partition][r.Offset] = string(r.Value)
			})
		}
	}
	produce(0, perPhase)
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	produce(perPhase, 2*perPhase) // in flight while the hostile input arrives
	for _, h := range hostileInputs() {
		h.send(t, dialRaw(t, f.addr), topic)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	produce(2*perPhase, 3*perPhase) // on the producer's connection, still served
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Fatalf("produce: %v", failed)
	}

	// The listener serves a new connection.
	if got := dialRaw(t, f.addr).request(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse); got.ErrorCode != 0 {
		t.Fatalf("ApiVersions after the hostile input: code %d", got.ErrorCode)
	}
	cons := f.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := consume(t, cons, 3*perPhase)
	next := map[int32]int64{}
	for _, r := range got {
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d read after %d: out of order, repeated or a gap", r.Partition, r.Offset, next[r.Partition]-1)
		}
		next[r.Partition]++
		if want, ok := acked[r.Partition][r.Offset]; !ok || want != string(r.Value) {
			t.Fatalf("partition %d offset %d holds %q, acknowledged %q (%v)", r.Partition, r.Offset, r.Value, want, ok)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("ListEndOffsets: %v %v", err, ends.Error())
	}
	total := 0
	for p := range int32(parts) {
		total += len(acked[p])
		if e, _ := ends.Lookup(topic, p); e.Offset != int64(len(acked[p])) || next[p] != e.Offset {
			t.Fatalf("partition %d ends at %d, read to %d, %d acknowledged: something else was appended or lost", p, e.Offset, next[p], len(acked[p]))
		}
	}
	if total != 3*perPhase {
		t.Fatalf("%d records acknowledged, want %d", total, 3*perPhase)
	}
}

// TestClientNeverSendsUnsupported pins why closing the connection on an
// unknown key or an unsupported version (as Kafka's broker does) reaches
// no client that negotiated: franz-go takes the versions ApiVersions
// announced, and a request whose key the listener did not announce, or
// whose versions the client knows do not meet the announced range, fails
// in the client ("broker is too old") without a byte written; its
// connection stays open and serves the next request, and the listener
// counts no refusal.
func TestClientNeverSendsUnsupported(t *testing.T) {
	f := serve(t, Config{})
	ctx := ctxFor(t)
	cl := f.client(t)
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// A key not served: DescribeACLs.
	if _, err := kmsg.NewPtrDescribeACLsRequest().RequestWith(ctx, cl); err == nil || !strings.Contains(err.Error(), "too old") {
		t.Fatalf("DescribeACLs: %v, want the client's own broker-too-old error", err)
	}
	// Versions below those served: a client capped at Kafka 0.10.2 knows
	// CreateTopics up to v1; the listener serves it from v2.
	old := f.client(t, kgo.MaxVersions(kversion.V0_10_2()))
	if res, err := kadm.NewClient(old).CreateTopics(ctx, 1, -1, nil, "never-sent"); err == nil && res["never-sent"].Err == nil {
		t.Fatal("CreateTopics from a 0.10.2 client succeeded")
	} else if e := errors.Join(err, res["never-sent"].Err); !strings.Contains(e.Error(), "too old") {
		t.Fatalf("CreateTopics from a 0.10.2 client: %v, want the client's own broker-too-old error", e)
	}
	for _, reason := range []string{"unknown_key", "unsupported_version", "malformed"} {
		if got := testutil.ToFloat64(f.srv.metrics.closed.WithLabelValues(reason)); got != 0 {
			t.Fatalf("%v connections closed for %s", got, reason)
		}
	}
	// Both clients are still served on their connections.
	if _, err := kadm.NewClient(cl).ListTopics(ctx); err != nil {
		t.Fatalf("ListTopics after: %v", err)
	}
	if _, err := kadm.NewClient(old).ListTopics(ctx); err != nil {
		t.Fatalf("ListTopics from the 0.10.2 client after: %v", err)
	}
}
