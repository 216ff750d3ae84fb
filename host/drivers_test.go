package host_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/shard"
)

// TestCallDriver pins the client call's decisions: "retry here" is
// retried in place with the one backoff until the deadline, "not leader"
// is followed and never retried in place (unless it names this node
// after a forward: leadership moving here), an unknown outcome is retried
// in a cluster only, and anything else ends the call.
func TestCallDriver(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := host.CallConfig{Clustered: true, Self: 1, Timeout: time.Second, BackoffMin: time.Millisecond, BackoffMax: 4 * time.Millisecond}
	retry := fmt.Errorf("materialising: %w", shard.ErrRetry)

	produce := &shard.Request{Op: shard.OpProduce, Producer: 9, Seq: 1}
	d := host.NewCallDriver(&cfg, produce)
	if st := d.Start(t0.Add(10*time.Millisecond), 0); st.Op != host.CallSend {
		t.Fatalf("start: %+v, want a send here", st)
	}
	// Retries in place: 1, 2, 4, 4 ms, then the deadline cuts the wait.
	now := t0
	for i, want := range []time.Duration{1, 2, 4, 3} {
		st := d.Answer(now, shard.Response{Err: retry}, nil)
		if st.Op != host.CallWait || st.At.Sub(now) != want*time.Millisecond {
			t.Fatalf("retry %d: %+v, want a wait of %v ms", i, st, want)
		}
		now = st.At
		if st := d.Resolved(nil); st.Op != host.CallSend {
			t.Fatalf("fired: %+v, want a send", st)
		}
	}
	if st := d.Answer(now, shard.Response{}, retry); st.Op != host.CallDone || !errors.Is(st.Err, shard.ErrRetry) {
		t.Fatalf("at the deadline: %+v, want done with the retried error", st)
	}

	d = host.NewCallDriver(&cfg, produce)
	if st := d.Start(time.Time{}, 3); st.Op != host.CallForward || st.To != 3 {
		t.Fatalf("start on a node without a replica: %+v, want a forward to 3", st)
	}
	nl := &shard.NotLeaderError{Leader: 2}
	if st := d.Answer(t0, shard.Response{Err: nl}, nil); st.Op != host.CallForward || st.To != 2 {
		t.Fatalf("not leader (2): %+v, want a forward to 2", st)
	}
	if st := d.Answer(t0, shard.Response{Err: &shard.NotLeaderError{Leader: 1}}, nil); st.Op != host.CallWait || !errors.Is(st.Err, shard.ErrRetry) {
		t.Fatalf("forwarded, not leader (this node): %+v, want a retry in place", st)
	}
	if st := d.Answer(t0, shard.Response{Err: shard.ErrOutcomeUnknown}, nil); st.Op != host.CallWait {
		t.Fatalf("unknown outcome in a cluster: %+v, want a retry", st)
	}
	if st := d.Answer(t0, shard.Response{Offset: 7}, nil); st.Op != host.CallDone || st.Err != nil || st.Resp.Offset != 7 {
		t.Fatalf("answer: %+v, want done at offset 7", st)
	}
	if st := d.Answer(t0, shard.Response{}, host.ErrClosed); st.Op != host.CallDone || !errors.Is(st.Err, host.ErrClosed) {
		t.Fatalf("closed: %+v, want done with ErrClosed", st)
	}
	if st := d.Answer(t0, shard.Response{Err: shard.ErrClosed}, nil); st.Op != host.CallDone || !errors.Is(st.Err, host.ErrClosed) {
		t.Fatalf("shard closed: %+v, want done with ErrClosed", st)
	}

	one := host.NewCallDriver(&host.CallConfig{Timeout: time.Second, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond}, produce)
	one.Start(time.Time{}, 0)
	if st := one.Answer(t0, shard.Response{Err: shard.ErrOutcomeUnknown}, nil); st.Op != host.CallDone || !errors.Is(st.Err, shard.ErrOutcomeUnknown) {
		t.Fatalf("unknown outcome on one node: %+v, want done (never retried)", st)
	}
	if st := one.Answer(t0, shard.Response{Err: nl}, nil); st.Op != host.CallDone {
		t.Fatalf("not leader on one node: %+v, want done", st)
	}
	// Without a deadline at Start, the first retry fixes it Timeout on.
	st := one.Answer(t0, shard.Response{Err: retry}, nil)
	if st.Op != host.CallWait {
		t.Fatalf("retry: %+v", st)
	}
	if st := one.Answer(t0.Add(time.Second), shard.Response{Err: retry}, nil); st.Op != host.CallDone {
		t.Fatalf("a timeout after the first retry: %+v, want done", st)
	}

	// Re-resolved: sent again, or ended by the resolve's error.
	if st := one.Resolved(nil); st.Op != host.CallSend {
		t.Fatalf("resolved: %+v, want a send", st)
	}
	gone := errors.New("gone")
	if st := one.Resolved(gone); st.Op != host.CallDone || !errors.Is(st.Err, gone) {
		t.Fatalf("resolve failed: %+v, want done with its error", st)
	}

	// Given up: with the caller's error, an unknown outcome while a
	// forward asked for is unanswered (never retried).
	if st := one.Cancelled(context.Canceled); st.Op != host.CallDone || !errors.Is(st.Err, context.Canceled) || errors.Is(st.Err, shard.ErrOutcomeUnknown) {
		t.Fatalf("given up sending here: %+v, want done with the context's error", st)
	}
	d = host.NewCallDriver(&cfg, produce)
	d.Start(time.Time{}, 0)
	d.Answer(t0, shard.Response{Err: nl}, nil) // forward to 2
	st = d.Cancelled(context.Canceled)
	if st.Op != host.CallDone || !errors.Is(st.Err, shard.ErrOutcomeUnknown) || !errors.Is(st.Err, context.Canceled) {
		t.Fatalf("given up forwarding: %+v, want done with an unknown outcome", st)
	}
}

