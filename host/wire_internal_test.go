package host

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
)

// A forwarded poll keeps its wait, start kind, reset, timestamp, count
// and budget, and its deadline as the time left; OpOffsets is accepted;
// a reply keeps the partition's start and end.
func TestWireRoundTripOfPollFieldsDeadlineAndOffsets(t *testing.T) {
	now := time.Unix(1000, 0)
	in := &shard.Request{Op: shard.OpPoll, NS: 7, Epoch: 3, Offset: 9, Count: 10, Consumer: "c",
		UseConsumer: true, FromLeader: true, Start: shard.StartTimestamp, Reset: shard.ResetLatest,
		Timestamp: 123, MaxWait: 2 * time.Second, MinCount: 4, MaxBytes: 4096,
		Deadline: now.Add(3 * time.Second)}
	b, err := EncodeRequest(in, now)
	if err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour) // the receiver's clock: only the time left travels
	out, err := DecodeRequest(b, later)
	if err != nil {
		t.Fatal(err)
	}
	if out.Start != in.Start || out.Reset != in.Reset || out.Timestamp != in.Timestamp || out.MaxWait != in.MaxWait ||
		out.MinCount != in.MinCount || out.MaxBytes != in.MaxBytes || out.Consumer != "c" || !out.UseConsumer || !out.FromLeader {
		t.Fatalf("poll fields lost: %+v", out)
	}
	if want := later.Add(3 * time.Second); !out.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want %v (the time left on the receiver's clock)", out.Deadline, want)
	}
	off := &shard.Request{Op: shard.OpOffsets, NS: 7, Consumer: "c", FromLeader: true}
	if b, err = EncodeRequest(off, now); err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeRequest(b, now); err != nil || got.Op != shard.OpOffsets || !got.Deadline.IsZero() {
		t.Fatalf("OpOffsets: %+v, %v", got, err)
	}
	r, err := DecodeResponse(EncodeResponse(shard.Response{Offset: 5, Found: true, Start: 2, End: 11}))
	if err != nil || r.Start != 2 || r.End != 11 || r.Offset != 5 || !r.Found {
		t.Fatalf("offsets reply: %+v, %v", r, err)
	}
}

// Errors a caller acts on keep their identity across a forward.
func TestWireKeepsTypedErrors(t *testing.T) {
	for _, c := range []struct {
		err, want error
	}{
		{shard.ErrTooManyWaiters, shard.ErrTooManyWaiters},
		{&partitionErr{syscall.ENOSPC}, partition.ErrNoSpace},
		{partition.ErrOffsetOutOfRange, partition.ErrOffsetOutOfRange},
		{shard.ErrStaleIncarnation, shard.ErrStaleIncarnation},
		{shard.ErrStaleIncarnation, shard.ErrRetry},
	} {
		r, err := DecodeResponse(EncodeResponse(shard.Response{Err: c.err}))
		if err != nil || !errors.Is(r.Err, c.want) {
			t.Errorf("%v across a forward: %v, %v; want %v", c.err, r.Err, err, c.want)
		}
	}
}

type partitionErr struct{ errno syscall.Errno }

func (e *partitionErr) Error() string { return "writeat x: " + e.errno.Error() }
func (e *partitionErr) Unwrap() error { return e.errno }

// Hostile requests are refused, not decoded: replication ops, poll fields
// on another op, unknown flags, a negative deadline.
func TestWireRefusesHostileRequests(t *testing.T) {
	now := time.Unix(0, 0)
	good, err := EncodeRequest(&shard.Request{Op: shard.OpPoll, NS: 1}, now)
	if err != nil {
		t.Fatal(err)
	}
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	const flagsAt = 1 + 8 + 8 + 8 + 4 + 8 + 8 + 8 + 4 // fixed header and the empty consumer name
	for name, b := range map[string][]byte{
		"raft op":                mut(func(b []byte) { b[0] = byte(shard.OpRaft) }),
		"catch-up op":            mut(func(b []byte) { b[0] = byte(shard.OpCatchUp) }),
		"poll fields on produce": mut(func(b []byte) { b[0] = byte(shard.OpProduce) }),
		"unknown flag":           mut(func(b []byte) { b[flagsAt] |= 1 << 6 }),
		"negative deadline":      mut(func(b []byte) { b[1+8+8+8+4+8+8+7] = 0x80 }),
		"truncated":              good[:10],
	} {
		if _, err := DecodeRequest(b, now); !errors.Is(err, errWire) {
			t.Errorf("%s: %v, want errWire", name, err)
		}
	}
}

// TestWireKeepsSentinels: an answer whose error is one of wireSentinels
// still matches it after a forward, and a sentinel index past the table is
// a malformed reply.
func TestWireKeepsSentinels(t *testing.T) {
	for _, sentinel := range wireSentinels {
		got, err := DecodeResponse(EncodeResponse(shard.Response{Err: fmt.Errorf("partition 1/2/3: %w", sentinel)}))
		if err != nil || !errors.Is(got.Err, sentinel) {
			t.Errorf("%v across the wire: %v, %v", sentinel, got.Err, err)
		}
	}
	if _, err := DecodeResponse([]byte{codeSentinel, byte(len(wireSentinels)), 0}); !errors.Is(err, errWire) {
		t.Errorf("sentinel index past the table: %v, want errWire", err)
	}
}

// An answer of unknown outcome crosses the wire as unknown even when it
// also wraps "retry" (a replica torn down with a proposal in flight is
// such an answer if built with both): read as "retry", the forwarding
// node's client would take an entry the other replicas may commit for
// not applied.
func TestWireUnknownOutcomeWinsOverRetry(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("%w: %w", shard.ErrOutcomeUnknown, shard.ErrStaleIncarnation),
		fmt.Errorf("%w: %w", shard.ErrOutcomeUnknown, fmt.Errorf("%w: partition is being removed", shard.ErrRetry)),
		fmt.Errorf("%w: %w", shard.ErrOutcomeUnknown, &shard.NotLeaderError{Leader: 2}),
		shard.OutcomeUnknown(fmt.Errorf("%w: partition removed", shard.ErrRetry)),
	} {
		r, derr := DecodeResponse(EncodeResponse(shard.Response{Err: err}))
		if derr != nil {
			t.Fatal(derr)
		}
		if !errors.Is(r.Err, shard.ErrOutcomeUnknown) || errors.Is(r.Err, shard.ErrRetry) || errors.Is(r.Err, shard.ErrNotLeader) {
			t.Errorf("%v crossed the wire as %v, want ErrOutcomeUnknown alone", err, r.Err)
		}
	}
}
