package parkway_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
)

type pollResult struct {
	b   parkway.Batch
	err error
	at  time.Time
}

// pollAsync runs a poll on its own goroutine and delivers its result.
func pollAsync(n *parkway.Node, ctx context.Context, topic parkway.Topic, part uint32, from parkway.Start, max int, opts ...parkway.PollOption) <-chan pollResult {
	ch := make(chan pollResult, 1)
	go func() {
		b, err := n.Poll(ctx, topic, part, from, max, opts...)
		ch <- pollResult{b, err, time.Now()}
	}()
	return ch
}

func notYet(t *testing.T, ch <-chan pollResult) {
	t.Helper()
	synctest.Wait() // every goroutine of the bubble is blocked
	select {
	case r := <-ch:
		t.Fatalf("waiting poll returned early: %v next %d, %v", payloads(r.b.Messages), r.b.Next, r.err)
	default:
	}
}

// A waiting poll returns as soon as a produce lands — with no virtual
// time passing, so it was woken by the append, not by a timer — and one
// that nothing satisfies returns empty at exactly its deadline.
func TestWaitingPollReturnsOnProduce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		stream := mustStream(t, n, "s")
		topic := mustTopic(t, n, stream, "t", 1)
		start := time.Now()
		ch := pollAsync(n, ctx, topic, 0, parkway.AtOffset(0), 10, parkway.WaitFor(10*time.Second))
		notYet(t, ch)
		mustProduce(t, n, topic, parkway.PartitionID(0), "m0")
		r := <-ch
		if r.err != nil || !slices.Equal(payloads(r.b.Messages), []string{"m0@0"}) || r.b.Next != 1 {
			t.Fatalf("waiting poll: %v next %d, %v; want m0@0 next 1", payloads(r.b.Messages), r.b.Next, r.err)
		}
		if waited := r.at.Sub(start); waited != 0 {
			t.Fatalf("waiting poll returned after %v of virtual time, want 0 (woken by the produce)", waited)
		}

		start = time.Now()
		ch = pollAsync(n, ctx, topic, 0, parkway.AtOffset(1), 10, parkway.WaitFor(2*time.Second), parkway.MinMessages(2))
		notYet(t, ch)
		mustProduce(t, n, topic, parkway.PartitionID(0), "m1") // one of two
		notYet(t, ch)
		r = <-ch
		if r.err != nil || !slices.Equal(payloads(r.b.Messages), []string{"m1@1"}) || r.b.Next != 2 {
			t.Fatalf("poll at its deadline: %v next %d, %v; want the partial batch m1@1", payloads(r.b.Messages), r.b.Next, r.err)
		}
		if waited := r.at.Sub(start); waited != 2*time.Second {
			t.Fatalf("poll answered after %v, want its 2s deadline", waited)
		}

		start = time.Now()
		r = <-pollAsync(n, ctx, topic, 0, parkway.AtOffset(2), 10, parkway.WaitFor(time.Second))
		if r.err != nil || len(r.b.Messages) != 0 || r.b.Next != 2 || r.at.Sub(start) != time.Second {
			t.Fatalf("empty poll at its deadline: %v next %d after %v, %v", payloads(r.b.Messages), r.b.Next, r.at.Sub(start), r.err)
		}

		// A context deadline earlier than the wait shortens it: the shard
		// answers (empty) a tenth of the time left before the caller gives
		// up.
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start = time.Now()
		b, err := n.Poll(short, topic, 0, parkway.AtOffset(2), 10, parkway.WaitFor(10*time.Second))
		if err != nil || len(b.Messages) != 0 || time.Since(start) != 270*time.Millisecond {
			t.Fatalf("poll under a 300ms context: %v after %v, %v", payloads(b.Messages), time.Since(start), err)
		}
	})
}

