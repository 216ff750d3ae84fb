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
	for _, c := range []Config{
		{GroupHeartbeatInterval: -time.Second},
		{GroupHeartbeatInterval: time.Minute}, // not below the default 45 s session timeout
		{GroupHeartbeatInterval: time.Second, GroupSessionTimeout: time.Second},
		{GroupSessionTimeout: time.Hour},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "group heartbeat interval") {
			t.Errorf("heartbeat interval %v, session timeout %v: %v", c.GroupHeartbeatInterval, c.GroupSessionTimeout, err)
		}
	}
	if err := (Config{GroupHeartbeatInterval: 100 * time.Millisecond, GroupSessionTimeout: time.Second}).Validate(); err != nil {
		t.Errorf("a heartbeat interval below the session timeout: %v", err)
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
	l := listen(t, node, Config{AdvertisedAddr: "127.0.0.1:1"})
	srv := l.srv
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.addr), kgo.DefaultProduceTopic("t"), kgo.AllowAutoTopicCreation())
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
	if err := l.serveErr(); !errors.Is(err, ErrServerClosed) {
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
	req := fetchRequest("idle", 1, 1<<20) // from the end: nothing to read yet
	req.MaxWaitMillis, req.MinBytes = 25_000, 1
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
	if testutil.ToFloat64(f.srv.metrics.connections) < 2 {
		t.Error("connections not counted")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	// Bytes in and out per API, as the requests: the produce's and the
	// metadata's both ways.
	for _, name := range []string{"parkway_kafka_received_bytes_total", "parkway_kafka_sent_bytes_total"} {
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "api" {
						got[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
		for _, api := range []string{"Produce", "Metadata", "ApiVersions"} {
			if got[api] == 0 {
				t.Errorf("%s of %s: %v, want some (all: %v)", name, api, got[api], got)
			}
		}
	}
}

// TestManyIdleConnections: 1,000 connections that send nothing (issue
// 30's figure, under the default MaxConnections of 1,024) are held — two
// goroutines and 16 KiB of buffers each, no CPU: each reader is blocked
// in a read — while a client is served, and Close releases them all (the
// package's goleak check).
func TestManyIdleConnections(t *testing.T) {
	f := serve(t, Config{})
	const n = 1000
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

// TestFetchSessions: fetch sessions (KIP-227). A fetch asking for a new
// session gets one and a full answer; a fetch of the session names only
// the partitions whose offset changed and is answered only for the
// partitions with news (records, or a moved high watermark); a fetch at
// the wrong epoch is INVALID_FETCH_SESSION_EPOCH, one of an unknown
// session FETCH_SESSION_ID_NOT_FOUND; a forgotten partition is no longer
// fetched; the final epoch closes the session. franz-go (which uses
// sessions) consumes through them.
func TestFetchSessions(t *testing.T) {
	f := serve(t, Config{DefaultPartitions: 1})
	ctx := ctxFor(t)
	prod := f.client(t, kgo.DefaultProduceTopic("sessions"), kgo.AllowAutoTopicCreation())
	produce := func(n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, kgo.StringRecord(fmt.Sprint(i)))
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(5)
	r := dialRaw(t, f.addr)
	fetch := func(id, epoch int32, offset int64, forget bool) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxBytes, req.SessionID, req.SessionEpoch = 12, 1<<20, id, epoch
		if offset >= 0 {
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = "sessions"
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.PartitionMaxBytes, fp.FetchOffset = 1<<20, offset
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
		}
		if forget {
			ft := kmsg.NewFetchRequestForgottenTopic()
			ft.Topic, ft.Partitions = "sessions", []int32{0}
			req.ForgottenTopics = append(req.ForgottenTopics, ft)
		}
		return r.request(req).(*kmsg.FetchResponse)
	}
	records := func(resp *kmsg.FetchResponse) (parts, n int) {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				parts++
				var b kmsg.RecordBatch
				if len(p.RecordBatches) > 0 && b.ReadFrom(p.RecordBatches) == nil {
					n += int(b.NumRecords)
				}
			}
		}
		return parts, n
	}

	resp := fetch(0, 0, 0, false)
	if parts, n := records(resp); resp.ErrorCode != 0 || resp.SessionID == 0 || parts != 1 || n != 5 {
		t.Fatalf("a fetch asking for a session: error %d, session %d, %d partitions, %d records; want a session and all 5", resp.ErrorCode, resp.SessionID, parts, n)
	}
	id := resp.SessionID
	// The client moved to offset 5: nothing new there.
	if resp := fetch(id, 1, 5, false); resp.ErrorCode != 0 || resp.SessionID != id {
		t.Fatalf("session fetch 1: error %d, session %d", resp.ErrorCode, resp.SessionID)
	} else if parts, _ := records(resp); parts != 0 {
		t.Fatalf("session fetch 1 without news answered %d partitions", parts)
	}
	// New records: a fetch naming no partition gets them.
	produce(2)
	if resp := fetch(id, 2, -1, false); resp.ErrorCode != 0 {
		t.Fatalf("session fetch 2: error %d", resp.ErrorCode)
	} else if parts, n := records(resp); parts != 1 || n != 2 {
		t.Fatalf("session fetch 2 after 2 new records: %d partitions, %d records", parts, n)
	}
	if resp := fetch(id, 2, -1, false); resp.ErrorCode != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("a repeated epoch: error %d, want INVALID_FETCH_SESSION_EPOCH", resp.ErrorCode)
	}
	if resp := fetch(id+1000, 1, -1, false); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("an unknown session: error %d, want FETCH_SESSION_ID_NOT_FOUND", resp.ErrorCode)
	}
	// A forgotten partition is no longer fetched.
	if resp := fetch(id, 3, -1, true); resp.ErrorCode != 0 {
		t.Fatalf("session fetch 3: error %d", resp.ErrorCode)
	}
	produce(1)
	if resp := fetch(id, 4, -1, false); resp.ErrorCode != 0 {
		t.Fatalf("session fetch 4: error %d", resp.ErrorCode)
	} else if parts, _ := records(resp); parts != 0 {
		t.Fatalf("a forgotten partition answered (%d partitions)", parts)
	}
	// The final epoch closes it.
	if resp := fetch(id, -1, 0, false); resp.ErrorCode != 0 || resp.SessionID != 0 {
		t.Fatalf("a final fetch: error %d, session %d", resp.ErrorCode, resp.SessionID)
	}
	if resp := fetch(id, 5, -1, false); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("a closed session: error %d, want FETCH_SESSION_ID_NOT_FOUND", resp.ErrorCode)
	}

	cons := f.client(t, kgo.ConsumeTopics("sessions"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if got := consume(t, cons, 8); len(got) != 8 {
		t.Fatalf("franz-go consumed %d records, want 8", len(got))
	}
}

// TestFetchSessionBounds: the sessions' partitions are bounded all
// together, whatever clients send; a session that ends gives its share
// back; the least recently used session makes room for a new one.
func TestFetchSessionBounds(t *testing.T) {
	fs := newFetchSessions()
	now := time.Now()
	fill := func(s *fetchSession, n int) {
		for i := range n {
			k := sessionKey{topic: fmt.Sprint(s.id), part: int32(i)}
			s.parts[k] = &sessionPart{key: k}
		}
	}
	var held []*fetchSession
	for i := range maxSessionPartitionsTotal / maxSessionPartitions {
		s := fs.open(now.Add(time.Duration(i) * time.Millisecond))
		fill(s, maxSessionPartitions)
		if !fs.account(s) {
			t.Fatalf("session %d refused below the bound (total %d)", s.id, fs.total)
		}
		fs.release(s, true)
		held = append(held, s)
	}
	extra := fs.open(now)
	fill(extra, 1)
	if fs.account(extra) {
		t.Fatalf("a partition past the total bound was taken (total %d)", fs.total)
	}
	fs.release(extra, false)
	fs.close(held[0].id)
	again := fs.open(now.Add(time.Minute))
	fill(again, maxSessionPartitions)
	if !fs.account(again) {
		t.Fatalf("a closed session's share was not given back (total %d)", fs.total)
	}
	fs.release(again, true)
	if fs.total != maxSessionPartitionsTotal {
		t.Fatalf("total %d, want %d", fs.total, maxSessionPartitionsTotal)
	}
	// A full table evicts the least recently used session.
	for len(fs.byID) < maxFetchSessions {
		s := fs.open(now.Add(2 * time.Minute))
		fs.release(s, true)
	}
	if s := fs.open(now.Add(3 * time.Minute)); s == nil || len(fs.byID) != maxFetchSessions {
		t.Fatalf("no session made room for a new one")
	} else if _, ok := fs.byID[held[1].id]; ok {
		t.Fatalf("the least recently used session was kept")
	}
}
