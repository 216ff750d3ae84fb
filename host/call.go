package host

import (
	"context"
	"errors"
	"fmt"
	"time"

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
// a goroutine: it is told the time and each event (an answer or a
// refused send, the namespace re-resolved or not, the caller giving up),
// and says what to do next (send here, forward there, wake at a time,
// done). Engine.StartCall makes the first attempt; PendingCall.Wait takes
// its answer and otherwise carries the driver's steps out as one stepped
// operation (callSteps) waited on by runSteps, with the engine's router,
// bus and clock; Engine.Call is the two of them. Engine.NewCall gives a
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
	// re-resolve the namespace, then call Resolved (Fired when it was
	// re-resolved).
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
	// Clustered: "not leader" is followed and an unknown outcome of a
	// request that may be sent again (RetriesUnknown) retried; a single
	// node never retries an unknown outcome.
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
	cfg          *CallConfig
	deadline     time.Time // the call's; zero until Start or the first retry
	bo           backoff.Backoff
	forwarding   bool // the answer awaited is a forwarded request's
	retryUnknown bool // RetriesUnknown of the call's request
}

// NewCallDriver is the driver of one call of req under cfg, which it
// keeps and does not change (an engine's calls share one). Of req it
// reads only what RetriesUnknown does.
func NewCallDriver(cfg *CallConfig, req *shard.Request) CallDriver {
	return CallDriver{cfg: cfg, bo: backoff.New(cfg.BackoffMin, cfg.BackoffMax), retryUnknown: RetriesUnknown(req)}
}

// RetriesUnknown reports whether a cluster's call sends req again after
// an answer of unknown outcome: a read, which changes nothing, and a
// produce carrying a (producer, sequence) pair, which the partition
// applies once however often it comes. Any other write is not sent
// again, and its call ends with the unknown outcome: a consumer offset
// stored or deleted, or a log truncated or purged, applied once and then
// again after another client's later write, would undo that write (a
// store of 1 applied again over an acknowledged 5).
func RetriesUnknown(req *shard.Request) bool {
	switch req.Op {
	case shard.OpPoll, shard.OpGetOffset, shard.OpOffsets:
		return true
	case shard.OpProduce:
		return req.Producer != 0
	}
	return false
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
	if d.begin(deadline, replica) {
		return CallStep{Op: CallForward, To: replica}
	}
	return CallStep{Op: CallSend}
}

