package shard

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// offsetStoreFails is a partition whose consumer-offset writes fail with
// an I/O error, as a failing disk would.
type offsetStoreFails struct {
	partition.Partition
	err error
}

func (p offsetStoreFails) StoreConsumerOffset(string, uint64) error { return p.err }

// TestBehaviour17FailedApplyAnswersEachWriteOfTheEntryOnce: when a
// committed entry cannot be applied part-way through (an I/O error storing
// a consumer offset), every write of the entry is answered exactly once —
// the write applied before the failure with its result, the failing one
// and every one after it with ErrOutcomeUnknown (they are committed; the
// partition is rebuilt and applies them again) — and no answer is lost to
// a full reply channel.
func TestBehaviour17FailedApplyAnswersEachWriteOfTheEntryOnce(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1, 2, 3)
	eio := errors.New("EIO")
	for id := uint64(1); id <= 3; id++ {
		h := n.nodes[id]
		p := offsetStoreFails{h.build(ns, epoch), eio}
		if err := h.step(h.shards[0], opInsertOwned(p, noSync)); err != nil {
			t.Fatal(err)
		}
	}
	n.settle()
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	s := n.shard(lead)
	calls := []call{
		produce(ns, "before"),
		request(ns, &Request{Op: OpStoreOffset, Consumer: "c", Offset: 0}),
		produce(ns, "after"),
	}
	for _, c := range calls {
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
	}
	for range calls {
		s.handleFrame(s.taken(<-s.inbox)) // as the pump: one entry once the inbox drains
	}
	if o := s.owned[ns]; len(o.rep.pending) != 1 {
		t.Fatalf("%d proposals for three buffered writes, want 1", len(o.rep.pending))
	}
	n.settle()
	if r := calls[0].answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("produce applied before the failure: %+v", r)
	}
	for i, c := range calls[1:] {
		if r := c.answered(t); !errors.Is(r.Err, ErrOutcomeUnknown) || !errors.Is(r.Err, eio) {
			t.Fatalf("write %d, at or after the failure: %v, want ErrOutcomeUnknown wrapping the I/O error", i+1, r.Err)
		}
	}
	drops := n.nodes[lead].drops("0", "produce", metrics.ReasonDeliveryFailed) +
		n.nodes[lead].drops("0", "store_offset", metrics.ReasonDeliveryFailed)
	if drops != 0 {
		t.Fatalf("%v answers lost to a full reply channel (a write answered twice)", drops)
	}
}

// A replica that caught up from a peer applies the entries it deferred
// meanwhile once its log reaches the snapshot's; when that fails first —
// the snapshot's consumer offsets cannot be stored — the deferred entries
// are lost to its group, which must stop (the partition is rebuilt and its
// group restored from the raft log) rather than go on applying the
// entries after them: the replica's log would skip the deferred messages
// and hold later ones at their offsets. The simulator found it (cluster
// seed 112): replicas disagreeing on an offset after an EIO on a consumer
// offset file during a catch-up.
func TestFailedCatchUpSettleStopsTheGroup(t *testing.T) {
	n := newMoveNet(t)
	info, lead := n.ledPartition(3)
	ns := info.NS
	want := n.produceAcked(lead, ns, 3)
	store := request(ns, &Request{Op: OpStoreOffset, Consumer: "c", Offset: 1})
	n.shard(lead).handle(store.f)
	n.settle()
	if r := store.answered(t); r.Err != nil {
		t.Fatalf("store offset: %v", r.Err)
	}

	// A fourth replica joins, on a disk that refuses consumer offsets.
	n.apply(metadata.DrainNode{Node: lead})
	info, _ = n.nodes[1].meta.Partition(ns)
	joiner := info.Replicas[len(info.Replicas)-1]
	h := n.nodes[joiner]
	p := h.build(ns, info.CreatedRevision)
	h.insert(h.shards[0], offsetStoreFails{p, errors.New("EIO")})
	n.parts[replicaKey{joiner, ns}] = p
	// Its catch-up fetches go unanswered while more is written: the
	// entries committed meanwhile are deferred on the joiner.
	n.drop = func(q queued) bool { return q.catchUp != nil && q.to == joiner }
	n.materialise(ns)
	for range 50 {
		n.tickAll()
	}
	if n.shard(joiner).owned[ns].rep.catchup == nil {
		t.Fatal("the joiner is not catching up")
	}
	for i := range 3 {
		m := fmt.Sprintf("deferred %d", i)
		c := produce(ns, m)
		l := n.leader(ns)
		n.shard(l).handle(c.f)
		n.settle()
		if r := c.answered(t); r.Err != nil {
			t.Fatalf("produce: %v", r.Err)
		}
		want = append(want, m)
	}
	n.drop = nil
	for range 50 {
		n.tickAll() // the fetch completes; storing the offsets fails
	}
	c := produce(ns, "after")
	n.shard(n.leader(ns)).handle(c.f)
	n.settle()
	for range 20 {
		n.tickAll()
	}
	got := payloads(t, p)
	if len(got) < 3 {
		t.Fatalf("the joiner holds %q: the catch-up never delivered the snapshot's messages", got)
	}
	if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
		t.Fatalf("the joiner's log %q is not a prefix of the group's %q", got, append(want, "after"))
	}
}

