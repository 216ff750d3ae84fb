package parkway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// tlsCluster is three nodes over mutually authenticated TLS on loopback,
// with the PKI that signed their certificates, so a test can open
// another bus with a member's key (whoever holds it can speak as it).
type tlsCluster struct {
	pool  *x509.CertPool
	certs map[transport.NodeID]*tls.Certificate
	buses map[transport.NodeID]*transport.TCPBus
	nodes map[transport.NodeID]*parkway.Node
}

// newTLSCluster starts nodes 1 to 3 with opts on their buses and tune
// (if not nil) applied to their Cluster. The PKI also signs node 4,
// which is not a member of any group: a certificate the cluster's CAs
// signed is all the transport asks.
func newTLSCluster(t *testing.T, opts transport.TCPOptions, tune func(*parkway.ClusterConfig)) *tlsCluster {
	t.Helper()
	peers := []transport.NodeID{1, 2, 3}
	c := &tlsCluster{buses: map[transport.NodeID]*transport.TCPBus{}, nodes: map[transport.NodeID]*parkway.Node{}}
	c.pool, c.certs = clusterPKI(t, append(peers, 4))
	for _, id := range peers {
		o := opts
		o.TLS = &transport.TLSConfig{ClusterID: "c1", Certificate: c.certs[id], CAs: c.pool}
		b, err := transport.ListenTCP(id, "127.0.0.1:0", nil, o)
		if err != nil {
			t.Fatal(err)
		}
		c.buses[id] = b
	}
	for _, id := range peers {
		for _, p := range peers {
			if p != id {
				if err := c.buses[id].AddPeer(p, c.buses[p].Addr().String()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, id := range peers {
		cl := &parkway.ClusterConfig{ID: id, Peers: peers, Bus: c.buses[id]}
		if tune != nil {
			tune(cl)
		}
		n, err := parkway.Open(parkway.Config{Shards: 1, Cluster: cl})
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[id] = n
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.Close()
		}
	})
	return c
}

// impostor opens a bus that authenticates as member id with its key,
// able to send to the other members.
func (c *tlsCluster) impostor(t *testing.T, id transport.NodeID) *transport.TCPBus {
	t.Helper()
	peers := map[transport.NodeID]string{}
	for p, b := range c.buses {
		if p != id {
			peers[p] = b.Addr().String()
		}
	}
	b, err := transport.ListenTCP(id, "127.0.0.1:0", peers, transport.TCPOptions{
		TLS: &transport.TLSConfig{ClusterID: "c1", Certificate: c.certs[id], CAs: c.pool}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// pollUntil polls cond in real time until it holds or ctx ends.
func pollUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestBehaviour26PoisonTermRefusedOverTLS pins issue 26's poison term
// over real TLS sockets: a member's key sends node 1 and node 2 raft
// messages at term 2^62 (raft's cap) and 2^62−1 for the metadata group
// and for a partition's group — a heartbeat and a snapshot. Each used to
// be adopted and persisted, and the group never elected a leader again
// (with 2^62−1, from its next election on). Now each is refused before
// raft sees it and counted (parkway_frame_drops_total, reason
// raft_out_of_reach), the cluster goes on creating topics and
// serving, and when node 1 stops, the two others elect new leaders for
// both groups and serve.
func TestBehaviour26PoisonTermRefusedOverTLS(t *testing.T) {
	c := newTLSCluster(t, transport.TCPOptions{}, nil)
	nodes := c.nodes
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := nodes[1].Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := nodes[1].Admin().CreateTopic(ctx, s, "t", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	ns, err := metadata.NewNamespace(s.ID, tp.ID, 0)
	if err != nil {
		t.Fatal(err)
	}

	evil := c.impostor(t, 3)
	send := func(to transport.NodeID, kind uint8, group uint64, prefix []byte, m *raftpb.Message) {
		t.Helper()
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := evil.Send(transport.Message{To: to, Kind: kind, Group: group, Payload: append(prefix, b...)}); err != nil {
			t.Fatal(err)
		}
	}
	poison := []uint64{1 << 62, 1<<62 - 1}
	regs := map[transport.NodeID]*prometheus.Registry{}
	for _, to := range []transport.NodeID{1, 2} {
		regs[to] = registry(t, nodes[to])
		var epoch uint64
		pollUntil(ctx, t, fmt.Sprintf("node %d to hold the partition", to), func() bool {
			var ok bool
			epoch, ok = parkway.HeldPartitions(nodes[to])[ns]
			return ok
		})
		incarnation := binary.LittleEndian.AppendUint64(nil, epoch)
		for _, term := range poison {
			heartbeat := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(),
				From: proto.Uint64(3), To: proto.Uint64(uint64(to)), Term: proto.Uint64(term)}
			snap := &raftpb.Message{Type: raftpb.MsgSnap.Enum(),
				From: proto.Uint64(3), To: proto.Uint64(uint64(to)), Term: proto.Uint64(term),
				Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(1 << 40), Term: proto.Uint64(term),
					ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}}
			send(to, host.KindMetaRaft, uint64(metadata.MetadataNamespace), nil, heartbeat)
			send(to, parkway.KindPartitionRaft, uint64(ns), incarnation, heartbeat)
			send(to, parkway.KindPartitionRaft, uint64(ns), incarnation, snap)
		}
		// A marker behind them on the same connection, refused as invalid
		// with or without the term bound (a heartbeat without a term):
		// once it is counted, the partition's poison has been stepped.
		send(to, parkway.KindPartitionRaft, uint64(ns), incarnation, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(),
			From: proto.Uint64(3), To: proto.Uint64(uint64(to))})
	}
	for _, to := range []transport.NodeID{1, 2} {
		pollUntil(ctx, t, fmt.Sprintf("node %d to take the messages", to), func() bool {
			return metricValue(t, regs[to], "parkway_frame_drops_total", "reason", "invalid_raft_message") >= 1
		})
	}

	// The cluster serves: a topic is created (the metadata group commits),
	// the partition takes a produce through each node.
	if _, err := nodes[2].Admin().CreateTopic(ctx, s, "after", 1); err != nil {
		t.Fatalf("CreateTopic after the poison messages: %v", err)
	}
	for _, id := range []transport.NodeID{1, 2, 3} {
		if _, err := nodes[id].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte(fmt.Sprintf("after-via-%d", id))}); err != nil {
			t.Fatalf("produce via node %d after the poison messages: %v", id, err)
		}
	}

	// And it elects: node 1 (the first campaigner, so it leads the
	// metadata group) stops, with the partition's leadership if it held
	// it; nodes 2 and 3 elect and serve both groups.
	if err := nodes[1].Close(); err != nil {
		t.Fatal(err)
	}
	delete(nodes, 1)
	if _, err := nodes[2].Admin().CreateTopic(ctx, s, "after-election", 1); err != nil {
		t.Fatalf("CreateTopic after node 1 stopped: %v", err)
	}
	if _, err := nodes[3].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after-election")}); err != nil {
		t.Fatalf("produce after node 1 stopped: %v", err)
	}
	lead, err := nodes[2].Cluster().Leader(ctx, tp, 0)
	if err != nil || (lead != 2 && lead != 3) {
		t.Fatalf("partition leader %d after node 1 stopped: %v", lead, err)
	}
	for _, to := range []transport.NodeID{1, 2} {
		want := float64(3 * len(poison))
		if got := metricValue(t, regs[to], "parkway_frame_drops_total", "reason", "raft_out_of_reach"); got != want {
			t.Errorf("node %d counted %v poison messages refused, want %v", to, got, want)
		}
	}
}

