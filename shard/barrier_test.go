package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
)

// Behaviour 3: a request for a committed but unmaterialised namespace parks,
// stamped with the committed created_revision at park time; with no
// committed metadata it parks unstamped.
func TestBehaviour03ParkStampedWithCommittedRevision(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	unknown, _ := metadata.NewNamespace(0, 0, 0)
	early := produce(unknown, "early")
	s.handle(early.f) // metadata does not know (0,0,0) yet
	ns, rev := h.topic("t")
	if ns != unknown {
		t.Fatalf("topic namespace %v, want %v", ns, unknown)
	}
	late := produce(ns, "late")
	s.handle(late.f)
	early.pending(t)
	late.pending(t)

	q := s.park.byNS[ns]
	if q == nil || q.len() != 2 {
		t.Fatalf("parked queue = %+v, want 2 frames", q)
	}
	if got := q.frames[q.head].stamp; got != 0 {
		t.Errorf("frame parked before the commit stamped %d, want none (0)", got)
	}
	if got := q.frames[q.head+1].stamp; got != rev {
		t.Errorf("frame parked after the commit stamped %d, want created_revision %d", got, rev)
	}
	if st := h.inspect(s); st.ParkedFrames != 2 || len(st.Parked) != 1 || st.Parked[0].NS != ns {
		t.Errorf("Inspect = %+v", st)
	}
}

// Behaviour 4: on materialisation at epoch E, frames stamped E or unstamped
// are served; frames stamped with another epoch are rejected as stale and
// answered — never served into the replacement.
func TestBehaviour04RedispatchServesOnlyMatchingIncarnation(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, _ := metadata.NewNamespace(0, 0, 0)
	unstamped := produce(ns, "unstamped")
	s.handle(unstamped.f)
	h.topic("t")
	dead := produce(ns, "dead") // stamped with the first incarnation
	s.handle(dead.f)
	epoch := h.recreate(ns, "t")
	live := produce(ns, "live")
	s.handle(live.f)

	p := h.build(ns, epoch)
	h.insert(s, p)

	if r := unstamped.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("unstamped frame: %+v, want served at 0", r)
	}
	mustErr(t, dead.answered(t), ErrStaleIncarnation)
	if r := live.answered(t); r.Err != nil || r.Offset != 1 {
		t.Fatalf("frame stamped with E: %+v, want served at 1", r)
	}
	if got := payloads(t, p); !slices.Equal(got, []string{"unstamped", "live"}) {
		t.Fatalf("partition holds %q: the dead incarnation's frame leaked in", got)
	}
	if got := testutil.ToFloat64(h.m.StaleRejects.WithLabelValues("0")); got != 1 {
		t.Fatalf("stale rejects = %v, want 1", got)
	}
	if st := h.inspect(s); st.ParkedFrames != 0 || s.park.bytes != 0 {
		t.Fatalf("park buffer not empty after re-dispatch: %+v", st)
	}
}

