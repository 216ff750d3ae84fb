package shard

import (
	"errors"
	"slices"

	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
)

// Write coalescing. Produces to one partition that arrive together — the
// inbox holds several when producers outpace the pump — are appended with
// one Append call: one record-encoding pass and one write instead of one
// per produce. They queue while the pump drains its inbox and are
// appended when it runs dry (settle), when enough are queued, or before
// anything else touches the partition (a read, a control operation), so
// no one observes the partition without them and arrival order is kept.
// Each produce is then answered with its own first offset, through the
// partition's fsync policy, exactly as if it had been appended alone.

// queueAppend queues f, a produce already admitted to o.
func (s *Shard) queueAppend(o *owned, f Frame) {
	if len(o.appendBuf) == 0 {
		s.appending = append(s.appending, o)
	}
	o.appendBuf = append(o.appendBuf, f)
	s.appendQueued++
}

// flushAppends appends everything queued, partition by partition.
func (s *Shard) flushAppends() {
	for _, o := range s.appending {
		s.flushAppendsOf(o)
	}
	clear(s.appending)
	s.appending = s.appending[:0]
	s.appendQueued = 0
}

// flushAppendsOf appends o's queued produces. A lone produce is appended
// as is. Several are appended as one batch; if that fails, each is
// appended alone, so one produce's bad input (or whatever else made the
// batch fail) is answered to it alone and never costs its neighbours.
func (s *Shard) flushAppendsOf(o *owned) {
	frames := o.appendBuf
	if len(frames) == 0 {
		return
	}
	defer func() {
		clear(frames)
		o.appendBuf = frames[:0]
	}()
	// Behaviour 10, again at append time: a delete may have committed
	// since the produces were admitted (the same drain of the inbox), and
	// no ack may land in an incarnation whose teardown is due. A
	// provisional partition's is not committed yet: its acks are held
	// (provisional.go). Checked, not confirmed: see committedHere.
	if _, err := s.committedHere(o); err != nil {
		for _, f := range frames {
			s.deny(f, metrics.DenyIncarnation, err)
		}
		return
	}
	if len(frames) == 1 || slices.ContainsFunc(frames, func(f Frame) bool { return f.Req.Encoded != nil || f.Req.Carried != nil }) {
		// An encoded batch is kept as one unit of its own, and a
		// carried produce is appended only to an empty partition
		// (carried.go): appended alone, as are their neighbours, in
		// arrival order.
		for _, f := range frames {
			s.appendOne(o, f) // it stamps the append time itself
		}
		return
	}
	now := s.clock.Now().UnixMicro()
	msgs := s.coalesceBuf[:0]
	give := true
	for _, f := range frames {
		stampAppendTime(f.Req.Messages, now)
		msgs = append(msgs, f.Req.Messages...)
		give = give && f.Req.Give
	}
	first, kept, err := appendTo(o.p, msgs, give)
	clear(msgs)
	s.coalesceBuf = msgs[:0]
	if err == nil {
		for _, f := range frames {
			s.commit.appended(o, f, Response{Offset: first, Kept: kept})
			first += uint64(len(f.Req.Messages))
		}
		return
	}
	for _, f := range frames {
		s.appendOne(o, f)
	}
}

// appendTo appends msgs to p, keeping their bytes when give offers them
// (every produce of the batch did) and p stores bytes as given; kept
// reports whether it did.
func appendTo(p partition.Partition, msgs []partition.Message, give bool) (first uint64, kept bool, err error) {
	if k, ok := p.(partition.Keeper); ok && give {
		first, err = k.AppendKept(msgs)
		return first, true, err
	}
	first, err = p.Append(msgs)
	return first, false, err
}

// decodeEncoded replaces r's encoded batch, if it has one, by its decoded
// messages, given (they are memory of their own): for a partition that
// does not keep encoded batches.
func decodeEncoded(r *Request) error {
	if r.Encoded == nil {
		return nil
	}
	msgs, err := partition.DecodeEncoded(r.Encoded)
	if err != nil {
		return err
	}
	r.Messages, r.Encoded, r.Give = msgs, nil, true
	return nil
}

// stampAppendTime sets the append time of a produce's messages: the
// shard's clock, read once per batch. The partition keeps append times
// non-decreasing.
func stampAppendTime(msgs []partition.Message, now int64) {
	for i := range msgs {
		msgs[i].AppendTime = now
	}
}

// appendOne appends a single produce and answers it.
func (s *Shard) appendOne(o *owned, f Frame) {
	if f.Req.Carried != nil && o.p.NextOffset() > 0 {
		s.commit.carriedThere(o, f)
		return
	}
	now := s.clock.Now().UnixMicro()
	var (
		first uint64
		kept  bool
		err   error
	)
	if k, ok := o.p.(partition.EncodedKeeper); ok && f.Req.Encoded != nil {
		first, err = k.AppendEncoded(f.Req.Encoded, now)
		kept = true
	} else if err = decodeEncoded(f.Req); err == nil {
		stampAppendTime(f.Req.Messages, now)
		first, kept, err = appendTo(o.p, f.Req.Messages, f.Req.Give)
	}
	if err != nil {
		if errors.Is(err, partition.ErrUnusable) {
			// The partition refuses every later write until it is built
			// again: fence it, so the reconciler evicts and rebuilds it
			// (behind the build backoff) as after a failed fsync. A
			// failed write it could not roll back may be in its log:
			// the outcome is unknown.
			s.fence(o, err)
			err = OutcomeUnknown(err)
		}
		s.answer(f, Response{Err: err})
		return
	}
	s.commit.appended(o, f, Response{Offset: first, Kept: kept})
}
