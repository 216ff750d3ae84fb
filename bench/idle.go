package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// runIdle is case W2 on one side: readers readers of the one partition
// (stream), each started from the first message; once every one has seen
// the warm message (so each is running and its next request waits on the
// server) and recorded it (the Consumer's commit, Consume's ack, done
// when the server has it), the process settles for idleSettle and returns
// its freed memory to the OS, then the clock runs for window with nothing
// produced. The CPU the process uses over the window,
// divided by the window, is the cost of keeping them waiting (with the
// idle system's own). Sides that observe it count the requests answered
// empty in the window: with a waitMaxWait wait, about readers × window /
// waitMaxWait, which shows every reader was waiting and asking again.
//
// Then, not timed: one message is produced, and the time until every
// reader has it is the wake-up of all of them by one produce. It also
// proves each was still waiting; a reader that has not seen it after
// drainTimeout is counted as missing it (with how its server sees it),
// not failed. A side without a reader measures the idle system alone.
func runIdle(ctx context.Context, in instance, side waitSide, readers int, window time.Duration, m *meter) (s waitSample, err error) {
	s.empties = -1
	if side.start == nil {
		readers = 0
	}
	var empties atomic.Int64
	ready, woken := newCounter(readers), newCounter(readers)
	f := newFailures()
	woke := make([]atomic.Bool, readers)
	hooks := func(i int) readerHooks {
		h := readerHooks{seen: func(p []byte) bool {
			seq, _, err := unstamp(p)
			switch {
			case err != nil:
				f.fail(err)
			case seq == 0:
				ready.add()
			case seq == stopSeq:
				woke[i].Store(true)
				woken.add()
				return false
			default:
				f.fail(fmt.Errorf("message %d seen on an idle partition", seq))
			}
			return true
		}}
		if side.countsEmpty {
			h.empty = func() { empties.Add(1) }
		}
		return h
	}
	var rds []*waitReader
	defer func() { err = errors.Join(err, stopAll(rds)) }()
	t := time.Now()
	for i := range readers {
		rd, err := side.start(ctx, in, fmt.Sprintf("idle-%d", i), hooks(i), f.fail)
		if err != nil {
			return s, fmt.Errorf("reader %d: %w", i, err)
		}
		rds = append(rds, rd)
	}
	if err := waitUntil(ctx, "every reader to see the warm message", ready.ch, f, drainTimeout); err != nil {
		return s, err
	}
	for _, rd := range rds {
		if rd.settle != nil {
			if err := rd.settle(ctx); err != nil {
				return s, err
			}
		}
	}
	s.setUp = time.Since(t)
	if err := sleepCtx(ctx, idleSettle); err != nil {
		return s, err
	}
	// The memory the earlier rounds and sides freed (a thousand readers
	// stopped, a server shut down, gigabytes written by the cases before)
	// is returned to the OS now, not by the runtime's background
	// scavenger during the window: that work belongs to whatever ran
	// before, whichever side's window it lands in.
	debug.FreeOSMemory()

	e0 := empties.Load()
	if err := m.start(); err != nil {
		return s, err
	}
	if err := sleepCtx(ctx, window); err != nil {
		return s, err
	}
	if err := m.stop(readers, 0); err != nil {
		return s, err
	}
	if side.countsEmpty {
		s.empties = empties.Load() - e0
	}
	select {
	case <-f.ch:
		return s, fmt.Errorf("a reader failed during the window: %w", f.err)
	default:
	}
	if readers == 0 {
		return s, nil
	}

	// Not timed: one produce wakes every reader.
	t = time.Now()
	if err := in.produceOne(ctx, 0, stamp(stopSeq, 0)); err != nil {
		return s, fmt.Errorf("wake message: %w", err)
	}
	err = waitUntil(ctx, "every reader to see the wake message", woken.ch, f, drainTimeout)
	if ctx.Err() != nil || f.err != nil || woken.got.Load() == 0 {
		return s, err
	}
	if err == nil {
		s.wake = time.Since(t)
		return s, nil
	}
	// Some readers never saw it: count them and ask the server how the
	// first looks, for the report, rather than failing the run.
	for i := range woke {
		if woke[i].Load() {
			continue
		}
		if s.missed++; s.missedState == "" {
			s.missedState = fmt.Sprintf("reader %d: no state", i)
			if st := rds[i].state; st != nil {
				s.missedState = fmt.Sprintf("reader %d: %s", i, st(ctx))
			}
		}
	}
	return s, nil
}
