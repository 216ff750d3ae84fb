package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
)

// waitRig is a Manual shard on a manual clock owning one partition.
type waitRig struct {
	t     *testing.T
	h     *harness
	s     *Shard
	clk   *clock.Manual
	ns    metadata.Namespace
	epoch uint64
}

func newWaitRig(t *testing.T, d Durability, opts ...harnessOpt) *waitRig {
	clk := clock.NewManual(time.Unix(1000, 0))
	opts = append([]harnessOpt{manual, func(c *Config) { c.Clock = clk }}, opts...)
	h := newHarness(t, 1, nil, opts...)
	r := &waitRig{t: t, h: h, s: h.shards[0], clk: clk}
	r.ns, r.epoch = h.topic("t")
	if err := r.s.InsertOwned(context.Background(), h.build(r.ns, r.epoch), d); err != nil {
		t.Fatal(err)
	}
	return r
}

// send queues c and steps the shard until it is idle.
func (r *waitRig) send(c call) call {
	r.t.Helper()
	if err := r.s.TrySend(c.f); err != nil {
		r.t.Fatal(err)
	}
	for r.s.Step() {
	}
	return c
}

func (r *waitRig) produce(payloads ...string) {
	r.t.Helper()
	for _, p := range payloads {
		if a := r.send(produce(r.ns, p)).answered(r.t); a.Err != nil {
			r.t.Fatal(a.Err)
		}
	}
}

// op sends a request that is answered at once and returns the answer.
func (r *waitRig) op(req Request) Response {
	r.t.Helper()
	ch := make(chan Response, 1)
	req.NS = r.ns
	return r.send(call{Frame{Req: &req, Reply: ch}, ch}).answered(r.t)
}

func poll(ns metadata.Namespace, req Request) call {
	ch := make(chan Response, 1)
	req.Op, req.NS = OpPoll, ns
	if req.Count == 0 {
		req.Count = 100
	}
	return call{Frame{Req: &req, Reply: ch}, ch}
}

// got lists a batch's payloads, space separated.
func got(r Response) string {
	var out []string
	for _, m := range r.Messages {
		out = append(out, string(m.Payload))
	}
	return strings.Join(out, " ")
}

func wantBatch(t *testing.T, r Response, payloads string, next uint64) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("poll answered %v", r.Err)
	}
	if g := got(r); g != payloads || r.Offset != next {
		t.Fatalf("poll answered %q next %d, want %q next %d", g, r.Offset, payloads, next)
	}
}

// A waiting poll is answered by the produce that satisfies it, with no
// time passing, and costs no timer work while it waits.
func TestWaitingPollWokenByProduce(t *testing.T) {
	for _, d := range []Durability{noSync, always, {Fsync: metadata.FsyncInterval, Interval: time.Hour}} {
		t.Run(fmt.Sprint(d.Fsync), func(t *testing.T) {
			r := newWaitRig(t, d)
			w := r.send(poll(r.ns, Request{MaxWait: 10 * time.Second}))
			w.pending(t)
			if r.clk.Pending() != 1 {
				t.Fatalf("%d timers armed, want the one wait timer", r.clk.Pending())
			}
			r.produce("a")
			wantBatch(t, w.answered(t), "a", 1)
			// Answered exactly once: the deadline finds nothing to answer.
			r.clk.Advance(10 * time.Second)
			for r.s.Step() {
			}
			w.pending(t)
		})
	}
}

// A waiting poll that nothing satisfies is answered at its deadline with
// what there is: nothing, and its own offset as the next one.
func TestWaitingPollDeadline(t *testing.T) {
	r := newWaitRig(t, noSync)
	r.produce("a")
	w := r.send(poll(r.ns, Request{Offset: 1, MaxWait: 2 * time.Second}))
	short := r.send(poll(r.ns, Request{Offset: 1, MaxWait: time.Second, MinCount: 5}))
	r.clk.Advance(999 * time.Millisecond)
	if r.s.Step() {
		t.Fatal("the wait timer fired before the earliest deadline")
	}
	w.pending(t)
	short.pending(t)
	r.clk.Advance(time.Millisecond)
	for r.s.Step() {
	}
	wantBatch(t, short.answered(t), "", 1)
	w.pending(t)
	// A partial batch at the deadline is returned as it is.
	partial := r.send(poll(r.ns, Request{Offset: 1, MaxWait: 5 * time.Second, MinCount: 3}))
	r.produce("b")
	partial.pending(t)
	wantBatch(t, w.answered(t), "b", 2)
	r.clk.Advance(5 * time.Second)
	for r.s.Step() {
	}
	wantBatch(t, partial.answered(t), "b", 2)
	if r.s.polls.waiters.Len() != 0 || r.s.polls.waitC() != nil {
		t.Fatalf("%d waiters left, timer armed %v", r.s.polls.waiters.Len(), r.s.polls.waitC() != nil)
	}
}

