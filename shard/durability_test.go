package shard

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// syncCounter wraps a partition, counting (and optionally failing) Sync.
type syncCounter struct {
	partition.Partition
	syncs int
	fail  error
}

func (c *syncCounter) Sync() error {
	c.syncs++
	return c.fail
}

var always = Durability{Fsync: metadata.FsyncAlways}

// Under FsyncAlways an ack waits for fsync, and the produces that queued
// while the pump was busy share one fsync (group commit).
func TestGroupCommitSharesOneFsync(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	if err := h.step(s, opInsertOwned(p, always)); err != nil {
		t.Fatal(err)
	}
	var calls []call
	for _, m := range []string{"a", "b", "c"} {
		c := produce(ns, m)
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	// Step the pump by hand: each frame is handled with more waiting
	// behind it, so the group stays open until the inbox drains.
	for range calls {
		s.handle(s.taken(<-s.inbox))
		if len(s.inbox) > 0 {
			s.maybeFlush()
			for _, c := range calls {
				c.pending(t)
			}
		}
	}
	if p.syncs != 0 {
		t.Fatalf("synced %d times before the group closed", p.syncs)
	}
	s.maybeFlush()
	if p.syncs != 1 {
		t.Fatalf("group of 3 produces took %d fsyncs, want 1", p.syncs)
	}
	for i, c := range calls {
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("ack %d: %+v", i, r)
		}
	}
}

// A reader never sees an un-acknowledged (un-synced) append: a poll closes
// the open group first.
func TestPollClosesOpenGroup(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	_ = h.step(s, opInsertOwned(p, always))
	w := produce(ns, "w")
	s.handle(w.f)
	w.pending(t)
	ch := make(chan Response, 1)
	s.handle(Frame{Req: &Request{Op: OpPoll, NS: ns, Count: 10}, Reply: ch})
	if p.syncs != 1 {
		t.Fatalf("poll read past an un-synced append (syncs=%d)", p.syncs)
	}
	if r := w.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := <-ch; len(r.Messages) != 1 {
		t.Fatalf("poll: %+v", r)
	}
}

// A failed fsync withholds the acks of its group: each is answered with
// the error, never with success.
func TestFsyncFailureWithholdsAcks(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	eio := errors.New("EIO")
	p := &syncCounter{Partition: h.build(ns, epoch), fail: eio}
	_ = h.step(s, opInsertOwned(p, always))
	a := produce(ns, "a")
	s.handle(a.f)
	s.maybeFlush()
	if r := a.answered(t); !errors.Is(r.Err, eio) {
		t.Fatalf("ack after failed fsync: %+v", r)
	}
}

// Under FsyncInterval the ack is immediate and the partition is synced
// within the interval, by a timer armed only while something is dirty.
func TestIntervalFsync(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, func(c *Config) { c.Clock = clk })
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	_ = h.step(s, opInsertOwned(p, Durability{Fsync: metadata.FsyncInterval, Interval: time.Second}))
	if s.commit.syncC() != nil {
		t.Fatal("sync timer armed with nothing dirty")
	}
	a := produce(ns, "a")
	s.handle(a.f)
	if r := a.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	if s.commit.syncC() == nil || p.syncs != 0 {
		t.Fatalf("after an append: timer %v, syncs %d", s.commit.syncC() != nil, p.syncs)
	}
	clk.Advance(time.Second)
	<-s.commit.syncC()
	s.commit.syncDue()
	if p.syncs != 1 || s.commit.syncC() != nil {
		t.Fatalf("after the interval: syncs %d, timer still armed %v", p.syncs, s.commit.syncC() != nil)
	}
}

// Tightening or loosening durability syncs what is dirty first.
func TestSetDurabilitySyncsFirst(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	_ = h.step(s, opInsertOwned(p, Durability{Fsync: metadata.FsyncInterval, Interval: time.Hour}))
	s.handle(produce(ns, "a").f)
	if err := h.step(s, opSetDurability(ns, noSync)); err != nil {
		t.Fatal(err)
	}
	if p.syncs != 1 || s.owned[ns].dur != noSync {
		t.Fatalf("syncs %d, durability %+v", p.syncs, s.owned[ns].dur)
	}
}

// Retention runs per owned partition with its own bounds.
func TestRetentionOp(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := h.build(ns, epoch)
	_ = h.step(s, opInsertOwned(p, Durability{Fsync: metadata.FsyncNever, RetentionBytes: 1}))
	var res RetentionResult
	if err := h.step(s, opRetain(time.Unix(1000, 0), &res)); err != nil || res.Errors != 0 {
		t.Fatalf("retain: %+v %v", res, err)
	}
}