// TestCallDriverRetriesUnknownOnlyWhereSafe pins which requests a
// cluster's call sends again after an answer of unknown outcome: reads
// and produces carrying a (producer, sequence) pair, which the partition
// deduplicates. A consumer offset stored or deleted, a produce without a
// producer, a truncate or a purge ends the call with the unknown outcome
// instead: applied, then applied again after another client's later
// write, it would undo that write (cluster simulator seed 7861: a store
// of 1 retried over an acknowledged 5).
func TestCallDriverRetriesUnknownOnlyWhereSafe(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := host.CallConfig{Clustered: true, Self: 1, Timeout: time.Second, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond}
	unknown := fmt.Errorf("%w: node 2 lost the lead to 3 while it held the request", shard.ErrOutcomeUnknown)
	for _, tc := range []struct {
		name  string
		req   shard.Request
		retry bool
	}{
		{"produce with a producer", shard.Request{Op: shard.OpProduce, Producer: 7, Seq: 3}, true},
		{"poll", shard.Request{Op: shard.OpPoll}, true},
		{"get offset", shard.Request{Op: shard.OpGetOffset, Consumer: "c"}, true},
		{"offsets", shard.Request{Op: shard.OpOffsets}, true},
		{"produce without a producer", shard.Request{Op: shard.OpProduce}, false},
		{"store offset", shard.Request{Op: shard.OpStoreOffset, Consumer: "c", Offset: 1}, false},
		{"delete offset", shard.Request{Op: shard.OpDeleteOffset, Consumer: "c"}, false},
		{"truncate", shard.Request{Op: shard.OpTruncate, Offset: 4}, false},
		{"purge", shard.Request{Op: shard.OpPurge}, false},
	} {
		if got := host.RetriesUnknown(&tc.req); got != tc.retry {
			t.Errorf("%s: RetriesUnknown %v, want %v", tc.name, got, tc.retry)
		}
		d := host.NewCallDriver(&cfg, &tc.req)
		d.Start(time.Time{}, 2)
		st := d.Answer(t0, shard.Response{}, unknown)
		switch {
		case tc.retry && st.Op != host.CallWait:
			t.Errorf("%s: unknown outcome answered %+v, want a retry in place", tc.name, st)
		case !tc.retry && (st.Op != host.CallDone || !errors.Is(st.Err, shard.ErrOutcomeUnknown) || errors.Is(st.Err, shard.ErrRetry)):
			t.Errorf("%s: unknown outcome answered %+v, want done with the unknown outcome", tc.name, st)
		}
		// "Retry here" stays retried for every request: it promises
		// the request was not applied.
		d = host.NewCallDriver(&cfg, &tc.req)
		d.Start(time.Time{}, 0)
		if st := d.Answer(t0, shard.Response{Err: fmt.Errorf("materialising: %w", shard.ErrRetry)}, nil); st.Op != host.CallWait {
			t.Errorf("%s: retry here answered %+v, want a retry in place", tc.name, st)
		}
	}
}

