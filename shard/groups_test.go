package shard

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// A commit group is bounded: while the inbox never empties (sustained
// load), the queued produces are appended, synced once and acknowledged
// exactly when maxGroup of them wait — not before, and not only once the
// inbox drains.
func TestCommitGroupClosesAtMaxGroup(t *testing.T) {
	h := newHarness(t, 1, nil, manual, func(c *Config) { c.InboxSize = maxGroup + 8 })
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	if err := s.InsertOwned(context.Background(), p, always); err != nil {
		t.Fatal(err)
	}
	base := p.syncs
	calls := make([]call, maxGroup+1)
	for i := range calls {
		calls[i] = produce(ns, "m")
		if err := s.TrySend(calls[i].f); err != nil {
			t.Fatal(err)
		}
	}
	for range maxGroup - 1 {
		s.Step()
	}
	calls[0].pending(t)
	if p.syncs != base {
		t.Fatalf("%d fsyncs before the group reached %d produces", p.syncs-base, maxGroup)
	}
	s.Step() // the maxGroup-th produce: the group closes, one more waits in the inbox
	if p.syncs != base+1 {
		t.Fatalf("%d fsyncs for a full group, want 1", p.syncs-base)
	}
	for i, c := range calls[:maxGroup] {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %d of a full group: %+v", i, r)
		}
	}
	calls[maxGroup].pending(t)
	s.Step()
	if r := calls[maxGroup].answered(t); r.Err != nil || r.Offset != maxGroup {
		t.Fatalf("produce after the full group: %+v", r)
	}
}

// appendSizes records the size of every batch appended.
type appendSizes struct {
	partition.Partition
	sizes []int
}

func (a *appendSizes) Append(msgs []partition.Message) (uint64, error) {
	a.sizes = append(a.sizes, len(msgs))
	return a.Partition.Append(msgs)
}

// The commit group's bound holds when parked produces are re-dispatched
// too: materialising a partition with more than maxGroup produces parked
// (and the inbox not empty, so nothing else closes the group) appends them
// in groups of at most maxGroup, each produce answered with its own
// offset in arrival order.
func TestCommitGroupClosesAtMaxGroupOnRedispatch(t *testing.T) {
	h := newHarness(t, 1, nil, manual, func(c *Config) { c.Park.FramesPerNamespace = maxGroup + 1 })
	s := h.shards[0]
	ns, epoch := h.topic("t")
	calls := make([]call, maxGroup+1)
	for i := range calls {
		calls[i] = produce(ns, "m")
		s.handle(calls[i].f) // committed, not materialised: parks
	}
	calls[0].pending(t)
	poll := request(ns, &Request{Op: OpPoll, Count: 2 * maxGroup})
	if err := s.TrySend(poll.f); err != nil {
		t.Fatal(err)
	}
	p := &appendSizes{Partition: h.build(ns, epoch)}
	c := opInsertOwned(p, noSync)
	s.runControl(c) // as the pump: re-dispatch with a frame still in the inbox
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
	s.handleFrame(s.taken(<-s.inbox))
	if !slices.Equal(p.sizes, []int{maxGroup, 1}) {
		t.Fatalf("%d re-dispatched produces appended in batches of %v, want [%d 1]", len(calls), p.sizes, maxGroup)
	}
	for i, c := range calls {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("re-dispatched produce %d: %+v", i, r)
		}
	}
	if r := poll.answered(t); r.Err != nil || len(r.Messages) != len(calls) {
		t.Fatalf("poll behind the re-dispatched produces: %d messages, %v", len(r.Messages), r.Err)
	}
}

