package parkway_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// Behaviour 20 through the node's own transport receiver: a raft message
// for a partition, sent over the bus by a peer with the incarnation the
// partition had before its topic was deleted and recreated, reaches a node
// that has the new incarnation materialised — and is rejected and counted
// as stale, never stepped into the new incarnation's group.
//
// Nodes 1 and 2 run; node 3's endpoint is driven by the test. The message
// is a heartbeat at a far higher term from node 3: stepped, it would make
// the receiving replica a follower of node 3, which its Leader shows.
// Inside the bubble, synctest.Wait returns only once every goroutine is
// blocked, and no virtual time passes between the waits, so no raft tick
// and no other traffic moves the counter meanwhile.
func TestBehaviour20ClusterDeadIncarnationRejectedOverTheTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		t.Cleanup(func() { _ = net.Close() }) // after the nodes' cleanups
		peers := []transport.NodeID{1, 2, 3}
		nodes := map[transport.NodeID]*parkway.Node{}
		for _, id := range peers[:2] {
			nodes[id] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
				Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		}
		peer3 := net.Endpoint(3)
		ctx := ctxFor(t)

		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 1)
		mustProduce(t, nodes[1], tp, parkway.PartitionID(0), "dead")
		if err := nodes[1].Admin().DeleteTopic(ctx, tp); err != nil {
			t.Fatal(err)
		}
		old := tp
		tp = mustTopic(t, nodes[1], s, "t", 1)
		if tp.ID != old.ID {
			t.Fatalf("recreated topic got id %d, want %d (slab reuse)", tp.ID, old.ID)
		}
		mustProduce(t, nodes[1], tp, parkway.PartitionID(0), "live")
		// A single-partition topic's partition is created with its topic.
		dead, live := old.Revision, tp.Revision
		if dead == live {
			t.Fatalf("recreate kept created revision %d", live)
		}
		ns, err := metadata.NewNamespace(s.ID, tp.ID, 0)
		if err != nil {
			t.Fatal(err)
		}

		for _, id := range peers[:2] {
			n := nodes[id]
			waitFor(t, fmt.Sprintf("node %d to materialise the new incarnation", id), func() bool {
				got, err := localLog(n, tp)
				return err == nil && len(got) == 1 && got[0] == "live"
			})
			reg := registry(t, n)
			synctest.Wait()
			before := metricValue(t, reg, "parkway_stale_rejects_total")

			heartbeat, err := proto.Marshal(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(),
				From: proto.Uint64(3), To: proto.Uint64(uint64(id)), Term: proto.Uint64(1 << 20)})
			if err != nil {
				t.Fatal(err)
			}
			payload := append(binary.LittleEndian.AppendUint64(nil, dead), heartbeat...)
			if err := peer3.Send(transport.Message{To: id, Kind: parkway.KindPartitionRaft, Group: uint64(ns), Payload: payload}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()

			if got := metricValue(t, reg, "parkway_stale_rejects_total") - before; got != 1 {
				t.Errorf("node %d: %v stale rejects for one dead-incarnation message, want 1", id, got)
			}
			if lead, err := n.Cluster().Leader(ctx, tp, 0); err != nil || lead == 3 {
				t.Errorf("node %d: leader %d (%v): the dead incarnation's message was stepped", id, lead, err)
			}
		}
	})
}
