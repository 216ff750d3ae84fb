package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// A membership change (AddNode, RemoveNode) is a sequence of steps, each
// judged from this node's metadata: RemoveNode brings the view up to date
// with a read barrier, drains the node (DrainNode through the metadata
// apply-and-retry), waits until no replica is left on it, then proposes
// the metadata group's configuration change carrying RemoveNode; AddNode
// proposes the change carrying AddNode (the learner) and waits for the
// leader to promote it. The configuration change is paced by the
// membership resend (ResendDriver).
//
// memberDriver holds those decisions without a clock or a goroutine: it
// is told the time and what this node's metadata says of the node
// (memberView), says what to do next, and is told each step's outcome.
// Engine.AddNode and Engine.RemoveNode carry its steps out blocking
// (changeMembership); MemberChange step by step for a manual engine's
// driver (the simulator), so both run the same decisions.

// memberOp is what a membership change's driver asks for next.
type memberOp uint8

const (
	// memberDone: the change is over, with memberStep.err.
	memberDone memberOp = iota
	// memberBarrier: run a read barrier, then barriered.
	memberBarrier
	// memberDrain: apply DrainNode (the apply-and-retry), then drained.
	memberDrain
	// memberPropose: propose the configuration change, then proposed.
	memberPropose
	// memberWait: wait until memberStep.at (zero: no timer) or the next
	// metadata application here, then step.
	memberWait
)

// memberStep is one decision of a memberDriver.
type memberStep struct {
	op  memberOp
	at  time.Time
	err error
	// again: the last proposal was not applied within the timeout and is
	// given up (the simulator counts these).
	again bool
}

// memberView is what this node's metadata says of the node changed.
type memberView struct {
	named    bool // the metadata names it
	voter    bool // this member's configuration holds it as a voter
	draining bool // it is being drained (DrainNode applied)
	held     int  // partitions still holding a replica on it
}

// The phases of a membership change.
const (
	phaseBarrier uint8 = iota // RemoveNode: the read barrier
	phaseDrain                // RemoveNode: DrainNode applied
	phaseMoves                // RemoveNode: waiting for the replicas to move
	phaseChange               // the configuration change, resent until applied
	phasePromote              // AddNode: waiting for the promotion to voter
)

// memberDriver decides the steps of one AddNode (add) or RemoveNode of
// node. It is not safe for concurrent use.
type memberDriver struct {
	add   bool
	node  uint64
	phase uint8
	rs    ResendDriver
}

// newMemberDriver is the change of node, its configuration change given
// timeout to apply and paused between lo and hi after a refusal.
func newMemberDriver(add bool, node uint64, timeout, lo, hi time.Duration) memberDriver {
	return memberDriver{add: add, node: node, rs: NewResendDriver(timeout, lo, hi)}
}

// start is the first step at now.
func (d *memberDriver) start(now time.Time, v memberView) memberStep {
	switch {
	case !d.add:
		d.phase = phaseBarrier
		return memberStep{op: memberBarrier}
	case v.voter:
		return memberStep{op: memberDone}
	case v.named:
		// A retry after an interruption finds the learner added: only
		// the wait for its promotion is left.
		d.phase = phasePromote
	default:
		d.phase = phaseChange
	}
	return d.step(now, v)
}

// step decides at now, after a wait or another step's outcome.
func (d *memberDriver) step(now time.Time, v memberView) memberStep {
	switch d.phase {
	case phaseDrain:
		if !v.named {
			return memberStep{op: memberDone} // not a member: a no-op
		}
		if !v.draining {
			return memberStep{op: memberDrain}
		}
		d.phase = phaseMoves
		fallthrough
	case phaseMoves:
		if v.held > 0 {
			return memberStep{op: memberWait}
		}
		d.phase = phaseChange
		fallthrough
	case phaseChange:
		applied := v.named
		if !d.add {
			applied = !v.named
		}
		st := d.rs.Step(now, applied)
		switch st.Op {
		case ResendPropose:
			return memberStep{op: memberPropose, again: st.Again}
		case ResendWait:
			return memberStep{op: memberWait, at: st.At, again: st.Again}
		}
		if !d.add {
			return memberStep{op: memberDone}
		}
		d.phase = phasePromote
		fallthrough
	case phasePromote:
		if v.voter {
			return memberStep{op: memberDone}
		}
		return memberStep{op: memberWait}
	}
	return memberStep{op: memberBarrier} // phaseBarrier: its outcome is awaited
}

