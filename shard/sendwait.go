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
	select {
	case s.inbox <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expire:
		return router.ErrFull
	}
}
