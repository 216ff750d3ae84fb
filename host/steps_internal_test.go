package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// scriptPort is a metaPort whose requests are answered as a script says:
// the n-th request (from 1) is given to answer, which answers it at once
// into reply, leaves it unanswered (it was lost), or refuses it. Every
// request is logged with the time it was made, from t0.
type scriptPort struct {
	lateQueue
	t0     time.Time
	log    []string
	n      int
	answer func(n int, op metaOp, reply chan MetadataResult) error
}

// lateQueue is what a script does later (later): a manual clock's run
// does it when its clock reaches it (deliver), a real clock's on a timer.
type lateQueue struct {
	clk  clock.Clock
	late []lateAnswer
}

type lateAnswer struct {
	at time.Time
	do func()
}

func (p *scriptPort) ask(what string, op metaOp, reply chan MetadataResult) error {
	p.n++
	p.log = append(p.log, fmt.Sprintf("%s %d at +%v", what, p.n, p.clk.Now().Sub(p.t0)))
	return p.answer(p.n, op, reply)
}

// later does do after d.
func (p *lateQueue) later(d time.Duration, do func()) {
	if _, ok := p.clk.(*clock.Manual); ok {
		p.late = append(p.late, lateAnswer{at: p.clk.Now().Add(d), do: do})
		return
	}
	time.AfterFunc(d, do)
}

// deliver does what the script does later, due at the manual clock's time, and
// returns when the next is due (zero: none).
func (p *lateQueue) deliver() time.Time {
	var next time.Time
	p.late = slices.DeleteFunc(p.late, func(l lateAnswer) bool {
		if !p.clk.Now().Before(l.at) {
			l.do()
			return true
		}
		next = earliest(next, l.at)
		return false
	})
	return next
}

func (p *scriptPort) read(reply chan MetadataResult) error { return p.ask("read", metaOp{}, reply) }

func (p *scriptPort) propose(op metaOp) error { return p.ask("propose", op, op.reply) }