// MinCount and the byte budget decide when a waiting poll is satisfied;
// the first message is returned even when it alone exceeds the budget.
func TestWaitingPollMinCountAndBytes(t *testing.T) {
	r := newWaitRig(t, noSync)
	three := r.send(poll(r.ns, Request{MaxWait: time.Minute, MinCount: 3}))
	bytes := r.send(poll(r.ns, Request{MaxWait: time.Minute, MinCount: 100, MaxBytes: 10}))
	r.produce("aaaa", "bbbb")
	three.pending(t)
	bytes.pending(t) // 8 bytes of 10
	r.produce("cccc")
	wantBatch(t, three.answered(t), "aaaa bbbb cccc", 3)
	wantBatch(t, bytes.answered(t), "aaaa bbbb", 2) // the third would exceed 10
	big := r.send(poll(r.ns, Request{Offset: 3, MaxWait: time.Minute, MaxBytes: 2}))
	r.produce("dddddddd")
	wantBatch(t, big.answered(t), "dddddddd", 4)
	// The budget applies to a poll answered at once too.
	wantBatch(t, r.send(poll(r.ns, Request{MaxBytes: 5})).answered(t), "aaaa", 1)
}

// A waiting poll is answered when its partition is torn down, truncated
// past its offset, fenced and evicted, or when the shard closes.
func TestWaitingPollAnsweredOnTeardown(t *testing.T) {
	ctx := context.Background()
	t.Run("tombstone", func(t *testing.T) {
		r := newWaitRig(t, noSync)
		w := r.send(poll(r.ns, Request{MaxWait: time.Minute}))
		if _, err := r.s.Tombstone(ctx, r.ns); err != nil {
			t.Fatal(err)
		}
		a := w.answered(t)
		mustErr(t, a, ErrRetry)
		mustErr(t, a, errTombstoned)
	})
	t.Run("truncate", func(t *testing.T) {
		r := newWaitRig(t, noSync)
		r.produce("a", "b")
		w := r.send(poll(r.ns, Request{Offset: 2, MaxWait: time.Minute}))
		tail := r.send(poll(r.ns, Request{Offset: 2, MaxWait: time.Minute, MinCount: 3}))
		r.op(Request{Op: OpTruncate, Offset: 2})
		w.pending(t) // truncated up to it, not past it
		r.op(Request{Op: OpPurge})
		w.pending(t) // a purge at the end does not pass it either
		r.produce("c")
		wantBatch(t, w.answered(t), "c", 3)
		r.produce("d")
		r.op(Request{Op: OpTruncate, Offset: 3})
		mustErr(t, tail.answered(t), partition.ErrOffsetOutOfRange)
	})
	t.Run("retention", func(t *testing.T) {
		r := newWaitRig(t, Durability{Fsync: metadata.FsyncNever, RetentionBytes: 1})
		r.produce("a", "b", "c")
		w := r.send(poll(r.ns, Request{Offset: 1, MaxWait: time.Minute, MinCount: 10}))
		if _, err := r.s.EnforceRetention(ctx, r.clk.Now()); err != nil {
			t.Fatal(err)
		}
		mustErr(t, w.answered(t), partition.ErrOffsetOutOfRange)
	})
	t.Run("close", func(t *testing.T) {
		r := newWaitRig(t, noSync)
		w := r.send(poll(r.ns, Request{MaxWait: time.Minute}))
		if err := r.s.Close(); err != nil {
			t.Fatal(err)
		}
		mustErr(t, w.answered(t), ErrClosed)
	})
	t.Run("fenced", func(t *testing.T) {
		clk := clock.NewManual(time.Unix(1000, 0))
		h := newHarness(t, 1, nil, manual, func(c *Config) { c.Clock = clk })
		s := h.shards[0]
		ns, epoch := h.topic("t")
		p := &syncCounter{Partition: h.build(ns, epoch)}
		if err := s.InsertOwned(ctx, p, always); err != nil {
			t.Fatal(err)
		}
		r := &waitRig{t: t, h: h, s: s, clk: clk, ns: ns, epoch: epoch}
		w := r.send(poll(ns, Request{MaxWait: time.Minute}))
		p.fail = errors.New("disk gone")
		pr := r.send(produce(ns, "a"))
		if a := pr.answered(t); a.Err == nil {
			t.Fatal("produce acknowledged after a failed fsync")
		}
		mustErr(t, w.answered(t), ErrPartitionFailed)
	})
}