// After a failed group-commit fsync the partition serves nothing more —
// reads included: the batch the fsync covered was answered with the error
// but sits in the log, and a reader must not see what a crash may erase
// (found by the simulator: a poll saw it, a power loss erased it, and its
// offset later held another message).
func TestFsyncFailureFencesPartition(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	_ = h.step(s, opInsertOwned(p, always))
	ok := produce(ns, "ok")
	s.handle(ok.f)
	s.maybeFlush()
	if r := ok.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	eio := errors.New("EIO")
	p.fail = eio
	lost := produce(ns, "lost")
	s.handle(lost.f)
	poll := make(chan Response, 1)
	s.handle(Frame{Req: &Request{Op: OpPoll, NS: ns, Count: 10}, Reply: poll})
	if r := lost.answered(t); !errors.Is(r.Err, eio) {
		t.Fatalf("ack after failed fsync: %+v", r)
	}
	if r := <-poll; !errors.Is(r.Err, ErrPartitionFailed) || len(r.Messages) != 0 {
		t.Fatalf("poll after failed fsync: %+v, want ErrPartitionFailed and no messages", r)
	}
	p.fail = nil // even if the disk recovers, what it lost is unknown
	for _, req := range []*Request{
		{Op: OpPoll, NS: ns, Count: 10},
		{Op: OpProduce, NS: ns, Messages: produce(ns, "x").f.Req.Messages},
		{Op: OpStoreOffset, NS: ns, Consumer: "c", Offset: 1},
		{Op: OpGetOffset, NS: ns, Consumer: "c"},
	} {
		ch := make(chan Response, 1)
		s.handle(Frame{Req: req, Reply: ch})
		s.maybeFlush()
		if r := <-ch; !errors.Is(r.Err, ErrPartitionFailed) || errors.Is(r.Err, ErrRetry) {
			t.Fatalf("%v after failed fsync: %+v, want ErrPartitionFailed (not retriable)", req.Op, r)
		}
	}
	if got := payloads(t, p); len(got) != 2 {
		t.Fatalf("partition holds %q", got)
	}
}

// Under FsyncAlways a partition is synced when it materialises, before
// anything is served from it: a log reopened after a process crash may
// hold writes that reached the page cache but were never fsynced, and a
// reader must not see what a later power loss may erase (found by the
// simulator). If that sync fails, the partition is fenced.
func TestInsertOwnedSyncsBeforeServing(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	// A reopened log: it holds a message nobody fsynced.
	if _, err := p.Append(produce(ns, "recovered").f.Req.Messages); err != nil {
		t.Fatal(err)
	}
	parked := make(chan Response, 1)
	s.handle(Frame{Req: &Request{Op: OpPoll, NS: ns, Count: 10}, Reply: parked})
	if err := h.step(s, opInsertOwned(p, always)); err != nil {
		t.Fatal(err)
	}
	if p.syncs != 1 {
		t.Fatalf("materialised with %d fsyncs, want 1 before serving", p.syncs)
	}
	if r := <-parked; r.Err != nil || len(r.Messages) != 1 {
		t.Fatalf("parked poll: %+v", r)
	}

	fresh, freshEpoch := h.topic("t3")
	f := &syncCounter{Partition: h.build(fresh, freshEpoch)}
	if err := h.step(s, opInsertOwned(f, always)); err != nil || f.syncs != 0 {
		t.Fatalf("a fresh partition was synced %d times (%v), want none", f.syncs, err)
	}

	ns2, epoch2 := h.topic("t2")
	eio := errors.New("EIO")
	q := &syncCounter{Partition: h.build(ns2, epoch2), fail: eio}
	if _, err := q.Append(produce(ns2, "recovered").f.Req.Messages); err != nil {
		t.Fatal(err)
	}
	poll := make(chan Response, 1)
	s.handle(Frame{Req: &Request{Op: OpPoll, NS: ns2, Count: 10}, Reply: poll})
	if err := h.step(s, opInsertOwned(q, always)); err != nil {
		t.Fatal(err)
	}
	if r := <-poll; !errors.Is(r.Err, ErrPartitionFailed) || !errors.Is(r.Err, eio) {
		t.Fatalf("parked poll on a partition whose first fsync failed: %+v", r)
	}
}

// Retention applies each bound only where it is set: a partition with an
// age bound loses its old messages, one with only a byte bound (and room
// to spare) keeps them — its zero age is "no age bound", not "older than
// now".
func TestRetentionAppliesOnlyTheBoundsSet(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	written := time.Unix(100, 0)
	parts := map[string]partition.Partition{}
	for name, d := range map[string]Durability{
		"age":   {Fsync: metadata.FsyncNever, RetentionAge: 10 * time.Second},
		"bytes": {Fsync: metadata.FsyncNever, RetentionBytes: 1 << 20},
	} {
		ns, epoch := h.topic(name)
		p := h.build(ns, epoch)
		if err := h.step(s, opInsertOwned(p, d)); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Append([]partition.Message{{Timestamp: written.UnixMicro(), Payload: []byte("old")}}); err != nil {
			t.Fatal(err)
		}
		parts[name] = p
	}
	var res RetentionResult
	if err := h.step(s, opRetain(written.Add(time.Minute), &res)); err != nil || res.Errors != 0 {
		t.Fatalf("retain: %+v %v", res, err)
	}
	if res.Messages != 1 || parts["age"].StartOffset() != 1 || parts["bytes"].StartOffset() != 0 {
		t.Fatalf("removed %d; age-bound starts at %d (want 1), byte-bound at %d (want 0)",
			res.Messages, parts["age"].StartOffset(), parts["bytes"].StartOffset())
	}
}

