package partition_test

import (
	"bytes"
	"testing"

	"github.com/parkway-io/parkway/partition"
)

// sameMsg reports whether m is msg(off, size) stored at off.
func sameMsg(m *partition.Message, off uint64, size int) bool {
	w := msg(off, size)
	if m.Offset != off || m.ID != w.ID || m.Timestamp != w.Timestamp || !bytes.Equal(m.Payload, w.Payload) || len(m.Headers) != len(w.Headers) {
		return false
	}
	for j := range w.Headers {
		if m.Headers[j].Key != w.Headers[j].Key || !bytes.Equal(m.Headers[j].Value, w.Headers[j].Value) {
			return false
		}
	}
	return true
}

// TestMemReadHandsOutStoredMessages: a MemStore read is a window on the
// stored messages (two reads of one offset share memory), capped so an
// append to it cannot write into the log, ending at its chunk's end; and
// nothing the partition does afterwards (appends, truncation, retention,
// SkipTo) writes a message a reader holds.
func TestMemReadHandsOutStoredMessages(t *testing.T) {
	const size = 16
	p := mustBuild(t, partition.NewMemStore(), mustNS(t, 1, 1, 0), 1)
	defer mustClose(t, p)
	for first := uint64(0); first < 3000; first += 500 {
		mustAppend(t, p, batch(first, 500, size))
	}
	r1, err := p.Read(10, 100)
	if err != nil || len(r1) != 100 {
		t.Fatalf("Read(10, 100) = %d messages, %v", len(r1), err)
	}
	r2, _ := p.Read(10, 100)
	if &r1[0] != &r2[0] {
		t.Fatal("two reads of offset 10 returned copies, want the stored messages")
	}
	if cap(r1) != len(r1) {
		t.Fatalf("a read's capacity is %d past its length: an append to it would write into the log", cap(r1)-len(r1))
	}
	_ = append(r1, msg(7777, size)) // must not land on offset 110
	if got, _ := p.Read(110, 1); len(got) != 1 || !sameMsg(&got[0], 110, size) {
		t.Fatal("appending to a read's slice overwrote the stored message 110")
	}
	if got, _ := p.Read(1000, 100); len(got) != 24 {
		t.Fatalf("Read(1000, 100) = %d messages, want the 24 up to the chunk's end", len(got))
	}
	if got, _ := p.Read(1024, 100); len(got) != 100 {
		t.Fatalf("Read(1024, 100) = %d messages, want 100", len(got))
	}

	held := make([][]partition.Message, 0, 3)
	for _, off := range []uint64{0, 1024, 2048} {
		r, err := p.Read(off, 1024)
		if err != nil || len(r) == 0 {
			t.Fatalf("Read(%d, 1024) = %d messages, %v", off, len(r), err)
		}
		held = append(held, r)
	}
	check := func(when string) {
		t.Helper()
		for _, r := range held {
			for i := range r {
				if !sameMsg(&r[i], r[0].Offset+uint64(i), size) {
					t.Fatalf("after %s, a held message at %d changed", when, r[0].Offset+uint64(i))
				}
			}
		}
	}
	mustAppend(t, p, batch(3000, 2000, size))
	check("appending")
	if err := p.TruncateBefore(2100); err != nil {
		t.Fatal(err)
	}
	check("TruncateBefore")
	if _, err := p.EnforceRetention(0, 100*int64(size)); err != nil {
		t.Fatal(err)
	}
	check("EnforceRetention")
	if err := p.SkipTo(10_000); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, batch(10_000, 1500, size))
	check("SkipTo and appending")
}

// TestMemAppendKept: AppendKept stores the caller's bytes themselves
// (no copy), capped so a reader's append cannot write into a neighbour,
// and counts them as Append does; Append copies.
func TestMemAppendKept(t *testing.T) {
	store := partition.NewMemStore()
	p := mustBuild(t, store, mustNS(t, 1, 1, 0), 1)
	defer mustClose(t, p)
	k, ok := p.(partition.Keeper)
	if !ok {
		t.Fatal("a MemStore partition is not a Keeper")
	}
	// One buffer holds every message's bytes, back to back, as a
	// decoded Kafka batch's do.
	buf := []byte("key0value0hv0key1value1hv1")
	in := make([]partition.Message, 2)
	for i := range in {
		b := buf[i*13:]
		in[i] = partition.Message{Key: b[0:4], Payload: b[4:10], Headers: []partition.Header{{Key: "h", Value: b[10:13]}}, Timestamp: 1}
	}
	if _, err := k.AppendKept(in); err != nil {
		t.Fatal(err)
	}
	got, err := p.Read(0, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("Read = %d messages, %v", len(got), err)
	}
	for i := range got {
		m, b := &got[i], buf[i*13:]
		if &m.Key[0] != &b[0] || &m.Payload[0] != &b[4] || &m.Headers[0].Value[0] != &b[10] {
			t.Fatalf("message %d: AppendKept copied the bytes, want the caller's", i)
		}
		if cap(m.Key) != len(m.Key) || cap(m.Payload) != len(m.Payload) || cap(m.Headers) != len(m.Headers) || cap(m.Headers[0].Value) != len(m.Headers[0].Value) {
			t.Fatalf("message %d: a kept slice reaches past its end (key %d/%d, payload %d/%d)", i, len(m.Key), cap(m.Key), len(m.Payload), cap(m.Payload))
		}
	}
	_ = append(got[0].Payload, 'X')
	if string(got[1].Key) != "key1" {
		t.Fatalf("appending to message 0's payload wrote %q into message 1's key", got[1].Key)
	}

	q := mustBuild(t, store, mustNS(t, 1, 1, 1), 1)
	defer mustClose(t, q)
	if _, err := q.Append(in); err != nil {
		t.Fatal(err)
	}
	if c, _ := q.Read(0, 1); &c[0].Payload[0] == &buf[4] {
		t.Fatal("Append kept the caller's payload, want a copy")
	}
	if p.Size() != q.Size() {
		t.Fatalf("Size after AppendKept %d, after Append %d", p.Size(), q.Size())
	}
}

// TestMemReadWhileAppending: readers on other goroutines go through the
// windows they were handed while the owner appends, truncates and
// enforces retention; run under the race detector, a write by the owner
// to memory a reader holds fails it.
func TestMemReadWhileAppending(t *testing.T) {
	const size = 8
	p := mustBuild(t, partition.NewMemStore(), mustNS(t, 1, 1, 0), 1)
	defer mustClose(t, p)
	windows := make(chan []partition.Message, 16)
	bad := make(chan uint64, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var kept [][]partition.Message
		failed := false
		for r := range windows { // drained to the end: the owner never blocks
			kept = append(kept, r)
			for _, w := range kept {
				for i := range w {
					if !failed && !sameMsg(&w[i], w[0].Offset+uint64(i), size) {
						failed = true
						bad <- w[i].Offset
					}
				}
			}
			if len(kept) > 8 {
				kept = kept[1:]
			}
		}
	}()
	for first := uint64(0); first < 5000; first += 50 {
		mustAppend(t, p, batch(first, 50, size))
		r, err := p.Read(first, 50)
		if err != nil {
			t.Fatal(err)
		}
		windows <- r
		if first%500 == 0 && first > 0 {
			if err := p.TruncateBefore(first - 200); err != nil {
				t.Fatal(err)
			}
			if _, err := p.EnforceRetention(0, int64(300*partition.MessageSize(&r[0]))); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(windows)
	<-done
	select {
	case off := <-bad:
		t.Fatalf("a reader saw message %d change", off)
	default:
	}
}
