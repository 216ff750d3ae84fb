package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// TestBehaviour18ProduceMidMaterialisationRetriedInPlace checks through the
// public API that a request racing its partition's materialisation is
// served without the caller ever seeing ErrRetry (DESIGN behaviour 18): the
// node parks it or retries it in place, never fails it over.
func TestBehaviour18ProduceMidMaterialisationRetriedInPlace(t *testing.T) {
	t.Run("commit wake only", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// A 30 s period on the bubble's virtual clock: only the commit's
			// wake can materialise a partition before a period has passed,
			// so every produce arrives before or during materialisation and
			// must still simply succeed, with no period tick needed.
			const period = 30 * time.Second
			n := open(t, parkway.Config{Shards: convShards, ReconcileInterval: period, RequestTimeout: 4 * period})
			start := time.Now()
			stream := mustStream(t, n, "b18")
			for i := range convTopics {
				topic := mustTopic(t, n, stream, fmt.Sprintf("t%d", i), 1)
				ack, err := n.Produce(ctxFor(t), topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("m")})
				if err != nil {
					t.Fatalf("produce right after creating t%d: %v (retriable: %v)", i, err, errors.Is(err, parkway.ErrRetry))
				}
				if ack.FirstOffset != 0 {
					t.Fatalf("t%d acked at offset %d, want 0", i, ack.FirstOffset)
				}
				expectLog(t, n, topic, 0, "m")
			}
			// Virtual time, so this is exact, not a timing assertion: if a
			// produce had needed the period tick, the clock would show it.
			if waited := time.Since(start); waited >= period {
				t.Fatalf("the produces were served only after %v of virtual time: a period tick, not the commit wake, materialised a partition", waited)
			}
		})
	})

	t.Run("build failure answered and retried in place", func(t *testing.T) {
		// Deterministic on a fake clock: the partition's first build fails
		// (a regular file blocks the data directory), so the parked produce
		// is answered with a retriable error; the client retries it in
		// place; the build succeeds once unblocked, and the caller gets a
		// plain ack.
		synctest.Test(t, func(t *testing.T) {
			dir := t.TempDir()
			blocker := filepath.Join(dir, "streams")
			if err := os.WriteFile(blocker, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			n := open(t, parkway.Config{
				DataDir: dir, Shards: convShards,
				ReconcileInterval: 30 * time.Second, RequestTimeout: 2 * time.Minute,
				BuildBackoffMin: time.Second, BuildBackoffMax: time.Second,
			})
			reg := registry(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			stream, err := n.Admin().CreateStream(ctx, "b18")
			if err != nil {
				t.Fatal(err)
			}
			topic, err := n.Admin().CreateTopic(ctx, stream, "t", 1)
			if err != nil {
				t.Fatal(err)
			}
			ns, _ := metadata.NewNamespace(stream.ID, topic.ID, 0)
			owner := fmt.Sprint(router.Assign(ns, convShards))
			synctest.Wait() // the commit's pass ran: the build failed
			if v := metricValue(t, reg, "parkway_partition_builds_failed_total", "shard", owner); v != 1 {
				t.Fatalf("%v failed builds on shard %s, want 1", v, owner)
			}

			var (
				ack  parkway.Ack
				perr error
				done = make(chan struct{})
			)
			go func() {
				defer close(done)
				ack, perr = n.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("m")})
			}()
			synctest.Wait()
			if v := metricValue(t, reg, "parkway_parked_frames", "shard", owner); v != 1 {
				t.Fatalf("%v frames parked on shard %s, want the produce", v, owner)
			}

			// An unrelated partition-shaping commit wakes the reconcilers.
			// The build is still backed off, so the sweep answers the
			// parked produce with a retriable build-failure error.
			if _, err := n.Admin().CreateTopic(ctx, stream, "other", 1); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if v := metricValue(t, reg, "parkway_frame_drops_total", "reason", "build_failed"); v != 1 {
				t.Fatalf("%v produces answered build_failed, want 1", v)
			}
			select {
			case <-done:
				t.Fatalf("produce returned (%v, %v) while its partition cannot be built", ack, perr)
			default:
			}

			// Unblock the build. The client keeps retrying in place and the
			// next pass materialises the partition.
			if err := os.Remove(blocker); err != nil {
				t.Fatal(err)
			}
			<-done
			if perr != nil {
				t.Fatalf("produce failed: %v (the caller must never see a retry-here answer before its deadline)", perr)
			}
			if ack.FirstOffset != 0 {
				t.Fatalf("acked at offset %d, want 0", ack.FirstOffset)
			}
			b, err := n.Poll(ctx, topic, 0, parkway.AtOffset(0), 10)
			if err != nil || len(b.Messages) != 1 || string(b.Messages[0].Payload) != "m" {
				t.Fatalf("Poll = %v, %v; want the one message", payloads(b.Messages), err)
			}
		})
	})

	t.Run("retriable error surfaces only at the deadline", func(t *testing.T) {
		// The build never succeeds: the client retries in place until its
		// deadline (RequestTimeout, shorter than the context here) and only
		// then returns the retriable error — ErrRetry, never ErrNotLeader.
		synctest.Test(t, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "streams"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			n := open(t, parkway.Config{
				DataDir: dir, Shards: convShards,
				ReconcileInterval: 100 * time.Millisecond, RequestTimeout: 2 * time.Second,
				BuildBackoffMin: time.Second, BuildBackoffMax: time.Second,
			})
			reg := registry(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stream, err := n.Admin().CreateStream(ctx, "b18")
			if err != nil {
				t.Fatal(err)
			}
			topic, err := n.Admin().CreateTopic(ctx, stream, "t", 1)
			if err != nil {
				t.Fatal(err)
			}
			_, err = n.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("m")})
			switch {
			case err == nil:
				t.Fatal("produce succeeded although its partition can never be built")
			case !errors.Is(err, parkway.ErrRetry):
				t.Fatalf("produce failed with %v, want an error wrapping ErrRetry", err)
			case errors.Is(err, parkway.ErrNotLeader):
				t.Fatalf("produce failed with %v: a retry-here answer must not read as not-leader", err)
			case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
				t.Fatalf("produce failed with %v: the node's RequestTimeout, not the context, must end the retries", err)
			}
			if v := metricValue(t, reg, "parkway_frame_drops_total", "reason", "build_failed"); v < 2 {
				t.Fatalf("%v build_failed answers: the produce was not retried in place", v)
			}
		})
	})
}