// The age bound counts back from now: a message younger than the bound
// survives a retention pass, and the same message is removed by the first
// pass after it has aged past the bound.
func TestRetentionByAgeKeepsWhatIsYoungerThanTheBound(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := h.build(ns, epoch)
	if err := h.step(s, opInsertOwned(p, Durability{Fsync: metadata.FsyncNever, RetentionAge: 10 * time.Second})); err != nil {
		t.Fatal(err)
	}
	written := time.Unix(100, 0)
	if _, err := p.Append([]partition.Message{{Timestamp: written.UnixMicro(), Payload: []byte("young")}}); err != nil {
		t.Fatal(err)
	}
	var res RetentionResult
	if err := h.step(s, opRetain(written.Add(5*time.Second), &res)); err != nil || res.Errors != 0 {
		t.Fatalf("retain: %+v %v", res, err)
	}
	if res.Messages != 0 || p.StartOffset() != 0 {
		t.Fatalf("5 s after the write, under a 10 s bound: removed %d, starts at %d (want 0, 0)", res.Messages, p.StartOffset())
	}
	if err := h.step(s, opRetain(written.Add(11*time.Second), &res)); err != nil || res.Errors != 0 {
		t.Fatalf("retain: %+v %v", res, err)
	}
	if res.Messages != 1 || p.StartOffset() != 1 {
		t.Fatalf("11 s after the write, under a 10 s bound: removed %d, starts at %d (want 1, 1)", res.Messages, p.StartOffset())
	}
}

// The interval-fsync timer fires by the earliest dirty partition's
// deadline: a partition with a longer interval dirtied later does not
// push it back.
func TestIntervalFsyncTimerKeepsTheEarliestDeadline(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, func(c *Config) { c.Clock = clk })
	s := h.shards[0]
	var short *syncCounter
	for _, c := range []struct {
		name     string
		interval time.Duration
	}{{"short", time.Second}, {"long", 10 * time.Second}} {
		ns, epoch := h.topic(c.name)
		p := &syncCounter{Partition: h.build(ns, epoch)}
		if err := h.step(s, opInsertOwned(p, Durability{Fsync: metadata.FsyncInterval, Interval: c.interval})); err != nil {
			t.Fatal(err)
		}
		if short == nil {
			short = p
		}
		w := produce(ns, "w")
		s.handle(w.f)
		if r := w.answered(t); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	clk.Advance(time.Second)
	select {
	case <-s.commit.syncC():
	default:
		t.Fatal("the interval timer did not fire at the short interval's deadline")
	}
	s.commit.syncDue()
	if short.syncs != 1 {
		t.Fatalf("short-interval partition synced %d times at its deadline, want 1", short.syncs)
	}
}

// Under FsyncInterval a replicated partition's applied writes are synced
// by the interval timer like a single node's, and a replica without a raft
// log on disk (a memory partition) is synced and re-configured without
// touching one.
func TestIntervalFsyncOfAReplicatedPartition(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, func(c *Config) {
		c.Clock = clk
		c.Replication = &Replication{Node: 1, Peers: []uint64{1},
			Send: func(uint64, metadata.Namespace, uint64, *raftpb.Message) {}}
	})
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	interval := Durability{Fsync: metadata.FsyncInterval, Interval: time.Second}
	if err := h.step(s, opInsertOwned(p, interval)); err != nil {
		t.Fatal(err)
	}
	s.settle() // the single voter elects itself
	w := produce(ns, "w")
	s.handle(w.f)
	s.settle()
	if r := w.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	syncs := p.syncs
	clk.Advance(time.Second)
	select {
	case <-s.commit.syncC():
	default:
		t.Fatal("no interval fsync due after an applied write")
	}
	s.commit.syncDue()
	if p.syncs != syncs+1 {
		t.Fatalf("interval fsync synced the partition %d times, want 1", p.syncs-syncs)
	}
	w2 := produce(ns, "w2")
	s.handle(w2.f)
	s.settle()
	w2.answered(t)
	if err := h.step(s, opSetDurability(ns, always)); err != nil {
		t.Fatal(err)
	}
}