// Behaviour 5: re-dispatched frames keep their arrival order, ahead of
// newer frames already waiting in the inbox. The pump is started with the
// InsertOwned already queued behind newer inbox frames: control precedes
// the inbox, so the parked frames must be served first. (The reference
// design appends re-dispatched frames behind the inbox and fails this.)
func TestBehaviour05RedispatchKeepsArrivalOrderAheadOfInbox(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	var parked []call
	for _, p := range []string{"p1", "p2", "p3"} {
		c := produce(ns, p)
		s.handle(c.f)
		parked = append(parked, c)
	}
	var newer []call
	for _, p := range []string{"n1", "n2"} {
		c := produce(ns, p)
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		newer = append(newer, c)
	}
	p := h.build(ns, epoch)
	op := opInsertOwned(p, noSync)
	if err := s.enqueue(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	s.Start()
	if err := <-op.done; err != nil {
		t.Fatal(err)
	}
	var offsets []uint64
	for _, c := range append(parked, newer...) {
		r := <-c.reply
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		offsets = append(offsets, r.Offset)
	}
	if want := []uint64{0, 1, 2, 3, 4}; !slices.Equal(offsets, want) {
		t.Fatalf("offsets of p1 p2 p3 n1 n2 = %v, want %v", offsets, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// Behaviour 6: during re-dispatch to another shard, a frame the owner's
// inbox refuses as full is re-parked keeping its age and order; once the
// owner is disconnected, the client frames are answered instead.
func TestBehaviour06RedispatchRefusedIsReparkedOrAnswered(t *testing.T) {
	// Shard 0 receives the frames (hash fallback, nothing committed); the
	// committed placement puts the namespace on shard 1, whose inbox holds
	// one frame.
	h := newHarness(t, 2, func(metadata.Namespace, int) int { return 1 })
	h.shards[1].inbox = make(chan inboxFrame, 1)
	s0, s1 := h.shards[0], h.shards[1]
	ns, _ := metadata.NewNamespace(0, 0, 0)
	var calls []call
	for _, p := range []string{"a", "b", "c"} {
		c := produce(ns, p)
		s0.handle(c.f)
		calls = append(calls, c)
	}
	h.sweep(s0, nil) // age the frames by one pass
	_, rev := h.topic("t")

	if err := h.step(s0, opSetRow(ns, router.Row{Owner: 1, Epoch: rev})); err != nil {
		t.Fatal(err)
	}
	if got := len(s1.inbox); got != 1 {
		t.Fatalf("owner inbox holds %d frames, want 1", got)
	}
	if in := <-s1.inbox; string(in.f.Req.Messages[0].Payload) != "a" {
		t.Fatalf("forwarded %q first, want a", in.f.Req.Messages[0].Payload)
	}
	q := s0.park.byNS[ns]
	if q == nil || q.len() != 2 {
		t.Fatalf("refused frames not re-parked: %+v", q)
	}
	for i, want := range []string{"b", "c"} {
		pf := q.frames[q.head+i]
		if string(pf.frame.Req.Messages[0].Payload) != want || pf.pass != 0 {
			t.Fatalf("re-parked frame %d = %q born at pass %d, want %q born at pass 0 (age kept)",
				i, pf.frame.Req.Messages[0].Payload, pf.pass, want)
		}
	}
	calls[1].pending(t)

	_ = s1.Close() // disconnected from now on
	if err := h.step(s0, opSetRow(ns, router.Row{Owner: 1, Epoch: rev})); err != nil {
		t.Fatal(err)
	}
	mustErr(t, calls[1].answered(t), ErrRetry)
	mustErr(t, calls[2].answered(t), ErrRetry)
	if got := h.drops("0", "produce", metrics.ReasonDisconnected); got != 2 {
		t.Fatalf("disconnected drops = %v, want 2", got)
	}
	if s0.park.frames != 0 || s0.park.bytes != 0 {
		t.Fatalf("park totals %d frames %d bytes, want 0", s0.park.frames, s0.park.bytes)
	}
}

// Behaviour 7: all three park bounds shed with a retriable answer and a
// count; footprints are rounded up to the alignment and kept as running
// totals.
func TestBehaviour07ParkBounds(t *testing.T) {
	t.Run("frames per namespace", func(t *testing.T) {
		h := newHarness(t, 1, nil, func(c *Config) { c.Park.FramesPerNamespace = 2 })
		s := h.shards[0]
		ns, _ := h.topic("t")
		a, b, c := produce(ns, "a"), produce(ns, "b"), produce(ns, "c")
		s.handle(a.f)
		s.handle(b.f)
		s.handle(c.f)
		a.pending(t)
		b.pending(t)
		mustErr(t, c.answered(t), ErrRetry)
		if got := h.drops("0", "produce", metrics.ReasonParkOverflow); got != 1 {
			t.Fatalf("park_overflow = %v, want 1", got)
		}
	})
	t.Run("bytes per namespace", func(t *testing.T) {
		h := newHarness(t, 1, nil, func(c *Config) { c.Park.BytesPerNamespace = 8192 })
		s := h.shards[0]
		ns, _ := h.topic("t")
		big := sized(ns, 5000) // 5000 + overhead rounds up to 8192
		s.handle(big.f)
		big.pending(t)
		if s.park.bytes != 8192 {
			t.Fatalf("footprint = %d, want 8192 (rounded up to 4 KiB)", s.park.bytes)
		}
		small := sized(ns, 1)
		s.handle(small.f)
		mustErr(t, small.answered(t), ErrRetry)
	})
	t.Run("footprint rounds up to the alignment and no further", func(t *testing.T) {
		h := newHarness(t, 1, nil)
		s := h.shards[0]
		// A frame's footprint is its payload plus a fixed overhead,
		// rounded up to the 4 KiB alignment.
		fit := 4096 - frameOverhead
		for i, c := range []struct {
			size int
			want int64
		}{{0, 4096}, {fit - 1, 4096}, {fit, 4096}, {fit + 1, 8192}} {
			ns, _ := h.topic(string(rune('a' + i)))
			before := s.park.bytes
			s.handle(sized(ns, c.size).f)
			if got := s.park.bytes - before; got != c.want {
				t.Errorf("a %d-byte frame counts %d bytes, want %d", c.size, got, c.want)
			}
		}
	})
	t.Run("peer frames and keys count their real size", func(t *testing.T) {
		h := newHarness(t, 1, nil)
		s := h.shards[0]
		// Each frame carries 5000 bytes beyond its fixed part, which with
		// the overhead rounds up to 8 KiB; counting only produce payloads
		// charged the first three 4 KiB.
		raft := &raftpb.Message{Type: raftpb.MsgApp.Enum(), Entries: []*raftpb.Entry{{Data: make([]byte, 4990)}}}
		keyed := produce(0, "")
		keyed.f.Req.Messages[0].Key = make([]byte, 5000)
		for i, r := range []*Request{
			{Op: OpRaft, Epoch: 1, Raft: raft},
			{Op: OpCatchUp, Epoch: 1, Payload: make([]byte, 5000)},
			keyed.f.Req,
			sized(0, 5000).f.Req,
		} {
			ns, _ := h.topic(string(rune('a' + i)))
			r.NS = ns
			before := s.park.bytes
			s.handle(Frame{Req: r})
			if got := s.park.bytes - before; got != 8192 {
				t.Errorf("%v frame %d counts %d bytes, want 8192", r.Op, i, got)
			}
		}
	})
	t.Run("bytes per shard", func(t *testing.T) {
		h := newHarness(t, 1, nil, func(c *Config) { c.Park.BytesPerShard = 8192 })
		s := h.shards[0]
		n1, _ := h.topic("t1")
		n2, _ := h.topic("t2")
		n3, _ := h.topic("t3")
		c1, c2, c3 := sized(n1, 10), sized(n2, 10), sized(n3, 10)
		s.handle(c1.f)
		s.handle(c2.f)
		s.handle(c3.f)
		c1.pending(t)
		c2.pending(t)
		mustErr(t, c3.answered(t), ErrRetry)
		if s.park.bytes != 8192 || s.park.frames != 2 {
			t.Fatalf("totals %d bytes %d frames, want 8192 and 2", s.park.bytes, s.park.frames)
		}
		if got := testutil.ToFloat64(h.m.ParkedBytes.WithLabelValues("0")); got != 8192 {
			t.Fatalf("parked bytes gauge = %v, want 8192", got)
		}
	})
	t.Run("running totals follow every mutation", func(t *testing.T) {
		h := newHarness(t, 1, nil)
		s := h.shards[0]
		rng := rand.New(rand.NewPCG(1, 2))
		var nss []metadata.Namespace
		for i := range 4 {
			ns, _ := h.topic(string(rune('a' + i)))
			nss = append(nss, ns)
		}
		for range 500 {
			ns := nss[rng.IntN(len(nss))]
			switch rng.IntN(4) {
			case 0, 1:
				s.handle(sized(ns, rng.IntN(9000)).f)
			case 2:
				h.sweep(s, nil)
			case 3:
				s.answerParked(ns, metrics.ReasonRemoved, errRemoved)
			}
			var frames int
			var bytes int64
			for _, q := range s.park.byNS {
				frames += q.len()
				bytes += q.bytes
			}
			if frames != s.park.frames || bytes != s.park.bytes || s.park.order.Len() != len(s.park.byNS) {
				t.Fatalf("running totals %d/%d drifted from contents %d/%d", s.park.frames, s.park.bytes, frames, bytes)
			}
		}
	})
}

// Behaviour 8: a parked frame survives at most MaxPasses sweeps, then is
// answered with a retriable error.
func TestBehaviour08ParkedFrameAgesOut(t *testing.T) {
	h := newHarness(t, 1, nil, func(c *Config) { c.Park.MaxPasses = 3 })
	s := h.shards[0]
	ns, _ := h.topic("t")
	old := produce(ns, "old")
	s.handle(old.f)
	h.sweep(s, nil)
	young := produce(ns, "young")
	s.handle(young.f)
	h.sweep(s, nil)
	old.pending(t)
	if res := h.sweep(s, nil); res.Expired != 1 {
		t.Fatalf("third sweep expired %d frames, want 1", res.Expired)
	}
	mustErr(t, old.answered(t), ErrRetry)
	young.pending(t)
	h.sweep(s, nil)
	mustErr(t, young.answered(t), ErrRetry)
	if got := h.drops("0", "produce", metrics.ReasonParkExpired); got != 2 {
		t.Fatalf("park_expired = %v, want 2", got)
	}
}

// Behaviour 9: a tombstoned namespace is answered with a retriable error,
// not served, and the deny is counted.
func TestBehaviour09TombstonedNamespaceDenied(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := h.build(ns, epoch)
	h.insert(s, p)
	var got uint64
	if err := h.step(s, opTombstone(ns, &got)); err != nil || got != epoch {
		t.Fatalf("tombstone: epoch %d err %v", got, err)
	}
	c := produce(ns, "x")
	s.handle(c.f)
	mustErr(t, c.answered(t), ErrRetry)
	if got := testutil.ToFloat64(h.m.TransientDenies.WithLabelValues("0", metrics.DenyTombstoned)); got != 1 {
		t.Fatalf("tombstoned denies = %v, want 1", got)
	}
	if _, ok := h.rt.Table().Get(ns); ok {
		t.Fatal("routing row survived the tombstone")
	}
	if err := h.step(s, opRemoveOwned(ns)); err != nil {
		t.Fatal(err)
	}
	if len(s.tombstoned) != 0 {
		t.Fatal("tombstone not cleared by RemoveOwned")
	}
}

// Behaviour 10: when the committed created_revision disagrees with the
// incarnation the shard holds, the request is refused (retriable), never
// acked against the incarnation teardown is about to erase.
func TestBehaviour10IncarnationFence(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	p := h.build(ns, epoch)
	h.insert(s, p)
	ok := produce(ns, "before")
	s.handle(ok.f)
	if r := ok.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.recreate(ns, "t") // committed, not yet reconciled
	c := produce(ns, "after")
	s.handle(c.f)
	mustErr(t, c.answered(t), ErrRetry)
	if got := payloads(t, p); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("dead incarnation holds %q", got)
	}
	h.apply(metadata.DeleteTopic{Stream: ns.Stream(), Topic: ns.Topic()}) // deleted outright
	d := produce(ns, "deleted")
	s.handle(d.f)
	mustErr(t, d.answered(t), ErrRetry)
	if got := testutil.ToFloat64(h.m.TransientDenies.WithLabelValues("0", metrics.DenyIncarnation)); got != 2 {
		t.Fatalf("incarnation denies = %v, want 2", got)
	}
	// A frame addressed to an explicit dead epoch is stale even though the
	// namespace is materialised (replicated traffic, behaviour 20's fence).
	h2 := newHarness(t, 1, nil)
	ns2, e2 := h2.topic("t")
	h2.insert(h2.shards[0], h2.build(ns2, e2))
	st := produce(ns2, "x")
	st.f.Req.Epoch = e2 + 100
	h2.shards[0].handle(st.f)
	mustErr(t, st.answered(t), ErrStaleIncarnation)
}

// Behaviour 10 for every partition operation, not only produces: once
// the topic's delete commits — and again once its recreate commits, before
// the reconciler has swapped the partition — a poll, a poll from a stored
// consumer offset, a consumer-offset read and a consumer-offset store sent
// to the still-owned partition are each refused with the retriable fence
// error and counted: nothing is read from, or stored in, the incarnation
// that teardown is about to erase. (Produces alone cannot pin the serve-time
// fence: the append-time re-check refuses them too.) Driven through a
// manual shard's inbox, as the pump would see the frames.
func TestBehaviour10FenceRefusesReadsAndOffsetStores(t *testing.T) {
	for _, tc := range []struct {
		name   string
		commit func(h *harness, ns metadata.Namespace)
	}{
		{"after delete", func(h *harness, ns metadata.Namespace) {
			h.apply(metadata.DeleteTopic{Stream: ns.Stream(), Topic: ns.Topic()})
		}},
		{"after recreate", func(h *harness, ns metadata.Namespace) { h.recreate(ns, "t") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, nil, manual)
			s := h.shards[0]
			ctx := context.Background()
			ns, epoch := h.topic("t")
			p := h.build(ns, epoch)
			if err := s.InsertOwned(ctx, p, noSync); err != nil {
				t.Fatal(err)
			}
			send := func(c call) Response {
				t.Helper()
				if err := s.TrySend(c.f); err != nil {
					t.Fatal(err)
				}
				if !s.Step() {
					t.Fatal("Step did not handle the frame")
				}
				return c.answered(t)
			}
			if r := send(produce(ns, "m")); r.Err != nil {
				t.Fatal(r.Err)
			}
			if r := send(request(ns, &Request{Op: OpStoreOffset, Consumer: "c", Offset: 1})); r.Err != nil {
				t.Fatal(r.Err)
			}

			tc.commit(h, ns) // committed; the shard still owns the old incarnation
			ops := map[string]*Request{
				"poll":          {Op: OpPoll, Offset: 0, Count: 10},
				"consumer poll": {Op: OpPoll, UseConsumer: true, Consumer: "c", Count: 10},
				"get offset":    {Op: OpGetOffset, Consumer: "c"},
				"store offset":  {Op: OpStoreOffset, Consumer: "c", Offset: 0},
			}
			for _, name := range []string{"poll", "consumer poll", "get offset", "store offset"} {
				r := send(request(ns, ops[name]))
				if !errors.Is(r.Err, errIncarnation) || !errors.Is(r.Err, ErrRetry) {
					t.Errorf("%s: answer %+v, want the retriable incarnation fence", name, r)
				}
				if len(r.Messages) != 0 || r.Found {
					t.Errorf("%s: served from the dead incarnation: %+v", name, r)
				}
			}
			if off, ok, err := p.ConsumerOffset("c"); err != nil || !ok || off != 1 {
				t.Fatalf("dead incarnation's consumer offset = %d, %v, %v; want 1 (the fenced store landed)", off, ok, err)
			}
			if got := testutil.ToFloat64(h.m.TransientDenies.WithLabelValues("0", metrics.DenyIncarnation)); got != 4 {
				t.Fatalf("incarnation denies = %v, want 4", got)
			}
		})
	}
}

// Behaviour 15 (shard side): a verdict answers a namespace's frames at
// once; frames of other namespaces only age.
func TestBehaviour15SweepVerdicts(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	a, _ := h.topic("a")
	b, _ := h.topic("b")
	c, _ := metadata.NewNamespace(7, 7, 7) // unknown: a lagging replica looks the same
	ca, cb, cc := produce(a, "a"), produce(b, "b"), produce(c, "c")
	s.handle(ca.f)
	s.handle(cb.f)
	s.handle(cc.f)
	res := h.sweep(s, map[metadata.Namespace]Verdict{a: VerdictNotOwner, b: VerdictBuildFailed})
	if res.Answered != 2 {
		t.Fatalf("answered %d, want 2", res.Answered)
	}
	mustErr(t, ca.answered(t), ErrRetry)
	mustErr(t, cb.answered(t), ErrRetry)
	cc.pending(t)
	if got := h.drops("0", "produce", metrics.ReasonNotOwner) + h.drops("0", "produce", metrics.ReasonBuildFailed); got != 2 {
		t.Fatalf("verdict drops = %v, want 2", got)
	}
}

// A build that failed for damage on disk answers its parked frames with
// the damage (ErrPartitionFailed wrapping the *partition.CorruptError),
// not a retry-here; any other cause stays retriable, naming the cause.
func TestBehaviour15BuildFailureCause(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	a, _ := h.topic("a")
	b, _ := h.topic("b")
	ca, cb := produce(a, "a"), produce(b, "b")
	s.handle(ca.f)
	s.handle(cb.f)
	damage := &partition.CorruptError{Path: "/d/0.log", Offset: 42, Err: errors.New("checksum")}
	var res SweepResult
	if err := h.step(s, opSweep(map[metadata.Namespace]Verdict{a: VerdictBuildFailed, b: VerdictBuildFailed},
		map[metadata.Namespace]error{a: fmt.Errorf("open: %w", damage), b: syscall.EIO}, &res)); err != nil {
		t.Fatal(err)
	}
	err := ca.answered(t).Err
	var ce *partition.CorruptError
	if !errors.As(err, &ce) || ce != damage || !errors.Is(err, ErrPartitionFailed) || errors.Is(err, ErrRetry) {
		t.Fatalf("damaged build: answer %v, want ErrPartitionFailed wrapping the *CorruptError, not ErrRetry", err)
	}
	if err := cb.answered(t).Err; !errors.Is(err, ErrRetry) || !strings.Contains(err.Error(), syscall.EIO.Error()) {
		t.Fatalf("build failed with EIO: answer %v, want a retriable answer naming the cause", err)
	}
}

// A frame whose committed owner is another shard is forwarded there, not
// parked where it can never materialise.
func TestMisroutedFrameForwarded(t *testing.T) {
	h := newHarness(t, 2, func(metadata.Namespace, int) int { return 1 })
	ns, _ := h.topic("t")
	c := produce(ns, "x")
	h.shards[0].handle(c.f)
	c.pending(t)
	if len(h.shards[1].inbox) != 1 || h.shards[0].park.frames != 0 {
		t.Fatal("misrouted frame not forwarded to the committed owner")
	}
}

// Behaviour 17 on the forwarding path: a forward to the committed owner
// that fails for a reason other than a full inbox — here the owner shard
// is closed — is answered (retriable) exactly once and counted as a
// misrouted drop; a full owner inbox is answered and counted as full.
func TestBehaviour17FailedForwardAnsweredAndCounted(t *testing.T) {
	h := newHarness(t, 2, func(metadata.Namespace, int) int { return 1 }, func(c *Config) { c.InboxSize = 1 })
	ns, _ := h.topic("t")

	fill := produce(ns, "fills the owner's inbox")
	if err := h.shards[1].TrySend(fill.f); err != nil {
		t.Fatal(err)
	}
	full := produce(ns, "full")
	h.shards[0].handle(full.f)
	mustErr(t, full.answered(t), ErrRetry)
	if got := h.drops("0", "produce", metrics.ReasonFull); got != 1 {
		t.Fatalf("full forwards counted = %v, want 1", got)
	}

	if err := h.shards[1].Close(); err != nil {
		t.Fatal(err)
	}
	mustErr(t, fill.answered(t), ErrClosed)
	for _, c := range []call{produce(ns, "x"), request(ns, &Request{Op: OpPoll, Count: 1})} {
		h.shards[0].handle(c.f)
		r := c.answered(t)
		if !errors.Is(r.Err, ErrRetry) || !errors.Is(r.Err, router.ErrDisconnected) {
			t.Fatalf("%v forwarded to a closed owner: answer %v, want ErrRetry wrapping ErrDisconnected", c.f.Req.Op, r.Err)
		}
	}
	if got := h.drops("0", "produce", metrics.ReasonMisrouted) + h.drops("0", "poll", metrics.ReasonMisrouted); got != 2 {
		t.Fatalf("failed forwards counted = %v, want 2", got)
	}
	if h.shards[0].park.frames != 0 {
		t.Fatal("a frame whose forward failed was parked")
	}
}

// Behaviour 17: across a random interleaving of frames, materialisations,
// tombstones, removals, sweeps and a final close, every client frame gets
// exactly one answer.
func TestBehaviour17EveryFrameAnsweredExactlyOnce(t *testing.T) {
	for seed := range uint64(20) {
		h := newHarness(t, 1, nil, func(c *Config) { c.Park.FramesPerNamespace = 8 })
		s := h.shards[0]
		rng := rand.New(rand.NewPCG(seed, 99))
		var nss []metadata.Namespace
		for i := range 3 {
			ns, _ := h.topic(string(rune('a' + i)))
			nss = append(nss, ns)
		}
		var calls []call
		for range 300 {
			ns := nss[rng.IntN(len(nss))]
			switch rng.IntN(8) {
			case 0, 1, 2, 3:
				c := produce(ns, "m")
				if rng.IntN(4) == 0 {
					if s.TrySend(c.f) != nil {
						c.reply <- Response{Err: router.ErrFull} // the sender answers refusals
					}
				} else {
					s.handle(c.f)
				}
				calls = append(calls, c)
			case 4:
				if _, ok := s.owned[ns]; !ok {
					rev, _ := h.meta.CreatedRevision(ns)
					_ = h.step(s, opInsertOwned(h.build(ns, rev), noSync))
				}
			case 5:
				var e uint64
				_ = h.step(s, opTombstone(ns, &e))
			case 6:
				_ = h.step(s, opRemoveOwned(ns))
			case 7:
				h.sweep(s, nil)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for i, c := range calls {
			if len(c.reply) != 1 {
				t.Fatalf("seed %d: call %d has %d answers, want exactly 1", seed, i, len(c.reply))
			}
		}
		if got := h.drops("0", "produce", metrics.ReasonDeliveryFailed); got != 0 {
			t.Fatalf("seed %d: %v answers failed delivery", seed, got)
		}
	}
}

// Closing answers everything queued and parked, and refuses new frames.
func TestCloseAnswersQueuedAndParked(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, _ := h.topic("t")
	parked := produce(ns, "p")
	s.handle(parked.f)
	queued := produce(ns, "q")
	if err := s.TrySend(queued.f); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	_ = s.Close() // idempotent
	mustErr(t, parked.answered(t), ErrClosed)
	mustErr(t, queued.answered(t), ErrClosed)
	if err := s.TrySend(produce(ns, "late").f); !errors.Is(err, router.ErrDisconnected) {
		t.Fatalf("send after close: %v", err)
	}
	if _, err := s.Inspect(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("control after close: %v", err)
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	err := Config{ID: -1, InboxSize: -1, Park: ParkLimits{Alignment: 3, MaxPasses: -1}}.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"ID", "InboxSize", "Alignment", "MaxPasses"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// Behaviour 19: a deny counts only once it is handed to the reply path; an
// answer that cannot be delivered counts as delivery_failed instead.
func TestBehaviour19DenyCountedOnlyWhenDelivered(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	h.insert(s, h.build(ns, epoch))
	var e uint64
	if err := h.step(s, opTombstone(ns, &e)); err != nil {
		t.Fatal(err)
	}
	c := produce(ns, "x")
	c.reply <- Response{} // a reply path with no room
	s.handle(c.f)
	if got := testutil.ToFloat64(h.m.TransientDenies.WithLabelValues("0", metrics.DenyTombstoned)); got != 0 {
		t.Fatalf("undelivered deny counted: %v", got)
	}
	if got := h.drops("0", "produce", metrics.ReasonDeliveryFailed); got != 1 {
		t.Fatalf("delivery_failed = %v, want 1", got)
	}
}

// Behaviour 14 (shard side): confirming a removal answers frames parked for
// the namespace.
func TestBehaviour14RemoveAnswersParked(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, _ := h.topic("t")
	c := produce(ns, "x")
	s.handle(c.f)
	c.pending(t)
	if err := h.step(s, opRemoveOwned(ns)); err != nil {
		t.Fatal(err)
	}
	mustErr(t, c.answered(t), ErrRetry)
	if got := h.drops("0", "produce", metrics.ReasonRemoved); got != 1 {
		t.Fatalf("removed drops = %v, want 1", got)
	}
}
