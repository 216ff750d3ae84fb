//go:build unix

package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
)

// BenchmarkIdleWaitingPolls parks waiting polls (WaitFor(MaxPollWait), up
// to one message each, spread over the two partitions of a 2-shard
// in-memory node, one per shard) and measures what the process spends
// while they wait and nothing is produced: every iteration is 100 ms of
// wall time, and the cpu-ms/s metric is the process's CPU time (getrusage,
// user+system) per second of wall time over all of them — 10 is 1% of one
// core. polls=0 is the idle node alone. A waiting poll is registered at
// its shard and woken only by a produce or its deadline, so the two
// should differ by nothing measurable. The figure is reported, not
// asserted: it depends on the machine.
//
//	go test -run '^$' -bench IdleWaitingPolls -benchtime 5s .
func BenchmarkIdleWaitingPolls(b *testing.B) {
	for _, polls := range []int{0, 1_000} {
		b.Run(fmt.Sprintf("polls=%d", polls), func(b *testing.B) { benchIdleWaitingPolls(b, polls) })
	}
}

func benchIdleWaitingPolls(b *testing.B, polls int) {
	n, t := benchNode(b, "")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	errs := make(chan error, polls)
	for i := range polls {
		wg.Go(func() {
			// Each partition holds one warm message: offset 1 is its end,
			// so the poll waits. A poll answered empty at its deadline
			// (the run is much shorter than MaxPollWait) polls again.
			for ctx.Err() == nil {
				batch, err := n.Poll(ctx, t, uint32(i%2), parkway.AtOffset(1), 1, parkway.WaitFor(parkway.MaxPollWait))
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					errs <- fmt.Errorf("poll %d: %w", i, err)
					return
				case len(batch.Messages) > 0:
					errs <- fmt.Errorf("poll %d: %d messages on an idle partition", i, len(batch.Messages))
					return
				}
			}
		})
	}
	// Every poll must be registered at its shard before the clock starts.
	deadline := time.Now().Add(time.Minute)
	for {
		waiting, err := parkway.WaitingPolls(ctx, n)
		if err != nil {
			b.Fatal(err)
		}
		if waiting == polls {
			break
		}
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d polls waiting after a minute", waiting, polls)
		}
	}

	cpu0 := processCPU(b)
	start := time.Now()
	for b.Loop() {
		time.Sleep(100 * time.Millisecond) // the measured idle time, not synchronisation
	}
	wall := time.Since(start)
	cpu := processCPU(b) - cpu0

	waiting, err := parkway.WaitingPolls(ctx, n)
	if err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	if waiting != polls {
		b.Fatalf("%d polls waiting after the run, want %d", waiting, polls)
	}
	b.ReportMetric(float64(cpu)/1e6/wall.Seconds(), "cpu-ms/s")
	b.ReportMetric(float64(waiting), "waiting")
}

// processCPU is the process's user+system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(errors.Join(errors.New("getrusage"), err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
