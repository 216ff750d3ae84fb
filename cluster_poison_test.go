package parkway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// tlsCluster is three nodes over mutually authenticated TLS on loopback,
// with the PKI that signed their certificates, so a test can open
// another bus with a member's key (whoever holds it can speak as it).
type tlsCluster struct {
	pool  *x509.CertPool
	certs map[parkway.NodeID]*tls.Certificate
	buses map[parkway.NodeID]*parkway.TCPBus
	nodes map[parkway.NodeID]*parkway.Node
}

func newTLSCluster(t *testing.T, opts parkway.TCPOptions) *tlsCluster {
	t.Helper()
	peers := []parkway.NodeID{1, 2, 3}
	c := &tlsCluster{buses: map[parkway.NodeID]*parkway.TCPBus{}, nodes: map[parkway.NodeID]*parkway.Node{}}
	c.pool, c.certs = clusterPKI(t, peers)
	for _, id := range peers {
		o := opts
		o.TLS = &parkway.TLSConfig{ClusterID: "c1", Certificate: c.certs[id], CAs: c.pool}
		b, err := parkway.ListenTCP(id, "127.0.0.1:0", nil, o)
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
		n, err := parkway.Open(parkway.Config{Shards: 1,
			Cluster: &parkway.Cluster{ID: id, Peers: peers, Bus: c.buses[id]}})
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
func (c *tlsCluster) impostor(t *testing.T, id parkway.NodeID) *parkway.TCPBus {
	t.Helper()
	peers := map[parkway.NodeID]string{}
	for p, b := range c.buses {
		if p != id {
			peers[p] = b.Addr().String()
		}
	}
	b, err := parkway.ListenTCP(id, "127.0.0.1:0", peers, parkway.TCPOptions{
		TLS: &parkway.TLSConfig{ClusterID: "c1", Certificate: c.certs[id], CAs: c.pool}})
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
	c := newTLSCluster(t, parkway.TCPOptions{})
	nodes := c.nodes
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := nodes[1].CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := nodes[1].CreateTopic(ctx, s, "t", 1)
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
	send := func(to parkway.NodeID, kind uint8, group uint64, prefix []byte, m *raftpb.Message) {
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
	regs := map[parkway.NodeID]*prometheus.Registry{}
	for _, to := range []parkway.NodeID{1, 2} {
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
	for _, to := range []parkway.NodeID{1, 2} {
		pollUntil(ctx, t, fmt.Sprintf("node %d to take the messages", to), func() bool {
			return metricValue(t, regs[to], "parkway_frame_drops_total", "reason", "invalid_raft_message") >= 1
		})
	}

	// The cluster serves: a topic is created (the metadata group commits),
	// the partition takes a produce through each node.
	if _, err := nodes[2].CreateTopic(ctx, s, "after", 1); err != nil {
		t.Fatalf("CreateTopic after the poison messages: %v", err)
	}
	for _, id := range []parkway.NodeID{1, 2, 3} {
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
	if _, err := nodes[2].CreateTopic(ctx, s, "after-election", 1); err != nil {
		t.Fatalf("CreateTopic after node 1 stopped: %v", err)
	}
	if _, err := nodes[3].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after-election")}); err != nil {
		t.Fatalf("produce after node 1 stopped: %v", err)
	}
	lead, err := nodes[2].Leader(ctx, tp, 0)
	if err != nil || (lead != 2 && lead != 3) {
		t.Fatalf("partition leader %d after node 1 stopped: %v", lead, err)
	}
	for _, to := range []parkway.NodeID{1, 2} {
		want := float64(3 * len(poison))
		if got := metricValue(t, regs[to], "parkway_frame_drops_total", "reason", "raft_out_of_reach"); got != want {
			t.Errorf("node %d counted %v poison messages refused, want %v", to, got, want)
		}
	}
}
