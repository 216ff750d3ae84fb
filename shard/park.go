package shard

import (
	"fmt"
	"time"

	"github.com/google/btree"

	"github.com/parkway-io/parkway/metadata"
)

// ParkLimits bounds the park buffer. Zero fields take the defaults.
type ParkLimits struct {
	// FramesPerNamespace caps frames parked for one namespace (default 128).
	FramesPerNamespace int
	// BytesPerNamespace caps the resident footprint parked for one
	// namespace (default 4 MiB).
	BytesPerNamespace int64
	// BytesPerShard caps the resident footprint parked on the shard
	// (default 16 MiB).
	BytesPerShard int64
	// Alignment is the unit footprints are rounded up to (default 4 KiB):
	// a parked frame holds whole buffers, so a 10-byte frame still pins a
	// 4 KiB buffer and must count as one.
	Alignment int64
	// MaxPasses is how many reconciler passes a frame survives parked
	// (default 3). With the reconciler period P, a parked frame is answered
	// between (MaxPasses-1)·P and MaxPasses·P after it parked, so the
	// client's retry deadline must exceed MaxPasses·P for the frame to be
	// retried rather than failed.
	MaxPasses int
	// MaxAge bounds how long a frame stays parked by the shard's own
	// clock (default MaxPasses × 1 s, the default pass period; a node
	// sets MaxPasses × its ReconcileInterval). Unlike MaxPasses it does
	// not depend on reconcile passes completing: a pass stuck inside a
	// slow build ages nothing, and the shard answers the frame anyway, at
	// the earlier of MaxAge after it parked and its request's Deadline.
	MaxAge time.Duration
}

// Park defaults, the reference server's.
const (
	DefaultFramesPerNamespace       = 128
	DefaultBytesPerNamespace  int64 = 4 << 20
	DefaultBytesPerShard      int64 = 16 << 20
	DefaultAlignment          int64 = 4 << 10
	DefaultMaxPasses                = 3
	// MaxParkPasses bounds MaxPasses: a frame parked for longer than
	// 1,000 reconcile passes waits for nothing a pass can bring.
	MaxParkPasses = 1000

	// frameOverhead is the fixed part of a parked frame's footprint (its
	// header and reply path), so a frame with no payload still counts.
	frameOverhead = 64
)

func (l ParkLimits) withDefaults() ParkLimits {
	if l.FramesPerNamespace == 0 {
		l.FramesPerNamespace = DefaultFramesPerNamespace
	}
	if l.BytesPerNamespace == 0 {
		l.BytesPerNamespace = DefaultBytesPerNamespace
	}
	if l.BytesPerShard == 0 {
		l.BytesPerShard = DefaultBytesPerShard
	}
	if l.Alignment == 0 {
		l.Alignment = DefaultAlignment
	}
	if l.MaxPasses == 0 {
		l.MaxPasses = DefaultMaxPasses
	}
	if l.MaxAge == 0 {
		l.MaxAge = time.Duration(l.MaxPasses) * time.Second
	}
	return l
}

func (l ParkLimits) validate() []error {
	var errs []error
	if l.FramesPerNamespace < 0 {
		errs = append(errs, fmt.Errorf("park FramesPerNamespace %d < 0", l.FramesPerNamespace))
	}
	if l.BytesPerNamespace < 0 {
		errs = append(errs, fmt.Errorf("park BytesPerNamespace %d < 0", l.BytesPerNamespace))
	}
	if l.BytesPerShard < 0 {
		errs = append(errs, fmt.Errorf("park BytesPerShard %d < 0", l.BytesPerShard))
	}
	if l.Alignment < 0 || l.Alignment&(l.Alignment-1) != 0 {
		errs = append(errs, fmt.Errorf("park Alignment %d is not a power of two", l.Alignment))
	}
	if l.MaxPasses < 0 || l.MaxPasses > MaxParkPasses {
		errs = append(errs, fmt.Errorf("park MaxPasses %d outside [0, %d] (0 for the default)", l.MaxPasses, MaxParkPasses))
	}
	if l.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("park MaxAge %v < 0", l.MaxAge))
	}
	return errs
}

// footprint is the resident size of a frame of n payload bytes.
func (l ParkLimits) footprint(n int64) int64 {
	n += frameOverhead
	return (n + l.Alignment - 1) &^ (l.Alignment - 1)
}

// ParkedFrame is one parked frame.
type parkedFrame struct {
	frame Frame
	// stamp is the committed created_revision when the frame parked, or
	// the epoch the frame itself addresses; 0 means none known.
	stamp uint64
	// pass is the shard's sweep count when the frame parked; its age in
	// passes is the difference to the current count. Storing the birth pass
	// instead of a counter makes aging O(1) per sweep and namespace rather
	// than a walk over every parked frame.
	pass uint64
	size int64
	// expires is when the shard answers the frame if it is still parked:
	// the earlier of its request's deadline and MaxAge after it parked.
	expires time.Time
}

