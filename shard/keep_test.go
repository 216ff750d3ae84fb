package shard

import (
	"fmt"
	"testing"
	"time"

	"github.com/parkway-io/parkway/partition"
)

// manyMessages is a produce of n messages with payloads "<prefix><i>".
func manyMessages(r *waitRig, n int, prefix string, give bool) call {
	msgs := make([]partition.Message, n)
	for i := range msgs {
		msgs[i].Payload = fmt.Appendf(nil, "%s%d", prefix, i)
	}
	return request(r.ns, &Request{Op: OpProduce, Messages: msgs, Give: give})
}

// A waiting poll whose read stops below the end (an in-memory partition
// serves a read up to the end of its chunk) is answered at once with
// what the read served: waiting would not make that read longer, and
// the poll would otherwise sit out its wait with messages available.
func TestWaitingPollAnsweredByAReadStoppedBelowTheEnd(t *testing.T) {
	r := newWaitRig(t, noSync)
	if a := r.send(manyMessages(r, 1100, "m", false)).answered(t); a.Err != nil {
		t.Fatal(a.Err)
	}
	w := r.send(poll(r.ns, Request{Offset: 1000, Count: 100, MinCount: 50, MaxWait: time.Minute}))
	a := w.answered(t)
	if a.Err != nil || len(a.Messages) != 24 || a.Offset != 1024 || a.End != 1100 {
		t.Fatalf("poll answered %d messages, next %d, end %d, %v; want the 24 up to the chunk's end, next 1024, end 1100", len(a.Messages), a.Offset, a.End, a.Err)
	}
	if r.s.polls.waiters.Len() != 0 {
		t.Fatalf("%d waiters left", r.s.polls.waiters.Len())
	}
	// Polled on from its next offset, the rest is there.
	b := r.send(poll(r.ns, Request{Offset: a.Offset, Count: 100})).answered(t)
	if len(b.Messages) != 76 || string(b.Messages[0].Payload) != "m1024" {
		t.Fatalf("the next poll answered %d messages, want 76 from m1024", len(b.Messages))
	}
}

// A produce that gives its bytes to an in-memory partition is kept, not
// copied, and answered Kept; one that does not is copied. Coalesced
// produces are kept only if every one of them gave its bytes.
func TestProduceGiveKeptByMemoryPartition(t *testing.T) {
	r := newWaitRig(t, noSync)
	given := manyMessages(r, 3, "g", true)
	lent := manyMessages(r, 3, "l", false)
	if a := r.send(given).answered(t); a.Err != nil || !a.Kept {
		t.Fatalf("a given produce answered Kept %v, %v; want kept", a.Kept, a.Err)
	}
	if a := r.send(lent).answered(t); a.Err != nil || a.Kept {
		t.Fatalf("a lent produce answered Kept %v, %v; want copied", a.Kept, a.Err)
	}
	stored := r.send(poll(r.ns, Request{Count: 6})).answered(t).Messages
	if len(stored) != 6 {
		t.Fatalf("%d messages stored, want 6", len(stored))
	}
	if &stored[0].Payload[0] != &given.f.Req.Messages[0].Payload[0] {
		t.Fatal("the given payload was copied")
	}
	if &stored[3].Payload[0] == &lent.f.Req.Messages[0].Payload[0] {
		t.Fatal("the lent payload was kept")
	}

	// Two produces in the inbox at once are appended as one batch.
	for _, give := range [][2]bool{{true, false}, {true, true}} {
		a, b := manyMessages(r, 2, "a", give[0]), manyMessages(r, 2, "b", give[1])
		for _, c := range []call{a, b} {
			if err := r.s.TrySend(c.f); err != nil {
				t.Fatal(err)
			}
		}
		for r.s.Step() {
		}
		want := give[0] && give[1]
		for _, c := range []call{a, b} {
			if got := c.answered(t); got.Err != nil || got.Kept != want {
				t.Fatalf("coalesced produces giving %v: answered Kept %v, %v; want %v", give, got.Kept, got.Err, want)
			}
		}
	}
}