// begin is Start reporting only whether the first step forwards to
// replica: startCall takes it so, without a CallStep (192 bytes) in its
// frame. A synchronous producer's stack is touched on every call, and
// thousands of them cycle through the cores' caches: the deeper the
// path, the larger every producer's stack (bench/RESULTS.md, "Issue 33: case
// 2, synchronous producers on one node").
func (d *CallDriver) begin(deadline time.Time, replica uint64) (forward bool) {
	d.deadline = deadline
	if replica != 0 {
		d.forwarding = true
		return true
	}
	return false
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
	if !RetryInPlace(err) && !(d.cfg.Clustered && d.retryUnknown && errors.Is(err, shard.ErrOutcomeUnknown)) {
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

// Resolved is the retry's time come and the namespace re-resolved: err
// nil, the request, carrying the partition's current namespace and
// incarnation, is sent again to the owner shard; otherwise err (its
// topic or partition is gone) ends the call, rather than its retries
// waiting out the deadline.
func (d *CallDriver) Resolved(err error) CallStep {
	if err != nil {
		return CallStep{Op: CallDone, Err: err}
	}
	return CallStep{Op: CallSend}
}

// Cancelled is the caller giving up with err (its context's): the call
// ends, never retried. A forward the driver asked for and that is not
// answered may still be applied by the node it went to (or be sent
// there yet): the call's outcome is unknown, ErrOutcomeUnknown wrapping
// err. Given up awaiting the owner shard's answer or in a retry's pause,
// the call ends with err itself, which the caller takes to mean the same
// (PendingCall.Wait).
func (d *CallDriver) Cancelled(err error) CallStep {
	return CallStep{Op: CallDone, Err: d.cancelled(err)}
}

// cancelled is Cancelled's error: PendingCall.wait takes it so, without
// a CallStep in its frame (see begin).
func (d *CallDriver) cancelled(err error) error {
	if d.forwarding {
		d.forwarding = false
		return shard.OutcomeUnknown(err)
	}
	return err
}

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
	port  callPort
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

// CallReusing is Call answered on reply, an empty channel of capacity 1
// that the caller owns, instead of a channel of the call's own. reusable
// reports that the call ended with the answer to its one send taken from
// reply: the owner shard answers each frame it takes exactly once, so
// nothing will be sent on reply again and the shard is done with req,
// and the caller may use both for another call. Otherwise (an error, a
// retry, a forward, the caller giving up) an answer may still land on
// reply, or the shard still hold req, and neither may be used again: a
// late answer read by a later call would be taken for its own.
//
// The answer (or, with err, the last one, if any) is written to *r,
// which the caller keeps where it likes (a pooled request's, off the
// stack: see CallDriver.begin).
//
// The caller waits for the answer, so the request is queued in its
// owner shard's waited lane (shard.SendWaited) rather than its inbox:
// many concurrent callers share the shard's wakes instead of each
// waiting for room in a full inbox.
func (e *Engine) CallReusing(ctx context.Context, req *shard.Request, reply chan shard.Response, resolve Resolve, r *shard.Response) (reusable bool, err error) {
	var p PendingCall
	e.start(&p, ctx, req, (*waitedPort)(e), reply)
	return p.wait(ctx, resolve, r)
}

// StartCall makes a call's first attempt and returns without waiting for
// its answer: a request for a local partition is queued at its owner
// shard (a full inbox makes it wait, bounded by the call's deadline:
// backpressure).
func (e *Engine) StartCall(ctx context.Context, req *shard.Request) PendingCall {
	return e.startCall(ctx, req, e, nil)
}

// startCall is StartCall with the call's attempts made through port and
// answered on reply (nil: a channel of the call's own).
func (e *Engine) startCall(ctx context.Context, req *shard.Request, port callPort, reply chan shard.Response) PendingCall {
	var p PendingCall
	e.start(&p, ctx, req, port, reply)
	return p
}

// start is startCall making the call in *p, a zero PendingCall: the
// synchronous call (CallReusing) keeps it in its own frame, with no copy
// returned through a second one.
func (e *Engine) start(p *PendingCall, ctx context.Context, req *shard.Request, port callPort, reply chan shard.Response) {
	if reply == nil {
		reply = make(chan shard.Response, 1)
	}
	p.e, p.port, p.reply = e, port, reply
	p.f = shard.Frame{Req: req, Reply: p.reply}
	// The clock is read only for a request without a deadline: a
	// producer stamps its own from the clock read that stamped its batch.
	if req.Deadline.IsZero() {
		cd, _ := ctx.Deadline()
		req.Deadline = CallDeadline(e.cfg.Clock.Now(), cd, e.cfg.RequestTimeout)
	}
	p.d = NewCallDriver(&e.callCfg, req)
	if to := e.firstReplica(req.NS); p.d.begin(req.Deadline, to) {
		p.to = to
	} else {
		p.sent = port.send(ctx, p.f)
	}
}

// NewCall is the driver of a call of req on this engine, for its
// namespace and with its deadline (zero: fixed at the first retry, see
// CallDriver.Start), and its first step: to the local owner shard, or,
// for a partition this node holds no replica of, straight to a live
// replica. StartCall takes its steps so; a manual engine's driver (the
// simulator) carries them out itself.
func (e *Engine) NewCall(req *shard.Request) (CallDriver, CallStep) {
	d := NewCallDriver(&e.callCfg, req)
	return d, d.Start(req.Deadline, e.firstReplica(req.NS))
}

// firstReplica is where a call's first attempt for ns is forwarded: a
// live replica when this node holds none (replicaFor), 0 to send it to
// the local owner shard.
func (e *Engine) firstReplica(ns metadata.Namespace) uint64 {
	if e.cl == nil {
		return 0
	}
	return e.replicaFor(ns)
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
// returns ctx's error (an unknown outcome wrapping it when a forward was
// awaited): the request may or may not have been applied. Call it once.
//
// The first local attempt's answer, which almost every call gets, is
// taken here with one receive: no clock read, no allocation. Anything
// else is the call's stepped operation (callSteps) carried out by
// runSteps, stopping for resolve before each retry: the resolver is the
// caller's and stays off the heap (a closure kept by the operation would
// escape and cost every call an allocation, the fast ones too).
func (p *PendingCall) Wait(ctx context.Context, resolve Resolve) (shard.Response, error) {
	var r shard.Response
	_, err := p.wait(ctx, resolve, &r)
	return r, err
}

// wait is Wait answering into *r, reporting whether the call ended with
// its first local attempt's answer taken (see CallReusing). The answer
// goes where its caller keeps it, not through a result copied out of
// each frame on the way (see begin).
func (p *PendingCall) wait(ctx context.Context, resolve Resolve, r *shard.Response) (bool, error) {
	if p.to == 0 && p.sent == nil {
		// A context that is never done (Background, TODO) is waited
		// out with a plain receive: a select, even with a nil second
		// case, goes through the runtime's select (the cases ordered,
		// a waiter queued per case) on every produce and wait.
		if done := ctx.Done(); done == nil {
			*r = <-p.reply
		} else {
			select {
			case *r = <-p.reply:
			case <-done:
				// The shard will still answer into the buffered reply
				// channel.
				*r = shard.Response{}
				return false, p.d.cancelled(ctx.Err())
			}
		}
		if r.Err == nil {
			return true, nil
		}
		p.reply <- *r // left for the steps to take: the shard sends one
	}
	s := p.steps(ctx, resolve != nil)
	for {
		err := runSteps(ctx, p.e.cfg.Clock, s)
		if !s.resolving {
			*r = s.st.Resp
			return false, err
		}
		ns, epoch, err := resolve(ctx)
		s.resolved(ns, epoch, err)
	}
}

// callPort is where a call's attempts go on this node: its owner shards
// (Engine.send, or waitedPort's lane).
type callPort interface {
	send(ctx context.Context, f shard.Frame) error
}

// waitedPort is the callPort of a call whose caller waits for each
// attempt's answer (CallReusing): its frames go to the owner shard's
// waited lane (a full one is backpressure, as a full inbox is for
// Engine.send), or through the inbox when the engine's senders are
// wrapped (Config.WrapSender).
type waitedPort Engine

func (p *waitedPort) send(ctx context.Context, f shard.Frame) error {
	e := (*Engine)(p)
	if e.waited == nil {
		return e.send(ctx, f)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	s := e.waited[e.router.Owner(f.Req.NS)]
	err := s.SendWaited(f)
	if err == nil {
		return nil
	}
	return e.sendFailed(ctx, f, err, s.SendWaitedBefore)
}

// callSteps is a client call as runSteps carries it out: the steps its
// CallDriver decides — the owner shard's answer awaited, a send made
// again, a forward (Forwarding) made and awaited, a retry's pause on an
// alarm — each told back to the driver. It makes no new attempt once ctx
// ended (runSteps then gives up, and the driver says what that means).
// Before each retry it stops for its owner to re-resolve the namespace,
// when the owner has a resolver (resolves): Step reports done with the
// call not over (resolving set), and resolved carries it on.
type callSteps struct {
	e     *Engine
	ctx   context.Context
	port  callPort
	d     CallDriver
	st    CallStep
	f     shard.Frame
	reply chan shard.Response
	sent  error       // the last send's refusal, not yet told to the driver
	due   bool        // CallSend: the send is still to be made
	fwd   *Forwarding // CallForward: the forward made (nil: not yet)
	alarm alarm       // CallWait: rings at the retry's time
	// resolves: the owner re-resolves the namespace before each retry;
	// resolving: a retry's time came, and Step stopped for it.
	resolves, resolving bool
}

// steps is the call's stepped operation from its first attempt on.
func (p *PendingCall) steps(ctx context.Context, resolves bool) *callSteps {
	s := &callSteps{e: p.e, ctx: ctx, port: p.port, d: p.d, f: p.f, reply: p.reply, sent: p.sent,
		alarm: alarm{clk: p.e.cfg.Clock}, resolves: resolves, st: CallStep{Op: CallSend}}
	if p.to != 0 {
		s.st = CallStep{Op: CallForward, To: p.to}
	}
	return s
}

// next takes the driver's next step st: a send is due, a retry's pause
// is timed by the alarm.
func (s *callSteps) next(st CallStep) {
	s.st, s.due = st, st.Op == CallSend
	if st.Op == CallWait {
		s.alarm.set(st.At)
	}
}

// Step implements stepper.
func (s *callSteps) Step() (err error, done bool) {
	for {
		switch s.st.Op {
		case CallDone:
			s.alarm.stop()
			return s.st.Err, true
		case CallSend:
			if s.due {
				if s.ctx.Err() != nil {
					return nil, false
				}
				s.due = false
				s.sent = s.port.send(s.ctx, s.f)
			}
			err := s.sent
			s.sent = nil
			var r shard.Response
			if err == nil {
				select {
				case r = <-s.reply:
				default:
					return nil, false
				}
			}
			s.next(s.d.Answer(s.e.cfg.Clock.Now(), r, err))
		case CallForward:
			if s.fwd == nil {
				if s.ctx.Err() != nil {
					return nil, false
				}
				f, err := s.e.StartForward(s.st.To, s.f.Req)
				if err != nil {
					s.next(s.d.Answer(s.e.cfg.Clock.Now(), shard.Response{}, err))
					break
				}
				s.fwd = f
			}
			r, err, done := s.fwd.Step()
			if !done {
				return nil, false
			}
			s.fwd = nil
			s.next(s.d.Answer(s.e.cfg.Clock.Now(), r, err))
		case CallWait:
			if !s.alarm.rang() || s.ctx.Err() != nil {
				return nil, false
			}
			if s.resolves {
				s.resolving = true
				return nil, true
			}
			s.next(s.d.Resolved(nil))
		}
	}
}

// resolved takes the owner's re-resolution of the namespace before a
// retry: the partition's current namespace and incarnation go into the
// request (partitions deleted and re-added within the topic get new
// ones), or err (its topic or partition is gone) is told to the driver.
func (s *callSteps) resolved(ns metadata.Namespace, epoch uint64, err error) {
	s.resolving = false
	if err == nil {
		s.f.Req.NS, s.f.Req.Epoch = ns, epoch
	}
	s.next(s.d.Resolved(err))
}

// wakes implements stepper: the owner shard's answer, the forward's
// wakes, or the retry's alarm.
func (s *callSteps) wakes() wakeup {
	switch {
	case s.st.Op == CallSend:
		return wakeup{reply: s.reply}
	case s.st.Op == CallForward && s.fwd != nil:
		return (*forwardSteps)(s.fwd).wakes()
	case s.st.Op == CallWait:
		return wakeup{alarm: &s.alarm}
	}
	return wakeup{}
}

// giveUp implements stepper: the driver says what the caller giving up
// means (Cancelled); a forward in flight is let go of.
func (s *callSteps) giveUp(err error) error {
	if s.fwd != nil {
		s.fwd.Abandon()
		s.fwd = nil
	}
	s.next(s.d.Cancelled(err))
	s.alarm.stop()
	return s.st.Err
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
	return e.sendFailed(ctx, f, err, e.shards[owner].SendBefore)
}

// sendFailed is what follows a send to an owner shard that failed with
// err, through its inbox (Engine.send) or its waited lane (waitedPort)
// alike: the failure is counted; a full one is backpressure, waited on
// for room with waitRoom until the call's deadline, with one timer (a
// context derived for it cost a context, a timer and their cancellation
// on every wait: with thousands of producers the inbox is full for most
// of their sends); a disconnected shard of a closed engine is ErrClosed.
func (e *Engine) sendFailed(ctx context.Context, f shard.Frame, err error, waitRoom func(context.Context, shard.Frame, <-chan time.Time) error) error {
	e.countSendFailure(f.Req, err)
	switch {
	case errors.Is(err, router.ErrFull):
		t := e.cfg.Clock.NewTimer(f.Req.Deadline.Sub(e.cfg.Clock.Now()))
		err = waitRoom(ctx, f, t.C())
		t.Stop()
		if errors.Is(err, router.ErrFull) {
			err = fmt.Errorf("%w: inbox full until the deadline", shard.ErrRetry)
		}
	case errors.Is(err, router.ErrDisconnected) && e.closed.Load():
		return ErrClosed
	}
	return err
}