// TestBehaviour26ForwardFloodHeldWithinBudgetOverTLS pins issue 26's
// memory exhaustion over real TLS sockets: node 4 (a certificate of the
// cluster, no replica) floods the partition's leader with 24 forwarded
// requests of 1 MiB each — waiting polls, so each one is held for its
// whole wait. Forwarded requests used to be held after receipt with no
// bound at all (200 produces of 16 MiB took the heap past 3 GiB). Now
// the leader holds at most MaxForwardedPeerBytes of them (measured by
// parkway_forwarded_held_bytes_peak, not the heap); every request beyond
// is answered at once with ErrRetry, and every request is answered
// exactly once.
func TestBehaviour26ForwardFloodHeldWithinBudgetOverTLS(t *testing.T) {
	const (
		peerBudget = 8 << 20
		requests   = 24
		wait       = 5 * time.Second
	)
	c := newTLSCluster(t, transport.TCPOptions{}, func(cl *parkway.ClusterConfig) {
		cl.MaxForwardedPeerBytes, cl.MaxForwardedBytes = peerBudget, 2*peerBudget
	})
	nodes := c.nodes
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := nodes[1].Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := nodes[1].Admin().CreateTopic(ctx, s, "t", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("warm")}); err != nil {
		t.Fatal(err)
	}
	lead, err := nodes[1].Cluster().Leader(ctx, tp, 0)
	if err != nil || lead == 0 {
		t.Fatalf("leader %d: %v", lead, err)
	}
	ns, err := metadata.NewNamespace(s.ID, tp.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var epoch uint64
	pollUntil(ctx, t, "the leader to hold the partition", func() bool {
		var ok bool
		epoch, ok = parkway.HeldPartitions(nodes[lead])[ns]
		return ok
	})

	reg := registry(t, nodes[lead])
	evil := c.impostor(t, 4)
	if err := c.buses[lead].AddPeer(4, evil.Addr().String()); err != nil {
		t.Fatal(err)
	}
	type reply struct {
		id  uint64
		err error
		at  time.Time
	}
	replies := make(chan reply, 2*requests)
	go func() { // ends when the impostor's bus closes
		for m := range evil.Recv() {
			if m.Kind == host.KindReply {
				r, err := host.DecodeResponse(m.Payload)
				if err != nil {
					r.Err = err
				}
				replies <- reply{m.Group, r.Err, time.Now()}
			}
		}
	}()
	pad := bytes.Repeat([]byte{'x'}, 1<<20-256)
	sent := map[uint64]time.Time{}
	for i := range requests {
		// A poll at the partition's end that waits for one message.
		req := &shard.Request{Op: shard.OpPoll, NS: ns, Epoch: epoch, Offset: 1, Count: 1, FromLeader: true,
			MaxWait: wait, MinCount: 1, Deadline: time.Now().Add(time.Minute),
			Messages: []partition.Message{{Payload: pad}}}
		payload, err := host.EncodeRequest(req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		id := uint64(i + 1)
		if err := evil.Send(transport.Message{To: lead, Kind: host.KindRequest, Group: id, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		sent[id] = time.Now()
		// The bus's queue is bounded; pace the sends so none is refused.
		pollUntil(ctx, t, "the request to leave the queue", func() bool { return evil.Stats().FramesWritten > uint64(i) })
	}
	answered := map[uint64]error{}
	retried := 0
	for len(answered) < requests {
		select {
		case r := <-replies:
			if _, dup := answered[r.id]; dup {
				t.Fatalf("request %d answered twice", r.id)
			}
			answered[r.id] = r.err
			switch took := r.at.Sub(sent[r.id]); {
			case errors.Is(r.err, parkway.ErrRetry):
				// At once: well before a held poll's wait could end.
				if retried++; took >= wait {
					t.Fatalf("request %d answered ErrRetry after %v, not at once", r.id, took)
				}
			case r.err != nil:
				t.Fatalf("request %d: %v", r.id, r.err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d requests answered", len(answered), requests)
		}
	}
	peak := metricValue(t, reg, "parkway_forwarded_held_bytes_peak")
	if peak > peerBudget || peak == 0 {
		t.Fatalf("the leader held up to %v bytes of node 4's forwarded requests, budget %d", peak, peerBudget)
	}
	refused := metricValue(t, reg, "parkway_forwarded_refused_total")
	if retried == 0 || refused != float64(retried) {
		t.Fatalf("%d requests answered ErrRetry, %v refused", retried, refused)
	}
	pollUntil(ctx, t, "the held requests to be released", func() bool {
		return metricValue(t, reg, "parkway_forwarded_held_bytes") == 0
	})
	// The partition serves on.
	if _, err := nodes[2].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
}
