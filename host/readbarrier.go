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
// pause of the one backoff. Barrier carries the tries out step by step
// (steps.go); ReadBarrier is a Barrier started, then waited on, and a
// manual engine's driver (the simulator) steps one itself
// (StartReadBarrier).

// askRead asks the group for a read index, answered into reply once it
// is applied here (serveReads), or at once with why the member takes no
// work. The caller owns the member (its goroutine, or a manual engine's
// driver).
func (m *metaGroup) askRead(reply chan MetadataResult) {
	if err := m.unavailable(); err != nil {
		reply <- MetadataResult{Err: err}
		return
	}
	if testhooks.NoReadIndexWait.Load() {
		reply <- MetadataResult{} // broken: answered before anything was confirmed or applied
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
	ctx, cancel := e.deadline(ctx)
	defer cancel()
	return runSteps(ctx, e.cfg.Clock, e.startBarrier(e.cl.meta.port(ctx), time.Time{}))
}

// Barrier is a read barrier in progress, carried on by calls to Step
// (StartReadBarrier; ReadBarrier waits on one). It is not safe for
// concurrent use.
type Barrier struct{ ask askSteps }

// StartReadBarrier starts a read barrier, given up at deadline (on the
// engine's clock) with an error wrapping shard.ErrRetry: ReadBarrier's
// steps, each taken by a call to Step — on a manual engine from the
// goroutine that drives it.
func (e *Engine) StartReadBarrier(deadline time.Time) (*Barrier, error) {
	if e.cl == nil {
		return nil, errNotClustered
	}
	return e.startBarrier(e.cl.meta.port(context.Background()), deadline), nil
}

// startBarrier starts a read barrier through port, given up at deadline
// (zero: none; the blocking owner's ctx bounds it).
func (e *Engine) startBarrier(port metaPort, deadline time.Time) *Barrier {
	b := &Barrier{ask: askSteps{clk: e.cfg.Clock, deadline: deadline,
		d: NewAskDriver(e.ForwardTimeout(), e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax, func(err error) bool {
			return !errors.Is(err, ErrClosed) && !errors.Is(err, ErrMetadataFailed)
		}),
		try:      port.read,
		noAnswer: fmt.Errorf("%w: no read index yet", shard.ErrRetry),
		gaveUp: func(err error, _ bool) error {
			return fmt.Errorf("%w: metadata read barrier: %w", shard.ErrRetry, err)
		}}}
	b.ask.start()
	return b
}

// Step makes the barrier's next try when one is due and takes what
// arrived — the try's answer, the end of its time or of a pause — and
// reports the barrier's outcome once it is over (done): nil when this
// node has applied everything the group had committed when the barrier
// started. It never blocks on a manual engine.
func (b *Barrier) Step() (err error, done bool) { return b.ask.Step() }

func (b *Barrier) wakes() wakeup { return b.ask.wakes() }

func (b *Barrier) giveUp(err error) error { return b.ask.giveUp(err) }