// A waiting poll ends with an error when its topic is deleted, when its
// partition is truncated past it, and when its node closes.
func TestWaitingPollEndsOnDeleteTruncateAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		stream := mustStream(t, n, "s")
		topic := mustTopic(t, n, stream, "t", 1)
		start := time.Now()
		ch := pollAsync(n, ctx, topic, 0, parkway.AtOffset(0), 10, parkway.WaitFor(20*time.Second))
		notYet(t, ch)
		if err := n.Admin().DeleteTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if !errors.Is(r.err, parkway.ErrTopicNotFound) && !errors.Is(r.err, parkway.ErrPartitionNotFound) {
			t.Fatalf("waiting poll on a deleted topic: %v, %v; want not found", payloads(r.b.Messages), r.err)
		}
		if r.at.Sub(start) >= 20*time.Second {
			t.Fatal("waiting poll on a deleted topic ran to its deadline")
		}

		// Truncated past its position: the poll ends with
		// ErrOffsetOutOfRange, and a poll AtFirst carries on.
		trunc := mustTopic(t, n, stream, "t2", 1)
		mustProduce(t, n, trunc, parkway.PartitionID(0), "m0", "m1", "m2", "m3")
		ch = pollAsync(n, ctx, trunc, 0, parkway.AtOffset(1), 10, parkway.WaitFor(20*time.Second), parkway.MinMessages(10))
		notYet(t, ch)
		if err := n.Admin().TruncatePartition(ctx, trunc, 0, 3); err != nil {
			t.Fatal(err)
		}
		if r := <-ch; !errors.Is(r.err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("waiting poll truncated past: %v, %v; want ErrOffsetOutOfRange", payloads(r.b.Messages), r.err)
		}
		if b, err := n.Poll(ctx, trunc, 0, parkway.AtFirst(), 10); err != nil || !slices.Equal(payloads(b.Messages), []string{"m3@3"}) {
			t.Fatalf("poll AtFirst after the truncation: %v, %v", payloads(b.Messages), err)
		}

		closing, err := parkway.Open(parkway.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		s2 := mustStream(t, closing, "s")
		t2 := mustTopic(t, closing, s2, "t", 1)
		ch = pollAsync(closing, ctx, t2, 0, parkway.AtOffset(0), 10, parkway.WaitFor(20*time.Second))
		notYet(t, ch)
		if err := closing.Close(); err != nil {
			t.Fatal(err)
		}
		if r := <-ch; !errors.Is(r.err, parkway.ErrClosed) {
			t.Fatalf("waiting poll on a closing node: %v", r.err)
		}
	})
}

// TestBehaviour24EveryStartPositionResolves: every start position
// resolves (DESIGN behaviour 24); a stored offset below the start never
// wedges a consumer; a poll past the end reports the end as Next.
func TestBehaviour24EveryStartPositionResolves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		stream := mustStream(t, n, "s")
		topic := mustTopic(t, n, stream, "t", 1)
		var times []time.Time
		for _, p := range []string{"m0", "m1", "m2", "m3", "m4"} {
			time.Sleep(time.Second) // virtual: spaces the append times
			times = append(times, time.Now())
			mustProduce(t, n, topic, parkway.PartitionID(0), p)
		}
		poll := func(from parkway.Start, max int) ([]string, uint64, error) {
			t.Helper()
			b, err := n.Poll(ctx, topic, 0, from, max)
			return payloads(b.Messages), b.Next, err
		}
		check := func(name string, from parkway.Start, max int, want []string, next uint64) {
			t.Helper()
			got, gotNext, err := poll(from, max)
			if err != nil || !slices.Equal(got, want) || gotNext != next {
				t.Fatalf("%s: %v next %d, %v; want %v next %d", name, got, gotNext, err, want, next)
			}
		}
		check("first", parkway.AtFirst(), 2, []string{"m0@0", "m1@1"}, 2)
		check("last", parkway.AtLast(), 10, []string{"m4@4"}, 5)
		check("time", parkway.AtTime(times[3]), 10, []string{"m3@3", "m4@4"}, 5)
		check("time between", parkway.AtTime(times[2].Add(time.Millisecond)), 10, []string{"m3@3", "m4@4"}, 5)
		check("time after all", parkway.AtTime(times[4].Add(time.Second)), 10, nil, 5)
		check("offset past the end", parkway.AtOffset(99), 10, nil, 5)
		check("consumer with none stored", parkway.AtConsumer("c"), 1, []string{"m0@0"}, 1)
		check("consumer with none stored, latest", parkway.AtConsumer("c").OrReset(parkway.ResetLatest), 10, nil, 5)
		if _, _, err := poll(parkway.AtConsumer("c").OrReset(parkway.ResetError), 10); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("consumer with none stored, reset error: %v", err)
		}

		// The consumer stores 1, then the partition is truncated past it.
		if err := n.Admin().StoreOffset(ctx, topic, 0, "c", 1); err != nil {
			t.Fatal(err)
		}
		if err := n.Admin().TruncatePartition(ctx, topic, 0, 3); err != nil {
			t.Fatal(err)
		}
		check("consumer below the start: clamped", parkway.AtConsumer("c"), 10, []string{"m3@3", "m4@4"}, 5)
		check("none stored after truncation: the start, not 0", parkway.AtConsumer("other"), 1, []string{"m3@3"}, 4)
		check("first after truncation", parkway.AtFirst(), 1, []string{"m3@3"}, 4)
		if _, _, err := poll(parkway.AtConsumer("c").OrReset(parkway.ResetError), 10); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("consumer below the start, reset error: %v", err)
		}
		// Storing below the start is accepted (and resolved on poll);
		// past the end is refused.
		if err := n.Admin().StoreOffset(ctx, topic, 0, "c", 0); err != nil {
			t.Fatalf("storing below the start: %v", err)
		}
		if err := n.Admin().StoreOffset(ctx, topic, 0, "c", 6); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("storing past the end: %v", err)
		}

		po, err := n.Admin().PartitionOffsets(ctx, topic, 0, "c")
		if err != nil || po != (parkway.PartitionOffsets{Start: 3, End: 5, Stored: 0, HasStored: true, Lag: 2}) {
			t.Fatalf("PartitionOffsets = %+v, %v", po, err)
		}
		if err := n.Admin().StoreOffset(ctx, topic, 0, "c", 4); err != nil {
			t.Fatal(err)
		}
		po, err = n.Admin().PartitionOffsets(ctx, topic, 0, "c")
		if err != nil || po.Stored != 4 || po.Lag != 1 {
			t.Fatalf("PartitionOffsets after storing 4 = %+v, %v", po, err)
		}
		po, err = n.Admin().PartitionOffsets(ctx, topic, 0, "")
		if err != nil || po != (parkway.PartitionOffsets{Start: 3, End: 5, Lag: 2}) {
			t.Fatalf("PartitionOffsets without a consumer = %+v, %v", po, err)
		}
		if _, err := n.Admin().PartitionOffsets(ctx, topic, 0, "bad\x00name"); !errors.Is(err, parkway.ErrInvalidConsumer) {
			t.Fatalf("PartitionOffsets with a bad consumer name: %v", err)
		}
	})
}

