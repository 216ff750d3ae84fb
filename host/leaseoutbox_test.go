package host

import (
	"errors"
	"testing"
	"time"
)

// A node's renewals of one lease window go out in one message: those
// asked within a window join one batch, sent at the window's end (not
// before); a renewal of a member with a shorter session brings the send
// forward to its own window's end; a full batch goes at once and the next
// renewal starts another.
func TestLeaseOutboxBatchesAWindow(t *testing.T) {
	o := newLeaseOutbox()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const session = 10 * time.Second // a window of 100 ms
	if w := LeaseWindow(session); w != 100*time.Millisecond {
		t.Fatalf("window %v, want 100ms", w)
	}
	var first *leaseBatch
	for i := range 30 {
		b, pos, err := o.add(MemberLease{Group: "g", Member: uint64(i), Session: session}, t0.Add(time.Duration(i)*time.Millisecond))
		if err != nil || pos != i || (first != nil && b != first) {
			t.Fatalf("renewal %d: position %d, batch %p (first %p), %v", i, pos, b, first, err)
		}
		first = b
	}
	if b, at := o.next(t0.Add(99 * time.Millisecond)); b != nil || !at.Equal(t0.Add(100*time.Millisecond)) {
		t.Fatalf("before the window's end: batch %v, due %v", b, at)
	}
	if b, _ := o.next(t0.Add(100 * time.Millisecond)); b != first || len(b.leases) != 30 {
		t.Fatalf("at the window's end: %v", b)
	}
	if b, at := o.next(t0.Add(time.Second)); b != nil || !at.IsZero() {
		t.Fatalf("nothing left: %v, %v", b, at)
	}

	// A short session's renewal waits its own (shorter) window only.
	o.add(MemberLease{Member: 1, Session: session}, t0)
	o.add(MemberLease{Member: 2, Session: time.Second}, t0.Add(3*time.Millisecond)) // a 10 ms window
	if _, at := o.next(t0.Add(4 * time.Millisecond)); !at.Equal(t0.Add(10 * time.Millisecond)) {
		t.Fatalf("due %v, want the short window's end", at)
	}
	if b, _ := o.next(t0.Add(10 * time.Millisecond)); b == nil || len(b.leases) != 2 {
		t.Fatalf("the short window's end: %v", b)
	}

	// A full batch is due at once.
	var full *leaseBatch
	for i := range maxLeaseBatch {
		full, _, _ = o.add(MemberLease{Member: uint64(i), Session: session}, t0)
	}
	next, pos, _ := o.add(MemberLease{Member: 1, Session: session}, t0)
	if next == full || pos != 0 {
		t.Fatalf("a renewal after a full batch joined it (position %d)", pos)
	}
	if b, _ := o.next(t0); b != full || len(b.leases) != maxLeaseBatch {
		t.Fatalf("a full batch is not due at once: %v", b)
	}

	// Closing answers what was never sent, and refuses more.
	o.close()
	select {
	case <-next.done:
	default:
		t.Fatal("a pending batch was not answered at close")
	}
	if !errors.Is(next.answer.Err, ErrClosed) {
		t.Fatalf("pending at close: %v", next.answer.Err)
	}
	if _, _, err := o.add(MemberLease{Session: session}, t0); !errors.Is(err, ErrClosed) {
		t.Fatalf("add after close: %v", err)
	}
}