// TestResendDriver pins the membership resend: a proposal in flight is
// waited for up to the timeout and then made again at once; a refused one
// is made again after a doubling pause, reset by a proposal made.
func TestResendDriver(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := host.NewResendDriver(50*time.Millisecond, time.Millisecond, 4*time.Millisecond)
	if st := r.Step(t0, false); st.Op != host.ResendPropose || st.Again {
		t.Fatalf("first step: %+v, want a proposal", st)
	}
	if d := r.Refused(t0); d != time.Millisecond {
		t.Fatalf("first pause %v, want 1ms", d)
	}
	if st := r.Step(t0, false); st.Op != host.ResendWait || !st.At.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("after a refusal: %+v, want a wait of 1ms", st)
	}
	if d := r.Refused(t0); d != 2*time.Millisecond {
		t.Fatalf("second pause %v, want 2ms", d)
	}
	now := t0.Add(2 * time.Millisecond)
	if st := r.Step(now, false); st.Op != host.ResendPropose {
		t.Fatalf("after the pause: %+v, want a proposal", st)
	}
	r.Proposed(now)
	if !r.InFlight() {
		t.Fatal("not in flight after a proposal")
	}
	if st := r.Step(now.Add(49*time.Millisecond), false); st.Op != host.ResendWait || !st.At.Equal(now.Add(50*time.Millisecond)) {
		t.Fatalf("in flight: %+v, want a wait to the timeout", st)
	}
	if st := r.Step(now.Add(50*time.Millisecond), false); st.Op != host.ResendPropose || !st.Again {
		t.Fatalf("at the timeout: %+v, want a proposal made again", st)
	}
	if d := r.Refused(now); d != time.Millisecond {
		t.Fatalf("pause after a proposal made: %v, want the minimum again", d)
	}
	if st := r.Step(now, true); st.Op != host.ResendDone {
		t.Fatalf("applied: %+v, want done", st)
	}
}

// TestAskDriver pins the metadata ask (apply-and-retry, read barrier):
// each try is given the timeout, an error worth another try pauses with
// the doubling backoff, any other answer ends the ask.
func TestAskDriver(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := host.NewAskDriver(50*time.Millisecond, time.Millisecond, 2*time.Millisecond, func(err error) bool { return errors.Is(err, shard.ErrRetry) })
	if st := d.Start(t0); st.Op != host.AskSend || !st.At.Equal(t0.Add(50*time.Millisecond)) {
		t.Fatalf("start: %+v, want a try given 50ms", st)
	}
	for i, want := range []time.Duration{1, 2, 2} {
		if st := d.Answer(t0, shard.ErrRetry); st.Op != host.AskWait || st.At.Sub(t0) != want*time.Millisecond {
			t.Fatalf("retry %d: %+v, want a pause of %v ms", i, st, want)
		}
	}
	if st := d.Fired(t0); st.Op != host.AskSend {
		t.Fatalf("fired: %+v, want a try", st)
	}
	if st := d.Answer(t0, host.ErrClosed); st.Op != host.AskDone || !errors.Is(st.Err, host.ErrClosed) {
		t.Fatalf("closed: %+v, want done with the error", st)
	}
	if st := d.Answer(t0, nil); st.Op != host.AskDone || st.Err != nil {
		t.Fatalf("answered: %+v, want done", st)
	}
}

