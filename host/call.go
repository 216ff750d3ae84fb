package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/backoff"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

// The client call: one request sent to the owner of its namespace,
// retried in place on "retry here" answers until its deadline (the
// context's, or RequestTimeout when it has none), following "not leader"
// answers to the leader they name, and re-resolved before every retry so
// a request whose partition was deleted meanwhile ends with a not-found
// error instead of waiting out its deadline.
//
// CallDriver holds the decisions, as a state machine without a clock or
// a goroutine: it is told the time and each answer, and says what to do
// next (send here, forward there, wake at a time, done). Engine.StartCall
// and PendingCall.Wait carry its steps out with the engine's router, bus
// and clock; Engine.Call is the two of them. Engine.NewCall gives a
// manual engine's driver (the simulator) the same CallDriver and first
// step, whose steps it carries out against its own delivery and clock
// (a forward through StartForward, forward.go).

// CallOp is what a call's driver asks for next.
type CallOp uint8

const (
	// CallDone: the call is over, with CallStep.Resp or CallStep.Err.
	CallDone CallOp = iota
	// CallSend: hand the request to this node's owner shard and feed
	// the outcome (a refusal, or the shard's answer) to Answer.
	CallSend
	// CallForward: send the request to node CallStep.To, its
	// partition's leader or a replica, and feed its answer to Answer.
	CallForward
	// CallWait: retry in place at CallStep.At (CallStep.Err is why):
	// re-resolve the namespace, then call Fired.
	CallWait
)

// CallStep is one decision of a CallDriver.
type CallStep struct {
	Op   CallOp
	To   uint64         // CallForward: the node to send to
	At   time.Time      // CallWait: when to retry
	Resp shard.Response // CallDone: the answer (Err nil)
	Err  error          // CallDone: the call's error; CallWait: the answer retried
}

// CallConfig is what a call's driver needs to know of its node.
type CallConfig struct {
	// Clustered: "not leader" is followed and an unknown outcome retried
	// (in a cluster a produce carries its (producer, sequence) pair, which
	// the partition deduplicates, and every other operation is
	// idempotent; a single node never retries an unknown outcome).
	Clustered bool
	// Self is this node's id: a forwarded request answered "not leader"
	// naming Self is leadership moving here, retried in place.
	Self uint64
	// Timeout bounds a call whose context has no earlier deadline.
	Timeout time.Duration
	// BackoffMin and BackoffMax pace the retries in place.
	BackoffMin, BackoffMax time.Duration
}

// CallDriver decides the steps of one client call. Make it with
// NewCallDriver; it is not safe for concurrent use.
type CallDriver struct {
	cfg        *CallConfig
	deadline   time.Time // the call's; zero until Start or the first retry
	bo         backoff.Backoff
	forwarding bool // the answer awaited is a forwarded request's
}

// NewCallDriver is the driver of one call under cfg, which it keeps and
// does not change (an engine's calls share one).
func NewCallDriver(cfg *CallConfig) CallDriver {
	return CallDriver{cfg: cfg, bo: backoff.New(cfg.BackoffMin, cfg.BackoffMax)}
}

// Start begins the call. deadline is the call's (CallDeadline), which
// its request carries to every attempt, so a frame parked behind a build
// that does not finish is answered by then (behaviour 17); zero, it is
// fixed at the first retry, Timeout after it. replica is where to send a
// request for a partition this node holds no replica of (0: it holds
// one, or is not clustered): the request goes straight there, as the
// "not leader" answer it stands for would send it; anything else goes to
// the local owner shard, whose answer for a partition held elsewhere
// points at a live replica.
func (d *CallDriver) Start(deadline time.Time, replica uint64) CallStep {
	d.deadline = deadline
	if replica != 0 {
		d.forwarding = true
		return CallStep{Op: CallForward, To: replica}
	}
	return CallStep{Op: CallSend}
}

// CallDeadline is the deadline of a call started at now: timeout later,
// or ctxDeadline if that is sooner and not zero.
func CallDeadline(now, ctxDeadline time.Time, timeout time.Duration) time.Time {
	d := now.Add(timeout)
	if !ctxDeadline.IsZero() && ctxDeadline.Before(d) {
		d = ctxDeadline
	}
	return d
}