// parkQueue is one namespace's parked frames in arrival order.
type parkQueue struct {
	ns     metadata.Namespace
	frames []parkedFrame // frames[head:] are live
	head   int
	bytes  int64
}

func (q *parkQueue) len() int { return len(q.frames) - q.head }

func (q *parkQueue) push(p parkedFrame) {
	if q.head > 0 && q.head == len(q.frames) {
		q.frames, q.head = q.frames[:0], 0
	}
	q.frames = append(q.frames, p)
	q.bytes += p.size
}

func (q *parkQueue) pop() parkedFrame {
	p := q.frames[q.head]
	q.frames[q.head] = parkedFrame{} // drop references for the GC
	q.head++
	q.bytes -= p.size
	return p
}

// parkBuffer is the shard's park buffer: a map for O(1) lookup on the hot
// path and a btree over the same queues for deterministic, ordered sweeps.
// The totals are kept as running sums updated at every mutation, so a bound
// check never scans.
type parkBuffer struct {
	limits ParkLimits
	byNS   map[metadata.Namespace]*parkQueue
	order  *btree.BTreeG[*parkQueue]
	frames int
	bytes  int64
}

func newParkBuffer(l ParkLimits) *parkBuffer {
	return &parkBuffer{
		limits: l,
		byNS:   make(map[metadata.Namespace]*parkQueue),
		order:  btree.NewG(16, func(a, b *parkQueue) bool { return a.ns < b.ns }),
	}
}

// park appends f to its namespace's queue, or returns false when a bound
// would be exceeded (the caller sheds and answers it).
func (b *parkBuffer) park(ns metadata.Namespace, p parkedFrame) bool {
	q := b.byNS[ns]
	qFrames, qBytes := 0, int64(0)
	if q != nil {
		qFrames, qBytes = q.len(), q.bytes
	}
	if qFrames+1 > b.limits.FramesPerNamespace ||
		qBytes+p.size > b.limits.BytesPerNamespace ||
		b.bytes+p.size > b.limits.BytesPerShard {
		return false
	}
	if q == nil {
		q = &parkQueue{ns: ns}
		b.byNS[ns] = q
		b.order.ReplaceOrInsert(q)
	}
	q.push(p)
	b.frames++
	b.bytes += p.size
	return true
}

// expire removes every frame whose expiry is at or before now, calling
// answer for each in namespace and arrival order, and returns the
// earliest expiry left (zero if none). It walks the buffer: it runs when
// the shard's park timer fires, not per arriving frame, and the buffer's
// bounds keep it small.
func (b *parkBuffer) expire(now time.Time, answer func(parkedFrame)) time.Time {
	var next time.Time
	var emptied []*parkQueue
	b.order.Ascend(func(q *parkQueue) bool {
		kept := q.frames[:q.head]
		for _, p := range q.frames[q.head:] {
			if !p.expires.IsZero() && !p.expires.After(now) {
				q.bytes -= p.size
				b.frames--
				b.bytes -= p.size
				answer(p)
				continue
			}
			if !p.expires.IsZero() && (next.IsZero() || p.expires.Before(next)) {
				next = p.expires
			}
			kept = append(kept, p)
		}
		clear(q.frames[len(kept):])
		q.frames = kept
		if q.len() == 0 {
			emptied = append(emptied, q)
		}
		return true
	})
	for _, q := range emptied {
		delete(b.byNS, q.ns)
		b.order.Delete(q)
	}
	return next
}

// take detaches and returns ns's queue (nil if none).
func (b *parkBuffer) take(ns metadata.Namespace) *parkQueue {
	q := b.byNS[ns]
	if q == nil {
		return nil
	}
	delete(b.byNS, ns)
	b.order.Delete(q)
	b.frames -= q.len()
	b.bytes -= q.bytes
	return q
}

// restore puts back what is left of a taken queue, ahead of anything that
// parked for ns since (there is nothing in practice: take and restore
// happen within one pump step).
func (b *parkBuffer) restore(q *parkQueue) {
	if q.len() == 0 {
		return
	}
	if cur := b.byNS[q.ns]; cur != nil {
		for cur.len() > 0 {
			q.push(cur.pop())
		}
		b.take(q.ns)
	}
	b.byNS[q.ns] = q
	b.order.ReplaceOrInsert(q)
	b.frames += q.len()
	b.bytes += q.bytes
}

// ParkedNamespace describes one namespace's parked frames.
type ParkedNamespace struct {
	NS     metadata.Namespace
	Frames int
	Bytes  int64
	// OldestPasses is how many sweeps the oldest frame has survived.
	OldestPasses int
}
