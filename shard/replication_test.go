package shard

import (
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
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
	// onSend, if set, sees every message a node's shard sends (and may
	// panic, as a broken transport would).
	onSend func(from uint64, ns metadata.Namespace, m *raftpb.Message)
}

type queued struct {
	to      uint64
	ns      metadata.Namespace
	epoch   uint64
	m       *raftpb.Message
	catchUp []byte // a catch-up message instead of m (moveNet)
}

func newReplNet(t *testing.T) *replNet {
	n := &replNet{t: t, nodes: map[uint64]*harness{}, cut: map[uint64]bool{}}
	peers := []uint64{1, 2, 3}
	for _, id := range peers {
		n.nodes[id] = newHarness(t, 1, nil, func(c *Config) {
			c.Replication = &Replication{Node: id, Peers: peers,
				Send: func(to uint64, ns metadata.Namespace, epoch uint64, m *raftpb.Message) {
					if n.onSend != nil {
						n.onSend(id, ns, m)
					}
					n.queue = append(n.queue, queued{to: to, ns: ns, epoch: epoch, m: m})
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
			n.shard(id).settle()
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
			n.shard(id).rg.tickRaft()
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

// tickUntilLeader ticks until ns has a leader among the materialised
// replicas. Raft randomises election timeouts, so a split vote can take a
// few rounds; the bound only catches a group that never elects.
func (n *replNet) tickUntilLeader(ns metadata.Namespace) uint64 {
	for range 500 {
		if lead := n.leader(ns); lead != 0 {
			return lead
		}
		n.tick(1)
	}
	return 0
}

// leaderAmong returns a leader of ns other than except (0: none).
func (n *replNet) leaderAmong(ns metadata.Namespace, except uint64) uint64 {
	for id := uint64(1); id <= 3; id++ {
		if o := n.shard(id).owned[ns]; id != except && o != nil && o.rep.grp != nil && o.rep.grp.IsLeader() {
			return id
		}
	}
	return 0
}

func (n *replNet) leader(ns metadata.Namespace) uint64 {
	for id := uint64(1); id <= 3; id++ {
		if o := n.shard(id).owned[ns]; o != nil && o.rep.grp != nil && o.rep.grp.IsLeader() {
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
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader among the two materialised replicas")
	}
	n.tick(30) // heartbeats reach the lagging backup, which parks them
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
	var newLead uint64
	for range 500 { // until the majority elects someone other than the cut-off leader
		n.tick(1)
		if l := n.leaderAmong(ns, lead); l != 0 {
			newLead = l
			break
		}
	}
	n.tick(40) // long enough for the cut-off leader to step down (CheckQuorum)
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

// Behaviour 18 on a replicated partition: while its group has no leader
// yet (here: the only materialised replica cannot win an election), a
// write and a leader read are answered "retry here shortly" — ErrRetry,
// counted as a no-leader deny — never "not leader", which would send the
// client elsewhere with no one to go to.
func TestBehaviour18NoLeaderYetIsRetryHereNotNotLeader(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1)
	n.materialise(1, ns, epoch)
	n.tick(30) // elections time out: the other replicas have not materialised
	s := n.shard(1)
	if lead := s.owned[ns].rep.grp.Leader(); lead != 0 {
		t.Fatalf("group has leader %d with one replica of three", lead)
	}
	calls := []call{produce(ns, "x"), request(ns, &Request{Op: OpPoll, Count: 1, FromLeader: true})}
	for _, c := range calls {
		s.handle(c.f)
	}
	n.settle()
	for _, c := range calls {
		r := c.answered(t)
		var nl *NotLeaderError
		if !errors.Is(r.Err, ErrRetry) || errors.Is(r.Err, ErrNotLeader) || errors.As(r.Err, &nl) {
			t.Fatalf("%v with no leader: answer %v, want retry here (ErrRetry), not not-leader", c.f.Req.Op, r.Err)
		}
	}
	if got := testutil.ToFloat64(n.nodes[1].m.TransientDenies.WithLabelValues("0", metrics.DenyNoLeader)); got != 2 {
		t.Fatalf("no-leader denies = %v, want 2", got)
	}
}

// Behaviour 18 for reads: a leader read still waiting for its leadership
// confirmation when a new leader takes over is answered "not leader" with
// that node's id — the client follows it — not "retry here".
func TestBehaviour18PendingLeaderReadFollowsTheNewLeader(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1, 2, 3)
	for id := uint64(1); id <= 3; id++ {
		n.materialise(id, ns, epoch)
	}
	n.settle()
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	s := n.shard(lead)
	read := request(ns, &Request{Op: OpPoll, Count: 1, FromLeader: true})
	s.handle(read.f) // waits for a heartbeat round that has not happened
	read.pending(t)
	peer := lead%3 + 1
	s.handle(Frame{Req: &Request{Op: OpRaft, NS: ns, Epoch: epoch,
		Raft: &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(peer), To: proto.Uint64(lead), Term: proto.Uint64(1000)}}})
	s.settle()
	var nl *NotLeaderError
	if r := read.answered(t); !errors.As(r.Err, &nl) || nl.Leader != peer || errors.Is(r.Err, ErrRetry) {
		t.Fatalf("leader read pending when node %d took over: %v, want not leader (node %d)", peer, r.Err, peer)
	}
}

// A partition's preferred leader — Peers[namespace mod len(Peers)], a pure
// function of the namespace, so leadership spreads over the nodes —
// campaigns as soon as it materialises: it leads without any election
// timeout (no tick) having passed.
func TestPreferredReplicaLeadsWithoutATick(t *testing.T) {
	n := newReplNet(t)
	for _, name := range []string{"a", "b", "c"} {
		ns, epoch := n.create(name, 1, 2, 3)
		for id := uint64(1); id <= 3; id++ {
			n.materialise(id, ns, epoch)
		}
		n.settle()
		if got, want := n.leader(ns), []uint64{1, 2, 3}[uint64(ns)%3]; got != want {
			t.Fatalf("%v is led by node %d before any tick, want its preferred node %d", ns, got, want)
		}
	}
}

// Produces that queue while the pump is busy are proposed together as one
// raft entry (they share its consensus round), each still answered with
// its own offsets and deduplicated on its own.
func TestConcurrentProducesShareOneEntry(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1, 2, 3)
	for id := uint64(1); id <= 3; id++ {
		n.materialise(id, ns, epoch)
	}
	n.settle()
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	s := n.shard(lead)
	var calls []call
	for _, p := range []string{"a", "b", "c"} {
		c := produce(ns, p)
		c.f.Req.Producer, c.f.Req.Seq = 7, uint64(len(calls)+1)
		s.handle(c.f) // buffered: the pump has more work queued
		calls = append(calls, c)
	}
	s.rg.flushProposals()
	o := s.owned[ns]
	if len(o.rep.pending) != 1 {
		t.Fatalf("%d proposals for 3 queued produces, want 1", len(o.rep.pending))
	}
	n.settle()
	for i, c := range calls {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %d: %+v", i, r)
		}
	}
	// A retry of the second produce (same producer and sequence) does not
	// apply again: it is answered with the first application's offset.
	retry := produce(ns, "b")
	retry.f.Req.Producer, retry.f.Req.Seq = 7, 2
	s.handle(retry.f)
	n.settle()
	if r := retry.answered(t); r.Err != nil || r.Offset != 1 {
		t.Fatalf("deduplicated retry: %+v", r)
	}
	if got := payloads(t, o.p); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("leader log %q", got)
	}
}

// Behaviour 17 on the proposal path: writes buffered at a leader for the
// next proposal are each answered exactly once when the leader learns of a
// higher term before the buffer is flushed — "not leader", with the new
// leader's id, since they were never proposed — and none of them is ever
// applied, on any replica.
func TestBehaviour17BufferedWritesAnsweredWhenLeadershipLost(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1, 2, 3)
	parts := map[uint64]partition.Partition{}
	for id := uint64(1); id <= 3; id++ {
		parts[id] = n.materialise(id, ns, epoch)
	}
	n.settle()
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	s := n.shard(lead)
	calls := []call{produce(ns, "a"), produce(ns, "b"),
		request(ns, &Request{Op: OpStoreOffset, Consumer: "c", Offset: 0})}
	for _, c := range calls {
		s.handle(c.f) // buffered: the pump has more work queued
	}
	if got := len(s.owned[ns].rep.proposeBuf); got != len(calls) {
		t.Fatalf("%d writes buffered, want %d", got, len(calls))
	}
	// Before the buffer is flushed, a peer's heartbeat at a higher term
	// arrives (a new leader was elected): this node is a follower now.
	peer := lead%3 + 1
	s.handle(Frame{Req: &Request{Op: OpRaft, NS: ns, Epoch: epoch,
		Raft: &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(peer), To: proto.Uint64(lead), Term: proto.Uint64(1000)}}})
	if s.owned[ns].rep.grp.IsLeader() {
		t.Fatal("the higher-term heartbeat did not end the leadership")
	}
	n.settle()
	for i, c := range calls {
		var nl *NotLeaderError
		if r := c.answered(t); !errors.As(r.Err, &nl) || nl.Leader != peer {
			t.Fatalf("buffered write %d: answer %v, want not leader (node %d)", i, r.Err, peer)
		}
	}
	if n.tickUntilLeader(ns) == 0 {
		t.Fatal("no leader after the term change")
	}
	n.tick(5)
	for _, c := range calls {
		c.pending(t) // nothing more: exactly one answer each
	}
	for id, p := range parts {
		if got := payloads(t, p); len(got) != 0 {
			t.Fatalf("replica %d applied never-proposed writes: %q", id, got)
		}
		if _, ok, err := p.ConsumerOffset("c"); err != nil || ok {
			t.Fatalf("replica %d stored a never-proposed consumer offset (%v)", id, err)
		}
	}
}

