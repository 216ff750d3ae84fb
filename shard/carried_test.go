package shard

import (
	"errors"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// carriedCall is a carried produce of payload to ns at epoch (the first
// messages of a new partition, logged with its topic's command) and what
// its Carried callback was told.
type carriedCall struct {
	call
	settled []error
}

// carriedHarness is a one-shard harness on a manual clock, so that the
// carried messages' deferred fsync runs when a test says.
func carriedHarness(t *testing.T) (*harness, *Shard, *clock.Manual) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, func(c *Config) { c.Clock = clk })
	return h, h.shards[0], clk
}

// loggedCarriedHarness is carriedHarness whose shard's Config.Carried
// answers for the carried produce the test puts in *logged: what the
// host's metadata log would hold.
func loggedCarriedHarness(t *testing.T) (*harness, *Shard, **carriedCall) {
	logged := new(*carriedCall)
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, func(c *Config) {
		c.Clock = clk
		c.Carried = func(ns metadata.Namespace, epoch uint64) *Request {
			if back := *logged; back != nil && back.f.Req.NS == ns && back.f.Req.Epoch == epoch {
				return back.f.Req
			}
			return nil
		}
	})
	return h, h.shards[0], logged
}

// firstThenLater checks that the carried messages ("first") took offset
// 0 and the produce after them ("later") offset 1.
func firstThenLater(t *testing.T, later call, p partition.Partition) {
	t.Helper()
	if r := later.answered(t); r.Err != nil || r.Offset != 1 {
		t.Fatalf("the produce after the carried messages answered %+v, want offset 1", r)
	}
	if got := payloads(t, p); len(got) != 2 || got[0] != "first" || got[1] != "later" {
		t.Fatalf("partition holds %q, want [first later]", got)
	}
}

// carriedSyncRuns advances clk to the carried messages' fsync and runs
// the timer's work, as the pump would.
func carriedSyncRuns(t *testing.T, s *Shard, clk *clock.Manual) {
	t.Helper()
	clk.Advance(carriedSyncDelay)
	c := s.commit.syncC()
	if c == nil {
		t.Fatal("no timer armed for the carried messages' fsync")
	}
	<-c
	s.commit.syncDue()
}

func carriedProduce(ns metadata.Namespace, epoch uint64, payload string) *carriedCall {
	c := &carriedCall{call: produce(ns, payload)}
	c.f.Req.Epoch = epoch
	c.f.Req.Carried = func(err error) { c.settled = append(c.settled, err) }
	return c
}

// A carried produce to an FsyncAlways partition is answered once
// appended, without waiting for the partition's fsync (the metadata log's
// fsync made it durable, so a reader sees it at once too), and told once
// the fsync that covers it is done, so the metadata log may forget it:
// that fsync runs carriedSyncDelay later, not beside the next create's
// metadata fsync (DESIGN behaviour 32).
func TestCarriedProduceAnsweredBeforeItsFsync(t *testing.T) {
	h, s, clk := carriedHarness(t)
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	if err := h.step(s, opInsertOwned(p, always)); err != nil {
		t.Fatal(err)
	}
	c := carriedProduce(ns, epoch, "first")
	s.handle(c.f)
	if r := c.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("carried produce answered %+v, want offset 0", r)
	}
	if p.syncs != 0 || len(c.settled) != 0 {
		t.Fatalf("before the group's fsync: %d syncs, settled %v; want none", p.syncs, c.settled)
	}
	if _, kept := s.carried[ns]; !kept {
		t.Fatal("the carried produce is not kept until its fsync")
	}
	poll := request(ns, &Request{Op: OpPoll, Count: 10})
	s.handle(poll.f)
	s.maybeFlush()
	if r := poll.answered(t); len(r.Messages) != 1 || p.syncs != 0 {
		t.Fatalf("poll: %+v after %d fsyncs, want the message before any", r, p.syncs)
	}
	carriedSyncRuns(t, s, clk)
	if p.syncs != 1 || len(c.settled) != 1 || c.settled[0] != nil {
		t.Fatalf("settled %v, want one nil after the fsync", c.settled)
	}
	if _, kept := s.carried[ns]; kept {
		t.Fatal("the carried produce is still kept after its fsync")
	}
}

