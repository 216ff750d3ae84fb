package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
// MemberChange carries its steps out, one Step at a time, through the
// port to the metadata member chosen when it starts (steps.go): a manual
// engine's driver (the simulator) steps it (StartAddNode,
// StartRemoveNode), and Engine.AddNode and Engine.RemoveNode start one
// and wait on it (runSteps), so both run the same code.

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

// changeMembership is AddNode (add) or RemoveNode of node: the member
// change started, then waited on until ctx ends. Each part is bounded as
// a call of its own: the read barrier and the drain by RequestTimeout
// from their start, the configuration change from its first proposal;
// the wait for the replicas to move by ctx alone (it takes as long as the
// data takes to copy).
func (c *clusterNode) changeMembership(ctx context.Context, add bool, node uint64) error {
	e := c.e
	mc, err := e.startMemberChange(c.meta.port(ctx), add, node, e.NewMetadataKey(), e.NewMetadataKey(), time.Time{})
	if err != nil {
		return err
	}
	return runSteps(ctx, e.cfg.Clock, mc)
}

// MemberChange is an AddNode or RemoveNode in progress (StartAddNode,
// StartRemoveNode; AddNode and RemoveNode wait on one), carried on by
// calls to Step. It is not safe for concurrent use.
type MemberChange struct {
	e        *Engine
	port     metaPort
	node     uint64
	data     []byte      // the configuration change's command, under its key
	drainKey MetadataKey // RemoveNode's DrainNode's
	deadline time.Time   // zero: none (the blocking owner's ctx bounds it)
	d        memberDriver
	st       memberStep
	// applied is the metadata application after the last look at the
	// view (taken before it, so one between the look and a wait wakes
	// the wait).
	applied <-chan struct{}
	// The part in progress: the read barrier, the drain, the answer of
	// the configuration change's proposal.
	barrier *Barrier
	drain   *askSteps
	prop    chan MetadataResult
	// changeBy bounds the configuration change: RequestTimeout from its
	// first proposal (zero: none made yet).
	changeBy time.Time
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
	if err := e.manualMembership(node); err != nil {
		return nil, err
	}
	return e.startMemberChange(memberPort{e.cl.meta}, true, node, key, MetadataKey{}, deadline)
}

// StartRemoveNode starts RemoveNode of node on a manual engine, given up
// at deadline: a read barrier, the DrainNode command under drainKey
// (unless applied already), the wait for the node's replicas to move,
// then the membership change carrying RemoveNode under key. Step takes
// its steps.
func (e *Engine) StartRemoveNode(drainKey, key MetadataKey, node uint64, deadline time.Time) (*MemberChange, error) {
	if err := e.manualMembership(node); err != nil {
		return nil, err
	}
	return e.startMemberChange(memberPort{e.cl.meta}, false, node, key, drainKey, deadline)
}

// startMemberChange starts the change of node through port, given up at
// deadline (zero: none).
func (e *Engine) startMemberChange(port metaPort, add bool, node uint64, key, drainKey MetadataKey, deadline time.Time) (*MemberChange, error) {
	var cmd metadata.Command = metadata.AddNode{Node: node}
	if !add {
		if err := e.cl.notSelf(node); err != nil {
			return nil, err
		}
		cmd = metadata.RemoveNode{Node: node}
	}
	// The command keeps its deduplication key through every proposal, so
	// a second commit is a no-op.
	data, err := encodeMetaCommand(key, cmd)
	if err != nil {
		return nil, err
	}
	mc := &MemberChange{e: e, port: port, node: node, data: data, drainKey: drainKey, deadline: deadline,
		d: newMemberDriver(add, node, e.ForwardTimeout(), e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax)}
	mc.st = mc.d.start(e.cfg.Clock.Now(), mc.view())
	return mc, nil
}

// view looks at what this node's metadata says of the node.
func (mc *MemberChange) view() memberView {
	mc.applied = mc.e.cl.applied.next()
	return mc.e.cl.memberView(mc.node)
}

