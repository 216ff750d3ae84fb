package shard

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
)

// A new partition's group has its leader as soon as its replicas exist:
// the preferred leader campaigns when it builds its replica, asks for
// votes without a pre-vote round (a new group never held an election),
// and wins after one round trip — two deliveries, the votes and their
// answers — with no raft tick, whichever order the replicas are built
// in (votes that reach a replica not yet built park and are stepped when
// it is).
func TestNewGroupFirstLeaderOneRoundNoTick(t *testing.T) {
	for _, order := range [][]uint64{{1, 2, 3}, {3, 2, 1}, {2, 3, 1}, {1, 3, 2}} {
		n := newReplNet(t)
		ns, epoch := n.create("t", 1, 2, 3)
		want := preferredLeader(ns, []uint64{1, 2, 3}, false)
		var sent []raftpb.MessageType
		n.onSend = func(_ uint64, _ metadata.Namespace, m *raftpb.Message) { sent = append(sent, m.GetType()) }
		deliveries := 0
		for _, id := range order {
			n.materialise(id, ns, epoch)
			n.shard(id).settle() // the end of the pump's unit of work
			// Deliver what is in flight, one hop at a time, before the
			// next replica is built.
			for n.leader(ns) == 0 && len(n.queue) > 0 {
				q := n.queue
				n.queue = nil
				deliveries++
				for _, m := range q {
					n.shard(m.to).handle(Frame{Req: &Request{Op: OpRaft, NS: m.ns, Epoch: m.epoch, Raft: m.m}})
				}
				for id := uint64(1); id <= 3; id++ {
					n.shard(id).settle()
				}
			}
		}
		if lead := n.leader(ns); lead != want || deliveries != 2 {
			t.Fatalf("built in order %v: leader %d after %d deliveries (sent %v), want preferred leader %d after 2, no tick",
				order, lead, deliveries, sent, want)
		}
		for _, typ := range sent {
			if typ == raftpb.MessageType_MsgPreVote {
				t.Fatalf("built in order %v: the first election sent pre-votes: %v", order, sent)
			}
		}
	}
}