// A carried produce to a partition that holds anything appends nothing:
// its messages were the partition's first, so they are there (what a log
// keeps is a prefix of it). It is answered with offset 0 and settled
// after the partition's next fsync.
func TestCarriedProduceToANonEmptyPartitionAppendsNothing(t *testing.T) {
	h, s, clk := carriedHarness(t)
	ns, epoch := h.topic("t")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	if _, err := p.Append(produce(ns, "first").f.Req.Messages); err != nil {
		t.Fatal(err)
	}
	if err := h.step(s, opInsertOwned(p, always)); err != nil {
		t.Fatal(err)
	}
	c := carriedProduce(ns, epoch, "first")
	s.handle(c.f)
	s.maybeFlush()
	if r := c.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("carried produce answered %+v, want offset 0", r)
	}
	if got := payloads(t, p); len(got) != 1 {
		t.Fatalf("partition holds %q, want the one first message", got)
	}
	carriedSyncRuns(t, s, clk)
	if len(c.settled) != 1 || c.settled[0] != nil {
		t.Fatalf("settled %v, want one nil", c.settled)
	}
}

// A failed fsync of a carried produce's partition fences it, and the
// rebuilt partition (which may have lost the messages: here it holds
// nothing) gets them back before anything parked for it is served, so no
// later produce takes the offsets they were acknowledged at.
func TestCarriedProduceGivenBackToARebuiltPartition(t *testing.T) {
	h, s, clk := carriedHarness(t)
	ns, epoch := h.topic("t")
	eio := errors.New("EIO")
	p := &syncCounter{Partition: h.build(ns, epoch), fail: eio}
	if err := h.step(s, opInsertOwned(p, always)); err != nil {
		t.Fatal(err)
	}
	c := carriedProduce(ns, epoch, "first")
	s.handle(c.f)
	if r := c.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("carried produce answered %+v, want offset 0", r)
	}
	carriedSyncRuns(t, s, clk)
	if len(c.settled) != 1 || !errors.Is(c.settled[0], eio) {
		t.Fatalf("settled %v, want the fsync's error", c.settled)
	}
	if err := evictStepped(s, ns); err != nil {
		t.Fatal(err)
	}
	later := produce(ns, "later")
	later.f.Req.Epoch = epoch
	s.handle(later.f) // parks: the partition is being rebuilt
	later.pending(t)

	if err := h.store.Remove(ns); err != nil { // the rebuild finds nothing of it on disk
		t.Fatal(err)
	}
	rebuilt := &syncCounter{Partition: h.build(ns, epoch)}
	if err := h.step(s, opInsertOwned(rebuilt, always)); err != nil {
		t.Fatal(err)
	}
	s.maybeFlush() // the later produce's group takes the given-back copy
	firstThenLater(t, later, rebuilt)
	if len(c.settled) != 2 || c.settled[1] != nil {
		t.Fatalf("settled %v, want nil once the rebuilt partition's fsync covered it", c.settled)
	}
	if _, kept := s.carried[ns]; kept {
		t.Fatal("still kept after the fsync")
	}
}