// stepEngine is an engine just real enough for a stepped operation: its
// clock, its timeouts, and (for a membership change) a metadata store
// and the metadata group's published configuration.
func stepEngine(t *testing.T, clk clock.Clock) *Engine {
	t.Helper()
	store, err := metadata.NewStore(metadata.Config{Shards: 1, Nodes: []uint64{1, 2, 3}, Assign: func(metadata.Namespace, int) int { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{meta: store}
	e.cfg.Clock = clk
	e.cfg.RequestTimeout = 10 * time.Second
	e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax = 100*time.Millisecond, 400*time.Millisecond
	e.cl = &clusterNode{e: e, cfg: Cluster{TickInterval: 10 * time.Millisecond}, meta: &metaGroup{}, applied: newAppliedSignal()}
	e.cl.meta.conf.Store(&metaConf{voters: []uint64{1, 2, 3}})
	return e
}

// opRun is one run of a stepped operation against a script.
type opRun struct {
	log     []string
	err     error
	retries int
}

// bothWays runs the operation start makes against the script answer
// twice: stepped, as a manual engine's driver steps it (a manual clock,
// advanced to the operation's next due time or alarm whenever a step
// leaves it waiting), and blocking, by runSteps on a real clock in a synctest
// bubble. It returns the two runs.
func bothWays(t *testing.T, start func(e *Engine, port metaPort) stepper, answer func(e *Engine, p *scriptPort, n int, op metaOp, reply chan MetadataResult) error) (stepped, blocking opRun) {
	t.Helper()
	retries := func(s stepper) int {
		if mc, ok := s.(*MemberChange); ok {
			return mc.Retries()
		}
		return 0
	}
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	e := stepEngine(t, clk)
	port := &scriptPort{lateQueue: lateQueue{clk: clk}, t0: clk.Now()}
	port.answer = func(n int, op metaOp, reply chan MetadataResult) error { return answer(e, port, n, op, reply) }
	s := start(e, port)
	for i := 0; ; i++ {
		err, done := s.Step()
		if done {
			port.log = append(port.log, fmt.Sprintf("done at +%v", clk.Now().Sub(port.t0)))
			stepped = opRun{log: port.log, err: err, retries: retries(s)}
			break
		}
		w := s.wakes()
		at := earliest(w.at, port.deliver())
		if w.alarm != nil && !w.alarm.fired {
			at = earliest(at, w.alarm.at)
		}
		if at.IsZero() || i > 1000 {
			t.Fatalf("stepped: a step waits with nothing due (log %q)", port.log)
		}
		clk.Advance(at.Sub(clk.Now()))
		port.deliver()
	}
	synctest.Test(t, func(t *testing.T) {
		e := stepEngine(t, clock.Real{})
		port := &scriptPort{lateQueue: lateQueue{clk: clock.Real{}}, t0: time.Now()}
		port.answer = func(n int, op metaOp, reply chan MetadataResult) error { return answer(e, port, n, op, reply) }
		s := start(e, port)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		err := runSteps(ctx, clock.Real{}, s)
		port.log = append(port.log, fmt.Sprintf("done at +%v", time.Since(port.t0)))
		blocking = opRun{log: port.log, err: err, retries: retries(s)}
	})
	return stepped, blocking
}

// The blocking form of each stepped operation takes the decisions its
// stepped form takes: on the same scripted answers — a try lost (no
// answer by its time), a refusal ("retry"), then an answer — both make
// the same requests at the same times, count the same proposals made
// again, and end the same way. The schedule itself is pinned too: a try
// given the forward timeout, pauses of the one backoff doubling from its
// minimum.
func TestSteppedAndBlockingDecideAlike(t *testing.T) {
	retry := fmt.Errorf("%w: no leader", shard.ErrRetry)
	// lostRefusedAnswered: the first request is lost, the second refused,
	// the third answered 50ms later.
	lostRefusedAnswered := func(_ *Engine, p *scriptPort, n int, _ metaOp, reply chan MetadataResult) error {
		switch n {
		case 1:
			return nil // lost: never answered
		case 2:
			reply <- MetadataResult{Err: retry}
			return nil
		}
		p.later(50*time.Millisecond, func() { reply <- MetadataResult{} })
		return nil
	}
	// FT is the forward timeout of stepEngine (50 ticks of 10ms); the
	// backoff pauses 100ms, then 200ms.
	for _, tc := range []struct {
		name    string
		start   func(e *Engine, port metaPort) stepper
		answer  func(e *Engine, p *scriptPort, n int, op metaOp, reply chan MetadataResult) error
		want    []string
		retries int
	}{{
		name:   "read barrier",
		start:  func(e *Engine, port metaPort) stepper { return e.startBarrier(port, time.Time{}) },
		answer: lostRefusedAnswered,
		want:   []string{"read 1 at +0s", "read 2 at +600ms", "read 3 at +800ms", "done at +850ms"},
	}, {
		name: "apply-and-retry",
		start: func(e *Engine, port metaPort) stepper {
			a, err := e.startCommand(port, MetadataKey{Producer: 1, Seq: 1}, metadata.DrainNode{Node: 4}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			return a
		},
		answer: lostRefusedAnswered,
		want:   []string{"propose 1 at +0s", "propose 2 at +600ms", "propose 3 at +800ms", "done at +850ms"},
	}, {
		// AddNode: the first proposal is taken by raft but lost (made
		// again at the forward timeout: a retry), the second refused
		// (made again after a pause), the third applied, the node then
		// promoted.
		name: "add node",
		start: func(e *Engine, port metaPort) stepper {
			mc, err := e.startMemberChange(port, true, 4, MetadataKey{Producer: 1, Seq: 1}, MetadataKey{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			return mc
		},
		answer: func(e *Engine, p *scriptPort, n int, op metaOp, reply chan MetadataResult) error {
			switch n {
			case 1:
				reply <- MetadataResult{} // taken by raft, then lost
				return nil
			case 2:
				reply <- MetadataResult{Err: retry}
				return nil
			}
			// Applied at once, and the learner promoted 30ms later: the
			// wait for the promotion wakes on the application here.
			if _, err := e.meta.Apply(metadata.AddNode{Node: op.change}); err != nil {
				t.Error(err)
			}
			e.cl.applied.fire()
			p.later(30*time.Millisecond, func() {
				e.cl.meta.conf.Store(&metaConf{voters: []uint64{1, 2, 3, op.change}})
				e.cl.applied.fire()
			})
			reply <- MetadataResult{}
			return nil
		},
		want:    []string{"propose 1 at +0s", "propose 2 at +500ms", "propose 3 at +600ms", "done at +630ms"},
		retries: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			stepped, blocking := bothWays(t, tc.start, tc.answer)
			if !slices.Equal(stepped.log, tc.want) || stepped.err != nil || stepped.retries != tc.retries {
				t.Errorf("stepped: %q, %v, %d retries; want %q, nil, %d", stepped.log, stepped.err, stepped.retries, tc.want, tc.retries)
			}
			if !slices.Equal(blocking.log, stepped.log) || blocking.err != nil || blocking.retries != stepped.retries {
				t.Errorf("blocking: %q, %v, %d retries; the stepped form: %q, nil, %d", blocking.log, blocking.err, blocking.retries, stepped.log, stepped.retries)
			}
		})
	}
}

// A blocking wait given up by its context ends the operation where it
// stands: a command whose proposal awaits its answer has an unknown
// outcome, one paused between tries has the context's error; a read
// barrier's wraps shard.ErrRetry.
func TestRunStepsGivesUpWhereItStands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := stepEngine(t, clock.Real{})
		for _, tc := range []struct {
			name           string
			answer         func(n int, op metaOp, reply chan MetadataResult) error
			start          func(port metaPort) stepper
			unknown, retry bool
		}{
			{"command in flight", func(int, metaOp, chan MetadataResult) error { return nil }, func(port metaPort) stepper {
				a, _ := e.startCommand(port, MetadataKey{Producer: 1, Seq: 1}, metadata.DrainNode{Node: 4}, time.Time{})
				return a
			}, true, false},
			{"command paused", func(_ int, _ metaOp, reply chan MetadataResult) error {
				reply <- MetadataResult{Err: shard.ErrRetry}
				return nil
			}, func(port metaPort) stepper {
				a, _ := e.startCommand(port, MetadataKey{Producer: 1, Seq: 1}, metadata.DrainNode{Node: 4}, time.Time{})
				return a
			}, false, false},
			{"read barrier", func(int, metaOp, chan MetadataResult) error { return nil }, func(port metaPort) stepper {
				return e.startBarrier(port, time.Time{})
			}, false, true},
		} {
			port := &scriptPort{lateQueue: lateQueue{clk: clock.Real{}}, t0: time.Now(), answer: tc.answer}
			ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			err := runSteps(ctx, clock.Real{}, tc.start(port))
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, shard.ErrOutcomeUnknown) != tc.unknown || errors.Is(err, shard.ErrRetry) != tc.retry {
				t.Errorf("%s: %v; want the deadline, unknown outcome %v, retry %v", tc.name, err, tc.unknown, tc.retry)
			}
		}
	})
}

// jumpClock is a clock whose wall time is set apart from its timers,
// which run on the manual clock's time (as a machine's monotonic clock
// runs on when its wall clock is set).
type jumpClock struct {
	*clock.Manual
	offset time.Duration
}

func (k *jumpClock) Now() time.Time { return k.Manual.Now().Add(k.offset) }

// A try's time and a pause are kept by timers: a step of the wall clock
// past them neither gives a try up nor cuts a pause short, for a read
// barrier and an apply-and-retry alike (the simulator's nodes have their
// wall clocks set and strobed; a comparison of wall times made a try
// that the timer keeps waiting on time out at once).
func TestStepsTimeTriesOnTimers(t *testing.T) {
	for _, name := range []string{"read barrier", "apply-and-retry"} {
		k := &jumpClock{Manual: clock.NewManual(time.Unix(1_000_000, 0))}
		e := stepEngine(t, k)
		port := &scriptPort{lateQueue: lateQueue{clk: k}, t0: k.Now()}
		refuse := false // the second try is refused: a pause follows
		port.answer = func(n int, _ metaOp, reply chan MetadataResult) error {
			if n == 2 && refuse {
				reply <- MetadataResult{Err: shard.ErrRetry}
			}
			return nil // otherwise lost
		}
		var s stepper = e.startBarrier(port, time.Time{})
		if name == "apply-and-retry" {
			a, err := e.startCommand(port, MetadataKey{Producer: 1, Seq: 1}, metadata.DrainNode{Node: 4}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			s = a
		}
		step := func(wantTries int) {
			t.Helper()
			if _, done := s.Step(); done || port.n != wantTries {
				t.Fatalf("%s: done %v after %d tries (%q), want %d under way", name, done, port.n, port.log, wantTries)
			}
		}
		step(1)
		k.offset += time.Hour // the wall clock is set an hour on
		step(1)
		k.Advance(e.ForwardTimeout()) // the try's time is up
		refuse = true
		step(1) // a pause of the backoff's minimum
		k.Advance(e.cfg.RetryBackoffMin)
		step(2) // refused: a pause of twice as long
		k.offset -= 2 * time.Hour
		k.Advance(e.cfg.RetryBackoffMin)
		step(2)
		k.Advance(e.cfg.RetryBackoffMin)
		step(3)
	}
}
