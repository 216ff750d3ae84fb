package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// TestConfigValidateReportsEveryProblem: Validate names each bad field,
// all at once, each wrapping ErrInvalidConfig.
func TestConfigValidateReportsEveryProblem(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("the zero Config: %v", err)
	}
	err := Config{
		AdvertisedAddr: "no-port", BrokerID: -1, DefaultPartitions: -1, DefaultReplicationFactor: -2,
		MaxRequestSize: 10, MaxInflightBytes: -1, MaxConnections: -1, IdleTimeout: -time.Second,
		RequestTimeout: -time.Second, Stream: "bad name",
	}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
	}
	for _, word := range []string{"advertised address", "broker id", "default partitions", "replication factor",
		"max request size", "in-flight bytes", "max connections", "idle timeout", "request timeout", "stream name"} {
		if !strings.Contains(err.Error(), word) {
			t.Errorf("Validate does not report the %s: %v", word, err)
		}
	}
	if err := (Config{BrokerID: 4, Brokers: map[int32]string{1: "a:1", 2: "b:70000"}}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "broker id 4") || !strings.Contains(err.Error(), "port must be") {
		t.Errorf("brokers without this node and with a bad port: %v", err)
	}
	if err := (Config{MaxRequestSize: 1 << 20, MaxInflightBytes: 1 << 10}).Validate(); err == nil {
		t.Error("a budget below one request passed Validate")
	}
	node, err := parkway.Open(parkway.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if _, err := NewServer(node, Config{BrokerID: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewServer with a bad config: %v", err)
	}
	if _, err := NewServer(nil, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewServer without a node: %v", err)
	}
}

// TestShutdownAndCloseAreIdempotent: Shutdown lets a connection's request
// finish and returns once every connection closed; Close after it, twice,
// returns at once; Serve after them refuses; no goroutine is left (the
// package's goleak check).
func TestShutdownAndCloseAreIdempotent(t *testing.T) {
	node, err := parkway.Open(parkway.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	srv, err := NewServer(node, Config{AdvertisedAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.Addr().String()), kgo.DefaultProduceTopic("t"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The advertised address is a dead port: the client reaches only the
	// seed connection, which is enough to hold a connection open.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v, want ErrServerClosed", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close after Shutdown: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close twice: %v", err)
	}
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(l2); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
}

// TestCloseEndsWaitingFetch: Close ends a fetch waiting for records
// instead of waiting out its MaxWait.
func TestCloseEndsWaitingFetch(t *testing.T) {
	f := serve(t, Config{})
	prod := f.client(t, kgo.DefaultProduceTopic("idle"), kgo.AllowAutoTopicCreation())
	if err := prod.ProduceSync(ctxFor(t), kgo.StringRecord("x")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, f.addr)
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = 12, 25_000, 1, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "idle"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes = 1, 1<<20 // the end: nothing to read yet
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	r.write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 1))
	start := time.Now()
	if err := f.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close took %v with a fetch waiting", d)
	}
}