// TestCloseAnswersParkedRequests closes a node while a produce is parked
// at its owner (its partition cannot be built): the produce is answered
// with ErrClosed, not left waiting for its context.
func TestCloseAnswersParkedRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "streams"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		n := open(t, parkway.Config{DataDir: dir, Shards: convShards, ReconcileInterval: 30 * time.Second, RequestTimeout: 2 * time.Minute})
		reg := registry(t, n)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		stream, _ := n.Admin().CreateStream(ctx, "close")
		topic, _ := n.Admin().CreateTopic(ctx, stream, "t", 1)
		synctest.Wait() // the commit's pass ran: the build failed
		var perr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, perr = n.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("m")})
		}()
		synctest.Wait()
		if v := metricValue(t, reg, "parkway_parked_frames"); v != 1 {
			t.Fatalf("%v frames parked, want the produce", v)
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
		if !errors.Is(perr, parkway.ErrClosed) {
			t.Fatalf("parked produce answered %v at Close, want ErrClosed", perr)
		}
		if err := n.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

// TestParkOverflowRetriedInPlace: with room for two parked frames per
// namespace, a third produce for a partition that is not built yet is
// shed (DESIGN behaviour 7) — answered with a retriable error and counted —
// and the client retries it in place until the partition lands, so all
// three callers simply get acks.
func TestParkOverflowRetriedInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		blocker := filepath.Join(dir, "streams")
		if err := os.WriteFile(blocker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		n := open(t, parkway.Config{
			DataDir: dir, Shards: convShards, Park: shard.ParkLimits{FramesPerNamespace: 2},
			ReconcileInterval: time.Second, RequestTimeout: time.Minute,
			BuildBackoffMin: 10 * time.Second, BuildBackoffMax: 10 * time.Second,
		})
		reg := registry(t, n)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		stream, err := n.Admin().CreateStream(ctx, "overflow")
		if err != nil {
			t.Fatal(err)
		}
		topic, err := n.Admin().CreateTopic(ctx, stream, "t", 1)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the commit's pass ran: the build failed

		const producers = 3
		acks := make([]parkway.Ack, producers)
		errs := make([]error, producers)
		done := make(chan struct{})
		go func() {
			defer close(done)
			var wg sync.WaitGroup
			for i := range producers {
				wg.Go(func() {
					acks[i], errs[i] = n.Produce(ctx, topic, parkway.PartitionID(0),
						parkway.Message{Payload: fmt.Appendf(nil, "m%d", i)})
				})
			}
			wg.Wait()
		}()
		synctest.Wait()
		if v := metricValue(t, reg, "parkway_parked_frames"); v != 2 {
			t.Fatalf("%v frames parked, want the bound, 2", v)
		}
		if v := metricValue(t, reg, "parkway_frame_drops_total", "reason", "park_overflow"); v != 1 {
			t.Fatalf("%v frames shed for park overflow, want 1", v)
		}

		if err := os.Remove(blocker); err != nil {
			t.Fatal(err)
		}
		<-done
		offsets := map[uint64]bool{}
		for i := range producers {
			if errs[i] != nil {
				t.Fatalf("producer %d: %v (a shed frame must be retried in place, not failed)", i, errs[i])
			}
			offsets[acks[i].FirstOffset] = true
		}
		if len(offsets) != producers || !offsets[0] || !offsets[1] || !offsets[2] {
			t.Fatalf("acked at offsets %v, want 0, 1 and 2", offsets)
		}
		if got := len(readAll(t, n, topic, 0)); got != producers {
			t.Fatalf("%d messages in the partition, want %d", got, producers)
		}
	})
}

