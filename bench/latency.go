package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// runLatency is case W1 on one side: one reader waits on the partition
// (it has read the warm message, and recorded it where it commits or
// acks, so its next request is waiting before the clock starts); the producer then produces one message at a time,
// each waiting for its ack, one every latencyInterval (at once if the
// previous took longer), at least count and until the round's minimum
// length has passed. Each payload carries its sequence number and the
// time taken just before its produce call; the reader records, for each,
// the time its loop sees it minus that. The timed section ends when the
// reader has seen every message, each exactly once; CPU/msg is the
// process's CPU over it (producer, server and reader) per message.
func runLatency(ctx context.Context, in instance, side waitSide, count int, m *meter) (err error) {
	base := time.Now()
	var (
		mu     sync.Mutex
		lat    []time.Duration
		seenAt []bool // by sequence number - 1
		bad    error
	)
	notify := make(chan struct{}, 1)
	warm := newCounter(1)
	seen := func(p []byte) bool {
		at := time.Since(base)
		seq, sent, err := unstamp(p)
		switch {
		case err != nil:
		case seq == 0:
			warm.add()
			return true
		case seq == stopSeq:
			return false
		}
		mu.Lock()
		switch {
		case err != nil:
			bad = err
		case seq > uint64(len(seenAt)):
			bad = fmt.Errorf("message %d seen, never produced", seq)
		case seenAt[seq-1]:
			bad = fmt.Errorf("message %d seen twice", seq)
		default:
			seenAt[seq-1] = true
			lat = append(lat, at-sent)
		}
		mu.Unlock()
		select {
		case notify <- struct{}{}:
		default:
		}
		return true
	}
	f := newFailures()
	rd, err := side.start(ctx, in, "latency", readerHooks{seen: seen}, f.fail)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rd.stop()) }()
	if err := waitUntil(ctx, "the reader to see the warm message", warm.ch, f, drainTimeout); err != nil {
		return err
	}
	if rd.settle != nil {
		if err := rd.settle(ctx); err != nil {
			return err
		}
	}

	if err := m.start(); err != nil {
		return err
	}
	more := m.budget(count)
	t0 := time.Now()
	n := 0
	for ; more(n); n++ {
		if d := time.Until(t0.Add(time.Duration(n) * latencyInterval)); d > 0 {
			if err := sleepCtx(ctx, d); err != nil {
				return err
			}
		}
		mu.Lock()
		seenAt = append(seenAt, false)
		mu.Unlock()
		payload := stamp(uint64(n+1), time.Since(base))
		if err := in.produceOne(ctx, 0, payload); err != nil {
			return fmt.Errorf("message %d: %w", n+1, err)
		}
	}
	// Wait until the reader has seen all n.
	deadline := time.NewTimer(drainTimeout)
	defer deadline.Stop()
	for {
		mu.Lock()
		got, b := len(lat), bad
		mu.Unlock()
		if b != nil {
			return b
		}
		if got == n {
			break
		}
		select {
		case <-notify:
		case <-f.ch:
			return fmt.Errorf("the reader failed after %d of %d messages: %w", got, n, f.err)
		case <-deadline.C:
			return fmt.Errorf("the reader saw %d of %d messages in %v", got, n, drainTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	mu.Lock()
	m.s.lat = append([]time.Duration(nil), lat...)
	mu.Unlock()
	if err := m.stop(n, waitPayload); err != nil {
		return err
	}
	// Not timed: tell the reader to stop, and wait for it to.
	if err := in.produceOne(ctx, 0, stamp(stopSeq, 0)); err != nil {
		return fmt.Errorf("stop message: %w", err)
	}
	select {
	case <-rd.done:
	case <-time.After(drainTimeout):
		return fmt.Errorf("the reader did not stop within %v of the stop message", drainTimeout)
	}
	return nil
}