// by is when the change is given up: its deadline, or the configuration
// change's own (zero: never).
func (mc *MemberChange) by() time.Time {
	if mc.d.phase == phaseChange {
		return earliest(mc.deadline, mc.changeBy)
	}
	return mc.deadline
}

// part is the deadline of a part started at now: RequestTimeout on, or
// the change's own if that is sooner.
func (mc *MemberChange) part(now time.Time) time.Time {
	return earliest(mc.deadline, now.Add(mc.e.cfg.RequestTimeout))
}

// Step takes the change's next steps — proposes when one is due, takes
// the answers that arrived, looks at the metadata again after a wait —
// and reports its outcome once it is over (done). It never blocks on a
// manual engine: call it again after the engine has been stepped.
func (mc *MemberChange) Step() (err error, done bool) {
	e, clk := mc.e, mc.e.cfg.Clock
	for {
		now := clk.Now()
		if by := mc.by(); mc.st.op != memberDone && !by.IsZero() && !now.Before(by) {
			mc.giveUp(fmt.Errorf("%w: %w", shard.ErrRetry, errDeadlinePassed))
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
				mc.barrier = e.startBarrier(mc.port, mc.part(now))
			}
			err, done := mc.barrier.Step()
			if !done {
				return nil, false
			}
			mc.barrier = nil
			mc.st = mc.d.barriered(clk.Now(), mc.view(), err)
		case memberDrain:
			if mc.drain == nil {
				a, err := e.startCommand(mc.port, mc.drainKey, metadata.DrainNode{Node: mc.node}, mc.part(now))
				if err != nil {
					mc.st = mc.d.drained(now, mc.view(), err)
					continue
				}
				mc.drain = a
			}
			err, done := mc.drain.Step()
			if !done {
				return nil, false
			}
			mc.drain = nil
			mc.st = mc.d.drained(clk.Now(), mc.view(), err)
		case memberWait:
			st := mc.d.step(now, mc.view())
			mc.st = st
			if st.op == memberWait && !st.again {
				return nil, false
			}
		case memberPropose:
			if mc.prop == nil {
				if mc.changeBy.IsZero() {
					mc.changeBy = now.Add(e.cfg.RequestTimeout)
				}
				reply := make(chan MetadataResult, 1)
				if err := mc.propose(reply); err != nil {
					mc.st = mc.d.proposed(clk.Now(), mc.view(), err)
					continue
				}
				mc.prop = reply
			}
			var r MetadataResult
			select {
			case r = <-mc.prop:
			default:
				return nil, false
			}
			mc.prop = nil
			mc.st = mc.d.proposed(clk.Now(), mc.view(), r.Err)
		}
	}
}

// propose proposes the configuration change through the port; a removal
// only of a node drained of its replicas (removable).
func (mc *MemberChange) propose(reply chan MetadataResult) error {
	if !mc.d.add {
		if err := mc.e.removable(mc.node); err != nil {
			return err
		}
	}
	return mc.port.propose(metaOp{change: mc.node, remove: !mc.d.add, data: mc.data, reply: reply})
}

// wakes implements stepper.
func (mc *MemberChange) wakes() wakeup {
	var w wakeup
	switch {
	case mc.barrier != nil:
		w = mc.barrier.wakes()
	case mc.drain != nil:
		w = mc.drain.wakes()
	case mc.prop != nil:
		w.answer = mc.prop
	case mc.st.op == memberWait:
		w = wakeup{at: mc.st.at, ready: mc.applied}
	}
	w.at = earliest(w.at, mc.by())
	return w
}

// giveUp implements stepper: the change ends where it stands, with the
// outcome of the part in progress given up with err.
func (mc *MemberChange) giveUp(err error) error {
	now := mc.e.cfg.Clock.Now()
	switch {
	case mc.barrier != nil:
		mc.st = mc.d.barriered(now, mc.view(), mc.barrier.giveUp(err))
		mc.barrier = nil
	case mc.drain != nil:
		mc.st = mc.d.drained(now, mc.view(), mc.drain.giveUp(err))
		mc.drain = nil
	default:
		mc.prop = nil
		mc.st = mc.d.cancelled(err)
	}
	return mc.st.err // a barrier or a drain given up ends the change
}
