package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// fwdPeer is node 2 as a script plays it to a forward from node 1 (a
// manual engine, e): each message node 1 sends it is logged with its
// time and handed to react, which answers it later (or not); news is
// told to node 1 on the script's schedule. Its log is locked: a real
// clock's run answers on timer goroutines.
type fwdPeer struct {
	lateQueue
	t0    time.Time
	e     *Engine
	self  transport.Bus // node 1's endpoint: what node 2 sends it
	peer  transport.Bus
	mu    sync.Mutex
	log   []string
	react func(p *fwdPeer, m transport.Message)
}

func (p *fwdPeer) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// To the millisecond: the first wait has the request's transfer
	// time (microseconds) on top of the forward timeout.
	p.log = append(p.log, fmt.Sprintf(format, args...)+fmt.Sprintf(" at +%v", p.clk.Now().Sub(p.t0).Round(time.Millisecond)))
}

// newFwdPeer is node 2 of e's network as react (a fresh script) plays
// it, its log's times from now on clk.
func newFwdPeer(t *testing.T, clk clock.Clock, e *Engine, net *transport.Network, react func() func(t *testing.T, p *fwdPeer, m transport.Message)) *fwdPeer {
	p := &fwdPeer{lateQueue: lateQueue{clk: clk}, t0: clk.Now(), e: e, self: net.Endpoint(1), peer: net.Endpoint(2)}
	r := react()
	p.react = func(p *fwdPeer, m transport.Message) { r(t, p, m) }
	return p
}

// receive has node 2 take what it was sent (a manual clock's run).
func (p *fwdPeer) receive() {
	for len(p.peer.Recv()) > 0 {
		p.got(<-p.peer.Recv())
	}
}

// serve has node 2 take what it is sent as it comes (a real clock's
// run), until the returned stop, which returns its log.
func (p *fwdPeer) serve() (stop func() []string) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case m := <-p.peer.Recv():
				p.got(m)
			case <-done:
				return
			}
		}
	})
	return func() []string {
		close(done)
		wg.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.log
	}
}

// advance moves a manual clock's run on, its i-th step having left it
// waiting: to the script's next action or alarm a (nil: none), whichever
// comes first, doing what is due then.
func (p *fwdPeer) advance(t *testing.T, i int, a *alarm) {
	at := p.deliver()
	if a != nil && !a.fired {
		at = earliest(at, a.at)
	}
	if at.IsZero() || i > 1000 {
		t.Fatalf("stepped: a step waits with nothing due (log %q)", p.log)
	}
	p.clk.(*clock.Manual).Advance(at.Sub(p.clk.Now()))
	p.deliver()
}

// got logs and reacts to a message node 2 received.
func (p *fwdPeer) got(m transport.Message) {
	p.logf("n2 got %s", map[uint8]string{KindRequest: "request", KindProbe: "probe"}[m.Kind])
	p.react(p, m)
}

// send sends node 1 a message of kind from node 2, and delivers it.
func (p *fwdPeer) send(t *testing.T, kind uint8, id uint64, payload []byte) {
	if err := p.peer.Send(transport.Message{To: 1, Kind: kind, Group: id, Payload: payload}); err != nil {
		t.Error(err)
		return
	}
	for len(p.self.Recv()) > 0 {
		if err := p.e.Deliver(<-p.self.Recv()); err != nil {
			t.Error(err)
		}
	}
}

// fwdOutcome names a forward's outcome.
func fwdOutcome(r shard.Response, err error) string {
	var nl *shard.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return fmt.Sprintf("not leader, %d leads", nl.Leader)
	case errors.Is(err, shard.ErrOutcomeUnknown):
		return "unknown outcome"
	case errors.Is(err, shard.ErrRetry):
		return "retry"
	case err != nil:
		return err.Error()
	}
	return fmt.Sprintf("offset %d", r.Offset)
}

