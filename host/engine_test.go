package host_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

var t0 = time.Unix(1_700_000_000, 0)

// A manual engine starts no goroutine; a produce to a topic created a
// moment earlier parks at its owner shard (the partition is committed but
// not built) and is served, by the same engine code a Node runs, once the
// caller runs the owner's reconcile pass.
func TestManualEngineParksAndRedispatches(t *testing.T) {
	before := runtime.NumGoroutine()
	e, err := host.New(host.Config{Shards: 2, Manual: true, Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Start(); !errors.Is(err, host.ErrManual) {
		t.Fatalf("Start on a manual engine: %v, want ErrManual", err)
	}
	if got := runtime.NumGoroutine(); got > before {
		t.Fatalf("a manual engine left %d goroutines, had %d", got, before)
	}
	ctx := context.Background()
	if _, err := e.ApplyMetadata(ctx, metadata.CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	res, err := e.ApplyMetadata(ctx, metadata.CreateTopic{Stream: res0(t, e), Name: "t", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	ns := res.Created[0].NS
	owner := e.Router().Owner(ns)
	reply := make(chan shard.Response, 1)
	if _, err := e.Router().Send(ns, shard.Frame{Req: &shard.Request{Op: shard.OpProduce, NS: ns,
		Messages: []partition.Message{{Payload: []byte("x")}}}, Reply: reply}); err != nil {
		t.Fatal(err)
	}
	if !e.Shards()[owner].Step() {
		t.Fatal("the owner did not step the queued produce")
	}
	if e.Shards()[owner].Parked() != 1 {
		t.Fatalf("parked = %d, want 1 (the partition is not built yet)", e.Shards()[owner].Parked())
	}
	select {
	case r := <-reply:
		t.Fatalf("answered before materialising: %+v", r)
	default:
	}
	select {
	case <-e.Wake(owner):
	default:
		t.Fatal("the commit did not wake the owner's reconciler")
	}
	rep, err := e.Reconcilers()[owner].Reconcile(ctx)
	if err != nil || rep.Built != 1 {
		t.Fatalf("pass: %+v, %v; want one build", rep, err)
	}
	select {
	case r := <-reply:
		if r.Err != nil || r.Offset != 0 {
			t.Fatalf("re-dispatched produce: %+v", r)
		}
	default:
		t.Fatal("the parked produce was not served when its partition materialised")
	}
}

func res0(t *testing.T, e *host.Engine) uint32 {
	t.Helper()
	s, ok := e.Meta().StreamByName("s")
	if !ok {
		t.Fatal("stream s not committed")
	}
	return s.ID
}

// A started engine runs its drivers; Close answers and stops them, is
// idempotent, and a second Start after Close is refused.
func TestStartedEngineServesAndCloses(t *testing.T) {
	e, err := host.New(host.Config{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := e.ApplyMetadata(ctx, metadata.CreateStream{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	res, err = e.ApplyMetadata(ctx, metadata.CreateTopic{Stream: res.Stream, Name: "t", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Created {
		r := e.Once(ctx, &shard.Request{Op: shard.OpProduce, NS: p.NS, Messages: []partition.Message{{Payload: []byte("m")}}})
		for errors.Is(r.Err, shard.ErrRetry) { // parked past its pass bound: retry, as the client does
			r = e.Once(ctx, &shard.Request{Op: shard.OpProduce, NS: p.NS, Messages: []partition.Message{{Payload: []byte("m")}}})
		}
		if r.Err != nil {
			t.Fatalf("produce to %v: %v", p.NS, r.Err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := e.Start(); !errors.Is(err, host.ErrClosed) {
		t.Fatalf("Start after Close: %v, want ErrClosed", err)
	}
	if _, err := e.ApplyMetadata(ctx, metadata.CreateStream{Name: "x"}); !errors.Is(err, host.ErrClosed) {
		t.Fatalf("ApplyMetadata after Close: %v, want ErrClosed", err)
	}
}

// Three manual cluster engines over a manually delivered network elect a
// metadata leader and commit a proposal on every member, driven only
// through the engine's step methods; deduplication answers a re-proposal
// under the same key with the first result and changes nothing.
func TestManualClusterCommitsAndDeduplicates(t *testing.T) {
	clk := clock.NewManual(t0)
	net := transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	var engines []*host.Engine
	for _, id := range peers {
		e, err := host.New(host.Config{Shards: 1, Manual: true, Clock: clk,
			Cluster: &host.Cluster{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		engines = append(engines, e)
	}
	pump := func() {
		for range 200 {
			moved := false
			for i, e := range engines {
				if err := e.HandleMetadata(); err != nil {
					t.Fatal(err)
				}
				ep := net.Endpoint(peers[i])
				for len(ep.Recv()) > 0 {
					if err := e.Deliver(<-ep.Recv()); err != nil {
						t.Fatal(err)
					}
					moved = true
				}
			}
			if !moved {
				return
			}
		}
	}
	pump()
	if lead := engines[0].MetadataStatus().Leader; lead != 1 {
		t.Fatalf("leader = %d, want node 1 (the first peer campaigns at start)", lead)
	}
	key := engines[0].NewMetadataKey()
	ch, err := engines[0].ProposeMetadata(key, metadata.CreateStream{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	pump()
	var first host.MetadataResult
	select {
	case first = <-ch:
	default:
		t.Fatal("the proposal was not answered once committed")
	}
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	ch, err = engines[0].ProposeMetadata(key, metadata.CreateStream{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	pump()
	second := <-ch
	if second.Err != nil || second.Result.Stream != first.Result.Stream {
		t.Fatalf("re-proposal: %+v, want the first result %+v", second, first)
	}
	for i, e := range engines {
		if got := len(e.Meta().Streams()); got != 1 {
			t.Fatalf("node %d holds %d streams, want 1", i+1, got)
		}
	}
}

// Two cluster engines register their default metrics on one registry:
// each labels its series with its node id, so they do not collide.
func TestClusterMetricsCarryNodeLabel(t *testing.T) {
	net := transport.NewNetwork(transport.NetworkOptions{ManualDelivery: true})
	defer net.Close()
	peers := []transport.NodeID{1, 2}
	reg := prometheus.NewRegistry()
	for _, id := range peers {
		e, err := host.New(host.Config{Shards: 1, Manual: true,
			Cluster: &host.Cluster{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		e.Metrics().Materialised.WithLabelValues("0").Inc()
		if err := reg.Register(e.Metrics()); err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	// Unlabelled sets collide, which is why the label exists.
	if err := prometheus.NewRegistry().Register(metrics.New()); err != nil {
		t.Fatal(err)
	}
	r2 := prometheus.NewRegistry()
	_ = r2.Register(metrics.New())
	if err := r2.Register(metrics.New()); err == nil {
		t.Fatal("two unlabelled metric sets registered on one registry")
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	err := host.Config{Shards: 0, InboxSize: -1, RequestTimeout: -time.Second,
		Cluster: &host.Cluster{ID: 9}}.Validate()
	if !errors.Is(err, host.ErrInvalidConfig) {
		t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"Shards", "InboxSize", "RequestTimeout", "Cluster.ID", "Cluster.Bus"} {
		if !contains(err.Error(), want) {
			t.Errorf("Validate does not report %s: %v", want, err)
		}
	}
}

// TestConfigRefusesNodeIDsAboveReplicaIDRange: a node id is the low 32
// bits of its replicas' raft ids (internal/raftid), so a larger one would
// name another node's replica; it is refused at configuration.
func TestConfigRefusesNodeIDsAboveReplicaIDRange(t *testing.T) {
	big := transport.NodeID(1<<32 | 2)
	err := (&host.Cluster{ID: 1, Peers: []transport.NodeID{1, big}}).Validate()
	if err == nil || !contains(err.Error(), "node ids are at most") {
		t.Fatalf("Validate of peer %d: %v, want it refused", big, err)
	}
	ok := (&host.Cluster{ID: 1, Peers: []transport.NodeID{1, 1<<32 - 1}}).Validate()
	if ok != nil && contains(ok.Error(), "node ids are at most") {
		t.Fatalf("Validate of peer 2^32-1: %v", ok)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
