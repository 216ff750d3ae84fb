package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/internal/testhooks"
	"github.com/parkway-io/parkway/shard"
)

// The read barrier asks the metadata group's leader for a read index
// (a heartbeat round confirms its leadership) and waits until this
// node's metadata has applied it. AskDriver decides the tries: each is
// given the forward timeout, and one that fails for a reason worth
// another (no leader answers, the member is down) is made again after a
// pause of the one backoff. ReadBarrier carries the tries out blocking,
// through the metadata goroutine; Barrier step by step, for a manual
// engine's driver (the simulator).

// errNoReadIndex is a try given up at its timeout.
var errNoReadIndex = fmt.Errorf("%w: no read index yet", shard.ErrRetry)

// barrierDriver is the driver of one read barrier of e.
func (e *Engine) barrierDriver() AskDriver {
	return NewAskDriver(e.ForwardTimeout(), e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax, func(err error) bool {
		return !errors.Is(err, ErrClosed) && !errors.Is(err, ErrMetadataFailed)
	})
}

// askRead asks the group for a read index, answered into reply once it
// is applied here (serveReads), or at once with why the member takes no
// work. The caller owns the member (its goroutine, or a manual engine's
// driver).
func (m *metaGroup) askRead(reply chan error) {
	if err := m.unavailable(); err != nil {
		reply <- err
		return
	}
	if testhooks.NoReadIndexWait.Load() {
		reply <- nil // broken: answered before anything was confirmed or applied
		return
	}
	m.wake()
	_ = m.barriers.Ask(m.g, metaRead{reply: reply}) // a failed group is reported by the next process
}

// ReadBarrier waits until this node's metadata has applied everything the
// metadata group had committed when it was called: a ReadIndex through the
// group's leader (a heartbeat round confirms its leadership), then a wait
// for the local applied index. A metadata read made after it returns sees
// every command committed before the call, through any node. On a single
// node, and on a manual engine, it returns at once: their reads are local
// (a single node's are current). It retries until ctx's deadline (or
// RequestTimeout) while no leader answers, then fails with an error
// wrapping shard.ErrRetry.
func (e *Engine) ReadBarrier(ctx context.Context) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if e.cl == nil || e.cfg.Manual {
		return nil
	}
	m := e.cl.meta
	ctx, cancel := e.deadline(ctx)
	defer cancel()
	d := e.barrierDriver()
	t := askTimer{clk: e.cfg.Clock}
	defer t.stop()
	for st := d.Start(e.cfg.Clock.Now()); ; {
		switch st.Op {
		case AskDone:
			return st.Err
		case AskWait:
			if err := t.sleep(ctx, st.At); err != nil {
				return fmt.Errorf("%w: metadata read barrier: %w", shard.ErrRetry, err)
			}
			st = d.Fired(e.cfg.Clock.Now())
			continue
		}
		reply := make(chan error, 1)
		select {
		case m.reads <- reply:
		case <-m.failed:
			return m.err
		case <-ctx.Done():
			return fmt.Errorf("%w: metadata read barrier: %w", shard.ErrRetry, ctx.Err())
		}
		var err error
		select {
		case err = <-reply:
		case <-t.until(st.At):
			err = errNoReadIndex
		case <-ctx.Done():
			return fmt.Errorf("%w: metadata read barrier: %w", shard.ErrRetry, ctx.Err())
		}
		if err != nil && ctx.Err() != nil && d.again(err) {
			return fmt.Errorf("%w: metadata read barrier: %w", shard.ErrRetry, ctx.Err())
		}
		st = d.Answer(e.cfg.Clock.Now(), err)
	}
}

// Barrier is a read barrier of a manual engine (StartReadBarrier),
// carried on by its driver's calls to Step. It is not safe for
// concurrent use.
type Barrier struct {
	e        *Engine
	d        AskDriver
	st       AskStep
	deadline time.Time
	reply    chan error // the try in flight's answer (nil: none made yet)
	t        askTimer
}

// StartReadBarrier starts a read barrier on a manual engine, given up
// at deadline (on the engine's clock) with an error wrapping
// shard.ErrRetry: ReadBarrier's steps, each taken by a call to Step from
// the goroutine that drives the engine.
func (e *Engine) StartReadBarrier(deadline time.Time) (*Barrier, error) {
	if e.cl == nil {
		return nil, errNotClustered
	}
	b := &Barrier{e: e, d: e.barrierDriver(), deadline: deadline, t: askTimer{clk: e.cfg.Clock}}
	b.st = b.d.Start(e.cfg.Clock.Now())
	return b, nil
}

// Step makes the barrier's next try when one is due and takes what
// arrived — the try's answer, its timer, the end of a pause — and
// reports the barrier's outcome once it is over (done): nil when this
// node has applied everything the group had committed when the barrier
// started. It never blocks.
func (b *Barrier) Step() (err error, done bool) {
	m, clk := b.e.cl.meta, b.e.cfg.Clock
	for {
		switch b.st.Op {
		case AskDone:
			b.t.stop()
			return b.st.Err, true
		case AskSend:
			if b.reply == nil {
				b.reply = make(chan error, 1)
				m.askRead(b.reply)
				_ = m.process() // a failed group answers the next try
				b.t.until(minTime(b.st.At, b.deadline))
			}
			// The answer is taken before the timer: a select over both,
			// when both are ready (the answer arrived in the step in
			// which the try's time ran out), would pick one at random,
			// and the same run would diverge — and an answer that
			// arrived is worth more than its timeout.
			var err error
			select {
			case err = <-b.reply:
			default:
				select {
				case <-b.t.t.C():
					err = errNoReadIndex
				default:
					return nil, false
				}
			}
			b.reply = nil
			b.st = b.d.Answer(clk.Now(), err)
			if b.st.Op == AskWait {
				b.t.until(minTime(b.st.At, b.deadline))
			}
		case AskWait:
			select {
			case <-b.t.t.C():
			default:
				return nil, false
			}
			b.st = b.d.Fired(clk.Now())
		}
		if b.st.Op != AskDone && !clk.Now().Before(b.deadline) {
			b.st = AskStep{Op: AskDone, Err: fmt.Errorf("%w: metadata read barrier: deadline passed", shard.ErrRetry)}
		}
	}
}

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