// A carried batch the metadata log still holds after a restart
// (Config.Carried) is appended first when the partition is built empty
// (its journal lost it), and not again when the partition holds it:
// then, synced at its build, the log may forget it at once. Either way a
// produce parked meanwhile lands after it.
func TestCarriedFromTheLogLandsFirstAtTheBuild(t *testing.T) {
	for _, kept := range []bool{false, true} {
		name := "journal lost it"
		if kept {
			name = "journal kept it"
		}
		t.Run(name, func(t *testing.T) {
			h, s, logged := loggedCarriedHarness(t)
			ns, epoch := h.topic("t")
			back := carriedProduce(ns, epoch, "first")
			*logged = back
			later := produce(ns, "later")
			later.f.Req.Epoch = epoch
			s.handle(later.f)
			later.pending(t)
			p := &syncCounter{Partition: h.build(ns, epoch)}
			if kept {
				if _, err := p.Append(produce(ns, "first").f.Req.Messages); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.step(s, opInsertOwned(p, always)); err != nil {
				t.Fatal(err)
			}
			if kept && (len(back.settled) != 1 || back.settled[0] != nil) {
				t.Fatalf("settled %v at the build of a partition holding it, want nil", back.settled)
			}
			s.maybeFlush()
			firstThenLater(t, later, p)
			if len(back.settled) != 1 || back.settled[0] != nil {
				t.Fatalf("settled %v, want one nil", back.settled)
			}
		})
	}
}

// A provisional partition confirmed without its carried produce having
// reached it (its sender could not hand it over) takes the messages from
// the metadata log (Config.Carried) at the confirmation, before a
// produce that arrived after the commit.
func TestCarriedFromTheLogAtTheConfirmation(t *testing.T) {
	h, s, logged := loggedCarriedHarness(t)
	cmd, a, withdraw := announced(t, h, "t")
	p := &syncCounter{Partition: h.build(a.NS, a.CreatedRevision)}
	if err := h.step(s, opInsertProvisional(p, always)); err != nil {
		t.Fatal(err)
	}
	back := carriedProduce(a.NS, a.CreatedRevision, "first")
	*logged = back
	h.apply(cmd)
	withdraw()
	later := produce(a.NS, "later") // the first frame after the commit confirms
	later.f.Req.Epoch = a.CreatedRevision
	s.handle(later.f)
	s.maybeFlush()
	firstThenLater(t, later, p)
	if len(back.settled) != 1 || back.settled[0] != nil {
		t.Fatalf("settled %v, want nil after the group's fsync", back.settled)
	}
}

// A carried produce to a provisional partition is answered, like any
// produce to one, only once its incarnation commits — but without an
// fsync of the partition; if the command does not commit, it is answered
// "not made".
func TestCarriedProduceToAProvisionalPartition(t *testing.T) {
	h, s, clk := carriedHarness(t)
	cmd, a, withdraw := announced(t, h, "t")
	p := &syncCounter{Partition: h.build(a.NS, a.CreatedRevision)}
	if err := h.step(s, opInsertProvisional(p, always)); err != nil {
		t.Fatal(err)
	}
	c := carriedProduce(a.NS, a.CreatedRevision, "first")
	s.handle(c.f)
	s.maybeFlush()
	c.pending(t) // held: the command is not durable yet
	if p.syncs != 0 {
		// The pump would be in this fsync when the commit's
		// confirmation arrives, and the answer would wait for it.
		t.Fatalf("a provisional partition's carried append synced %d times before its commit", p.syncs)
	}
	h.apply(cmd)
	withdraw()
	if err := h.step(s, opInsertOwned(p, always)); err != nil {
		t.Fatal(err)
	}
	if r := c.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("answered %+v at the commit, want offset 0", r)
	}
	if p.syncs != 0 || len(c.settled) != 0 {
		t.Fatalf("the answer waited for %d fsyncs of the partition (settled %v)", p.syncs, c.settled)
	}
	carriedSyncRuns(t, s, clk) // the partition's fsync follows the answer
	if p.syncs != 1 || len(c.settled) != 1 || c.settled[0] != nil {
		t.Fatalf("after the commit: %d fsyncs, settled %v; want 1 and nil", p.syncs, c.settled)
	}

	_, b, withdrawB := announced(t, h, "u")
	q := &syncCounter{Partition: h.build(b.NS, b.CreatedRevision)}
	if err := h.step(s, opInsertProvisional(q, always)); err != nil {
		t.Fatal(err)
	}
	d := carriedProduce(b.NS, b.CreatedRevision, "first")
	s.handle(d.f)
	withdrawB() // its command failed
	var epoch uint64
	if err := h.step(s, opTombstone(b.NS, &epoch)); err != nil {
		t.Fatal(err)
	}
	mustErr(t, d.answered(t), ErrRetry)
	if _, kept := s.carried[b.NS]; kept {
		t.Fatal("a torn-down incarnation's carried produce is still kept")
	}
}

// Under another policy than FsyncAlways a carried produce takes the
// ordinary path: answered as appended, never settled, not kept.
func TestCarriedProduceUnderIntervalIsOrdinary(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	if err := h.step(s, opInsertOwned(h.build(ns, epoch), noSync)); err != nil {
		t.Fatal(err)
	}
	c := carriedProduce(ns, epoch, "first")
	s.handle(c.f)
	if r := c.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("answered %+v", r)
	}
	if len(c.settled) != 0 {
		t.Fatalf("settled %v under FsyncNever", c.settled)
	}
	if _, kept := s.carried[ns]; kept {
		t.Fatal("kept under FsyncNever")
	}
}

// A carried partition's fsync shares the next commit group of the shard,
// whatever partition that group is for: one fsync of the journal (here
// the partitions' own syncs, counted) covers both, and the carried
// produce is settled with the group, before its delay is up.
func TestCarriedSyncJoinsTheNextGroup(t *testing.T) {
	h, s, _ := carriedHarness(t)
	ns, epoch := h.topic("t")
	other, otherEpoch := h.topic("u")
	p := &syncCounter{Partition: h.build(ns, epoch)}
	q := &syncCounter{Partition: h.build(other, otherEpoch)}
	for _, x := range []*syncCounter{p, q} {
		if err := h.step(s, opInsertOwned(x, always)); err != nil {
			t.Fatal(err)
		}
	}
	c := carriedProduce(ns, epoch, "first")
	s.handle(c.f)
	c.answered(t)
	w := produce(other, "w")
	s.handle(w.f)
	s.maybeFlush()
	if r := w.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	if p.syncs != 1 || q.syncs != 1 || len(c.settled) != 1 || c.settled[0] != nil {
		t.Fatalf("after the other partition's group: syncs %d and %d, settled %v; want the carried one in the group", p.syncs, q.syncs, c.settled)
	}
	s.commit.syncDue() // its timer finds nothing left to do
	if p.syncs != 1 {
		t.Fatalf("synced again: %d", p.syncs)
	}
}