// readUnusable is a partition whose reads meet a write held behind that
// failed and could not be taken back: every read says the partition is
// unusable until it is built again.
type readUnusable struct{ partition.Partition }

func (readUnusable) Read(uint64, int) ([]partition.Message, error) {
	return nil, fmt.Errorf("%w: write-behind failed", partition.ErrUnusable)
}

// A poll that finds its partition unusable (partition.ErrUnusable from a
// read) fences it, as an append that does, and is answered as every later
// request is (ErrPartitionFailed): the reconciler then rebuilds it. Unfenced it stayed unusable, every read failing, until the node
// restarted (single-node simulator seed 498: ENOSPC on a held write, then
// EIO syncing its take-back).
func TestPollOnUnusablePartitionFencesIt(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	h.insert(s, readUnusable{h.build(ns, epoch)})
	c := produce(ns, "a")
	s.handle(c.f)
	s.settle()
	if r := c.answered(t); r.Err != nil {
		t.Fatalf("produce: %v", r.Err)
	}
	poll := request(ns, &Request{Op: OpPoll, Count: 1})
	s.handle(poll.f)
	s.settle()
	if r := poll.answered(t); !errors.Is(r.Err, ErrPartitionFailed) || !errors.Is(r.Err, partition.ErrUnusable) {
		t.Fatalf("poll: %v, want ErrPartitionFailed wrapping ErrUnusable", r.Err)
	}
	if s.Fenced() != 1 {
		t.Fatalf("%d partitions fenced after a poll met an unusable one, want 1", s.Fenced())
	}
}

