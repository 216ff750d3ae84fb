package shard

import (
	"errors"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// replNet steps three single-shard "nodes" (each its own metadata, router
// and store) on the test goroutine; raft messages queue and are delivered
// as OpRaft frames by settle, so every run is deterministic.
type replNet struct {
	t     *testing.T
	nodes map[uint64]*harness
	queue []queued
	cut   map[uint64]bool
}

type queued struct {
	to    uint64
	ns    metadata.Namespace
	epoch uint64
	m     *raftpb.Message
}

func newReplNet(t *testing.T) *replNet {
	n := &replNet{t: t, nodes: map[uint64]*harness{}, cut: map[uint64]bool{}}
	peers := []uint64{1, 2, 3}
	for _, id := range peers {
		n.nodes[id] = newHarness(t, 1, nil, func(c *Config) {
			c.Replication = &Replication{Node: id, Peers: peers,
				Send: func(to uint64, ns metadata.Namespace, epoch uint64, m *raftpb.Message) {
					n.queue = append(n.queue, queued{to, ns, epoch, m})
				}}
		})
	}
	return n
}

func (n *replNet) shard(id uint64) *Shard { return n.nodes[id].shards[0] }

// settle processes ready groups and delivers messages until quiet.
func (n *replNet) settle() {
	for range 10000 {
		for id := uint64(1); id <= 3; id++ {
			n.shard(id).processReady()
			n.shard(id).maybeFlush()
		}
		q := n.queue
		n.queue = nil
		if len(q) == 0 {
			return
		}
		for _, m := range q {
			if n.cut[m.to] || n.cut[m.m.GetFrom()] {
				continue
			}
			n.shard(m.to).handle(Frame{Req: &Request{Op: OpRaft, NS: m.ns, Epoch: m.epoch, Raft: m.m}})
		}
	}
	n.t.Fatal("network did not settle")
}

func (n *replNet) tick(rounds int) {
	for range rounds {
		for id := uint64(1); id <= 3; id++ {
			n.shard(id).tickRaft()
		}
		n.settle()
	}
}

// create commits the same topic on the given nodes' metadata.
func (n *replNet) create(name string, ids ...uint64) (metadata.Namespace, uint64) {
	var ns metadata.Namespace
	var rev uint64
	for _, id := range ids {
		ns, rev = n.nodes[id].topic(name)
	}
	return ns, rev
}

func (n *replNet) materialise(id uint64, ns metadata.Namespace, epoch uint64) partition.Partition {
	h := n.nodes[id]
	p := h.build(ns, epoch)
	if err := h.step(h.shards[0], opInsertOwned(p, noSync)); err != nil {
		n.t.Fatal(err)
	}
	return p
}

func (n *replNet) leader(ns metadata.Namespace) uint64 {
	for id := uint64(1); id <= 3; id++ {
		if o := n.shard(id).owned[ns]; o != nil && o.grp != nil && o.grp.IsLeader() {
			return id
		}
	}
	return 0
}

// Behaviours 20 and 21: a backup whose metadata lags parks the partition's
// raft traffic and catches up after materialising; a produce is acked only
// once a quorum has it, survives the loss of a minority, and every replica
// converges to the same log.
func TestBehaviour20LaggingBackupParksAndCatchesUp(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1, 2) // node 3's metadata has not applied it
	p1 := n.materialise(1, ns, epoch)
	p2 := n.materialise(2, ns, epoch)
	n.settle()
	n.tick(30)
	lead := n.leader(ns)
	if lead == 0 {
		t.Fatal("no leader among the two materialised replicas")
	}
	if st := n.nodes[3].inspect(n.shard(3)); st.ParkedFrames == 0 {
		t.Fatal("the lagging backup did not park the partition's raft traffic")
	}
	c := produce(ns, "first")
	n.shard(lead).handle(c.f)
	n.settle()
	if r := c.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("produce with a 2-of-3 quorum: %+v", r)
	}

	// Node 3 catches up: it applies the metadata, materialises, and the
	// parked messages are stepped.
	n.create("t", 3)
	p3 := n.materialise(3, ns, epoch)
	n.settle()
	n.tick(5)
	for id, p := range map[uint64]partition.Partition{1: p1, 2: p2, 3: p3} {
		if got := payloads(t, p); !slices.Equal(got, []string{"first"}) {
			t.Fatalf("node %d log %q after catch-up", id, got)
		}
	}

	// A follower answers "not leader" with the leader's id.
	follower := uint64(1)
	if follower == lead {
		follower = 2
	}
	f := produce(ns, "x")
	n.shard(follower).handle(f.f)
	var nl *NotLeaderError
	if r := f.answered(t); !errors.As(r.Err, &nl) || nl.Leader != lead || errors.Is(r.Err, ErrRetry) {
		t.Fatalf("produce on a follower: %v", r.Err)
	}

	// Behaviour 21: the minority side refuses writes; the majority goes on.
	for id := uint64(1); id <= 3; id++ {
		n.cut[id] = id == lead
	}
	n.tick(40)
	newLead := n.leader(ns)
	if newLead == 0 || newLead == lead {
		t.Fatalf("majority did not elect a new leader (got %d)", newLead)
	}
	m := produce(ns, "second")
	n.shard(newLead).handle(m.f)
	n.settle()
	if r := m.answered(t); r.Err != nil || r.Offset != 1 {
		t.Fatalf("produce on the majority: %+v", r)
	}
	old := produce(ns, "lost")
	n.shard(lead).handle(old.f)
	n.settle()
	if r := old.answered(t); r.Err == nil {
		t.Fatal("the cut-off old leader acknowledged a write")
	}
	n.cut = map[uint64]bool{}
	n.tick(20)
	for id := uint64(1); id <= 3; id++ {
		if got := payloads(t, map[uint64]partition.Partition{1: p1, 2: p2, 3: p3}[id]); !slices.Equal(got, []string{"first", "second"}) {
			t.Fatalf("node %d log %q after healing", id, got)
		}
	}
}

// Behaviour 20: replicated messages carry the incarnation; one addressed
// to a dead incarnation is rejected even though the partition (the new
// incarnation) is materialised.
func TestBehaviour20DeadIncarnationRejectedWhenMaterialised(t *testing.T) {
	n := newReplNet(t)
	ns, old := n.create("t", 1)
	h := n.nodes[1]
	epoch := h.recreate(ns, "t")
	n.materialise(1, ns, epoch)
	n.queue = nil
	before := h.inspect(n.shard(1))
	msg := &raftpb.Message{}
	n.shard(1).handle(Frame{Req: &Request{Op: OpRaft, NS: ns, Epoch: old, Raft: msg}})
	if got := testutilStale(h); got != 1 {
		t.Fatalf("stale rejects = %v, want 1", got)
	}
	if after := h.inspect(n.shard(1)); after.ParkedFrames != before.ParkedFrames {
		t.Fatal("dead-incarnation message parked instead of rejected")
	}
}