// barriered is the read barrier's outcome.
func (d *memberDriver) barriered(now time.Time, v memberView, err error) memberStep {
	if err != nil {
		return memberStep{op: memberDone, err: fmt.Errorf("parkway: removing node %d: %w", d.node, err)}
	}
	// This node's metadata may have lagged behind the node's addition
	// (it was cut off while another member added it): judged from that
	// view, the node is "not a member" and the call would return at
	// once, with the node still a voter and a holder of replicas. So the
	// drain is judged only once the view is up to date.
	d.phase = phaseDrain
	return d.step(now, v)
}

// drained is the DrainNode command's outcome.
func (d *memberDriver) drained(now time.Time, v memberView, err error) memberStep {
	if err != nil {
		return memberStep{op: memberDone, err: err}
	}
	d.phase = phaseMoves
	return d.step(now, v)
}

// proposed is the configuration change's proposal's outcome: nil when
// raft took it, an error wrapping shard.ErrRetry when no leader is known
// or the member is down (proposed again after a pause).
func (d *memberDriver) proposed(now time.Time, v memberView, err error) memberStep {
	switch {
	case err == nil:
		// Proposed: wait for it to apply, for a bounded time (a proposal
		// lost to a leader change is proposed again).
		d.rs.Proposed(now)
	case errors.Is(err, shard.ErrRetry):
		d.rs.Refused(now)
	default:
		return memberStep{op: memberDone, err: err}
	}
	return d.step(now, v)
}

// cancelled is the caller giving up with err (its context's, or the
// deadline passed): what the change's outcome then is depends on where
// it stood.
func (d *memberDriver) cancelled(err error) memberStep {
	switch d.phase {
	case phaseMoves:
		err = fmt.Errorf("parkway: removing node %d: waiting for its replicas to move: %w", d.node, err)
	case phaseChange:
		if d.rs.InFlight() {
			err = fmt.Errorf("%w: changing the membership of node %d: %w", shard.ErrOutcomeUnknown, d.node, err)
		}
	case phasePromote:
		err = fmt.Errorf("%w: node %d is a learner of the metadata group, not caught up yet: %w", ErrNotPromoted, d.node, err)
	}
	return memberStep{op: memberDone, err: err}
}

// memberView is what this node's metadata says of node.
func (c *clusterNode) memberView(node uint64) memberView {
	meta := c.e.meta
	_, held := meta.Moving(node)
	return memberView{
		named:    slices.Contains(meta.Nodes(), node),
		voter:    c.meta.voter(node),
		draining: slices.Contains(meta.Draining(), node),
		held:     held,
	}
}

// memberDriver is the driver of an AddNode (add) or RemoveNode of node
// on this engine.
func (e *Engine) memberDriver(add bool, node uint64) memberDriver {
	return newMemberDriver(add, node, e.ForwardTimeout(), e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax)
}