// Past Config.MaxWaiters a waiting poll is refused with ErrTooManyWaiters
// (not retriable in place); polls that need not wait are still served.
func TestWaitingPollBound(t *testing.T) {
	r := newWaitRig(t, noSync, func(c *Config) { c.MaxWaiters = 2 })
	a := r.send(poll(r.ns, Request{MaxWait: time.Minute}))
	b := r.send(poll(r.ns, Request{MaxWait: time.Minute}))
	c := r.send(poll(r.ns, Request{MaxWait: time.Minute}))
	a.pending(t)
	b.pending(t)
	if st, err := r.s.Inspect(context.Background()); err != nil || st.Waiting != 2 {
		t.Fatalf("Inspect: %d waiting, %v; want 2", st.Waiting, err)
	}
	refused := c.answered(t)
	mustErr(t, refused, ErrTooManyWaiters)
	if errors.Is(refused.Err, ErrRetry) {
		t.Fatal("ErrTooManyWaiters wraps ErrRetry")
	}
	if got := r.h.drops("0", "poll", metrics.ReasonWaitersFull); got != 1 {
		t.Fatalf("waiters_full drops = %v, want 1", got)
	}
	wantBatch(t, r.send(poll(r.ns, Request{})).answered(t), "", 0)
	r.produce("x")
	wantBatch(t, a.answered(t), "x", 1)
	wantBatch(t, b.answered(t), "x", 1)
	r.send(poll(r.ns, Request{Offset: 1, MaxWait: time.Minute})).pending(t) // room again
}

// Each start position resolves against the partition.
func TestPollStartPositions(t *testing.T) {
	r := newWaitRig(t, noSync)
	for _, p := range []string{"a", "b", "c", "d"} {
		r.clk.Advance(time.Second)
		r.produce(p)
	}
	t0 := r.clk.Now() // "d" was appended at t0, "c" at t0-1s
	store := func(consumer string, off uint64) {
		t.Helper()
		if a := r.op(Request{Op: OpStoreOffset, Consumer: consumer, Offset: off}); a.Err != nil {
			t.Fatal(a.Err)
		}
	}
	cases := []struct {
		name    string
		req     Request
		want    string
		next    uint64
		wantErr error
	}{
		{"offset", Request{Offset: 1}, "b c d", 4, nil},
		{"offset past the end reads as the end", Request{Offset: 99}, "", 4, nil},
		{"first", Request{Start: StartFirst}, "b c d", 4, nil},
		{"last", Request{Start: StartLast}, "d", 4, nil},
		{"timestamp", Request{Start: StartTimestamp, Timestamp: t0.Add(-time.Second).UnixMicro()}, "c d", 4, nil},
		{"timestamp between", Request{Start: StartTimestamp, Timestamp: t0.Add(-1500 * time.Millisecond).UnixMicro()}, "c d", 4, nil},
		{"timestamp after all", Request{Start: StartTimestamp, Timestamp: t0.Add(time.Millisecond).UnixMicro()}, "", 4, nil},
		{"next none earliest", Request{Start: StartNext, Consumer: "none"}, "b c d", 4, nil},
		{"next none latest", Request{Start: StartNext, Consumer: "none", Reset: ResetLatest}, "", 4, nil},
		{"next none error", Request{Start: StartNext, Consumer: "none", Reset: ResetError}, "", 0, partition.ErrOffsetOutOfRange},
		{"next stored", Request{Start: StartNext, Consumer: "c2", Reset: ResetError}, "c d", 4, nil},
		{"next stored (UseConsumer)", Request{UseConsumer: true, Consumer: "c2"}, "c d", 4, nil},
		{"next below start earliest", Request{Start: StartNext, Consumer: "c0"}, "b c d", 4, nil},
		{"next below start latest", Request{Start: StartNext, Consumer: "c0", Reset: ResetLatest}, "", 4, nil},
		{"next below start error", Request{Start: StartNext, Consumer: "c0", Reset: ResetError}, "", 0, partition.ErrOffsetOutOfRange},
	}
	store("c2", 2)
	store("c0", 0)
	r.op(Request{Op: OpTruncate, Offset: 1})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := r.send(poll(r.ns, c.req)).answered(t)
			if c.wantErr != nil {
				mustErr(t, a, c.wantErr)
				return
			}
			wantBatch(t, a, c.want, c.next)
		})
	}
	mustErr(t, r.send(poll(r.ns, Request{Offset: 0})).answered(t), partition.ErrOffsetOutOfRange)
	// A waiting "last" on an empty partition waits for the next message.
	r.op(Request{Op: OpPurge})
	w := r.send(poll(r.ns, Request{Start: StartLast, MaxWait: time.Minute}))
	r.produce("e")
	wantBatch(t, w.answered(t), "e", 5)
	// OpOffsets reports start, end and a consumer's stored offset.
	o := r.op(Request{Op: OpOffsets, Consumer: "c2"})
	if o.Err != nil || o.Start != 4 || o.End != 5 || !o.Found || o.Offset != 2 {
		t.Fatalf("offsets = %+v, want start 4, end 5, stored 2", o)
	}
	if o := r.op(Request{Op: OpOffsets}); o.Err != nil || o.Found || o.Start != 4 || o.End != 5 {
		t.Fatalf("offsets without a consumer = %+v", o)
	}
}

