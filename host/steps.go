package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// The operations a caller waits for — a read barrier, a command's
// apply-and-retry, a membership change, a request forwarded to another
// node — are each one stepped operation, as dragonboat's SyncPropose is
// Propose plus a wait: its Step makes the next request when one is due,
// takes the answers that arrived and reports the outcome once it is over;
// the blocking call (ReadBarrier, ApplyMetadata in a cluster, AddNode,
// RemoveNode, the client call past its first answer and the client
// call's forward) is the operation started, then runSteps, the one
// blocking wait between steps. A manual engine's driver
// (the simulator) steps the same operations itself (StartReadBarrier,
// StartAddNode, StartRemoveNode, StartForward), so the code it checks is
// the code the blocking calls run.
//
// What differs between the two is only who owns the metadata member: a
// manual engine's driver, from whose goroutine the steps are taken, or a
// started engine's metadata goroutine. The operation reaches it through
// a metaPort chosen when it starts.

// metaPort is how a stepped operation hands its requests to this node's
// metadata member. Either way each request is answered once on the reply
// channel it carries (buffered, of one).
type metaPort interface {
	// read asks the group for a read index, answered once it is applied
	// here (or at once with why the member takes no work).
	read(reply chan MetadataResult) error
	// propose proposes op: a command is answered once committed and
	// applied here; a membership change (op.change) once raft took it.
	propose(op metaOp) error
}

// port is the metaPort of an operation started now: the member itself on
// a manual engine, whose driver steps the operation from the goroutine
// that owns the member; the metadata goroutine's channels on a started
// engine, a hand-off bounded by ctx.
func (m *metaGroup) port(ctx context.Context) metaPort {
	if m.c.e.cfg.Manual {
		return memberPort{m}
	}
	return goroutinePort{m: m, ctx: ctx}
}

// memberPort calls the member directly, then handles what the request
// made ready: the caller owns the member.
type memberPort struct{ m *metaGroup }

func (p memberPort) read(reply chan MetadataResult) error {
	p.m.askRead(reply)
	_ = p.m.process() // a failed group answers the next try
	return nil
}

func (p memberPort) propose(op metaOp) error {
	m := p.m
	if op.change != 0 {
		if err := m.proposeConfChange(!op.remove, op.change, op.data); err != nil {
			return err
		}
		op.reply <- MetadataResult{}
	} else if err := m.propose(op.data, op.reply); err != nil {
		return err
	}
	return m.process()
}

// goroutinePort hands each request to a started engine's metadata
// goroutine (take). The hand-off waits while that goroutine is busy; it
// ends with the member stopped for good, the engine closed, or ctx.
type goroutinePort struct {
	m   *metaGroup
	ctx context.Context
}

func (p goroutinePort) read(reply chan MetadataResult) error { return handOff(p, p.m.reads, reply) }

func (p goroutinePort) propose(op metaOp) error { return handOff(p, p.m.props, op) }

