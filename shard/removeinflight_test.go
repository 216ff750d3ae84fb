package shard

import (
	"errors"
	"fmt"
	"testing"
)

// A leader's replica torn down (its stream deleted) while a proposal of
// its is in flight answers the proposal "outcome unknown", never "retry":
// the entry was already sent, and the other replicas — still unaware of
// the delete — may commit and serve it. A "retry" would tell the client
// it was not applied (cluster simulator seed 1531: the answer crossed a
// forward as "retry", the client counted the produce not applied, and
// two replicas of the dead incarnation appended it).
func TestRemovedLeaderAnswersInFlightProposalUnknown(t *testing.T) {
	n := newMoveNet(t)
	info, lead := n.ledPartition(3)
	n.produceAcked(lead, info.NS, 1)
	for id := uint64(1); id <= 4; id++ {
		if id != lead {
			n.cut[id] = true // the proposal goes out and is never answered
		}
	}
	c := produce(info.NS, "in flight")
	n.shard(lead).handle(c.f)
	n.settle()
	c.pending(t)
	var epoch uint64
	if err := n.nodes[lead].step(n.shard(lead), opTombstone(info.NS, &epoch)); err != nil {
		t.Fatal(err)
	}
	r := c.answered(t)
	if !errors.Is(r.Err, ErrOutcomeUnknown) {
		t.Fatalf("in-flight proposal of a removed replica answered %v, want ErrOutcomeUnknown", r.Err)
	}
	if errors.Is(r.Err, ErrRetry) {
		t.Fatalf("in-flight proposal of a removed replica answered %v, which matches ErrRetry (\"not applied\")", r.Err)
	}
}

// OutcomeUnknown keeps a cause's chain except ErrRetry's.
func TestOutcomeUnknownNeverMatchesRetry(t *testing.T) {
	for _, cause := range []error{errTombstoned, errRemoved, ErrStaleIncarnation, fmt.Errorf("wrapped: %w", errIncarnation)} {
		err := OutcomeUnknown(cause)
		if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrRetry) {
			t.Errorf("OutcomeUnknown(%v) = %v: matches ErrOutcomeUnknown %v, ErrRetry %v; want true, false",
				cause, err, errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrRetry))
		}
		if err.Error() != ErrOutcomeUnknown.Error()+": "+cause.Error() {
			t.Errorf("OutcomeUnknown(%v) lost its cause's text: %q", cause, err)
		}
	}
	if err := OutcomeUnknown(ErrClosed); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("OutcomeUnknown(ErrClosed) = %v: must match both", err)
	}
}
