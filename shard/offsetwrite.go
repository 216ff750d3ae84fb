package shard

import (
	"context"
	"sync"

	"github.com/parkway-io/parkway/partition"
)

// Consumer offset stores off the pump. A consumer offset store is
// acknowledged once its offset is durable: an fdatasync of the
// consumer's offset file (partition.OffsetStager). On the pump, that
// fsync stalled every other frame of the shard behind it — the next
// produce, the poll that would deliver it — for as long as the disk took;
// a Consumer committing after each batch (CommitAfterBatch) put one such
// stall between every two batches it was handed. So the pump stages the
// store (the offset recorded, so reads see it; the file opened) and hands
// the write to the shard's offset writer, a goroutine that runs the
// writes one at a time, in the order they were staged (as the partitions
// require: a slot rewritten while its write is in flight may reach the
// disk torn), and answers each store when its write returns. The pump
// serves on meanwhile. A Manual shard (the simulator's) runs the write
// at once on the pump, as it did before, so a stepped run stays
// deterministic.
//
// The writer goroutine is started at the first staged store, so a shard
// whose consumers never commit has none. It is a member of the shard's
// run.Group: Close stops it with the pump, then runs the writes still
// queued on the closing goroutine (drainOffsetWrites), answering their
// stores, before the partitions are closed.

// offsetWrite is a staged store: its write and the frame it answers.
type offsetWrite struct {
	write func() error
	f     Frame
}

// offsetWriter runs staged consumer offset writes off the pump.
type offsetWriter struct {
	start sync.Once
	mu    sync.Mutex
	queue []offsetWrite
	wake  chan struct{} // capacity 1: the queue is not empty
}

// stageOffset serves an OpStoreOffset against o's partition: staged and
// handed to the offset writer, or stored at once (a store the partition
// makes durable as it stages it, a failed one, a Manual shard's) and
// answered as serveRead answers; false if the partition cannot stage
// (the caller serves it as any other request).
func (s *Shard) stageOffset(o *owned, f Frame) bool {
	st, ok := o.p.(partition.OffsetStager)
	if !ok {
		return false
	}
	write, err := st.StageConsumerOffset(f.Req.Consumer, f.Req.Offset)
	if err != nil || write == nil || s.cfg.Manual {
		if err == nil && write != nil {
			err = write()
		}
		err = s.damagedRead(o, f, s.fenceUnusable(o, err))
		s.answer(f, Response{Err: err, Offset: f.Req.Offset})
		return true
	}
	w := &s.offsets
	w.start.Do(func() {
		w.wake = make(chan struct{}, 1)
		s.group.Go(func(ctx context.Context) { s.runOffsetWrites(ctx) })
	})
	w.mu.Lock()
	w.queue = append(w.queue, offsetWrite{write: write, f: f})
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

// runOffsetWrites is the offset writer's goroutine: it runs the staged
// writes in order and answers their stores, until ctx ends. What is left
// then (the pump may stage a store as it stops) is run by
// drainOffsetWrites at shutdown, after the pump and this goroutine have
// returned.
func (s *Shard) runOffsetWrites(ctx context.Context) {
	w := &s.offsets
	for {
		select {
		case <-w.wake:
		case <-ctx.Done():
			return
		}
		for s.runQueuedOffsetWrites() {
		}
	}
}

// runQueuedOffsetWrites runs the writes queued now, in order, answering
// their stores, and reports whether there were any.
func (s *Shard) runQueuedOffsetWrites() bool {
	w := &s.offsets
	w.mu.Lock()
	batch := w.queue
	w.queue = nil
	w.mu.Unlock()
	for _, ow := range batch {
		s.answer(ow.f, Response{Err: ow.write(), Offset: ow.f.Req.Offset})
	}
	return len(batch) > 0
}

// drainOffsetWrites runs the writes still queued at shutdown: every
// staged store is written and answered, and its file closed, before the
// partitions are.
func (s *Shard) drainOffsetWrites() {
	for s.runQueuedOffsetWrites() {
	}
}