// Answer takes the outcome of the last send or forward at now: the
// answer r, or err when there was none (the request was refused, or the
// forward failed).
func (d *CallDriver) Answer(now time.Time, r shard.Response, err error) CallStep {
	if err == nil {
		err = r.Err
	}
	if err == nil {
		d.forwarding = false
		return CallStep{Op: CallDone, Resp: r}
	}
	if errors.Is(err, ErrClosed) {
		return CallStep{Op: CallDone, Err: ErrClosed}
	}
	// "Not leader" is never retried in place: the request follows the
	// hint to the leader, and only a "retry here" from there brings it
	// back to a retry in place.
	var nl *shard.NotLeaderError
	if d.cfg.Clustered && errors.As(err, &nl) && nl.Leader != 0 {
		if !d.forwarding || nl.Leader != d.cfg.Self {
			d.forwarding = true
			return CallStep{Op: CallForward, To: nl.Leader}
		}
		// Leadership is moving to this node: retry here.
		err = fmt.Errorf("%w: leadership moving here", shard.ErrRetry)
	}
	d.forwarding = false
	if errors.Is(err, shard.ErrClosed) {
		return CallStep{Op: CallDone, Err: fmt.Errorf("%w: %w", ErrClosed, err)}
	}
	if !RetryInPlace(err) && !(d.cfg.Clustered && errors.Is(err, shard.ErrOutcomeUnknown)) {
		return CallStep{Op: CallDone, Err: err}
	}
	if d.deadline.IsZero() {
		d.deadline = now.Add(d.cfg.Timeout)
	}
	if !now.Before(d.deadline) {
		return CallStep{Op: CallDone, Err: fmt.Errorf("parkway: deadline passed while retrying: %w", err)}
	}
	wait := min(d.bo.Next(), d.deadline.Sub(now))
	return CallStep{Op: CallWait, At: now.Add(wait), Err: err}
}

// Fired is the retry's time come, the namespace re-resolved into the
// request: send it again to the owner shard.
func (d *CallDriver) Fired() CallStep { return CallStep{Op: CallSend} }

// RetryInPlace reports whether err means "the same request to this node
// will likely succeed shortly". "Not leader" is deliberately not one of
// them: retrying it here can never succeed; nor is an unknown outcome,
// which only a cluster retries (CallConfig.Clustered).
func RetryInPlace(err error) bool {
	if errors.Is(err, shard.ErrNotLeader) || errors.Is(err, shard.ErrOutcomeUnknown) {
		return false
	}
	return errors.Is(err, shard.ErrRetry) || errors.Is(err, router.ErrFull)
}

// Resolve re-resolves a call's namespace before a retry in place: the
// partition's current namespace and incarnation, or the error that ends
// the call (its topic or partition is gone).
type Resolve func(ctx context.Context) (metadata.Namespace, uint64, error)

// PendingCall is a call started by StartCall: its first attempt made,
// its answer awaited by Wait. It is not safe for concurrent use.
type PendingCall struct {
	e     *Engine
	d     CallDriver
	f     shard.Frame
	reply chan shard.Response
	to    uint64 // where the first try was forwarded (0: sent here)
	sent  error  // the first local send's refusal
}

// Call sends req to the owner of its namespace and waits for the
// answer, retrying in place and following "not leader" (see CallDriver);
// resolve (nil: never) re-resolves the namespace before each retry.
func (e *Engine) Call(ctx context.Context, req *shard.Request, resolve Resolve) (shard.Response, error) {
	p := e.StartCall(ctx, req)
	return p.Wait(ctx, resolve)
}

// StartCall makes a call's first attempt and returns without waiting for
// its answer: a request for a local partition is queued at its owner
// shard (a full inbox makes it wait, bounded by the call's deadline:
// backpressure).
func (e *Engine) StartCall(ctx context.Context, req *shard.Request) PendingCall {
	p := PendingCall{e: e, reply: make(chan shard.Response, 1)}
	p.f = shard.Frame{Req: req, Reply: p.reply}
	// The clock is read only for a request without a deadline: a
	// producer stamps its own from the clock read that stamped its batch.
	if req.Deadline.IsZero() {
		cd, _ := ctx.Deadline()
		req.Deadline = CallDeadline(e.cfg.Clock.Now(), cd, e.cfg.RequestTimeout)
	}
	var st CallStep
	if p.d, st = e.NewCall(req.NS, req.Deadline); st.Op == CallForward {
		p.to = st.To
	} else {
		p.sent = e.send(ctx, p.f)
	}
	return p
}

// NewCall is the driver of a call on this engine of a request for ns
// with deadline (zero: fixed at the first retry, see CallDriver.Start),
// and its first step: to the local owner shard, or, for a partition this
// node holds no replica of, straight to a live replica. StartCall takes
// its steps so; a manual engine's driver (the simulator) carries them
// out itself.
func (e *Engine) NewCall(ns metadata.Namespace, deadline time.Time) (CallDriver, CallStep) {
	d := NewCallDriver(&e.callCfg)
	var replica uint64
	if e.cl != nil {
		replica = e.replicaFor(ns)
	}
	return d, d.Start(deadline, replica)
}

