package host

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// scriptShard is node 1's owner shard as a script plays it to a client
// call (a callPort): the n-th send (from 1) is logged, with the epoch the
// request carries, and answered as answer says — refused (refused not
// nil), answered after a delay, or not at all (ok false).
type scriptShard struct {
	p      *fwdPeer
	n      int
	answer func(n int) (r shard.Response, after time.Duration, ok bool, refused error)
}

func (s *scriptShard) send(_ context.Context, f shard.Frame) error {
	s.n++
	s.p.logf("send %d (epoch %d)", s.n, f.Req.Epoch)
	r, after, ok, refused := s.answer(s.n)
	switch {
	case refused != nil:
		return refused
	case !ok:
	case after == 0:
		f.Reply <- r
	default:
		s.p.later(after, func() { f.Reply <- r })
	}
	return nil
}

// callCase is a client call from node 1 of two (the engine of
// fwdEngine): its owner shard answers as shard says, node 2 as react
// says, the n-th re-resolve (from 1) ends with resolve(n) (epoch n
// otherwise), and the caller's context ends after cancel (0: never).
type callCase struct {
	name    string
	shard   func(n int) (r shard.Response, after time.Duration, ok bool, refused error)
	react   func() func(t *testing.T, p *fwdPeer, m transport.Message)
	resolve func(n int) error
	cancel  time.Duration
	want    []string
}

// callOutcome names a call's outcome, and whether it carries the
// caller's context's error.
func callOutcome(r shard.Response, err error) string {
	s := fwdOutcome(r, err)
	if err != nil && errors.Is(err, context.Canceled) && s != context.Canceled.Error() {
		s += " (context canceled)"
	}
	return s
}

// callEngine is fwdEngine with the call's retries paced from 20ms to
// 80ms: a schedule the log shows to the millisecond.
func callEngine(t *testing.T, clk clock.Clock) (*Engine, *transport.Network) {
	e, net := fwdEngine(t, clk)
	e.callCfg.BackoffMin, e.callCfg.BackoffMax = 20*time.Millisecond, 80*time.Millisecond
	return e, net
}

// callBothWays runs tc both ways (nodeTwoBothWays): stepped, the call's stepped
// operation (callSteps) stepped on a manual clock advanced to its alarm
// (the retry's, or its forward's) or the script's next action whenever a
// step leaves it waiting, given up as runSteps gives up once the context
// ended, re-resolved as Wait re-resolves; and blocking, by
// PendingCall.Wait.
func callBothWays(t *testing.T, tc callCase) (stepped, blocking []string) {
	t.Helper()
	ns := metadata.Namespace(1 << 20)
	req := func() *shard.Request {
		return &shard.Request{Op: shard.OpProduce, NS: ns, Messages: []partition.Message{{Payload: []byte("m")}}}
	}
	resolve := func(p *fwdPeer) Resolve {
		n := 0
		return func(context.Context) (metadata.Namespace, uint64, error) {
			n++
			p.logf("resolve %d", n)
			if err := tc.resolve(n); err != nil {
				return 0, 0, err
			}
			return ns, uint64(n), nil
		}
	}
	// noneLeft checks that the call let go of its forward's registrations.
	noneLeft := func(t *testing.T, e *Engine) {
		e.cl.mu.Lock()
		defer e.cl.mu.Unlock()
		if len(e.cl.waiting) != 0 || len(e.cl.watching) != 0 {
			t.Errorf("the call left %d forwards awaited, %d watched", len(e.cl.waiting), len(e.cl.watching))
		}
	}

	return nodeTwoBothWays(t, callEngine, tc.react, func(t *testing.T, e *Engine, p *fwdPeer) string {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if tc.cancel > 0 {
			p.later(tc.cancel, cancel)
		}
		res := resolve(p)
		pc := e.startCall(ctx, req(), &scriptShard{p: p, answer: tc.shard}, nil)
		s := pc.steps(ctx, true)
		for i := 0; ; i++ {
			p.receive()
			err, done := s.Step()
			p.receive()
			if done && s.resolving {
				s.resolved(res(ctx))
				continue
			}
			if !done && ctx.Err() != nil {
				err, done = s.giveUp(ctx.Err()), true
			}
			if done {
				noneLeft(t, e)
				return callOutcome(s.st.Resp, err)
			}
			p.advance(t, i, s.wakes().alarm)
		}
	}, func(t *testing.T, e *Engine, p *fwdPeer) string {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if tc.cancel > 0 {
			time.AfterFunc(tc.cancel, cancel)
		}
		pc := e.startCall(ctx, req(), &scriptShard{p: p, answer: tc.shard}, nil)
		r, err := pc.Wait(ctx, resolve(p))
		noneLeft(t, e)
		return callOutcome(r, err)
	})
}

