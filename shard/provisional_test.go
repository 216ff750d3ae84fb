package shard

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// announced announces a topic of one partition without committing it,
// and returns the command, the partition the command would create and
// the withdrawal.
func announced(t *testing.T, h *harness, name string) (metadata.CreateTopic, metadata.AnnouncedPartition, func()) {
	t.Helper()
	if _, ok := h.meta.Stream(0); !ok {
		h.apply(metadata.CreateStream{Name: "s"})
	}
	cmd := metadata.CreateTopic{Stream: 0, Name: name, Partitions: 1}
	withdraw := h.meta.Announce(cmd)
	ann := h.meta.Announced()
	if len(ann) != 1 {
		t.Fatalf("announced %v", ann)
	}
	return cmd, ann[0], withdraw
}

// provisionalPartition announces name (announced) and hands its
// partition to s as provisional, as the reconciler's prebuild does.
func provisionalPartition(t *testing.T, h *harness, s *Shard, name string) (metadata.CreateTopic, metadata.AnnouncedPartition, func(), partition.Partition) {
	t.Helper()
	cmd, a, withdraw := announced(t, h, name)
	p := h.build(a.NS, a.CreatedRevision)
	if err := h.step(s, opInsertProvisional(p, noSync)); err != nil {
		t.Fatal(err)
	}
	return cmd, a, withdraw, p
}

// A produce to a provisional partition (its command logged, not yet
// durable) is appended at once and answered only once the partition's
// incarnation commits: no acknowledgement of a write to a topic that may
// still fail to exist (DESIGN behaviour 32, the barrier's own case).
// Reads park until the commit. The reconciler's InsertOwned of the same
// partition confirms it.
func TestProvisionalPartitionHoldsAcksUntilItsCommit(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	cmd, a, withdraw, p := provisionalPartition(t, h, s, "t")
	c := produce(a.NS, "first")
	c.f.Req.Epoch = a.CreatedRevision
	s.handle(c.f)
	s.settle()
	if got := payloads(t, p); len(got) != 1 {
		t.Fatalf("provisional partition holds %q, want the produce appended", got)
	}
	c.pending(t) // appended, not acknowledged: the command is not durable
	read := request(a.NS, &Request{Op: OpOffsets})
	s.handle(read.f)
	s.settle()
	read.pending(t) // nothing of it is shown before the commit
	if st := h.inspect(s); len(st.Provisional) != 1 || len(st.Owned) != 0 {
		t.Fatalf("state %+v: want one provisional partition, none owned", st)
	}

	h.apply(cmd)
	withdraw()
	if err := h.step(s, opInsertOwned(p, noSync)); err != nil {
		t.Fatal(err)
	}
	if r := c.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("produce answered %+v, want offset 0", r)
	}
	if r := read.answered(t); r.Err != nil || r.End != 1 {
		t.Fatalf("offsets answered %+v, want end 1", r)
	}
	if st := h.inspect(s); len(st.Provisional) != 0 || st.Owned[a.NS] != a.CreatedRevision {
		t.Fatalf("state %+v: want the partition owned at %d", st, a.CreatedRevision)
	}
}

// A provisional partition whose command does not commit is torn down:
// its held produces are answered "retry" (not made: nothing of that
// incarnation is ever served) and its parked reads answered.
func TestProvisionalPartitionNotCommittedAnswersNotMade(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	_, a, withdraw, _ := provisionalPartition(t, h, s, "t")
	c := produce(a.NS, "first")
	s.handle(c.f)
	s.settle()
	c.pending(t)
	read := request(a.NS, &Request{Op: OpOffsets})
	s.handle(read.f)
	s.settle()
	withdraw() // the command failed
	var epoch uint64
	if err := h.step(s, opTombstone(a.NS, &epoch)); err != nil {
		t.Fatal(err)
	}
	mustErr(t, c.answered(t), ErrRetry)
	if err := h.step(s, opRemoveOwned(a.NS)); err != nil {
		t.Fatal(err)
	}
	mustErr(t, read.answered(t), ErrRetry)
	if st := h.inspect(s); len(st.Provisional) != 0 || len(st.Owned) != 0 {
		t.Fatalf("state %+v: want nothing held", st)
	}
}