// A snapshot installed on a replica makes its consumer offsets the
// snapshot's: one the replica stored but the snapshot lacks was deleted
// in entries the replica never applied (a replicated OpDeleteOffset it
// missed while cut off), and settle removes it; one the snapshot holds
// is stored as the snapshot says.
func TestSettleDropsOffsetsTheSnapshotLacks(t *testing.T) {
	h := newHarness(t, 1, nil)
	ns, epoch := h.topic("t")
	p := h.build(ns, epoch)
	if _, err := p.Append([]partition.Message{{Payload: []byte("a")}, {Payload: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"kept", "gone"} {
		if err := p.StoreConsumerOffset(c, 1); err != nil {
			t.Fatal(err)
		}
	}
	o := &owned{p: p}
	o.rep.restore(replicatedState{next: 2, consumers: map[string]uint64{"kept": 2}})
	if err := o.settle(); err != nil {
		t.Fatalf("settle: %v", err)
	}
	if got := p.ConsumerOffsets(); len(got) != 1 || got["kept"] != 2 {
		t.Fatalf("consumer offsets after settle: %v, want kept at 2 alone", got)
	}
}

// raftLogged is a partition whose replica keeps its raft log on fsys (as
// a file partition does, partition.Located), so a rebuild restores the
// group from it; while *fail is set, its consumer-offset writes fail.
type raftLogged struct {
	partition.Partition
	fsys vfs.FS
	fail *error
}

func (p raftLogged) Location() (vfs.FS, string) { return p.fsys, "/raft" }

func (p raftLogged) StoreConsumerOffset(name string, off uint64) error {
	if *p.fail != nil {
		return *p.fail
	}
	return p.Partition.StoreConsumerOffset(name, off)
}

// A follower installing the leader's snapshot needs no catch-up (its log
// holds every message) but cannot store the snapshot's consumer offset
// (EIO) after raft persisted the snapshot: its group fails and the
// partition is fenced, evicted and rebuilt from its raft log, whose
// snapshot the rebuild must settle into the partition — its log again
// needs no catch-up, and nothing after the snapshot re-applies the
// offset. Unsettled, the rebuilt replica answered "not found" for a
// consumer offset its peers held (simulator cluster seed 1609).
func TestRebuildSettlesTheRaftSnapshotItFailedToInstall(t *testing.T) {
	n := newMoveNetWith(t, func(r *Replication) { r.CompactEntries = 64 })
	n.apply(metadata.CreateStream{Name: "s"})
	info := n.apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 1, Config: metadata.TopicConfig{Replicas: 3}}).Created[0]
	ns, epoch := info.NS, info.CreatedRevision
	fails := map[uint64]*error{}
	disks := map[uint64]vfs.FS{}
	for _, id := range info.Replicas {
		h := n.nodes[id]
		fails[id], disks[id] = new(error), vfs.NewMem()
		if err := disks[id].MkdirAll("/raft", 0o755); err != nil {
			t.Fatal(err)
		}
		p := h.build(ns, epoch)
		h.insert(h.shards[0], raftLogged{p, disks[id], fails[id]})
		n.parts[replicaKey{id, ns}] = p
	}
	n.settle()
	var lead uint64
	for range 500 {
		if lead = n.leader(ns); lead != 0 {
			break
		}
		n.tickAll()
	}
	if lead == 0 {
		t.Fatal("no leader")
	}
	n.produceAcked(lead, ns, 2)
	var f uint64 // a follower
	for _, id := range info.Replicas {
		if id != lead {
			f = id
			break
		}
	}

	// Cut off, the follower misses consumer c's stores, then d's again
	// and again: the leader compacts well past c's last store, beyond the
	// entries its group keeps in memory for a lagging follower (512, the
	// replica package's default), so the follower must take the snapshot,
	// and no entry after it stores c — only the snapshot holds it.
	n.cutGroup[replicaKey{f, ns}] = true
	for i := range uint64(600) {
		consumer, off := "d", i%2
		if i < 2 {
			consumer = "c"
		}
		store := request(ns, &Request{Op: OpStoreOffset, Consumer: consumer, Offset: off})
		n.shard(lead).handle(store.f)
		n.settle()
		if r := store.answered(t); r.Err != nil {
			t.Fatalf("store offset: %v", r.Err)
		}
	}
	snap, _ := n.shard(lead).rg.replicated[ns].rep.grp.Snapshot()
	if snap <= 512+n.shard(f).rg.replicated[ns].rep.grp.Applied() {
		t.Fatalf("the leader compacted at %d only: it would send the follower entries, not its snapshot", snap)
	}
	*fails[f] = errors.New("EIO")
	n.cutGroup[replicaKey{f, ns}] = false
	for range 20 {
		n.tickAll()
	}
	s := n.shard(f)
	if s.Fenced() != 1 {
		t.Fatalf("%d partitions fenced on the follower, want 1: the snapshot's install did not fail", s.Fenced())
	}
	if got := testutil.ToFloat64(n.nodes[f].m.RaftSnapshots.WithLabelValues("0")); got != 1 {
		t.Fatalf("the follower installed %v snapshots, want 1", got)
	}
	if _, ok, _ := n.parts[replicaKey{f, ns}].ConsumerOffset("c"); ok {
		t.Fatal("the follower stored the offset its failing disk refused")
	}

	// The reconciler evicts the fenced partition and rebuilds it, on a
	// disk that works again.
	if err := evictStepped(s, ns); err != nil {
		t.Fatalf("evict: %v", err)
	}
	*fails[f] = nil
	h := n.nodes[f]
	p := h.build(ns, epoch)
	h.insert(s, raftLogged{p, disks[f], fails[f]})
	n.parts[replicaKey{f, ns}] = p
	for range 20 {
		n.tickAll()
	}
	if s.Fenced() != 0 {
		t.Fatal("the rebuilt partition is fenced")
	}
	if o := s.rg.replicated[ns]; o == nil || o.rep.catchup != nil {
		t.Fatal("the rebuilt replica is not replicating, or is catching up: its log held every message")
	}
	if got := testutil.ToFloat64(n.nodes[f].m.RaftSnapshots.WithLabelValues("0")); got != 1 {
		t.Fatalf("the follower installed %v snapshots, want 1: the rebuild must restore the one its raft log holds", got)
	}
	for _, id := range info.Replicas {
		for _, c := range []string{"c", "d"} {
			off, ok, err := n.parts[replicaKey{id, ns}].ConsumerOffset(c)
			if err != nil || !ok || off != 1 {
				t.Fatalf("replica %d (follower %d rebuilt) answers consumer %s at %d, found %v, %v; want 1", id, f, c, off, ok, err)
			}
		}
	}
}
