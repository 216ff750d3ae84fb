package clock

import (
	"context"
	"errors"
	"time"
)

// WithTimeout is context.WithTimeout on c: the returned context ends when
// d has passed on c (for a Manual clock, when Advance moves past it), when
// ctx ends, or when cancel is called, whichever is first. Its Err is
// context.DeadlineExceeded when c's time ran out, as context.WithTimeout's
// is; its Deadline is c.Now()+d unless ctx's is earlier. As with
// context.WithTimeout, a ctx whose deadline comes no later than c.Now()+d
// is only made cancellable (no timer: ctx ends first, and its end is
// reported as DeadlineExceeded when its deadline passed), and on Real it
// is context.WithTimeout itself. The caller must call cancel: until then a
// goroutine waits on the timer.
func WithTimeout(ctx context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := c.(Real); ok {
		return context.WithTimeout(ctx, d)
	}
	deadline := c.Now().Add(d)
	inner, cancel := context.WithCancelCause(ctx)
	if pd, ok := ctx.Deadline(); ok && !pd.After(deadline) {
		return &clockCtx{Context: inner, deadline: pd}, func() { cancel(context.Canceled) }
	}
	t := c.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-inner.Done():
		}
	}()
	return &clockCtx{Context: inner, deadline: deadline}, func() { cancel(context.Canceled) }
}

// Sleep waits d on c, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// clockCtx is a context whose deadline is kept on a Clock.
type clockCtx struct {
	context.Context // a WithCancelCause of the parent
	deadline        time.Time
}

func (c *clockCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Err reports DeadlineExceeded when the clock's timer ended the context
// (WithCancelCause alone would say Canceled).
func (c *clockCtx) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
