package parkway

import (
	"errors"
	"fmt"
	"testing"

	"github.com/parkway-io/parkway/shard"
)

// TestBehaviour18ForwardedRetryHereSurvivesTheWire pins behaviour 18 across
// a forward: the answer a leader gives a forwarded request travels back
// through encodeResponse and decodeResponse, and a "retry here shortly"
// (ErrRetry, and ErrStaleIncarnation, which wraps it) must still be one
// after the trip — retried in place by the client, never taken for "not
// leader / go elsewhere" — while "not leader" keeps its hint and is never
// retried in place.
func TestBehaviour18ForwardedRetryHereSurvivesTheWire(t *testing.T) {
	retryHere := []struct {
		name  string
		err   error
		stale bool
	}{
		{"ErrRetry", shard.ErrRetry, false},
		{"wrapped ErrRetry", fmt.Errorf("partition materialising: %w", shard.ErrRetry), false},
		{"ErrStaleIncarnation", shard.ErrStaleIncarnation, true},
		{"wrapped ErrStaleIncarnation", fmt.Errorf("ns 0/1/0: %w", shard.ErrStaleIncarnation), true},
	}
	for _, c := range retryHere {
		r, err := decodeResponse(encodeResponse(shard.Response{Err: c.err}))
		if err != nil {
			t.Fatalf("%s: decode: %v", c.name, err)
		}
		var nl *shard.NotLeaderError
		switch {
		case !errors.Is(r.Err, ErrRetry):
			t.Errorf("%s came back as %v: no longer ErrRetry", c.name, r.Err)
		case errors.Is(r.Err, ErrNotLeader) || errors.As(r.Err, &nl):
			t.Errorf("%s came back as %v: typed as not-leader", c.name, r.Err)
		case !retryInPlace(r.Err):
			t.Errorf("%s came back as %v: not retried in place", c.name, r.Err)
		case c.stale != errors.Is(r.Err, shard.ErrStaleIncarnation):
			t.Errorf("%s came back as %v: stale incarnation %v, want %v", c.name, r.Err, !c.stale, c.stale)
		}
	}

	r, err := decodeResponse(encodeResponse(shard.Response{Err: &shard.NotLeaderError{Leader: 3}}))
	if err != nil {
		t.Fatal(err)
	}
	var nl *shard.NotLeaderError
	if !errors.As(r.Err, &nl) || nl.Leader != 3 || errors.Is(r.Err, ErrRetry) || retryInPlace(r.Err) {
		t.Fatalf("not-leader (node 3) came back as %v", r.Err)
	}
}
