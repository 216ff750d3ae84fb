package host

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// TestMemberDriverAdd pins AddNode's steps: a voter already is done at
// once; a node not named is proposed (again at the timeout, after a
// pause on a refusal) until the metadata names it, then waited for
// until it is a voter; a node named already skips the proposal; a
// caller giving up while the learner waits is told ErrNotPromoted, and
// while a proposal is in flight that the outcome is unknown.
func TestMemberDriverAdd(t *testing.T) {
	t0 := time.Unix(1000, 0)
	newD := func() memberDriver {
		return newMemberDriver(true, 4, 50*time.Millisecond, time.Millisecond, 4*time.Millisecond)
	}
	d := newD()
	if st := d.start(t0, memberView{named: true, voter: true}); st.op != memberDone || st.err != nil {
		t.Fatalf("a voter already: %+v, want done", st)
	}
	d = newD()
	if st := d.start(t0, memberView{named: true}); st.op != memberWait || !st.at.IsZero() {
		t.Fatalf("a learner already: %+v, want a wait for its promotion", st)
	}
	if st := d.cancelled(context.DeadlineExceeded); !errors.Is(st.err, ErrNotPromoted) || !errors.Is(st.err, context.DeadlineExceeded) {
		t.Fatalf("given up while a learner: %v, want ErrNotPromoted and the context's error", st.err)
	}
	d = newD()
	st := d.start(t0, memberView{})
	if st.op != memberPropose {
		t.Fatalf("not named: %+v, want a proposal", st)
	}
	if st = d.proposed(t0, memberView{}, fmt.Errorf("%w: no leader", shard.ErrRetry)); st.op != memberWait || !st.at.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("refused: %+v, want a pause of 1ms", st)
	}
	now := t0.Add(time.Millisecond)
	if st = d.step(now, memberView{}); st.op != memberPropose {
		t.Fatalf("after the pause: %+v, want a proposal", st)
	}
	if st = d.proposed(now, memberView{}, nil); st.op != memberWait || !st.at.Equal(now.Add(50*time.Millisecond)) {
		t.Fatalf("proposed: %+v, want a wait to the timeout", st)
	}
	if st := d.cancelled(context.Canceled); !errors.Is(st.err, shard.ErrOutcomeUnknown) {
		t.Fatalf("given up in flight: %v, want ErrOutcomeUnknown", st.err)
	}
	if st = d.step(now.Add(50*time.Millisecond), memberView{}); st.op != memberPropose || !st.again {
		t.Fatalf("at the timeout: %+v, want a proposal made again", st)
	}
	if st = d.proposed(now, memberView{}, nil); st.op != memberWait {
		t.Fatalf("proposed again: %+v, want a wait", st)
	}
	if st = d.step(now, memberView{named: true}); st.op != memberWait || !st.at.IsZero() {
		t.Fatalf("applied: %+v, want a wait for the promotion", st)
	}
	if st = d.step(now, memberView{named: true, voter: true}); st.op != memberDone || st.err != nil {
		t.Fatalf("promoted: %+v, want done", st)
	}
	d = newD()
	d.start(t0, memberView{})
	if st := d.proposed(t0, memberView{}, metadata.ErrInvalidNode); st.op != memberDone || !errors.Is(st.err, metadata.ErrInvalidNode) {
		t.Fatalf("refused for good: %+v, want done with the error", st)
	}
}

// TestMemberDriverRemove pins RemoveNode's steps: the read barrier
// first (its failure ends the call), then a node not named is a no-op;
// one not draining is drained, one holding replicas waited for, then
// the removal proposed until the metadata no longer names it.
func TestMemberDriverRemove(t *testing.T) {
	t0 := time.Unix(1000, 0)
	newD := func() memberDriver {
		return newMemberDriver(false, 4, 50*time.Millisecond, time.Millisecond, 4*time.Millisecond)
	}
	member := memberView{named: true, voter: true}
	d := newD()
	if st := d.start(t0, member); st.op != memberBarrier {
		t.Fatalf("start: %+v, want a read barrier", st)
	}
	if st := d.barriered(t0, member, shard.ErrRetry); st.op != memberDone || !errors.Is(st.err, shard.ErrRetry) {
		t.Fatalf("barrier failed: %+v, want done with its error", st)
	}
	d = newD()
	d.start(t0, member)
	if st := d.barriered(t0, memberView{}, nil); st.op != memberDone || st.err != nil {
		t.Fatalf("not a member: %+v, want done", st)
	}
	d = newD()
	d.start(t0, member)
	if st := d.barriered(t0, member, nil); st.op != memberDrain {
		t.Fatalf("a member: %+v, want the drain", st)
	}
	if st := d.drained(t0, member, metadata.ErrNotEnoughNodes); st.op != memberDone || !errors.Is(st.err, metadata.ErrNotEnoughNodes) {
		t.Fatalf("drain refused: %+v, want done with its error", st)
	}
	d = newD()
	d.start(t0, member)
	d.barriered(t0, member, nil)
	held := memberView{named: true, voter: true, draining: true, held: 2}
	if st := d.drained(t0, held, nil); st.op != memberWait || !st.at.IsZero() {
		t.Fatalf("replicas held: %+v, want a wait for the moves", st)
	}
	if st := d.cancelled(context.DeadlineExceeded); !errors.Is(st.err, context.DeadlineExceeded) || errors.Is(st.err, shard.ErrOutcomeUnknown) {
		t.Fatalf("given up during the moves: %v, want the context's error", st.err)
	}
	drained := memberView{named: true, voter: true, draining: true}
	if st := d.step(t0, drained); st.op != memberPropose {
		t.Fatalf("drained: %+v, want the removal proposed", st)
	}
	if st := d.proposed(t0, drained, nil); st.op != memberWait || !st.at.Equal(t0.Add(50*time.Millisecond)) {
		t.Fatalf("proposed: %+v, want a wait to the timeout", st)
	}
	if st := d.step(t0, memberView{}); st.op != memberDone || st.err != nil {
		t.Fatalf("applied: %+v, want done", st)
	}
	// A node drained already (an earlier call's drain applied) goes
	// straight to the wait for its moves.
	d = newD()
	d.start(t0, member)
	if st := d.barriered(t0, drained, nil); st.op != memberPropose {
		t.Fatalf("drained by an earlier call: %+v, want the removal proposed", st)
	}
}
