package shard

import (
	"context"
	"time"

	"github.com/parkway-io/parkway/router"
)

// SendBefore is Send bounded by expire as well as ctx: it waits for room
// in the inbox until ctx ends (ctx's error) or expire delivers
// (router.ErrFull: the inbox stayed full, the frame was not taken). A
// caller bounding the wait by a deadline of its own passes a timer's
// channel, which costs one timer where a context derived for the
// deadline costs a context, a timer and their cancellation.
func (s *Shard) SendBefore(ctx context.Context, f Frame, expire <-chan time.Time) error {
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	// A peer frame over the byte bound is refused at once, as TrySend
	// does: its bytes may not wait for room, only its slot may.
	in, err := s.charge(f)
	if err != nil {
		return err
	}
	s.handoffs.Add(1)
	select {
	case s.inbox <- in:
		return nil
	case <-ctx.Done():
		s.handoffs.Add(^uint64(0))
		s.uncharge(in)
		return ctx.Err()
	case <-expire:
		s.handoffs.Add(^uint64(0))
		s.uncharge(in)
		return router.ErrFull
	}
}