// The key and the producer's timestamp are kept with the message, and
// the append time is stamped by the shard.
func TestConsumeKeyAndTimestamps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		stream := mustStream(t, n, "s")
		topic := mustTopic(t, n, stream, "t", 3)
		produced := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC).UnixMicro()
		ack, err := n.Produce(ctx, topic, parkway.Key([]byte("user-7")),
			parkway.Message{Payload: []byte("a"), Timestamp: produced},
			parkway.Message{Payload: []byte("b"), Key: []byte("own")},
		)
		if err != nil {
			t.Fatal(err)
		}
		b, err := n.Poll(ctx, topic, ack.Partition, parkway.AtFirst(), 10)
		if err != nil || len(b.Messages) != 2 {
			t.Fatalf("poll: %d messages, %v", len(b.Messages), err)
		}
		now := time.Now().UnixMicro()
		a, bm := b.Messages[0], b.Messages[1]
		if string(a.Key) != "user-7" || a.Timestamp != produced || a.AppendTime != now {
			t.Fatalf("first message: key %q timestamp %d append time %d; want user-7, %d, %d", a.Key, a.Timestamp, a.AppendTime, produced, now)
		}
		if string(bm.Key) != "own" || bm.Timestamp != now || bm.AppendTime != now {
			t.Fatalf("second message: key %q timestamp %d append time %d; want own, %d, %d", bm.Key, bm.Timestamp, bm.AppendTime, now, now)
		}
	})
}

// Bad poll options are refused before anything is sent.
func TestPollOptionsInvalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		ctx := ctxFor(t)
		stream := mustStream(t, n, "s")
		topic := mustTopic(t, n, stream, "t", 1)
		for name, opt := range map[string]parkway.PollOption{
			"negative wait":  parkway.WaitFor(-time.Second),
			"wait over cap":  parkway.WaitFor(parkway.MaxPollWait + time.Second),
			"zero count":     parkway.MinMessages(0),
			"zero byte cap":  parkway.MaxBytes(0),
			"negative bytes": parkway.MaxBytes(-1),
		} {
			if _, err := n.Poll(ctx, topic, 0, parkway.AtFirst(), 10, opt); !errors.Is(err, parkway.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
			}
		}
		if _, err := n.Poll(ctx, topic, 0, parkway.AtFirst(), 10, parkway.WaitFor(parkway.MaxPollWait)); err != nil {
			t.Fatalf("a wait of MaxPollWait: %v", err)
		}
	})
}