// Every replica applies an entry's fresh produces with one Append; a
// produce repeating an earlier one's (producer, sequence) inside the same
// entry flushes the batch and is answered with the first one's offset.
func TestEntryProducesShareOneAppendOnEveryReplica(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1, 2, 3)
	counters := map[uint64]*appendCounter{}
	for id := uint64(1); id <= 3; id++ {
		h := n.nodes[id]
		c := &appendCounter{Partition: h.build(ns, epoch)}
		if err := h.step(h.shards[0], opInsertOwned(c, noSync)); err != nil {
			t.Fatal(err)
		}
		counters[id] = c
	}
	n.settle()
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	s := n.shard(lead)
	var calls []call
	for i, p := range []string{"a", "b", "c", "a"} {
		c := produce(ns, p)
		c.f.Req.Producer, c.f.Req.Seq = 7, uint64(i+1)
		if i == 3 {
			c.f.Req.Seq = 1 // a retry of "a" in the same entry
		}
		s.handle(c.f)
		calls = append(calls, c)
	}
	s.rg.flushProposals()
	n.settle()
	for i, want := range []uint64{0, 1, 2, 0} {
		if r := calls[i].answered(t); r.Err != nil || r.Offset != want {
			t.Fatalf("produce %d: %+v, want offset %d", i, r, want)
		}
	}
	for id, c := range counters {
		if c.calls != 1 {
			t.Fatalf("replica %d appended the entry with %d calls, want 1", id, c.calls)
		}
		if got := payloads(t, c); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("replica %d log %q", id, got)
		}
	}
}

// A leader read waits for its ReadIndex confirmation; if the partition's
// deletion commits meanwhile, the read is denied (behaviour 10), not
// served from the dead incarnation.
func TestLeaderReadDeniedAfterDeleteCommits(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1, 2, 3)
	for id := uint64(1); id <= 3; id++ {
		n.materialise(id, ns, epoch)
	}
	n.settle()
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	s := n.shard(lead)
	ch := make(chan Response, 1)
	s.handle(Frame{Req: &Request{Op: OpPoll, NS: ns, Count: 10, FromLeader: true}, Reply: ch})
	select {
	case r := <-ch:
		t.Fatalf("leader read answered before its confirmation: %+v", r)
	default:
	}
	h := n.nodes[lead]
	h.apply(metadata.DeleteTopic{Stream: ns.Stream(), Topic: ns.Topic()})
	n.settle()
	mustErr(t, <-ch, ErrRetry)
}
