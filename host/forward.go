package host

import (
	"context"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Requests forwarded to a partition's leader (Engine.forward) wait for
// the leader's answer: a waiting poll up to its MaxWait, anything else up
// to the forward timeout. A leader that dies, or is cut off and steps
// down, never answers: without news the poll's reader waited out its
// MaxWait (5 s by default) although the new leader was known a fraction
// of a second after the failure. So each forwarded request is watched:
// when this node learns that its partition has a new leader (its
// replica's raft group reports it, shard Replication.LeaderChanged) or
// that the node it went to is dead (node liveness), forward gives up on
// the old leader. A read is sent again where the news points (the old
// leader's late answer finds no one waiting); a write ends with an
// unknown outcome, as at the timer, and the caller retries it (a produce
// with its producer sequence, which the partition deduplicates) — on a
// new leader only, not on a death node liveness declared: a node busy
// taking a large batch can look dead for a while, and its write would
// start over.
//
// Without news, a request is sent once to its node and never stacked on
// it again: a leader slow to take or serve it (a multi-MiB batch on a
// starved machine, where each forward timeout used to add one more copy,
// 4–5 in all) would only fall further behind. At each forward timeout
// the sender asks instead whether the node still holds the request
// (KindProbe, answered from the forward budget's record of the requests
// received and not yet answered) and waits on while it does, or while
// the question goes unanswered, up to the caller's context and the
// request's deadline. A "no" means the request or its answer was lost —
// the answer is sent before the record is dropped, on the same
// connection, so it arrives first — and ends the attempt with an unknown
// outcome; the caller's retry sends it again.

// forwardWatch is one watched forwarded poll: the node it went to, and
// where the news arrives (buffered: the newest unread news is enough).
// arrived is signalled after each news, for the blocking wait of the
// forward (awaited.arrived, shared by its answers).
type forwardWatch struct {
	to      uint64
	c       chan forwardEvent
	arrived chan struct{}
}

// forwardEvent is news for a watched poll: the partition's new leader
// (0: none known yet), or that the node the poll went to is dead.
type forwardEvent struct {
	lead uint64
	dead bool
}

// watch registers forwarded poll id of ns, sent to node to.
func (c *clusterNode) watch(id uint64, ns metadata.Namespace, to uint64) *forwardWatch {
	w := &forwardWatch{to: to, c: make(chan forwardEvent, 1), arrived: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watching[ns]
	if ws == nil {
		ws = make(map[uint64]*forwardWatch)
		c.watching[ns] = ws
	}
	ws[id] = w
	return w
}

// unwatch forgets forwarded poll id of ns.
func (c *clusterNode) unwatch(id uint64, ns metadata.Namespace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watching[ns]
	delete(ws, id)
	if len(ws) == 0 {
		delete(c.watching, ns)
	}
}

// tell hands w the news ev, merged with news it has not read yet (a
// death is not forgotten, a known leader not replaced by "none"). Its
// callers hold c.mu, so there is one writer: once it emptied the buffer,
// the send cannot block.
func (w *forwardWatch) tell(ev forwardEvent) {
	select {
	case old := <-w.c:
		ev.dead = ev.dead || old.dead
		if ev.lead == 0 {
			ev.lead = old.lead
		}
	default:
	}
	w.c <- ev
	signal(w.arrived)
}

// signal leaves a signal on c (buffered, of one) unless one is there.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// leaderChanged is shard Replication.LeaderChanged: ns's group on this
// node learned its leader is lead (0: none). It runs on a shard's pump.
func (c *clusterNode) leaderChanged(ns metadata.Namespace, lead uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.watching[ns] {
		w.tell(forwardEvent{lead: lead})
	}
}

// peerDead tells the polls forwarded to peer that it was declared dead.
func (c *clusterNode) peerDead(peer uint64) {
	c.hints.dropNode(peer)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ws := range c.watching {
		for _, w := range ws {
			if w.to == peer {
				w.tell(forwardEvent{dead: true})
			}
		}
	}
}

// ForwardOp is what a forwarded request's driver asks for next.
type ForwardOp uint8

const (
	// ForwardDone: the forward is over, with ForwardStep.Resp or
	// ForwardStep.Err.
	ForwardDone ForwardOp = iota
	// ForwardWait: wait for the answer, a probe's answer or news of the
	// partition's leader, and call Timer at ForwardStep.At.
	ForwardWait
	// ForwardProbe: ask the node whether it still holds the request
	// (KindProbe), then wait as for ForwardWait.
	ForwardProbe
)

// ForwardStep is one decision of a ForwardDriver.
type ForwardStep struct {
	Op   ForwardOp
	At   time.Time      // ForwardWait, ForwardProbe: when to call Timer
	Resp shard.Response // ForwardDone: the node's answer (Err nil)
	Err  error          // ForwardDone: why the forward ended without one
}

// ForwardDriver decides the steps of one forwarded request, as a state
// machine without a clock or a goroutine: it is told the time and each
// event (the answer, a timer, a probe's answer, news of the partition's
// leader, the caller giving up) and says what to do next. Engine.forward
// carries its steps out blocking, Forwarding step by step for a manual
// engine's driver (the simulator). Make it with NewForwardDriver; it is
// not safe for concurrent use.
type ForwardDriver struct {
	to       uint64
	reads    bool          // a read, which may be sent again on news
	wait     time.Duration // the request's MaxWait
	deadline time.Time     // the request's (zero: none)
	timeout  time.Duration // the forward timeout (Engine.ForwardTimeout)
	at       time.Time     // when the timer fires next
}

// NewForwardDriver is the driver of req forwarded to node to, probed
// every timeout.
func NewForwardDriver(to uint64, req *shard.Request, timeout time.Duration) ForwardDriver {
	reads := req.Op == shard.OpPoll || req.Op == shard.OpOffsets || req.Op == shard.OpGetOffset
	return ForwardDriver{to: to, reads: reads, wait: req.MaxWait, deadline: req.Deadline, timeout: timeout}
}

// Start is the request sent at now, its encoding n bytes long. A waiting
// poll is answered by the leader up to its wait later; a large batch
// needs time to travel to the leader and on to a quorum.
func (d *ForwardDriver) Start(now time.Time, n int) ForwardStep {
	d.at = now.Add(d.timeout + d.wait + transferTime(n))
	return ForwardStep{Op: ForwardWait, At: d.at}
}

// Reply is the node's answer b (its encoding).
func (d *ForwardDriver) Reply(b []byte) ForwardStep {
	r, err := DecodeResponse(b)
	if err != nil {
		return ForwardStep{Op: ForwardDone, Err: err}
	}
	return ForwardStep{Op: ForwardDone, Resp: r}
}

// Timer is the timer come at now without an answer. Sending the request
// again would stack a second copy on a leader that may still be taking
// or serving the first (a multi-MiB batch on a starved machine was sent
// 4–5 times so): the node is asked whether it holds it, and waited on,
// up to the request's deadline.
func (d *ForwardDriver) Timer(now time.Time) ForwardStep {
	if !d.deadline.IsZero() && !now.Before(d.deadline) {
		return ForwardStep{Op: ForwardDone, Err: fmt.Errorf("%w: no reply from node %d by the request's deadline", shard.ErrOutcomeUnknown, d.to)}
	}
	next := d.timeout
	if !d.deadline.IsZero() {
		next = min(next, d.deadline.Sub(now))
	}
	d.at = now.Add(next)
	return ForwardStep{Op: ForwardProbe, At: d.at}
}

// Probed is the probe's answer: whether the node holds the request. Its
// owner feeds an answer that arrived first to Reply instead: the probe's
// answer follows the request's on the same connection.
func (d *ForwardDriver) Probed(held bool) ForwardStep {
	if held {
		return ForwardStep{Op: ForwardWait, At: d.at}
	}
	return ForwardStep{Op: ForwardDone, Err: fmt.Errorf("%w: node %d does not hold the request (it, or its answer, was lost)", shard.ErrOutcomeUnknown, d.to)}
}

// News is news of the partition: its new leader lead (0: none known
// yet), or that the node the request went to was declared dead.
func (d *ForwardDriver) News(lead uint64, dead bool) ForwardStep {
	newLeader := lead != 0 && lead != d.to
	if !d.reads && newLeader {
		// A write may or may not have been applied by the old leader: its
		// outcome is unknown, and the caller retries it on the new leader
		// (a produce with its producer sequence, which the partition
		// deduplicates). Only a leader the partition's raft group reports
		// ends it: node liveness may declare a node dead that is only slow
		// to take a large batch, and the write would start over.
		return ForwardStep{Op: ForwardDone, Err: fmt.Errorf("%w: node %d lost the lead to %d while it held the request", shard.ErrOutcomeUnknown, d.to, lead)}
	}
	if !d.reads || !dead && !newLeader {
		// No leader yet (an election is under way), the same one again,
		// or a write told of a death: keep waiting for the answer or the
		// next news.
		return ForwardStep{Op: ForwardWait, At: d.at}
	}
	// A read may be sent again: the old leader's late answer, if any,
	// finds no one waiting.
	if dead {
		return ForwardStep{Op: ForwardDone, Err: fmt.Errorf("%w: node %d, which held the read, was declared dead", shard.ErrRetry, d.to)}
	}
	return ForwardStep{Op: ForwardDone, Err: &shard.NotLeaderError{Leader: lead}}
}

// Cancelled is the caller giving up with err (its context's): the
// outcome is unknown.
func (d *ForwardDriver) Cancelled(err error) ForwardStep {
	return ForwardStep{Op: ForwardDone, Err: shard.OutcomeUnknown(err)}
}

// awaited is a forwarded request awaiting its reply from node to, and
// the answers to the probes asking it whether it still holds it; arrived
// is signalled after each is left (and after each news of the forward's
// watch), for the blocking wait (runSteps) to take the next step.
type awaited struct {
	ch      chan []byte
	probe   chan bool
	arrived chan struct{}
	to      uint64
}

// Forwarding is a partition request forwarded to another node, awaiting
// its answer: the owner of its ForwardDriver's steps, which it carries
// out with the engine's bus and clock (its timer is an alarm on the
// clock's timers). Engine.forward carries its steps out blocking
// (runSteps); a manual engine's driver steps one with Step. It is not
// safe for concurrent use.
type Forwarding struct {
	c     *clusterNode
	clk   clock.Clock
	id    uint64
	to    uint64
	req   *shard.Request
	a     awaited
	w     *forwardWatch
	alarm alarm // rings at the driver's ForwardStep.At
	d     ForwardDriver
	st    ForwardStep
}

// StartForward sends req to node to, its partition's leader or a
// replica, and returns without waiting for the answer: Step takes the
// answer and the events that end the wait. A manual engine's driver uses
// it where a started engine's client call forwards and waits.
func (e *Engine) StartForward(to uint64, req *shard.Request) (*Forwarding, error) {
	c := e.cl
	if c == nil {
		return nil, errNotClustered
	}
	f := &Forwarding{c: c, clk: e.cfg.Clock, id: c.reqID.Add(1), to: to, req: req, alarm: alarm{clk: e.cfg.Clock}}
	f.d = NewForwardDriver(to, req, e.ForwardTimeout())
	now := f.clk.Now()
	payload, err := EncodeRequest(req, now)
	if err != nil {
		return nil, err
	}
	// The leader may never answer: it died, or it was cut off and stepped
	// down. The forward follows the news instead of waiting out its
	// timer (a waiting poll's MaxWait, or the forward timeout). The
	// watch's arrival signal is the answers' too: one channel wakes the
	// blocking wait.
	f.w = c.watch(f.id, req.NS, to)
	f.a = awaited{ch: make(chan []byte, 1), probe: make(chan bool, 1), arrived: f.w.arrived, to: to}
	c.mu.Lock()
	c.waiting[f.id] = f.a
	c.mu.Unlock()
	if err := c.send(to, KindRequest, f.id, payload); err != nil {
		f.unregister()
		return nil, fmt.Errorf("%w: forward to node %d: %w", shard.ErrRetry, to, err)
	}
	f.st = f.d.Start(now, len(payload))
	f.alarm.set(f.st.At)
	return f, nil
}

// ID is the forward's request id on the bus (transport.Message.Group of
// the request, its reply and probes).
func (f *Forwarding) ID() uint64 { return f.id }

// Step takes what arrived since the last call — the answer, a probe's
// answer, news of the leader, the timer — and reports the forward's
// outcome once it is over (done); a forward over has let go of its
// registrations. It never blocks.
func (f *Forwarding) Step() (r shard.Response, err error, done bool) {
	for f.st.Op != ForwardDone {
		if f.st.Op == ForwardProbe {
			f.probe()
			continue
		}
		select {
		case b := <-f.a.ch:
			f.st = f.d.Reply(b)
			continue
		default:
		}
		// The others in a fixed order, one at a time: a select over
		// several ready ones would pick at random, and a driver stepping
		// a manual engine (the simulator) must make the same run from
		// the same inputs.
		select {
		case held := <-f.a.probe:
			f.probed(held)
			continue
		default:
		}
		select {
		case ev := <-f.w.c:
			f.st = f.d.News(ev.lead, ev.dead)
			continue
		default:
		}
		if !f.alarm.rang() {
			return shard.Response{}, nil, false
		}
		f.st = f.d.Timer(f.clk.Now())
	}
	r, err = f.end()
	return r, err, true
}

// Abandon lets go of a forward not over, its answer no longer awaited (a
// late one finds no one waiting).
func (f *Forwarding) Abandon() {
	if f.st.Op != ForwardDone {
		f.st = ForwardStep{Op: ForwardDone, Err: shard.ErrOutcomeUnknown}
		f.unregister()
	}
}

// probe asks the node whether it still holds the request, and sets the
// timer for the next question.
func (f *Forwarding) probe() {
	_ = f.c.send(f.to, KindProbe, f.id, nil)
	f.alarm.set(f.st.At)
	f.st.Op = ForwardWait
}

// probed takes a probe's answer. The probe's answer follows the
// request's on the same connection, so an answer sent before it is here
// already.
func (f *Forwarding) probed(held bool) {
	if !held {
		select {
		case b := <-f.a.ch:
			f.st = f.d.Reply(b)
			return
		default:
		}
	}
	f.st = f.d.Probed(held)
}

// end lets go of the forward's registrations and returns its outcome,
// learning from a "not leader" answer that the node does not lead.
func (f *Forwarding) end() (shard.Response, error) {
	f.unregister()
	if f.st.Err != nil {
		return shard.Response{}, f.st.Err
	}
	f.c.learnForwarded(f.req, f.to, f.st.Resp, nil)
	return f.st.Resp, nil
}

// unregister forgets the forward's reply and news registrations and
// stops its alarm.
func (f *Forwarding) unregister() {
	f.c.mu.Lock()
	delete(f.c.waiting, f.id)
	f.c.mu.Unlock()
	if f.w != nil {
		f.c.unwatch(f.id, f.req.NS)
		f.w = nil
	}
	f.alarm.stop()
}

// forwardSteps is a Forwarding as runSteps carries it out: a stepper
// (the answer, once it is over, is the driver's last step's).
type forwardSteps Forwarding

// Step implements stepper.
func (s *forwardSteps) Step() (err error, done bool) {
	_, err, done = (*Forwarding)(s).Step()
	return err, done
}

// wakes implements stepper: the alarm, and the signal left after each
// answer, probe answer and news.
func (s *forwardSteps) wakes() wakeup { return wakeup{alarm: &s.alarm, ready: s.a.arrived} }

// giveUp implements stepper: the outcome is unknown.
func (s *forwardSteps) giveUp(err error) error {
	s.st = s.d.Cancelled(err)
	_, err = (*Forwarding)(s).end()
	return err
}

// forward sends a partition request to node to (its leader) and waits
// for the answer: the client following a "not leader" hint. The request
// is sent to to once: a leader that takes long to answer (a large batch
// on a loaded machine) is asked, every ForwardTimeout, whether it still
// holds the request, and waited for while it does or does not answer, up
// to ctx and the request's deadline; it is given up only when it says it
// does not hold it (the request, or its answer, was lost on the way), or
// when the partition's leader moves. The outcome is then unknown; the
// caller sends the request again (produces carry a (producer, sequence)
// pair, so a batch is never applied twice). ForwardDriver decides; it is
// the stepped forward (StartForward) carried out by runSteps.
func (e *Engine) forward(ctx context.Context, to uint64, req *shard.Request) (shard.Response, error) {
	f, err := e.StartForward(to, req)
	if err != nil {
		return shard.Response{}, err
	}
	if err := runSteps(ctx, e.cfg.Clock, (*forwardSteps)(f)); err != nil {
		return shard.Response{}, err
	}
	return f.st.Resp, nil
}