// changeMembership carries out the steps of AddNode (add) or RemoveNode
// of node blocking, until ctx ends. The configuration change is given
// RequestTimeout from its first proposal when ctx has no deadline; the
// wait for the replicas to move is bounded by ctx alone (it takes as
// long as the data takes to copy).
func (c *clusterNode) changeMembership(ctx context.Context, add bool, node uint64) error {
	e, m := c.e, c.meta
	clk := e.cfg.Clock
	var cmd metadata.Command = metadata.AddNode{Node: node}
	if !add {
		cmd = metadata.RemoveNode{Node: node}
	}
	// The command keeps its deduplication key through every proposal, so
	// a second commit is a no-op.
	data, err := encodeMetaCommand(e.NewMetadataKey(), cmd)
	if err != nil {
		return err
	}
	d := e.memberDriver(add, node)
	// applied is taken before each view is read, so an application after
	// the look wakes the wait.
	var applied <-chan struct{}
	look := func() memberView {
		applied = c.applied.next()
		return c.memberView(node)
	}
	changeCtx := ctx // the configuration change's, bounded from its first proposal
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for st := d.start(clk.Now(), look()); ; {
		switch st.op {
		case memberDone:
			return st.err
		case memberBarrier:
			err := e.ReadBarrier(ctx)
			st = d.barriered(clk.Now(), look(), err)
		case memberDrain:
			_, err := e.ApplyMetadata(ctx, metadata.DrainNode{Node: node})
			st = d.drained(clk.Now(), look(), err)
		case memberWait:
			var fired <-chan time.Time
			if !st.at.IsZero() {
				if timer == nil {
					timer = clk.NewTimer(st.at.Sub(clk.Now()))
				} else {
					timer.Reset(st.at.Sub(clk.Now()))
				}
				fired = timer.C()
			}
			wctx := ctx
			if d.phase == phaseChange {
				wctx = changeCtx
			}
			select {
			case <-applied:
			case <-fired:
			case <-wctx.Done():
				st = d.cancelled(wctx.Err())
				continue
			}
			st = d.step(clk.Now(), look())
		case memberPropose:
			if changeCtx == ctx {
				var cancel context.CancelFunc
				changeCtx, cancel = e.deadline(ctx)
				defer cancel()
			}
			reply := make(chan MetadataResult, 1)
			select {
			case m.props <- metaOp{change: node, remove: !add, data: data, reply: reply}:
			case <-m.failed:
				return m.err
			case <-changeCtx.Done():
				st = d.cancelled(changeCtx.Err())
				continue
			}
			var r MetadataResult
			select {
			case r = <-reply:
			case <-changeCtx.Done():
				st = d.cancelled(changeCtx.Err())
				continue
			}
			st = d.proposed(clk.Now(), look(), r.Err)
		}
	}
}

// MemberChange is an AddNode or RemoveNode on a manual engine
// (StartAddNode, StartRemoveNode), carried on by its driver's calls to
// Step: the same decisions as the started engine's call, the waits left
// to the caller. It is not safe for concurrent use.
type MemberChange struct {
	e        *Engine
	node     uint64
	key      MetadataKey // the configuration change's
	drainKey MetadataKey // RemoveNode's DrainNode's
	deadline time.Time
	d        memberDriver
	st       memberStep
	barrier  *Barrier
	// The drain in flight: its ask, and the answer of the try made.
	drain    AskDriver
	drainSt  AskStep
	asked    bool
	drainAns <-chan MetadataResult
	retries  int
}

// Retries is how many times the configuration change was proposed again
// because the last proposal was not applied within the forward timeout.
func (mc *MemberChange) Retries() int { return mc.retries }

// StartAddNode starts AddNode of node on a manual engine, given up at
// deadline (on the engine's clock): the membership change carrying the
// AddNode command under key, proposed through this node's metadata
// member (again under the same key while it does not apply), then the
// wait for the leader to promote the learner. Step takes its steps.
func (e *Engine) StartAddNode(key MetadataKey, node uint64, deadline time.Time) (*MemberChange, error) {
	return e.startMemberChange(true, node, key, MetadataKey{}, deadline)
}

// StartRemoveNode starts RemoveNode of node on a manual engine, given up
// at deadline: a read barrier, the DrainNode command under drainKey
// (unless applied already), the wait for the node's replicas to move,
// then the membership change carrying RemoveNode under key. Step takes
// its steps.
func (e *Engine) StartRemoveNode(drainKey, key MetadataKey, node uint64, deadline time.Time) (*MemberChange, error) {
	return e.startMemberChange(false, node, key, drainKey, deadline)
}

