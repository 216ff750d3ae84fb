//go:build unix

package shard

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIdleWaitingPolls parks 1,000 waiting polls (30 s wait) on a
// running shard, measures the process's CPU time (user + system, from
// getrusage) over an idle window while they wait, then wakes them all
// with one produce. It reports the CPU consumed per second of waiting:
// a waiting poll has no goroutine, timer or re-poll of its own, so the
// figure is the idle process's background (the Go runtime), not a cost
// per poll. The window is wall-clock time by nature; it measures, it
// does not synchronise (the polls are known to be registered by Flush).
func BenchmarkIdleWaitingPolls(b *testing.B) {
	// polls=0 is the same shard and process with nothing waiting: the
	// baseline the 1,000 waiting polls are compared with.
	for _, polls := range []int{0, 1000} {
		b.Run(fmt.Sprintf("polls=%d", polls), func(b *testing.B) { benchIdleWaiting(b, polls) })
	}
}

func benchIdleWaiting(b *testing.B, polls int) {
	const window = 500 * time.Millisecond
	h := newHarness(b, 1, nil, func(c *Config) { c.InboxSize = 2*polls + 16 })
	s := h.shards[0]
	s.Start()
	ctx := context.Background()
	ns, epoch := h.topic("t")
	if err := s.InsertOwned(ctx, h.build(ns, epoch), noSync); err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	next := uint64(0)
	for b.Loop() {
		replies := make([]chan Response, polls)
		for i := range replies {
			c := poll(ns, Request{Offset: next, MaxWait: MaxPollWait})
			replies[i] = c.reply
			if err := s.Send(ctx, c.f); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Flush(ctx); err != nil { // every poll is registered
			b.Fatal(err)
		}
		before := processCPU(b)
		time.Sleep(window)
		cpu += processCPU(b) - before
		p := produce(ns, "wake")
		if err := s.Send(ctx, p.f); err != nil {
			b.Fatal(err)
		}
		for _, r := range replies {
			if a := <-r; a.Err != nil || len(a.Messages) != 1 {
				b.Fatalf("woken poll: %+v", a)
			}
		}
		<-p.reply
		next++
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/window.Seconds()/1000, "cpu-ms/s-idle")
}

// processCPU is the process's user plus system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