// CallHere sends req to the owner shard of its namespace on this node,
// once, and waits for the answer: it is neither forwarded nor retried,
// as a write fenced to a raft term (shard.Request.Term) must not be — it
// is the local replica's leadership in that term the caller asks for. A
// partition this node holds no replica of answers a NotLeaderError.
func (e *Engine) CallHere(ctx context.Context, req *shard.Request) (shard.Response, error) {
	if e.replicaFor(req.NS) != 0 {
		return shard.Response{}, &shard.NotLeaderError{}
	}
	if req.Deadline.IsZero() {
		cd, _ := ctx.Deadline()
		req.Deadline = CallDeadline(e.cfg.Clock.Now(), cd, e.cfg.RequestTimeout)
	}
	reply := make(chan shard.Response, 1)
	if err := e.send(ctx, shard.Frame{Req: req, Reply: reply}); err != nil {
		return shard.Response{}, err
	}
	select {
	case r := <-reply:
		return r, r.Err
	case <-ctx.Done():
		return shard.Response{}, ctx.Err()
	}
}

// callConfig is the CallConfig of this engine's calls.
func (e *Engine) callConfig() CallConfig {
	return CallConfig{Clustered: e.cl != nil, Self: e.NodeID(), Timeout: e.cfg.RequestTimeout,
		BackoffMin: e.cfg.RetryBackoffMin, BackoffMax: e.cfg.RetryBackoffMax}
}

// Wait returns the call's answer, retrying and forwarding as the driver
// decides, within ctx and the call's deadline. A Wait ended by ctx
// returns ctx's error: the request may or may not have been applied.
// Call it once.
func (p *PendingCall) Wait(ctx context.Context, resolve Resolve) (shard.Response, error) {
	e, d, req := p.e, &p.d, p.f.Req
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	step := CallStep{Op: CallSend}
	if p.to != 0 {
		step = CallStep{Op: CallForward, To: p.to}
	}
	for {
		switch step.Op {
		case CallDone:
			return step.Resp, step.Err
		case CallSend:
			err := p.sent
			p.sent = nil
			if errors.Is(err, ErrClosed) {
				return shard.Response{}, ErrClosed
			}
			var r shard.Response
			if err == nil {
				select {
				case r = <-p.reply:
				case <-ctx.Done():
					// The shard will still answer into the buffered
					// reply channel; the request may or may not have
					// been applied.
					return shard.Response{}, ctx.Err()
				}
				if r.Err == nil {
					return r, nil
				}
			}
			if ctx.Err() != nil {
				return shard.Response{}, ctx.Err()
			}
			// The clock is read only once an attempt failed: the first
			// attempt of almost every call succeeds.
			step = d.Answer(e.cfg.Clock.Now(), r, err)
		case CallForward:
			r, err := e.forward(ctx, step.To, req)
			step = d.Answer(e.cfg.Clock.Now(), r, err)
			if step.Op == CallWait && ctx.Err() != nil && errors.Is(step.Err, shard.ErrOutcomeUnknown) {
				// A forward cut short by ctx: its outcome is unknown.
				return shard.Response{}, step.Err
			}
		case CallWait:
			wait := step.At.Sub(e.cfg.Clock.Now())
			if timer == nil {
				timer = e.cfg.Clock.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C():
			case <-ctx.Done():
				return shard.Response{}, ctx.Err()
			}
			// Re-resolve before every attempt: a handle whose
			// incarnation is gone ends the call with a not-found error,
			// and the request carries the partition's current
			// incarnation of the same topic (partitions deleted and
			// re-added within the topic get new ones).
			if resolve != nil {
				ns, epoch, err := resolve(ctx)
				if err != nil {
					return shard.Response{}, err
				}
				req.NS, req.Epoch = ns, epoch
			}
			step = d.Fired()
			p.sent = e.send(ctx, p.f)
		}
	}
}

// send hands f to the owner shard of its namespace. A full inbox is
// backpressure: it waits for room (bounded by the request's deadline)
// rather than retrying on a timer.
func (e *Engine) send(ctx context.Context, f shard.Frame) error {
	if e.closed.Load() {
		return ErrClosed
	}
	owner, err := e.router.Send(f.Req.NS, f)
	if err == nil {
		return nil
	}
	e.countSendFailure(f.Req, err)
	switch {
	case errors.Is(err, router.ErrFull):
		// Wait for room until the call's deadline, with one timer (a
		// context derived for it cost a context, a timer and their
		// cancellation on every wait: with thousands of producers the
		// inbox is full for most of their sends).
		t := e.cfg.Clock.NewTimer(f.Req.Deadline.Sub(e.cfg.Clock.Now()))
		err = e.shards[owner].SendBefore(ctx, f, t.C())
		t.Stop()
		if errors.Is(err, router.ErrFull) {
			err = fmt.Errorf("%w: inbox full until the deadline", shard.ErrRetry)
		}
	case errors.Is(err, router.ErrDisconnected) && e.closed.Load():
		return ErrClosed
	}
	return err
}