// A full inbox is backpressure, not failure: with an inbox of one frame
// (and so a waited lane of shard.WaitedLaneFactor) and a shard pump held
// in an fsync, 64 concurrent producers find the lane full; the refusals are counted and
// every produce still succeeds once the pump moves (the client waits for
// room in the owner's lane within its deadline).
func TestFullInboxIsBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var hold atomic.Bool
		fsys := errorfs.New(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpSync && hold.Load() {
				<-gate // the pump is stuck in a slow fsync
			}
			return nil
		}))
		n := open(t, parkway.Config{DataDir: "/data", FS: fsys, Shards: 1, InboxSize: 1})
		reg := registry(t, n)
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1, parkway.WithFsync(parkway.FsyncAlways, 0))
		mustProduce(t, n, tp, parkway.PartitionID(0), "warm")
		hold.Store(true)
		errs := make(chan error, 64)
		for i := range 64 {
			go func() {
				_, err := n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte(fmt.Sprint(i))})
				errs <- err
			}()
		}
		synctest.Wait() // every producer is blocked: in the pump's fsync, or waiting for room
		if got := metricValue(t, reg, "parkway_frame_drops_total", "reason", "full"); got == 0 {
			t.Fatal("the inbox never refused a frame: the test did not exercise backpressure")
		}
		hold.Store(false)
		close(gate)
		for range 64 {
			if err := <-errs; err != nil {
				t.Fatalf("produce against a full inbox: %v", err)
			}
		}
		if got := len(readAll(t, n, tp, 0)); got != 65 {
			t.Fatalf("partition holds %d messages, want 65", got)
		}
	})
}

// A wait for room in a full inbox ends at the call's deadline: with an
// inbox of one frame (a waited lane of shard.WaitedLaneFactor) and the
// shard held in an fsync, producers are started one at a time until one
// finds the inbox and the lane full (the pump may hold one more frame:
// when the first producer runs the fsync itself, the pump takes the next
// frame and waits with it for the shard). That produce waits
// RequestTimeout and then fails as a retry that ran out of time
// (ErrRetry), while those ahead of it succeed once the shard moves.
func TestFullInboxWaitEndsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var hold atomic.Bool
		fsys := errorfs.New(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpSync && hold.Load() {
				<-gate // the shard is stuck in a slow fsync
			}
			return nil
		}))
		const timeout = 5 * time.Second
		n := open(t, parkway.Config{DataDir: "/data", FS: fsys, Shards: 1, InboxSize: 1, RequestTimeout: timeout})
		reg := registry(t, n)
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1, parkway.WithFsync(parkway.FsyncAlways, 0))
		mustProduce(t, n, tp, parkway.PartitionID(0), "warm")
		hold.Store(true)
		release := sync.OnceFunc(func() { hold.Store(false); close(gate) })
		t.Cleanup(release) // before the node's Close, which needs the pump

		// At most the fsync's producer, the pump's frame, the inbox's and
		// the lane's, and the one refused.
		const most = 1 + 1 + 1 + shard.WaitedLaneFactor + 1
		errs := make(chan error, most)
		produce := func(i int) {
			_, err := n.Produce(context.Background(), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte(fmt.Sprint(i))})
			errs <- err
		}
		started := 0
		for metricValue(t, reg, "parkway_frame_drops_total", "reason", "full") == 0 {
			if started == most {
				t.Fatalf("%d producers and none found the inbox and the lane full", started)
			}
			go produce(started)
			started++
			synctest.Wait() // in the fsync, the pump's hand, the inbox or the lane, or waiting for room
		}
		if started < 3+shard.WaitedLaneFactor {
			t.Fatalf("producer %d found no room: the fsync's, the inbox's (1) and the lane's (%d) were not all taken", started-1, shard.WaitedLaneFactor)
		}
		start := time.Now()
		var err error
		select {
		case err = <-errs:
		case <-time.After(2 * timeout):
			t.Fatalf("a produce still waits for room on a full inbox %v after its request timeout", timeout)
		}
		if !errors.Is(err, parkway.ErrRetry) {
			t.Fatalf("produce waiting on a full inbox: %v, want ErrRetry", err)
		}
		if waited := time.Since(start); waited != timeout {
			t.Fatalf("the wait for room ended after %v, want the request timeout %v", waited, timeout)
		}
		release()
		for range started - 1 {
			if err := <-errs; err != nil {
				t.Fatalf("produce ahead of the refused one: %v", err)
			}
		}
	})
}
