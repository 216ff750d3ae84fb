// Package run owns goroutines: every long-lived goroutine in parkway is
// started through a Group and stopped by cancelling the Group's context, so
// Close can wait for all of them and no goroutine outlives its owner.
package run

import (
	"context"
	"sync"
)

// Group starts goroutines that share one cancellation.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// NewGroup returns a Group whose goroutines stop when Stop is called.
func NewGroup() *Group {
	ctx, cancel := context.WithCancel(context.Background())
	return &Group{ctx: ctx, cancel: cancel}
}

// Go starts f in a goroutine; f must return once ctx is done.
func (g *Group) Go(f func(ctx context.Context)) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f(g.ctx)
	}()
}

// Done is closed once Stop has been called.
func (g *Group) Done() <-chan struct{} { return g.ctx.Done() }

// Stop cancels every goroutine and waits for them. It is idempotent.
func (g *Group) Stop() {
	g.once.Do(g.cancel)
	g.wg.Wait()
}

// Context returns the Group's context, done once Stop is called.
func (g *Group) Context() context.Context { return g.ctx }