// TestForwardDriver pins a forwarded request's decisions: the answer ends
// it; the timer asks whether the node still holds the request and waits
// on while it does, until the request's deadline; a "no" ends it with an
// unknown outcome; a new leader ends a write (unknown) and sends a read
// there, a death sends a read again and leaves a write waiting; the
// caller giving up makes the outcome unknown.
func TestForwardDriver(t *testing.T) {
	t0 := time.Unix(1000, 0)
	timeout := 50 * time.Millisecond
	write := &shard.Request{Op: shard.OpProduce, Deadline: t0.Add(120 * time.Millisecond)}
	d := host.NewForwardDriver(2, write, timeout)
	if st := d.Start(t0, 0); st.Op != host.ForwardWait || !st.At.Equal(t0.Add(timeout)) {
		t.Fatalf("start: %+v, want a wait of the forward timeout", st)
	}
	now := t0.Add(timeout)
	if st := d.Timer(now); st.Op != host.ForwardProbe || !st.At.Equal(now.Add(timeout)) {
		t.Fatalf("timer: %+v, want a probe and another timeout", st)
	}
	if st := d.Probed(true); st.Op != host.ForwardWait || !st.At.Equal(now.Add(timeout)) {
		t.Fatalf("held: %+v, want to wait on", st)
	}
	now = now.Add(timeout)
	if st := d.Timer(now); st.Op != host.ForwardProbe || !st.At.Equal(write.Deadline) {
		t.Fatalf("timer near the deadline: %+v, want a probe and a wait to the deadline", st)
	}
	if st := d.Timer(write.Deadline); st.Op != host.ForwardDone || !errors.Is(st.Err, shard.ErrOutcomeUnknown) {
		t.Fatalf("deadline: %+v, want an unknown outcome", st)
	}
	if st := d.Probed(false); st.Op != host.ForwardDone || !errors.Is(st.Err, shard.ErrOutcomeUnknown) {
		t.Fatalf("not held: %+v, want an unknown outcome", st)
	}
	if st := d.News(0, false); st.Op != host.ForwardWait {
		t.Fatalf("write, no leader yet: %+v, want to wait on", st)
	}
	if st := d.News(2, false); st.Op != host.ForwardWait {
		t.Fatalf("write, the same leader: %+v, want to wait on", st)
	}
	if st := d.News(0, true); st.Op != host.ForwardWait {
		t.Fatalf("write, node declared dead: %+v, want to wait on", st)
	}
	if st := d.News(3, false); st.Op != host.ForwardDone || !errors.Is(st.Err, shard.ErrOutcomeUnknown) {
		t.Fatalf("write, new leader: %+v, want an unknown outcome", st)
	}
	if st := d.Cancelled(errors.New("gone")); st.Op != host.ForwardDone || !errors.Is(st.Err, shard.ErrOutcomeUnknown) {
		t.Fatalf("cancelled: %+v, want an unknown outcome", st)
	}
	b := host.EncodeResponse(shard.Response{Offset: 7})
	if st := d.Reply(b); st.Op != host.ForwardDone || st.Err != nil || st.Resp.Offset != 7 {
		t.Fatalf("reply: %+v, want the answer", st)
	}

	read := &shard.Request{Op: shard.OpPoll, MaxWait: time.Second}
	d = host.NewForwardDriver(2, read, timeout)
	if st := d.Start(t0, 0); !st.At.Equal(t0.Add(timeout + time.Second)) {
		t.Fatalf("waiting poll: %+v, want a wait of the timeout and its MaxWait", st)
	}
	var nl *shard.NotLeaderError
	if st := d.News(3, false); st.Op != host.ForwardDone || !errors.As(st.Err, &nl) || nl.Leader != 3 {
		t.Fatalf("read, new leader: %+v, want not leader naming 3", st)
	}
	if st := d.News(0, true); st.Op != host.ForwardDone || !errors.Is(st.Err, shard.ErrRetry) {
		t.Fatalf("read, node declared dead: %+v, want a retry", st)
	}
	if st := d.News(2, false); st.Op != host.ForwardWait {
		t.Fatalf("read, the same leader: %+v, want to wait on", st)
	}
}