// A replicated partition's proposal is bounded the same way: maxGroup
// writes buffered while the inbox never empties are proposed as one entry
// at once, and every one is acknowledged once it commits.
func TestProposalGroupClosesAtMaxGroup(t *testing.T) {
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
	o := s.owned[ns]
	calls := make([]call, maxGroup+1)
	for i := range calls {
		calls[i] = produce(ns, "m")
		if err := s.TrySend(calls[i].f); err != nil {
			t.Fatal(err)
		}
	}
	for range maxGroup - 1 {
		s.handleFrame(s.taken(<-s.inbox)) // as the pump: the inbox is not empty yet
	}
	if len(o.rep.pending) != 0 || len(o.rep.proposeBuf) != maxGroup-1 {
		t.Fatalf("%d proposals, %d writes buffered before the bound; want 0 and %d", len(o.rep.pending), len(o.rep.proposeBuf), maxGroup-1)
	}
	s.handleFrame(s.taken(<-s.inbox))
	if len(o.rep.pending) != 1 || len(o.rep.proposeBuf) != 0 {
		t.Fatalf("%d proposals, %d writes buffered at the bound; want 1 and 0", len(o.rep.pending), len(o.rep.proposeBuf))
	}
	s.handleFrame(s.taken(<-s.inbox)) // the inbox drains: the last write is proposed alone
	n.settle()
	for i, c := range calls {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("write %d: %+v", i, r)
		}
	}
}

// A committed entry is read back from the raft log, which a disk can
// corrupt: an entry whose produce claims more batch bytes than it carries
// is an error for the group (the partition is fenced and rebuilt), never a
// slice past the entry's end.
func TestCorruptEntryIsAnErrorNotAPanic(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1)
	n.materialise(1, ns, epoch)
	s := n.shard(1)
	h := groupHandler{rg: &s.rg, o: s.owned[ns]}
	for _, claimed := range []uint32{30, 1000} { // just past the entry's end, and far past it
		entry := binary.LittleEndian.AppendUint32(nil, 1) // one operation
		entry = append(entry, entryProduce)
		entry = binary.LittleEndian.AppendUint64(entry, 0) // producer
		entry = binary.LittleEndian.AppendUint64(entry, 0) // sequence
		entry = binary.LittleEndian.AppendUint32(entry, claimed)
		entry = append(entry, 1, 2, 3) // 3 of the bytes claimed
		if err := h.apply(1, 0, entry); err == nil {
			t.Fatalf("a produce claiming %d bytes with 3 present applied", claimed)
		}
	}
	if got := payloads(t, h.o.p); len(got) != 0 {
		t.Fatalf("partition holds %q after a corrupt entry", got)
	}
}