// fwdCase is a forward of the request req makes (given the run's start)
// to node 2, which the script plays: react to what node 2 receives, and
// what happens on node 1 from the start (news).
type fwdCase struct {
	name  string
	req   func(t0 time.Time) *shard.Request
	react func() func(t *testing.T, p *fwdPeer, m transport.Message) // a fresh script for each run
	start func(p *fwdPeer)
	want  []string
}

// fwdEngine is node 1 of two, a manual engine on clk (forward timeout
// 500ms), and node 2's endpoint.
func fwdEngine(t *testing.T, clk clock.Clock) (*Engine, *transport.Network) {
	net := transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true})
	e, err := New(Config{Shards: 1, Manual: true, Clock: clk,
		Cluster: &Cluster{ID: 1, Peers: []transport.NodeID{1, 2}, Bus: net.Endpoint(1), TickInterval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return e, net
}

// nodeTwoBothWays runs a script twice on node 1 of two (made by engine on the
// run's clock), node 2 playing react: stepped, on a manual clock, by
// stepped (which calls p.advance whenever a step leaves it waiting), and
// blocking, on a real clock in a synctest bubble, by blocking while node
// 2 takes what it is sent as it comes. Each returns the outcome, logged
// as done; nodeTwoBothWays returns the two logs.
func nodeTwoBothWays(t *testing.T, engine func(*testing.T, clock.Clock) (*Engine, *transport.Network),
	react func() func(t *testing.T, p *fwdPeer, m transport.Message),
	stepped, blocking func(t *testing.T, e *Engine, p *fwdPeer) string) (steppedLog, blockingLog []string) {
	t.Helper()
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	e, net := engine(t, clk)
	p := newFwdPeer(t, clk, e, net, react)
	p.logf("done: %s", stepped(t, e, p))
	steppedLog = p.log
	e.Close()
	net.Close()

	synctest.Test(t, func(t *testing.T) {
		e, net := engine(t, clock.Real{})
		defer net.Close()
		defer e.Close()
		p := newFwdPeer(t, clock.Real{}, e, net, react)
		stop := p.serve()
		outcome := blocking(t, e, p)
		synctest.Wait() // what node 2 got before the end is logged
		p.logf("done: %s", outcome)
		blockingLog = stop()
	})
	return steppedLog, blockingLog
}

// sameLogs checks a stepped run's log against want, and the blocking
// run's against the stepped one's.
func sameLogs(t *testing.T, stepped, blocking, want []string) {
	t.Helper()
	if !slices.Equal(stepped, want) {
		t.Errorf("stepped: %q\nwant      %q", stepped, want)
	}
	if !slices.Equal(blocking, stepped) {
		t.Errorf("blocking: %q\nstepped:  %q", blocking, stepped)
	}
}

// forwardBothWays runs tc both ways (nodeTwoBothWays): stepped, as a manual
// engine's driver (the simulator) steps a Forwarding, its clock advanced
// to the forward's alarm or the script's next action whenever a step
// leaves it waiting; and blocking, by Engine.forward.
func forwardBothWays(t *testing.T, tc fwdCase) (stepped, blocking []string) {
	t.Helper()
	return nodeTwoBothWays(t, fwdEngine, tc.react, func(t *testing.T, e *Engine, p *fwdPeer) string {
		f, err := e.StartForward(2, tc.req(p.t0))
		if err != nil {
			t.Fatal(err)
		}
		tc.start(p)
		for i := 0; ; i++ {
			p.receive()
			r, err, done := f.Step()
			p.receive()
			if done {
				return fwdOutcome(r, err)
			}
			p.advance(t, i, &f.alarm)
		}
	}, func(t *testing.T, e *Engine, p *fwdPeer) string {
		tc.start(p)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		return fwdOutcome(e.forward(ctx, 2, tc.req(p.t0)))
	})
}

// The blocking forward (Engine.forward) takes the decisions the stepped
// one (StartForward, then Step, as the simulator drives it) takes: on the
// same scripted node 2 — answering after probes it holds the request,
// saying it lost it, its partition's leader moving, the request's
// deadline passing — both send the same messages at the same times and
// end the same way. The schedule itself is pinned too: a probe every
// forward timeout (500ms here), a waiting poll given its MaxWait on top.
func TestSteppedAndBlockingForwardAlike(t *testing.T) {
	ns := metadata.Namespace(1 << 20)
	write := func(time.Time) *shard.Request {
		return &shard.Request{Op: shard.OpProduce, NS: ns, Messages: []partition.Message{{Payload: []byte("m")}}}
	}
	// answer has node 2 answer the request after d, and each probe n
	// (from 1) after 10ms saying held(n), or not at all when held has no
	// answer for it (ok false).
	answer := func(d time.Duration, held func(n int) (yes, ok bool)) func() func(t *testing.T, p *fwdPeer, m transport.Message) {
		return func() func(t *testing.T, p *fwdPeer, m transport.Message) {
			probes := 0
			return func(t *testing.T, p *fwdPeer, m transport.Message) {
				switch m.Kind {
				case KindRequest:
					if d > 0 {
						p.later(d, func() { p.send(t, KindReply, m.Group, EncodeResponse(shard.Response{Offset: 7})) })
					}
				case KindProbe:
					probes++
					if yes, ok := held(probes); ok {
						b := byte(0)
						if yes {
							b = 1
						}
						p.later(10*time.Millisecond, func() { p.send(t, KindProbeReply, m.Group, []byte{b}) })
					}
				}
			}
		}
	}
	holds := func(int) (bool, bool) { return true, true }
	nothing := func(*fwdPeer) {}
	for _, tc := range []fwdCase{{
		// The first probe answered "held", the second not at all; the
		// answer comes between the second and the third.
		name:  "answered after probes",
		req:   write,
		react: answer(1200*time.Millisecond, func(n int) (bool, bool) { return true, n == 1 }),
		start: nothing,
		want:  []string{"n2 got request at +0s", "n2 got probe at +500ms", "n2 got probe at +1s", "done: offset 7 at +1.2s"},
	}, {
		name:  "lost",
		req:   write,
		react: answer(0, func(n int) (bool, bool) { return n > 1, true }),
		start: nothing,
		want:  []string{"n2 got request at +0s", "n2 got probe at +500ms", "done: unknown outcome at +510ms"},
	}, {
		// A write told of node 2's death waits on; a new leader ends it.
		name:  "write, leader moved",
		req:   write,
		react: answer(0, holds),
		start: func(p *fwdPeer) {
			p.later(100*time.Millisecond, func() { p.e.cl.peerDead(2) })
			p.later(700*time.Millisecond, func() { p.e.cl.leaderChanged(ns, 3) })
		},
		want: []string{"n2 got request at +0s", "n2 got probe at +500ms", "done: unknown outcome at +700ms"},
	}, {
		// A waiting poll is given its MaxWait on top of the timeout; news
		// of no leader yet leaves it waiting, a new one ends it.
		name: "waiting poll, leader moved",
		req: func(time.Time) *shard.Request {
			return &shard.Request{Op: shard.OpPoll, NS: ns, Count: 1, MaxWait: time.Second}
		},
		react: answer(0, holds),
		start: func(p *fwdPeer) {
			p.later(1200*time.Millisecond, func() { p.e.cl.leaderChanged(ns, 0) })
			p.later(1700*time.Millisecond, func() { p.e.cl.leaderChanged(ns, 3) })
		},
		want: []string{"n2 got request at +0s", "n2 got probe at +1.5s", "done: not leader, 3 leads at +1.7s"},
	}, {
		name: "deadline",
		req: func(t0 time.Time) *shard.Request {
			r := write(t0)
			r.Deadline = t0.Add(800 * time.Millisecond)
			return r
		},
		react: answer(0, holds),
		start: nothing,
		want:  []string{"n2 got request at +0s", "n2 got probe at +500ms", "done: unknown outcome at +800ms"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			stepped, blocking := forwardBothWays(t, tc)
			sameLogs(t, stepped, blocking, tc.want)
		})
	}
}