// A shard that replicates its partitions refuses a provisional one: a
// replica serves nothing before its group exists.
func TestProvisionalPartitionRefusedWhenReplicated(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	_, a, withdraw := announced(t, h, "t")
	defer withdraw()
	s.cfg.Replication = &Replication{}
	defer func() { s.cfg.Replication = nil }()
	p := h.build(a.NS, a.CreatedRevision)
	if err := h.step(s, opInsertProvisional(p, noSync)); err == nil {
		t.Fatal("a replicating shard took a provisional partition")
	}
}

// The commit of a provisional partition lands while a read is parked
// behind it and a produce is queued, not yet flushed: the flush appends
// the produce without confirming the partition (a confirmation there
// redispatched the parked read, whose serving flushed the same queue from
// inside the flush and cleared the frames the outer flush was still
// appending: a nil dereference that stopped the pump). The held
// acknowledgement and the read are answered at the confirmation.
func TestProvisionalCommitDuringAFlushWithAParkedRead(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	other, otherEpoch := h.topic("other") // a committed partition on the same shard
	h.insert(s, h.build(other, otherEpoch))
	cmd, a, withdraw, p := provisionalPartition(t, h, s, "t")
	read := request(a.NS, &Request{Op: OpOffsets})
	s.handle(read.f)
	s.settle()
	read.pending(t) // parked behind the provisional partition
	c := produce(a.NS, "first")
	c.f.Req.Epoch = a.CreatedRevision
	next := produce(other, "next")
	for _, f := range []Frame{c.f, next.f} {
		if err := s.TrySend(f); err != nil {
			t.Fatal(err)
		}
	}
	s.handleFrame(s.taken(<-s.inbox)) // queued: another frame waits
	h.apply(cmd)                      // the commit lands before the flush
	withdraw()
	s.handleFrame(s.taken(<-s.inbox)) // the inbox drained: the flush
	s.settle()
	if got := payloads(t, p); len(got) != 1 || got[0] != "first" {
		t.Fatalf("partition holds %q, want the produce appended once", got)
	}
	if r := next.answered(t); r.Err != nil {
		t.Fatalf("the other partition's produce answered %+v", r)
	}
	if err := h.step(s, opInsertOwned(p, noSync)); err != nil {
		t.Fatal(err)
	}
	if r := c.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("produce answered %+v, want offset 0", r)
	}
	if r := read.answered(t); r.Err != nil || r.End != 1 {
		t.Fatalf("offsets answered %+v, want end 1", r)
	}
}

// A produce to a provisional partition is appended and its answer held
// for its topic's commit, which does not come by the request's deadline:
// the shard answers it by then, on its own clock with no reconcile pass,
// with ErrOutcomeUnknown (the record is durable and is served if the
// topic commits) — never left unanswered, never a success. A produce
// with no deadline stays held; the commit that lands later answers it,
// and nothing twice. No timer stays armed once nothing is held.
func TestProvisionalHeldAckAnsweredByItsDeadline(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, manual, func(c *Config) { c.Clock = clk })
	s := h.shards[0]
	cmd, a, withdraw, p := provisionalPartition(t, h, s, "t")
	timed, untimed := produce(a.NS, "timed"), produce(a.NS, "untimed")
	timed.f.Req.Deadline = clk.Now().Add(time.Second)
	for _, c := range []call{timed, untimed} {
		c.f.Req.Epoch = a.CreatedRevision
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		for s.Step() {
		}
	}
	if got := payloads(t, p); len(got) != 2 {
		t.Fatalf("provisional partition holds %q, want both produces appended", got)
	}
	timed.pending(t)
	untimed.pending(t)
	clk.Advance(999 * time.Millisecond)
	for s.Step() {
	}
	timed.pending(t)
	clk.Advance(time.Millisecond)
	for s.Step() {
	}
	mustErr(t, timed.answered(t), ErrOutcomeUnknown)
	untimed.pending(t)

	h.apply(cmd)
	withdraw()
	if err := h.step(s, opInsertOwned(p, noSync)); err != nil {
		t.Fatal(err)
	}
	if r := untimed.answered(t); r.Err != nil || r.Offset != 1 {
		t.Fatalf("the produce with no deadline answered %+v at the commit, want offset 1", r)
	}
	timed.pending(t) // answered once, by its deadline
	if clk.Pending() != 0 {
		t.Fatalf("%d timers armed with nothing held", clk.Pending())
	}
}