// Truncations and purges of a replicated partition are entries too: every
// replica applies them at the same point of the log (a purge is the
// shortest operation, one byte).
func TestReplicatedTruncateAndPurgeApplyOnEveryReplica(t *testing.T) {
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
	do := func(c call) Response {
		t.Helper()
		s.handle(c.f)
		n.settle()
		return c.answered(t)
	}
	for _, m := range []string{"a", "b", "c"} {
		if r := do(produce(ns, m)); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if r := do(request(ns, &Request{Op: OpTruncate, Offset: 1})); r.Err != nil || r.Offset != 1 {
		t.Fatalf("truncate: %+v", r)
	}
	for id, p := range parts {
		if p.StartOffset() != 1 {
			t.Fatalf("replica %d starts at %d after truncate, want 1", id, p.StartOffset())
		}
	}
	if r := do(request(ns, &Request{Op: OpPurge})); r.Err != nil || r.Offset != 3 {
		t.Fatalf("purge: %+v", r)
	}
	for id, p := range parts {
		msgs, err := p.Read(0, 10)
		if err != nil && !errors.Is(err, partition.ErrOffsetOutOfRange) {
			t.Fatal(err)
		}
		if p.StartOffset() != 3 || len(msgs) != 0 {
			t.Fatalf("replica %d after purge: start %d, %d readable", id, p.StartOffset(), len(msgs))
		}
	}
}

// Zero replication settings take their documented defaults; set ones are
// kept.
func TestReplicationDefaults(t *testing.T) {
	h := newHarness(t, 1, nil)
	send := func(uint64, metadata.Namespace, uint64, *raftpb.Message) {}
	for _, c := range []struct {
		in, want Replication
	}{
		{Replication{}, Replication{TickInterval: DefaultTickInterval, CompactEntries: DefaultCompactEntries, CompactBytes: DefaultCompactBytes}},
		{Replication{TickInterval: 3, CompactEntries: 4, CompactBytes: 5}, Replication{TickInterval: 3, CompactEntries: 4, CompactBytes: 5}},
	} {
		r := c.in
		r.Node, r.Peers, r.Send = 1, []uint64{1}, send
		s, err := New(Config{Replication: &r}, h.meta, h.rt)
		if err != nil {
			t.Fatal(err)
		}
		got := s.cfg.Replication
		if got.TickInterval != c.want.TickInterval || got.CompactEntries != c.want.CompactEntries || got.CompactBytes != c.want.CompactBytes {
			t.Errorf("Replication %+v became tick %v, compact %d entries / %d bytes; want %+v", c.in, got.TickInterval, got.CompactEntries, got.CompactBytes, c.want)
		}
		_ = s.Close()
	}
}

// Config bounds: a pinned shard needs a CPU ≥ 0 (0 is a CPU), and a
// shard's ID must be below the router's shard count.
func TestConfigBounds(t *testing.T) {
	if err := (Config{PinCPU: true, CPU: -1}).Validate(); err == nil || !contains(err.Error(), "CPU") {
		t.Errorf("PinCPU with CPU -1: %v, want an error naming CPU", err)
	}
	if err := (Config{PinCPU: true, CPU: 0}).Validate(); err != nil {
		t.Errorf("PinCPU with CPU 0: %v", err)
	}
	h := newHarness(t, 2, nil)
	for _, id := range []int{2, 3} {
		if s, err := New(Config{ID: id}, h.meta, h.rt); err == nil {
			_ = s.Close()
			t.Errorf("shard ID %d of 2 accepted", id)
		}
	}
	s, err := New(Config{ID: 1}, h.meta, h.rt)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}

// Inspect reports how many sweeps the oldest parked frame of a namespace
// has survived and which owned partitions are fenced, and the fenced
// count follows fencing (once per partition, however often its syncs
// fail) and tombstoning.
func TestInspectAgesAndFencedCount(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	h.sweep(s, nil) // the frame parks at pass 1
	parkedNS, _ := h.topic("parked")
	s.handle(produce(parkedNS, "p").f)
	h.sweep(s, nil)
	h.sweep(s, nil)
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	if err := h.step(s, opInsertOwned(p, always)); err != nil {
		t.Fatal(err)
	}
	healthyNS, healthyEpoch := h.topic("healthy")
	h.insert(s, h.build(healthyNS, healthyEpoch))

	st := h.inspect(s)
	if len(st.Parked) != 1 || st.Parked[0].NS != parkedNS || st.Parked[0].OldestPasses != 2 {
		t.Fatalf("parked = %+v, want %v aged 2 passes", st.Parked, parkedNS)
	}
	if len(st.Failed) != 0 || s.Fenced() != 0 {
		t.Fatalf("healthy shard: failed %v, fenced %d", st.Failed, s.Fenced())
	}

	p.fail = errors.New("EIO")
	for _, m := range []string{"a", "b"} { // two failed syncs, one fenced partition
		c := produce(ns, m)
		s.handle(c.f)
		s.maybeFlush()
		c.answered(t)
	}
	if st := h.inspect(s); !slices.Equal(st.Failed, []metadata.Namespace{ns}) || s.Fenced() != 1 {
		t.Fatalf("after failed syncs: failed %v, fenced %d; want [%v] and 1", st.Failed, s.Fenced(), ns)
	}
	var e uint64
	if err := h.step(s, opTombstone(healthyNS, &e)); err != nil || s.Fenced() != 1 {
		t.Fatalf("tombstoning a healthy partition: fenced %d (%v), want 1", s.Fenced(), err)
	}
	if err := h.step(s, opTombstone(ns, &e)); err != nil || s.Fenced() != 0 {
		t.Fatalf("tombstoning the fenced partition: fenced %d (%v), want 0", s.Fenced(), err)
	}
}

// Control operations on a started shard run on its pump and return their
// results to the caller.
func TestControlOperationsOnThePump(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	s.Start()
	ctx := context.Background()
	ns, epoch := h.topic("t")
	if err := s.InsertOwned(ctx, h.build(ns, epoch), noSync); err != nil {
		t.Fatal(err)
	}
	st, err := s.Inspect(ctx)
	if err != nil || st.Owned[ns] != epoch {
		t.Fatalf("Inspect on the pump: %+v, %v; want %v owned at %d", st, err, ns, epoch)
	}
}