func (e *Engine) startMemberChange(add bool, node uint64, key, drainKey MetadataKey, deadline time.Time) (*MemberChange, error) {
	if err := e.manualMembership(node); err != nil {
		return nil, err
	}
	if !add {
		if err := e.cl.notSelf(node); err != nil {
			return nil, err
		}
	}
	mc := &MemberChange{e: e, node: node, key: key, drainKey: drainKey, deadline: deadline, d: e.memberDriver(add, node)}
	mc.st = mc.d.start(e.cfg.Clock.Now(), e.cl.memberView(node))
	return mc, nil
}

// Step takes the change's next steps — proposes when one is due, takes
// the answers that arrived, looks at the metadata again after a wait —
// and reports its outcome once it is over (done). It never blocks: call
// it again after the engine has been stepped.
func (mc *MemberChange) Step() (err error, done bool) {
	e, c, clk := mc.e, mc.e.cl, mc.e.cfg.Clock
	for {
		now := clk.Now()
		if mc.st.op != memberDone && !now.Before(mc.deadline) {
			mc.abandon()
			mc.st = mc.d.cancelled(fmt.Errorf("%w: deadline passed", shard.ErrRetry))
		}
		if mc.st.again {
			mc.retries++
			mc.st.again = false
		}
		switch mc.st.op {
		case memberDone:
			return mc.st.err, true
		case memberBarrier:
			if mc.barrier == nil {
				b, err := e.StartReadBarrier(mc.deadline)
				if err != nil {
					mc.st = mc.d.barriered(now, c.memberView(mc.node), err)
					continue
				}
				mc.barrier = b
			}
			err, done := mc.barrier.Step()
			if !done {
				return nil, false
			}
			mc.barrier = nil
			mc.st = mc.d.barriered(clk.Now(), c.memberView(mc.node), err)
		case memberDrain:
			err, done := mc.stepDrain(now)
			if !done {
				return nil, false
			}
			mc.st = mc.d.drained(clk.Now(), c.memberView(mc.node), err)
		case memberWait:
			st := mc.d.step(now, c.memberView(mc.node))
			if st.op == memberWait && !st.again {
				mc.st = st
				return nil, false
			}
			mc.st = st
		case memberPropose:
			var err error
			if mc.d.add {
				err = e.ProposeAddNode(mc.key, mc.node)
			} else {
				err = e.ProposeRemoveNode(mc.key, mc.node)
			}
			mc.st = mc.d.proposed(clk.Now(), c.memberView(mc.node), err)
		}
	}
}

// stepDrain carries the DrainNode command's apply-and-retry on: each try
// proposes it under the drain's key and is given the forward timeout,
// and one refused for a reason worth another is made again after a
// pause, as ApplyMetadata does.
func (mc *MemberChange) stepDrain(now time.Time) (err error, done bool) {
	e := mc.e
	if !mc.asked {
		mc.asked = true
		mc.drain = NewAskDriver(e.ForwardTimeout(), e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax, func(err error) bool {
			return errors.Is(err, shard.ErrRetry)
		})
		mc.drainSt = mc.drain.Start(now)
	}
	for {
		switch mc.drainSt.Op {
		case AskDone:
			mc.asked = false
			return mc.drainSt.Err, true
		case AskWait:
			if now.Before(mc.drainSt.At) {
				return nil, false
			}
			mc.drainSt = mc.drain.Fired(now)
			continue
		}
		if mc.drainAns == nil {
			ch, err := e.ProposeMetadata(mc.drainKey, metadata.DrainNode{Node: mc.node})
			if err != nil {
				mc.drainSt = mc.drain.Answer(now, err)
				continue
			}
			mc.drainAns = ch
		}
		var r MetadataResult
		select {
		case r = <-mc.drainAns:
		default:
			if now.Before(mc.drainSt.At) {
				return nil, false
			}
			r = MetadataResult{Err: fmt.Errorf("%w: not committed yet", shard.ErrRetry)}
		}
		mc.drainAns = nil
		mc.drainSt = mc.drain.Answer(now, r.Err)
	}
}

// abandon lets go of a read barrier in flight (its timer).
func (mc *MemberChange) abandon() {
	if mc.barrier != nil {
		mc.barrier.t.stop()
		mc.barrier = nil
	}
}