// The blocking client call (PendingCall.Wait: its first answer taken,
// then its stepped operation waited on by runSteps) takes the decisions
// the stepped one takes, on the same scripted owner shard and node 2:
// a retry in place after a "retry here" answer, re-resolved first; a
// send refused by a full inbox; "not leader" followed into a forward, and
// a forward answered "not leader" naming this node brought back to a
// retry here; a failed re-resolve; the caller's context ending in a
// retry's pause and during a forward. Both make the same sends, resolves
// and forwards at the same times and end the same way; the schedule is
// pinned too (retries paced 20ms, 40ms, ...).
func TestSteppedAndBlockingCallAlike(t *testing.T) {
	retry := fmt.Errorf("%w: test", shard.ErrRetry)
	ok := func(after time.Duration) func(int) (shard.Response, time.Duration, bool, error) {
		return func(int) (shard.Response, time.Duration, bool, error) {
			return shard.Response{Offset: 7}, after, true, nil
		}
	}
	// answers has the owner shard answer the n-th send rs[n-1], after
	// 5ms; past the list, offset 7 at once.
	answers := func(rs ...shard.Response) func(int) (shard.Response, time.Duration, bool, error) {
		return func(n int) (shard.Response, time.Duration, bool, error) {
			if n > len(rs) {
				return ok(0)(n)
			}
			return rs[n-1], 5 * time.Millisecond, true, nil
		}
	}
	// node2 has node 2 answer a forwarded request r after 10ms, or
	// never (answer false); probes go unanswered.
	node2 := func(r shard.Response, answer bool) func() func(t *testing.T, p *fwdPeer, m transport.Message) {
		return func() func(t *testing.T, p *fwdPeer, m transport.Message) {
			return func(t *testing.T, p *fwdPeer, m transport.Message) {
				if m.Kind == KindRequest && answer {
					p.later(10*time.Millisecond, func() { p.send(t, KindReply, m.Group, EncodeResponse(r)) })
				}
			}
		}
	}
	silent := node2(shard.Response{}, false)
	resolves := func(int) error { return nil }
	gone := errors.New("partition gone")
	for _, tc := range []callCase{{
		name:    "retry here, re-resolved",
		shard:   answers(shard.Response{Err: retry}),
		react:   silent,
		resolve: resolves,
		want:    []string{"send 1 (epoch 0) at +0s", "resolve 1 at +25ms", "send 2 (epoch 1) at +25ms", "done: offset 7 at +25ms"},
	}, {
		// Refused by a full inbox, then by one full until the deadline:
		// both are retried here, the second after a doubled pause.
		name: "full inbox",
		shard: func(n int) (shard.Response, time.Duration, bool, error) {
			switch n {
			case 1:
				return shard.Response{}, 0, false, fmt.Errorf("shard 0: %w", router.ErrFull)
			case 2:
				return shard.Response{}, 0, false, fmt.Errorf("%w: inbox full until the deadline", shard.ErrRetry)
			}
			return ok(5 * time.Millisecond)(n)
		},
		react:   silent,
		resolve: resolves,
		want: []string{"send 1 (epoch 0) at +0s", "resolve 1 at +20ms", "send 2 (epoch 1) at +20ms",
			"resolve 2 at +60ms", "send 3 (epoch 2) at +60ms", "done: offset 7 at +65ms"},
	}, {
		name:    "not leader, forwarded",
		shard:   answers(shard.Response{Err: &shard.NotLeaderError{Leader: 2}}),
		react:   node2(shard.Response{Offset: 9}, true),
		resolve: resolves,
		want:    []string{"send 1 (epoch 0) at +0s", "n2 got request at +5ms", "done: offset 9 at +15ms"},
	}, {
		// Node 2 says this node leads now: the call retries here.
		name:    "forwarded, leadership moving here",
		shard:   answers(shard.Response{Err: &shard.NotLeaderError{Leader: 2}}),
		react:   node2(shard.Response{Err: &shard.NotLeaderError{Leader: 1}}, true),
		resolve: resolves,
		want: []string{"send 1 (epoch 0) at +0s", "n2 got request at +5ms", "resolve 1 at +35ms",
			"send 2 (epoch 1) at +35ms", "done: offset 7 at +35ms"},
	}, {
		name:    "re-resolve fails",
		shard:   answers(shard.Response{Err: retry}),
		react:   silent,
		resolve: func(int) error { return gone },
		want:    []string{"send 1 (epoch 0) at +0s", "resolve 1 at +25ms", "done: partition gone at +25ms"},
	}, {
		// Given up in the pause: the caller's error, not retried.
		name:    "context ends in the pause",
		shard:   answers(shard.Response{Err: retry}),
		react:   silent,
		resolve: resolves,
		cancel:  15 * time.Millisecond,
		want:    []string{"send 1 (epoch 0) at +0s", "done: context canceled at +15ms"},
	}, {
		// Given up awaiting a forward's answer: the outcome is unknown,
		// and the forward is let go of.
		name:    "context ends in a forward",
		shard:   answers(shard.Response{Err: &shard.NotLeaderError{Leader: 2}}),
		react:   silent,
		resolve: resolves,
		cancel:  300 * time.Millisecond,
		want:    []string{"send 1 (epoch 0) at +0s", "n2 got request at +5ms", "done: unknown outcome (context canceled) at +300ms"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			stepped, blocking := callBothWays(t, tc)
			sameLogs(t, stepped, blocking, tc.want)
		})
	}
}