func handOff[T any](p goroutinePort, to chan<- T, v T) error {
	select {
	case to <- v:
		return nil
	case <-p.m.failed:
		return p.m.err
	case <-p.m.c.e.group.Context().Done():
		return ErrClosed
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

// take carries out a request handed to the metadata goroutine.
func (m *metaGroup) take(op metaOp) {
	if op.change != 0 {
		op.reply <- MetadataResult{Err: m.proposeConfChange(!op.remove, op.change, op.data)}
	} else if err := m.propose(op.data, op.reply); err != nil {
		op.reply <- MetadataResult{Err: err}
	}
}

// stepper is a stepped operation as runSteps carries it out.
type stepper interface {
	// Step takes the operation's next steps; it reports the outcome once
	// the operation is over (done). It never blocks on a manual engine
	// (on a started one it may wait for the metadata goroutine to take a
	// request).
	Step() (err error, done bool)
	// wakes is what can make the next Step progress.
	wakes() wakeup
	// giveUp ends the operation where it stands, the caller having
	// given up with err, and is its outcome.
	giveUp(err error) error
}

// wakeup is what a stepped operation waits for between its steps.
type wakeup struct {
	at     time.Time           // its next due time (zero: none)
	alarm  *alarm              // its alarm, when one is armed (nil: none)
	answer chan MetadataResult // a request's answer (nil: none awaited)
	// ready is a channel that can be received from once something the
	// next step takes arrived (nil: none watched): closed by the next
	// metadata application here, or signalled by each answer, probe
	// answer or news left for a forward (buffered, of one: a signal not
	// yet taken covers the next, and a stale one costs one step).
	ready <-chan struct{}
	// reply is the owner shard's answer to a client call's send (nil:
	// none awaited).
	reply chan shard.Response
}

// alarm is a stepped operation's own timer, on the engine's clock. A step
// sees whether it rang without blocking; the blocking wait may take its
// fire first, and the ring is kept for the step to see. Timers run on
// the clock's monotonic time, so a step of the wall clock moves no try's
// timeout (a simulated node's clock jumps and strobes).
type alarm struct {
	clk   clock.Clock
	t     clock.Timer
	at    time.Time // when it rings (zero: not armed)
	fired bool
}

// set arms the alarm to ring at at, forgetting an earlier ring.
func (a *alarm) set(at time.Time) {
	d := at.Sub(a.clk.Now())
	if a.t == nil {
		a.t = a.clk.NewTimer(d)
	} else {
		a.t.Reset(d)
	}
	a.at, a.fired = at, false
}

// rang reports whether the alarm rang since it was set.
func (a *alarm) rang() bool {
	if !a.fired && a.t != nil {
		select {
		case <-a.t.C():
			a.fired = true
		default:
		}
	}
	return a.fired
}

// c is the channel the alarm rings on (nil: not armed).
func (a *alarm) c() <-chan time.Time {
	if a.t == nil || a.fired {
		return nil
	}
	return a.t.C()
}

// stop disarms the alarm.
func (a *alarm) stop() {
	if a.t != nil {
		a.t.Stop()
	}
	a.at = time.Time{}
}

// earliest is the earlier of a and b, either zero for none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// runSteps carries s out blocking: Step until it is done, blocking
// between steps on what can make the next one progress (s.wakes), with
// one timer on clk, and giving up when ctx ends.
func runSteps(ctx context.Context, clk clock.Clock, s stepper) error {
	var t clock.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		err, done := s.Step()
		if done {
			return err
		}
		if err := ctx.Err(); err != nil {
			return s.giveUp(err)
		}
		w := s.wakes()
		var rang <-chan time.Time
		if w.alarm != nil {
			rang = w.alarm.c()
		}
		var fired <-chan time.Time
		if !w.at.IsZero() {
			if d := w.at.Sub(clk.Now()); t == nil {
				t = clk.NewTimer(d)
			} else {
				t.Reset(d)
			}
			fired = t.C()
		}
		select {
		case r := <-w.answer:
			// Left for the step to take: the channel holds one answer,
			// and its sender sends no other.
			w.answer <- r
		case r := <-w.reply:
			// Left so too: the shard answers a frame once.
			w.reply <- r
		case <-w.ready:
		case <-rang:
			w.alarm.fired = true
		case <-fired:
		case <-ctx.Done():
		}
	}
}

// errDeadlinePassed is a stepped operation's own deadline passed.
var errDeadlinePassed = fmt.Errorf("deadline passed: %w", context.DeadlineExceeded)

// askSteps carries out the tries an AskDriver decides: each is a request
// (try) given until the try's time, or the operation's deadline, to be
// answered; noAnswer stands for no answer by then. It is the stepped form
// of a read barrier and of a command's apply-and-retry.
type askSteps struct {
	clk      clock.Clock
	d        AskDriver
	st       AskStep
	deadline time.Time // zero: none (the blocking owner's ctx bounds it)
	try      func(reply chan MetadataResult) error
	noAnswer error
	// gaveUp is the outcome when the caller gives up with err, a try
	// awaiting its answer (inFlight) or not.
	gaveUp func(err error, inFlight bool) error
	reply  chan MetadataResult // the try in flight's answer (nil: none)
	r      MetadataResult      // the last answer
	// alarm rings at due(): the try's time is up, or the pause is over.
	alarm alarm
}

// start begins the operation at now.
func (a *askSteps) start() {
	a.alarm.clk = a.clk
	a.st = a.d.Start(a.clk.Now())
}

// due is when the current try is given up, or the pause ends.
func (a *askSteps) due() time.Time { return earliest(a.st.At, a.deadline) }

// Step implements stepper.
func (a *askSteps) Step() (err error, done bool) {
	for {
		now := a.clk.Now()
		switch a.st.Op {
		case AskDone:
			a.alarm.stop()
			return a.st.Err, true
		case AskWait:
			if !a.alarm.rang() {
				return nil, false
			}
			a.st = a.d.Fired(now)
		case AskSend:
			if a.reply == nil {
				reply := make(chan MetadataResult, 1)
				if err := a.try(reply); err != nil {
					a.r = MetadataResult{Err: err}
					a.answered(now)
					break
				}
				a.reply = reply
				a.alarm.set(a.due())
			}
			// The answer is taken before the time: an answer that
			// arrived in the step in which the try's time ran out is
			// worth more than its timeout (and a select over both would
			// pick at random: the same simulated run would diverge).
			select {
			case a.r = <-a.reply:
			default:
				if !a.alarm.rang() {
					return nil, false
				}
				a.r = MetadataResult{Err: a.noAnswer}
			}
			a.reply = nil
			a.answered(now)
		}
		if a.st.Op != AskDone && !a.deadline.IsZero() && !now.Before(a.deadline) {
			a.st = AskStep{Op: AskDone, Err: a.gaveUp(errDeadlinePassed, false)}
		}
	}
}

// answered takes the try's outcome, a.r, at now; a pause is timed by the
// alarm.
func (a *askSteps) answered(now time.Time) {
	if a.st = a.d.Answer(now, a.r.Err); a.st.Op == AskWait {
		a.alarm.set(a.due())
	}
}

// wakes implements stepper.
func (a *askSteps) wakes() wakeup {
	w := wakeup{alarm: &a.alarm}
	if a.st.Op == AskSend {
		w.answer = a.reply
	}
	return w
}

// giveUp implements stepper.
func (a *askSteps) giveUp(err error) error {
	err = a.gaveUp(err, a.reply != nil)
	a.st, a.reply = AskStep{Op: AskDone, Err: err}, nil
	a.alarm.stop()
	return err
}

// startCommand starts the apply-and-retry of cmd under key through port,
// given up at deadline (zero: none): each try proposes it under the same
// key and is given the forward timeout to be committed and applied here,
// and one refused for a reason worth another (an error wrapping
// shard.ErrRetry: no leader, the member down) is made again after a pause
// of the one backoff. The key makes a second commit a no-op answering the
// first's result.
func (e *Engine) startCommand(port metaPort, key MetadataKey, cmd metadata.Command, deadline time.Time) (*askSteps, error) {
	data, err := encodeMetaCommand(key, cmd)
	if err != nil {
		return nil, err
	}
	a := &askSteps{clk: e.cfg.Clock, deadline: deadline,
		d: NewAskDriver(e.ForwardTimeout(), e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax, func(err error) bool {
			return errors.Is(err, shard.ErrRetry)
		}),
		try: func(reply chan MetadataResult) error {
			return port.propose(metaOp{data: data, reply: reply})
		},
		noAnswer: fmt.Errorf("%w: not committed yet", shard.ErrRetry),
		gaveUp: func(err error, inFlight bool) error {
			if inFlight {
				// Proposed but not seen committed: it may still commit.
				return shard.OutcomeUnknown(err)
			}
			return err
		}}
	a.start()
	return a, nil
}
