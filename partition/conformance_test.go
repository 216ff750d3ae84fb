package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// harness is one Store implementation under the shared conformance tests.
type harness struct {
	name string
	// open returns a fresh store and a restart function that returns the
	// store as a restarted process would see it (the same MemStore; a new
	// FileStore on the same directory).
	open func(t *testing.T) (store partition.Store, restart func() partition.Store)
}

func harnesses() []harness {
	return []harness{
		{"mem", func(t *testing.T) (partition.Store, func() partition.Store) {
			s := partition.NewMemStore()
			return s, func() partition.Store { return s }
		}},
		{"file", func(t *testing.T) (partition.Store, func() partition.Store) {
			cfg := partition.FileConfig{Dir: t.TempDir()}
			return newFileStore(t, cfg), func() partition.Store { return newFileStore(t, cfg) }
		}},
	}
}

func newFileStore(t testing.TB, cfg partition.FileConfig) *partition.FileStore {
	t.Helper()
	s, err := partition.NewFileStore(cfg)
	if err != nil {
		t.Fatalf("NewFileStore: %v", err)
	}
	return s
}

func mustNS(t testing.TB, stream, topic, part uint32) metadata.Namespace {
	t.Helper()
	ns, err := metadata.NewNamespace(stream, topic, part)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func mustBuild(t testing.TB, s partition.Store, ns metadata.Namespace, epoch uint64) partition.Partition {
	t.Helper()
	p, err := s.Build(ns, epoch)
	if err != nil {
		t.Fatalf("Build(%v, %d): %v", ns, epoch, err)
	}
	return p
}

func mustClose(t testing.TB, p partition.Partition) {
	t.Helper()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// msg is message number i of a test: its payload, id, timestamp and
// headers are derived from i, so checkRead can verify any offset.
func msg(i uint64, size int) partition.Message {
	m := partition.Message{Timestamp: int64(i) * 1000, Payload: payload(i, size)}
	m.ID[0], m.ID[15] = byte(i), byte(i>>8)
	if i%3 == 0 {
		m.Headers = []partition.Header{{Key: "n", Value: []byte(fmt.Sprint(i))}, {Key: "flag"}}
	}
	return m
}

func payload(i uint64, size int) []byte {
	p := make([]byte, size)
	for j := range p {
		p[j] = byte(i) + byte(j)
	}
	return p
}

func batch(first uint64, n, size int) []partition.Message {
	msgs := make([]partition.Message, n)
	for i := range msgs {
		msgs[i] = msg(first+uint64(i), size)
	}
	return msgs
}

func mustAppend(t testing.TB, p partition.Partition, msgs []partition.Message) uint64 {
	t.Helper()
	want := p.NextOffset()
	first, err := p.Append(msgs)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if first != want {
		t.Fatalf("Append returned first offset %d, want %d", first, want)
	}
	if got := p.NextOffset(); got != want+uint64(len(msgs)) {
		t.Fatalf("NextOffset after Append = %d, want %d", got, want+uint64(len(msgs)))
	}
	return first
}

// checkRead reads [from, from+n) and checks every message against msg.
func checkRead(t testing.TB, p partition.Partition, from uint64, max, wantN, size int) {
	t.Helper()
	got, err := p.Read(from, max)
	if err != nil {
		t.Fatalf("Read(%d, %d): %v", from, max, err)
	}
	if len(got) != wantN {
		t.Fatalf("Read(%d, %d) returned %d messages, want %d", from, max, len(got), wantN)
	}
	for k, m := range got {
		i := from + uint64(k)
		w := msg(i, size)
		if m.Offset != i || m.ID != w.ID || m.Timestamp != w.Timestamp || !bytes.Equal(m.Payload, w.Payload) {
			t.Fatalf("Read(%d, %d)[%d] = {Offset %d, Timestamp %d, %d bytes}, want offset %d",
				from, max, k, m.Offset, m.Timestamp, len(m.Payload), i)
		}
		if len(m.Headers) != len(w.Headers) {
			t.Fatalf("message %d has %d headers, want %d", i, len(m.Headers), len(w.Headers))
		}
		for j := range w.Headers {
			if m.Headers[j].Key != w.Headers[j].Key || !bytes.Equal(m.Headers[j].Value, w.Headers[j].Value) {
				t.Fatalf("message %d header %d = %q:%q, want %q:%q", i, j,
					m.Headers[j].Key, m.Headers[j].Value, w.Headers[j].Key, w.Headers[j].Value)
			}
		}
	}
}

// checkReadOn is checkRead over as many reads as the partition needs: a
// MemStore read stops at its chunk's end, and the caller reads on from
// the next offset, as Partition.Read says.
func checkReadOn(t testing.TB, p partition.Partition, from uint64, max, wantN, size int) {
	t.Helper()
	got := 0
	for got < wantN {
		more, err := p.Read(from+uint64(got), max-got)
		if err != nil || len(more) == 0 {
			t.Fatalf("Read(%d, %d) = %d messages, %v; %d read before, want %d in all", from+uint64(got), max-got, len(more), err, got, wantN)
		}
		checkRead(t, p, from+uint64(got), max-got, len(more), size)
		got += len(more)
	}
	if more, err := p.Read(from+uint64(got), max-got); err != nil || got < max && len(more) != 0 {
		t.Fatalf("Read(%d, %d) past the %d messages wanted = %d messages, %v", from+uint64(got), max-got, wantN, len(more), err)
	}
}

func TestConformance(t *testing.T) {
	for _, h := range harnesses() {
		t.Run(h.name, func(t *testing.T) {
			for _, c := range conformanceCases {
				t.Run(c.name, func(t *testing.T) {
					store, restart := h.open(t)
					c.run(t, store, restart)
				})
			}
		})
	}
}

var conformanceCases = []struct {
	name string
	run  func(t *testing.T, s partition.Store, restart func() partition.Store)
}{
	{"SkipTo", func(t *testing.T, s partition.Store, restart func() partition.Store) {
		ns := mustNS(t, 1, 2, 3)
		p := mustBuild(t, s, ns, 7)
		mustAppend(t, p, batch(0, 5, 64))
		if err := p.StoreConsumerOffset("c", 3); err != nil {
			t.Fatal(err)
		}
		// Past the end and not on a chunk or segment boundary.
		const to = 1000 + 37
		if err := p.SkipTo(to); err != nil {
			t.Fatalf("SkipTo: %v", err)
		}
		check := func(p partition.Partition, next uint64) {
			t.Helper()
			if p.StartOffset() != to || p.NextOffset() != next {
				t.Fatalf("start %d next %d, want %d and %d", p.StartOffset(), p.NextOffset(), to, next)
			}
			if _, err := p.Read(4, 10); !errors.Is(err, partition.ErrOffsetOutOfRange) {
				t.Fatalf("read of a skipped offset: %v", err)
			}
			if off, ok, err := p.ConsumerOffset("c"); err != nil || !ok || off != 3 {
				t.Fatalf("consumer offset after skip: %d %v %v", off, ok, err)
			}
		}
		check(p, to)
		if got := mustAppend(t, p, batch(to, 3, 64)); got != to {
			t.Fatalf("append after skip at %d", got)
		}
		checkRead(t, p, to, 10, 3, 64)
		check(p, to+3)
		// At or below the end it is a truncation (here a no-op).
		if err := p.SkipTo(to + 1); err != nil {
			t.Fatal(err)
		}
		if p.StartOffset() != to+1 {
			t.Fatalf("SkipTo inside the log: start %d", p.StartOffset())
		}
		mustClose(t, p)
		s = restart()
		p = mustBuild(t, s, ns, 7)
		defer mustClose(t, p)
		if p.StartOffset() != to+1 || p.NextOffset() != to+3 {
			t.Fatalf("after reopen: start %d next %d", p.StartOffset(), p.NextOffset())
		}
		checkRead(t, p, to+1, 10, 2, 64)
	}},
	{"AppendRead", func(t *testing.T, s partition.Store, _ func() partition.Store) {
		ns := mustNS(t, 1, 2, 3)
		p := mustBuild(t, s, ns, 7)
		defer mustClose(t, p)
		if p.Namespace() != ns || p.Epoch() != 7 || p.NextOffset() != 0 {
			t.Fatalf("new partition: ns %v epoch %d next %d", p.Namespace(), p.Epoch(), p.NextOffset())
		}
		var next uint64
		for _, n := range []int{1, 5, 100, 2} {
			if first := mustAppend(t, p, batch(next, n, 64)); first != next {
				t.Fatalf("first = %d, want %d", first, next)
			}
			next += uint64(n)
		}
		checkRead(t, p, 0, 1000, int(next), 64)
		checkRead(t, p, 0, 1, 1, 64)
		checkRead(t, p, 3, 10, 10, 64)
		checkRead(t, p, 50, 1000, int(next)-50, 64)
		checkRead(t, p, next-1, 5, 1, 64)
		// Every single offset.
		for i := range next {
			checkRead(t, p, i, 1, 1, 64)
		}
	}},
	{"EmptyBatch", func(t *testing.T, s partition.Store, _ func() partition.Store) {
		p := mustBuild(t, s, mustNS(t, 0, 0, 0), 1)
		defer mustClose(t, p)
		for _, b := range [][]partition.Message{nil, {}} {
			if _, err := p.Append(b); !errors.Is(err, partition.ErrEmptyBatch) {
				t.Fatalf("Append(empty) = %v, want ErrEmptyBatch", err)
			}
		}
		if p.NextOffset() != 0 {
			t.Fatalf("NextOffset after empty batch = %d", p.NextOffset())
		}
	}},
	{"ReadBounds", func(t *testing.T, s partition.Store, _ func() partition.Store) {
		p := mustBuild(t, s, mustNS(t, 0, 0, 1), 1)
		defer mustClose(t, p)
		if got, err := p.Read(0, 10); err != nil || len(got) != 0 {
			t.Fatalf("Read on empty log = %d msgs, %v", len(got), err)
		}
		mustAppend(t, p, batch(0, 10, 8))
		for _, from := range []uint64{10, 11, 1 << 40} {
			if got, err := p.Read(from, 10); err != nil || len(got) != 0 {
				t.Fatalf("Read(%d) at/past end = %d msgs, %v", from, len(got), err)
			}
		}
		for _, max := range []int{0, -1} {
			if got, err := p.Read(0, max); err != nil || len(got) != 0 {
				t.Fatalf("Read(0, %d) = %d msgs, %v", max, len(got), err)
			}
		}
	}},
	{"ConsumerOffsets", func(t *testing.T, s partition.Store, restart func() partition.Store) {
		ns := mustNS(t, 4, 5, 6)
		p := mustBuild(t, s, ns, 3)
		if _, ok, err := p.ConsumerOffset("c"); ok || err != nil {
			t.Fatalf("unknown consumer: ok=%v err=%v", ok, err)
		}
		if err := p.StoreConsumerOffset("c", 1); !errors.Is(err, partition.ErrOffsetOutOfRange) {
			t.Fatalf("offset past empty log: %v, want ErrOffsetOutOfRange", err)
		}
		if err := p.StoreConsumerOffset("c", 0); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, p, batch(0, 5, 8))
		names := []string{"c", "", "a/b", "..", ".hidden", "~x", strings.Repeat("long/", 100)}
		for i, name := range names {
			if err := p.StoreConsumerOffset(name, uint64(i%6)); err != nil {
				t.Fatalf("StoreConsumerOffset(%q): %v", name, err)
			}
		}
		if err := p.StoreConsumerOffset("c", 5); err != nil { // == NextOffset is fine
			t.Fatal(err)
		}
		if err := p.StoreConsumerOffset("c", 6); !errors.Is(err, partition.ErrOffsetOutOfRange) {
			t.Fatalf("offset past NextOffset: %v, want ErrOffsetOutOfRange", err)
		}
		check := func(p partition.Partition) {
			t.Helper()
			for i, name := range names {
				want := uint64(i % 6)
				if name == "c" {
					want = 5
				}
				if got, ok, err := p.ConsumerOffset(name); !ok || err != nil || got != want {
					t.Fatalf("ConsumerOffset(%q) = %d, %v, %v; want %d", name, got, ok, err, want)
				}
			}
		}
		check(p)
		mustClose(t, p)
		p = mustBuild(t, restart(), ns, 3)
		check(p)
		if got := p.ConsumerOffsets(); len(got) != len(names) {
			t.Fatalf("ConsumerOffsets lists %d consumers, want %d", len(got), len(names))
		}

		// A deleted offset is gone, after a restart too; deleting one
		// not stored is no error.
		deleted := names[2]
		for range 2 {
			if err := p.DeleteConsumerOffset(deleted); err != nil {
				t.Fatalf("DeleteConsumerOffset(%q): %v", deleted, err)
			}
		}
		gone := func(p partition.Partition) {
			t.Helper()
			if _, ok, err := p.ConsumerOffset(deleted); ok || err != nil {
				t.Fatalf("ConsumerOffset(%q) after its delete: ok=%v err=%v", deleted, ok, err)
			}
			if _, ok := p.ConsumerOffsets()[deleted]; ok {
				t.Fatalf("ConsumerOffsets lists %q after its delete", deleted)
			}
			if got, ok, err := p.ConsumerOffset("c"); !ok || err != nil || got != 5 {
				t.Fatalf("ConsumerOffset(c) = %d, %v, %v after another's delete", got, ok, err)
			}
		}
		gone(p)
		mustClose(t, p)
		p = mustBuild(t, restart(), ns, 3)
		defer mustClose(t, p)
		gone(p)
	}},
	{"BufferReuse", func(t *testing.T, s partition.Store, _ func() partition.Store) {
		p := mustBuild(t, s, mustNS(t, 1, 1, 1), 1)
		defer mustClose(t, p)
		buf := []byte("original")
		val := []byte("value")
		key := []byte("key")
		msgs := []partition.Message{{Payload: buf, Headers: []partition.Header{{Key: string(key), Value: val}}}, {Payload: buf[:4]}}
		mustAppend(t, p, msgs)
		copy(buf, "XXXXXXXX")
		copy(val, "YYYYY")
		msgs[0].Headers[0].Key = "changed"
		msgs[0].Payload = nil
		got, err := p.Read(0, 2)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[0].Payload) != "original" || string(got[1].Payload) != "orig" ||
			got[0].Headers[0].Key != "key" || string(got[0].Headers[0].Value) != "value" {
			t.Fatalf("stored data changed with the caller's buffers: %q %q %+v", got[0].Payload, got[1].Payload, got[0].Headers)
		}
		// Appending to a read payload must not spill into the next message.
		_ = append(got[0].Payload, "!!!!"...)
		again, _ := p.Read(1, 1)
		if string(again[0].Payload) != "orig" {
			t.Fatalf("appending to a read payload changed the next message: %q", again[0].Payload)
		}
	}},
	{"ReopenSameEpoch", func(t *testing.T, s partition.Store, restart func() partition.Store) {
		ns := mustNS(t, 9, 8, 7)
		p := mustBuild(t, s, ns, 42)
		mustAppend(t, p, batch(0, 20, 100))
		if err := p.StoreConsumerOffset("g", 12); err != nil {
			t.Fatal(err)
		}
		mustClose(t, p)
		p = mustBuild(t, restart(), ns, 42)
		if p.NextOffset() != 20 {
			t.Fatalf("reopened NextOffset = %d, want 20", p.NextOffset())
		}
		checkRead(t, p, 0, 100, 20, 100)
		if off, ok, _ := p.ConsumerOffset("g"); !ok || off != 12 {
			t.Fatalf("reopened consumer offset = %d, %v", off, ok)
		}
		mustAppend(t, p, batch(20, 5, 100))
		checkRead(t, p, 0, 100, 25, 100)
		mustClose(t, p)
		p = mustBuild(t, restart(), ns, 42)
		defer mustClose(t, p)
		checkRead(t, p, 0, 100, 25, 100)
	}},
	{"OtherEpochDiscards", func(t *testing.T, s partition.Store, restart func() partition.Store) {
		ns := mustNS(t, 1, 2, 3)
		p := mustBuild(t, s, ns, 1)
		mustAppend(t, p, batch(0, 10, 10))
		if err := p.StoreConsumerOffset("g", 4); err != nil {
			t.Fatal(err)
		}
		mustClose(t, p)
		p = mustBuild(t, restart(), ns, 2)
		if p.NextOffset() != 0 || p.Epoch() != 2 {
			t.Fatalf("new incarnation: NextOffset %d, epoch %d", p.NextOffset(), p.Epoch())
		}
		if _, ok, _ := p.ConsumerOffset("g"); ok {
			t.Fatal("consumer offset survived into a new incarnation")
		}
		if got, _ := p.Read(0, 10); len(got) != 0 {
			t.Fatalf("new incarnation reads %d old messages", len(got))
		}
		mustAppend(t, p, batch(0, 3, 10))
		mustClose(t, p)
		// And the old epoch is gone for good: going back is another discard.
		p = mustBuild(t, restart(), ns, 2)
		checkRead(t, p, 0, 10, 3, 10)
		mustClose(t, p)
	}},
	{"RemoveThenBuild", func(t *testing.T, s partition.Store, restart func() partition.Store) {
		ns := mustNS(t, 3, 3, 3)
		if err := s.Remove(ns); err != nil {
			t.Fatalf("Remove of an absent namespace: %v", err)
		}
		p := mustBuild(t, s, ns, 5)
		mustAppend(t, p, batch(0, 4, 10))
		if err := p.StoreConsumerOffset("g", 4); err != nil {
			t.Fatal(err)
		}
		mustClose(t, p)
		if err := s.Remove(ns); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if err := s.Remove(ns); err != nil {
			t.Fatalf("second Remove: %v", err)
		}
		p = mustBuild(t, restart(), ns, 5) // same epoch, but nothing to reopen
		defer mustClose(t, p)
		if p.NextOffset() != 0 {
			t.Fatalf("NextOffset after Remove = %d", p.NextOffset())
		}
		if _, ok, _ := p.ConsumerOffset("g"); ok {
			t.Fatal("consumer offset survived Remove")
		}
	}},
	{"Closed", func(t *testing.T, s partition.Store, _ func() partition.Store) {
		p := mustBuild(t, s, mustNS(t, 0, 1, 0), 1)
		mustAppend(t, p, batch(0, 2, 10))
		mustClose(t, p)
		if _, err := p.Append(batch(2, 1, 1)); !errors.Is(err, partition.ErrClosed) {
			t.Errorf("Append after Close: %v", err)
		}
		if _, err := p.Read(0, 1); !errors.Is(err, partition.ErrClosed) {
			t.Errorf("Read after Close: %v", err)
		}
		if err := p.StoreConsumerOffset("c", 0); !errors.Is(err, partition.ErrClosed) {
			t.Errorf("StoreConsumerOffset after Close: %v", err)
		}
		if _, _, err := p.ConsumerOffset("c"); !errors.Is(err, partition.ErrClosed) {
			t.Errorf("ConsumerOffset after Close: %v", err)
		}
		if err := p.Close(); !errors.Is(err, partition.ErrClosed) {
			t.Errorf("second Close: %v", err)
		}
	}},
	{"InUse", func(t *testing.T, s partition.Store, _ func() partition.Store) {
		ns := mustNS(t, 2, 2, 2)
		p := mustBuild(t, s, ns, 1)
		if _, err := s.Build(ns, 1); !errors.Is(err, partition.ErrInUse) {
			t.Fatalf("Build of an open namespace: %v, want ErrInUse", err)
		}
		if _, err := s.Build(ns, 2); !errors.Is(err, partition.ErrInUse) {
			t.Fatalf("Build of an open namespace at another epoch: %v, want ErrInUse", err)
		}
		if err := s.Remove(ns); !errors.Is(err, partition.ErrInUse) {
			t.Fatalf("Remove of an open namespace: %v, want ErrInUse", err)
		}
		mustAppend(t, p, batch(0, 1, 1)) // the open handle is unaffected
		mustClose(t, p)
		p = mustBuild(t, s, ns, 1)
		checkRead(t, p, 0, 10, 1, 1)
		mustClose(t, p)
		if err := s.Remove(ns); err != nil {
			t.Fatal(err)
		}
	}},
	{"TruncateBefore", func(t *testing.T, s partition.Store, restart func() partition.Store) {
		ns := mustNS(t, 5, 1, 0)
		p := mustBuild(t, s, ns, 2)
		if p.StartOffset() != 0 {
			t.Fatalf("StartOffset of a new partition = %d", p.StartOffset())
		}
		if err := p.TruncateBefore(0); err != nil {
			t.Fatalf("TruncateBefore(0) on an empty log: %v", err)
		}
		if err := p.TruncateBefore(1); !errors.Is(err, partition.ErrOffsetOutOfRange) {
			t.Fatalf("TruncateBefore past NextOffset: %v, want ErrOffsetOutOfRange", err)
		}
		fillSegments(t, p, 100, 10, 50)
		if err := p.StoreConsumerOffset("g", 10); err != nil {
			t.Fatal(err)
		}
		if err := p.TruncateBefore(35); err != nil {
			t.Fatal(err)
		}
		check := func(p partition.Partition, next uint64) {
			t.Helper()
			if p.StartOffset() != 35 || p.NextOffset() != next {
				t.Fatalf("StartOffset %d NextOffset %d, want 35, %d", p.StartOffset(), p.NextOffset(), next)
			}
			for _, from := range []uint64{0, 34} {
				if _, err := p.Read(from, 1); !errors.Is(err, partition.ErrOffsetOutOfRange) {
					t.Fatalf("Read(%d) below start: %v, want ErrOffsetOutOfRange", from, err)
				}
			}
			checkRead(t, p, 35, 1000, int(next-35), 50)
			if off, ok, _ := p.ConsumerOffset("g"); !ok || off != 10 {
				t.Fatalf("consumer offset = %d, %v; truncation must keep it", off, ok)
			}
		}
		check(p, 100)
		for _, off := range []uint64{0, 20, 35} { // at or below start: no-ops
			if err := p.TruncateBefore(off); err != nil {
				t.Fatalf("TruncateBefore(%d) below start: %v", off, err)
			}
		}
		if err := p.TruncateBefore(101); !errors.Is(err, partition.ErrOffsetOutOfRange) {
			t.Fatalf("TruncateBefore past NextOffset: %v", err)
		}
		check(p, 100)
		mustAppend(t, p, batch(100, 5, 50)) // offsets continue
		mustClose(t, p)
		p = mustBuild(t, restart(), ns, 2)
		defer mustClose(t, p)
		check(p, 105)
	}},
	{"Purge", func(t *testing.T, s partition.Store, restart func() partition.Store) {
		ns := mustNS(t, 5, 1, 1)
		p := mustBuild(t, s, ns, 1)
		mustAppend(t, p, batch(0, 30, 40))
		if err := p.TruncateBefore(p.NextOffset()); err != nil {
			t.Fatalf("purge: %v", err)
		}
		check := func(p partition.Partition, next uint64) {
			t.Helper()
			if p.StartOffset() != next || p.NextOffset() != next || p.Size() != 0 {
				t.Fatalf("after purge: StartOffset %d NextOffset %d Size %d; want %d, %d, 0",
					p.StartOffset(), p.NextOffset(), p.Size(), next, next)
			}
			if got, err := p.Read(next, 10); err != nil || len(got) != 0 {
				t.Fatalf("Read at the end after purge: %d, %v", len(got), err)
			}
			if _, err := p.Read(next-1, 10); !errors.Is(err, partition.ErrOffsetOutOfRange) {
				t.Fatalf("Read of a purged offset: %v", err)
			}
		}
		check(p, 30)
		if err := p.TruncateBefore(30); err != nil { // purging an empty log again
			t.Fatal(err)
		}
		mustClose(t, p)
		p = mustBuild(t, restart(), ns, 1)
		check(p, 30)
		mustAppend(t, p, batch(30, 5, 40)) // offsets are never reused
		checkRead(t, p, 30, 10, 5, 40)
		if err := p.TruncateBefore(35); err != nil {
			t.Fatal(err)
		}
		check(p, 35)
		mustClose(t, p)
		p = mustBuild(t, restart(), ns, 1)
		defer mustClose(t, p)
		check(p, 35)
	}},
	{"SizeAndSync", func(t *testing.T, s partition.Store, restart func() partition.Store) {
		ns := mustNS(t, 5, 1, 2)
		p := mustBuild(t, s, ns, 1)
		if p.Size() != 0 {
			t.Fatalf("Size of a new partition = %d", p.Size())
		}
		if err := p.Sync(); err != nil {
			t.Fatalf("Sync of an empty partition: %v", err)
		}
		var want int64
		for i := range uint64(20) {
			m := msg(i, int(i)*7)
			want += recSize(m)
			mustAppend(t, p, []partition.Message{m})
			if p.Size() != want {
				t.Fatalf("Size after %d messages = %d, want %d", i+1, p.Size(), want)
			}
		}
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := p.Sync(); err != nil { // nothing new
			t.Fatal(err)
		}
		mustClose(t, p)
		if err := p.Sync(); !errors.Is(err, partition.ErrClosed) {
			t.Fatalf("Sync after Close: %v", err)
		}
		for name, err := range map[string]error{
			"TruncateBefore": p.TruncateBefore(0),
			"EnforceRetention": func() error {
				_, err := p.EnforceRetention(1, 1)
				return err
			}(),
		} {
			if !errors.Is(err, partition.ErrClosed) {
				t.Fatalf("%s after Close: %v", name, err)
			}
		}
		p = mustBuild(t, restart(), ns, 1)
		defer mustClose(t, p)
		if p.Size() != want {
			t.Fatalf("Size after reopen = %d, want %d", p.Size(), want)
		}
	}},
	{"RetentionDisabled", func(t *testing.T, s partition.Store, _ func() partition.Store) {
		p := mustBuild(t, s, mustNS(t, 5, 1, 3), 1)
		defer mustClose(t, p)
		mustAppend(t, p, batch(0, 10, 10))
		if n, err := p.EnforceRetention(0, 0); n != 0 || err != nil {
			t.Fatalf("EnforceRetention(0, 0) = %d, %v", n, err)
		}
		if n, err := p.EnforceRetention(0, -5); n != 0 || err != nil {
			t.Fatalf("EnforceRetention(0, -5) = %d, %v", n, err)
		}
		// Nothing is older than the oldest message, and everything fits.
		if n, err := p.EnforceRetention(msg(0, 10).Timestamp, 1<<30); n != 0 || err != nil {
			t.Fatalf("EnforceRetention with nothing to remove = %d, %v", n, err)
		}
		checkRead(t, p, 0, 100, 10, 10)
	}},
	{"List", func(t *testing.T, s partition.Store, restart func() partition.Store) {
		l := s
		if got, err := l.List(); err != nil || len(got) != 0 {
			t.Fatalf("List of an empty store = %v, %v", got, err)
		}
		want := []partition.Stored{
			{NS: mustNS(t, 0, 0, 7), Epoch: 3},
			{NS: mustNS(t, 0, 1, 0), Epoch: 1},
			{NS: mustNS(t, 2, 0, 0), Epoch: 9},
			{NS: mustNS(t, 2, 0, 1), Epoch: 9},
		}
		for _, i := range []int{2, 0, 3, 1} {
			p := mustBuild(t, s, want[i].NS, want[i].Epoch)
			if i != 1 { // an open partition is listed too
				mustClose(t, p)
			}
		}
		for _, st := range []partition.Store{s, restart()} {
			if got, err := st.List(); err != nil || !slices.Equal(got, want) {
				t.Fatalf("List = %v, %v; want %v", got, err, want)
			}
		}
		if err := s.Remove(want[2].NS); err != nil {
			t.Fatal(err)
		}
		want = slices.Delete(want, 2, 3)
		if got, err := restart().List(); err != nil || !slices.Equal(got, want) {
			t.Fatalf("List after Remove = %v, %v; want %v", got, err, want)
		}
	}},
	{"ConcurrentBuildRemove", func(t *testing.T, s partition.Store, _ func() partition.Store) {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := range uint32(8) {
			ns := mustNS(t, g, 1, 0)
			wg.Go(func() {
				for epoch := range uint64(4) {
					p, err := s.Build(ns, epoch)
					if err != nil {
						errs <- err
						return
					}
					if _, err := p.Append(batch(0, 3, 10)); err != nil {
						errs <- err
					}
					if err := p.Close(); err != nil {
						errs <- err
					}
					if epoch%2 == 1 {
						if err := s.Remove(ns); err != nil {
							errs <- err
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}},
}