// On a replicated partition a waiting leader read is woken on the leader
// by the apply that makes the produce readable, a waiting local read on a
// follower by the follower's apply; every replica stores the leader's
// append time. When leadership moves, the leader reads waiting on the old
// leader are sent to the new one.
func TestWaitingPollReplicated(t *testing.T) {
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
	follower := lead%3 + 1
	leaderRead := poll(ns, Request{FromLeader: true, MaxWait: time.Minute})
	n.shard(lead).handle(leaderRead.f)
	localRead := poll(ns, Request{MaxWait: time.Minute})
	n.shard(follower).handle(localRead.f)
	n.settle()
	leaderRead.pending(t)
	localRead.pending(t)
	if w := n.shard(lead).polls.waiters.Len(); w != 1 {
		t.Fatalf("leader holds %d waiting polls, want 1", w)
	}
	c := produce(ns, "x")
	n.shard(lead).handle(c.f)
	n.settle()
	if r := c.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	wantBatch(t, leaderRead.answered(t), "x", 1)
	wantBatch(t, localRead.answered(t), "x", 1)
	var at int64
	for id, p := range parts {
		msgs, err := p.Read(0, 1)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("node %d: %d messages, %v", id, len(msgs), err)
		}
		if at == 0 {
			at = msgs[0].AppendTime
		}
		if msgs[0].AppendTime != at || at == 0 {
			t.Fatalf("node %d stores append time %d, another replica %d", id, msgs[0].AppendTime, at)
		}
	}

	// Leadership moves away: the waiting leader read is answered "not
	// leader"; a waiting local read stays.
	stale := poll(ns, Request{Offset: 1, FromLeader: true, MaxWait: time.Minute})
	n.shard(lead).handle(stale.f)
	local := poll(ns, Request{Offset: 1, MaxWait: time.Minute})
	n.shard(lead).handle(local.f)
	n.settle()
	stale.pending(t)
	n.cut[lead] = true
	for range 500 {
		if n.leaderAmong(ns, lead) != 0 {
			break
		}
		n.tick(1)
	}
	n.cut[lead] = false
	n.tick(20) // the old leader hears of the new term
	// Not leader (with the new leader's id), or no leader known while
	// the old one stepped down: both send the client on.
	if a := stale.answered(t); !errors.Is(a.Err, ErrNotLeader) && !errors.Is(a.Err, errNoLeader) {
		t.Fatalf("waiting leader read on a deposed leader answered %+v", a)
	}
	local.pending(t)
}