// TestMetrics: the listener's series register beside the node's on one
// pedantic registry and count requests per API, error codes, bytes and
// connections.
func TestMetrics(t *testing.T) {
	f := serve(t, Config{MetricsLabels: prometheus.Labels{"node": "1"}})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(f.node.Metrics()); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(f.srv.Metrics()); err != nil {
		t.Fatalf("registering the listener's metrics beside the node's: %v", err)
	}
	cl := f.client(t, kgo.DefaultProduceTopic("counted"), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctxFor(t), kgo.StringRecord("x")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, f.addr)
	if code := produceRecords(r, "counted", []byte("not a batch at all")); code == 0 {
		t.Fatal("garbage records accepted")
	}
	if n := testutil.ToFloat64(f.srv.metrics.requests.WithLabelValues("Produce")); n < 2 {
		t.Errorf("Produce requests counted: %v, want at least 2", n)
	}
	if n := testutil.ToFloat64(f.srv.metrics.errors.WithLabelValues("Produce", "2")); n != 1 {
		t.Errorf("CORRUPT_MESSAGE answers counted: %v, want 1", n)
	}
	if testutil.ToFloat64(f.srv.metrics.bytesIn) == 0 || testutil.ToFloat64(f.srv.metrics.bytesOut) == 0 || testutil.ToFloat64(f.srv.metrics.connections) < 2 {
		t.Error("bytes or connections not counted")
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
}

// TestManyIdleConnections: 500 connections that send nothing are held
// (two goroutines and 16 KiB of buffers each, no CPU: each reader is
// blocked in a read) while a client is served, and Close releases them
// all (the package's goleak check).
func TestManyIdleConnections(t *testing.T) {
	f := serve(t, Config{})
	const n = 500
	for range n {
		dialRaw(t, f.addr)
	}
	f.waitConnections(t, n)
	cl := f.client(t, kgo.DefaultProduceTopic("busy"), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctxFor(t), kgo.StringRecord("served")).FirstErr(); err != nil {
		t.Fatalf("produce beside %d idle connections: %v", n, err)
	}
}

// TestEveryServedKeyHasAHandler: every API key and version ApiVersions
// announces is decoded, dispatched and answered with a response that
// encodes (a key announced without a handler would panic and close the
// connection).
func TestEveryServedKeyHasAHandler(t *testing.T) {
	node, err := parkway.Open(parkway.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	srv, err := NewServer(node, Config{RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("t"))
	for key, vr := range served {
		for v := vr.min; v <= vr.max; v++ {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			frame := formatter.AppendRequest(nil, req, 1)[4:]
			p, err := srv.process(ctxFor(t), frame, "/t", srv.newSession())
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			resp := p.finish(ctxFor(t))
			if resp == nil {
				t.Fatalf("%s v%d: no response", kmsg.NameForKey(key), v)
			}
			_ = appendResponse(nil, p.hdr, resp)
		}
	}
}

// TestBudget: a budget hands out bytes up to its total, makes the next
// taker wait until bytes are released, and lets a waiter go when its
// context ends.
func TestBudget(t *testing.T) {
	b := newBudget(10)
	if err := b.acquire(ctxFor(t), 6); err != nil {
		t.Fatal(err)
	}
	if err := b.acquire(ctxFor(t), 4); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.acquire(ctxFor(t), 5) }()
	select {
	case err := <-got:
		t.Fatalf("took 5 bytes of a spent budget: %v", err)
	default:
	}
	b.release(6)
	if err := <-got; err != nil {
		t.Fatalf("after a release: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { got <- b.acquire(ctx, 10) }()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter whose context ended: %v", err)
	}
	if want := int64(4 * DefaultMaxRequestSize); connBudget(Config{}.withDefaults()) != want {
		t.Fatalf("a connection's budget: %d, want %d", connBudget(Config{}.withDefaults()), want)
	}
}

// TestFetchSessionsDeclined: fetch sessions (KIP-227) are declined as
// the KIP allows. A fetch asking for a new session (id 0, epoch 0) is
// served in full with session id 0, "no session was created", so the
// client goes on with full fetches; one naming a session is
// FETCH_SESSION_ID_NOT_FOUND, after which a client starts over with a
// full fetch. franz-go (which asks for sessions) consumes either way.
func TestFetchSessionsDeclined(t *testing.T) {
	f := serve(t, Config{DefaultPartitions: 1})
	ctx := ctxFor(t)
	prod := f.client(t, kgo.DefaultProduceTopic("sessions"), kgo.AllowAutoTopicCreation())
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, kgo.StringRecord(fmt.Sprint(i)))
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, f.addr)
	fetch := func(id, epoch int32) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxBytes, req.SessionID, req.SessionEpoch = 12, 1<<20, id, epoch
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "sessions"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		return r.request(req).(*kmsg.FetchResponse)
	}
	resp := fetch(0, 0)
	if resp.ErrorCode != 0 || resp.SessionID != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions[0].RecordBatches) == 0 {
		t.Fatalf("a fetch asking for a session: error %d, session %d, %+v; want a full answer with no session", resp.ErrorCode, resp.SessionID, resp.Topics)
	}
	if resp := fetch(5, 1); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("a fetch naming a session: error %d, want FETCH_SESSION_ID_NOT_FOUND", resp.ErrorCode)
	}
	cons := f.client(t, kgo.ConsumeTopics("sessions"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if got := consume(t, cons, 5); len(got) != 5 {
		t.Fatalf("franz-go consumed %d records, want 5", len(got))
	}
}
