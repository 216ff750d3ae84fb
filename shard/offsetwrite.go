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
// store (the slot's bytes made, the file opened) and hands the write to
// the shard's offset writer, a goroutine that runs the writes one at a
// time, in the order they were staged (as the partitions require: a slot
// rewritten while its write is in flight may reach the disk torn), and
// hands each back to the pump when it returned (offsetsWritten). The
// pump serves on meanwhile; when a write comes back it runs the store's
// done, which makes the offset the one reads see (ConsumerOffset, the
// Consumer's resume point, the offsets a replica copies), then answers
// the store. Until then reads see the previous offset: never one a crash
// could take back. A Manual shard (the simulator's) runs the write and
// its done at once on the pump, as it did before, so a stepped run stays
// deterministic.
//
// The writer goroutine is started at the first staged store, so a shard
// whose consumers never commit has none. It is a member of the shard's
// run.Group: Close stops it with the pump, then, on the closing
// goroutine (drainOffsetWrites), hands back the writes it ran and runs
// the writes still queued, answering their stores, before the partitions
// are closed.

// offsetWrite is a staged store: its write, its done and the frame it
// answers; err is the write's result once it ran.
type offsetWrite struct {
	write func() error
	done  func(error)
	f     Frame
	err   error
}

// offsetWriter runs staged consumer offset writes off the pump.
type offsetWriter struct {
	start   sync.Once
	mu      sync.Mutex
	queue   []offsetWrite // staged, not yet run
	written []offsetWrite // run, not yet handed back to the pump
	wake    chan struct{} // capacity 1: the queue is not empty
	back    chan struct{} // capacity 1: written is not empty
}

// writtenC is signalled when the writer has run writes the pump has not
// taken back yet; nil (blocks forever) before the writer starts.
func (w *offsetWriter) writtenC() <-chan struct{} { return w.back }

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
	write, done, err := st.StageConsumerOffset(f.Req.Consumer, f.Req.Offset)
	if err != nil || write == nil || s.cfg.Manual {
		if err == nil && write != nil {
			err = write()
			done(err)
		}
		err = s.damagedRead(o, f, s.fenceUnusable(o, err))
		s.answer(f, Response{Err: err, Offset: f.Req.Offset})
		return true
	}
	w := &s.offsets
	w.start.Do(func() {
		w.wake = make(chan struct{}, 1)
		w.back = make(chan struct{}, 1)
		s.group.Go(func(ctx context.Context) { s.runOffsetWrites(ctx) })
	})
	w.mu.Lock()
	w.queue = append(w.queue, offsetWrite{write: write, done: done, f: f})
	w.mu.Unlock()
	signal(w.wake)
	return true
}

// signal wakes c's reader unless a wake is pending already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// runOffsetWrites is the offset writer's goroutine: it runs the staged
// writes in order and hands them back to the pump, until ctx ends. What
// is left then (the pump may stage a store as it stops) is run by
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

// runQueuedOffsetWrites runs the writes queued now, in order, queues them
// for the pump (offsetsWritten), and reports whether there were any.
func (s *Shard) runQueuedOffsetWrites() bool {
	w := &s.offsets
	w.mu.Lock()
	batch := w.queue
	w.queue = nil
	w.mu.Unlock()
	for i := range batch {
		batch[i].err = batch[i].write()
		w.mu.Lock()
		w.written = append(w.written, batch[i])
		w.mu.Unlock()
		signal(w.back)
	}
	return len(batch) > 0
}

// offsetsWritten runs, on the pump, the done of each write the writer
// ran, in order, and answers its store.
func (s *Shard) offsetsWritten() {
	w := &s.offsets
	w.mu.Lock()
	batch := w.written
	w.written = nil
	w.mu.Unlock()
	for _, ow := range batch {
		ow.done(ow.err)
		s.answer(ow.f, Response{Err: ow.err, Offset: ow.f.Req.Offset})
	}
}

// offsetsWrittenFired is the pump's unit of work for written stores.
func (s *Shard) offsetsWrittenFired() {
	s.offsetsWritten()
	s.settle()
}

// drainOffsetWrites runs the writes still queued at shutdown: every
// staged store is written, done and answered, and its file closed,
// before the partitions are.
func (s *Shard) drainOffsetWrites() {
	for {
		s.offsetsWritten()
		if !s.runQueuedOffsetWrites() {
			return
		}
	}
}
