package partition_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// testEncoded is an encoded batch of n messages whose payloads name
// their index in it ("<tag>/<i>"), timestamped ts+i; decodes counts its
// Decode calls and err fails them.
type testEncoded struct {
	tag     string
	n       int
	ts      int64
	size    int64
	decodes int
	err     error
}

func (b *testEncoded) Len() int            { return b.n }
func (b *testEncoded) Size() int64         { return b.size }
func (b *testEncoded) MaxTimestamp() int64 { return b.ts + int64(b.n) - 1 }

func (b *testEncoded) Decode() ([]partition.Message, error) {
	b.decodes++
	if b.err != nil {
		return nil, b.err
	}
	msgs := make([]partition.Message, b.n)
	for i := range msgs {
		msgs[i].Timestamp = b.ts + int64(i)
		msgs[i].Payload = fmt.Appendf(nil, "%s/%d", b.tag, i)
	}
	return msgs, nil
}

func memEncodedPartition(t *testing.T) (partition.Partition, partition.EncodedKeeper) {
	t.Helper()
	ns, err := metadata.NewNamespace(1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := partition.NewMemStore().Build(ns, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, p.(partition.EncodedKeeper)
}

// readAll reads [from, next) message by message run, checking offsets.
func readAll(t *testing.T, p partition.Partition, from uint64) []string {
	t.Helper()
	var out []string
	for from < p.NextOffset() {
		msgs, err := p.Read(from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			t.Fatalf("read at %d below next %d returned nothing", from, p.NextOffset())
		}
		for i := range msgs {
			if msgs[i].Offset != from+uint64(i) {
				t.Fatalf("message %d of a read at %d has offset %d", i, from, msgs[i].Offset)
			}
			out = append(out, string(msgs[i].Payload))
		}
		from += uint64(len(msgs))
	}
	return out
}

// TestMemEncodedBatchesKeptAndDecodedOnRead pins the in-memory store's
// encoded batches: one stored unit between native messages, offsets
// dense across both, handed back as they are by ReadEncoded (never
// decoded for it), decoded once by the first Read that reaches them, with
// the append time they were appended at.
func TestMemEncodedBatchesKeptAndDecodedOnRead(t *testing.T) {
	p, k := memEncodedPartition(t)
	if _, err := p.Append([]partition.Message{{Payload: []byte("n0"), Timestamp: 5, AppendTime: 100}}); err != nil {
		t.Fatal(err)
	}
	a := &testEncoded{tag: "a", n: 3, ts: 10, size: 40}
	first, err := k.AppendEncoded(a, 200)
	if err != nil || first != 1 {
		t.Fatalf("AppendEncoded = %d, %v; want 1", first, err)
	}
	if _, err := p.Append([]partition.Message{{Payload: []byte("n4"), Timestamp: 20, AppendTime: 150}, {Payload: []byte("n5"), Timestamp: 21, AppendTime: 300}}); err != nil {
		t.Fatal(err)
	}
	b := &testEncoded{tag: "b", n: 2, ts: 30, size: 25}
	if first, err = k.AppendEncoded(b, 0); err != nil || first != 6 {
		t.Fatalf("AppendEncoded = %d, %v; want 6", first, err)
	}
	if p.NextOffset() != 8 {
		t.Fatalf("next offset %d, want 8", p.NextOffset())
	}
	native := int64(len("n0")) + int64(len("n4")) + int64(len("n5"))
	if got := p.Size(); got <= 40+25+native || got > 40+25+native+3*64 {
		t.Fatalf("size %d: want the encoded batches' 65 bytes and the native messages' encoded sizes", got)
	}
	for off, want := range map[uint64]struct {
		b    partition.Encoded
		base uint64
	}{0: {nil, 0}, 1: {a, 1}, 3: {a, 1}, 4: {nil, 0}, 6: {b, 6}, 7: {b, 6}, 8: {nil, 0}} {
		got, base, err := k.ReadEncoded(off)
		if err != nil || got != want.b || base != want.base {
			t.Fatalf("ReadEncoded(%d) = %v, %d, %v; want %v, %d", off, got, base, err, want.b, want.base)
		}
	}
	if a.decodes != 0 || b.decodes != 0 {
		t.Fatalf("decoded %d and %d times before any Read", a.decodes, b.decodes)
	}
	want := []string{"n0", "a/0", "a/1", "a/2", "n4", "n5", "b/0", "b/1"}
	if got := readAll(t, p, 0); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %q, want %q", got, want)
	}
	if got := readAll(t, p, 2); fmt.Sprint(got) != fmt.Sprint(want[2:]) {
		t.Fatalf("read from 2: %q, want %q", got, want[2:])
	}
	if a.decodes != 1 || b.decodes != 1 {
		t.Fatalf("decoded %d and %d times, want once each", a.decodes, b.decodes)
	}
	msgs, err := p.Read(1, 10)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("read at 1: %d messages, %v; want a's 3", len(msgs), err)
	}
	for i, m := range msgs {
		if m.AppendTime != 200 || m.Timestamp != 10+int64(i) {
			t.Fatalf("a/%d: append time %d, timestamp %d; want 200, %d", i, m.AppendTime, m.Timestamp, 10+i)
		}
	}
	// b was stamped 0: its newest timestamp, raised to its predecessor's
	// append time (300) to keep append times non-decreasing.
	if msgs, _ := p.Read(6, 1); msgs[0].AppendTime != 300 {
		t.Fatalf("b's append time %d, want 300", msgs[0].AppendTime)
	}
	for at, want := range map[int64]uint64{0: 0, 100: 0, 101: 1, 200: 1, 201: 5, 300: 5, 301: 8} {
		if got, err := p.OffsetForTime(at); err != nil || got != want {
			t.Fatalf("OffsetForTime(%d) = %d, %v; want %d", at, got, err, want)
		}
	}
}

// TestMemEncodedTruncateAndRetention truncates into an encoded batch (it
// stays whole for ReadEncoded, its messages below the start unreadable,
// its size counted until its last message goes) and removes batches by
// age and size whole.
func TestMemEncodedTruncateAndRetention(t *testing.T) {
	p, k := memEncodedPartition(t)
	a := &testEncoded{tag: "a", n: 4, ts: 10, size: 100}
	b := &testEncoded{tag: "b", n: 4, ts: 50, size: 100}
	for _, e := range []*testEncoded{a, b} {
		if _, err := k.AppendEncoded(e, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.TruncateBefore(2); err != nil {
		t.Fatal(err)
	}
	if got, base, err := k.ReadEncoded(2); err != nil || got != a || base != 0 {
		t.Fatalf("ReadEncoded(2) after truncating to 2 = %v, %d, %v; want a from 0", got, base, err)
	}
	if _, _, err := k.ReadEncoded(1); !errors.Is(err, partition.ErrOffsetOutOfRange) {
		t.Fatalf("ReadEncoded below the start: %v, want ErrOffsetOutOfRange", err)
	}
	if got := readAll(t, p, 2); fmt.Sprint(got) != "[a/2 a/3 b/0 b/1 b/2 b/3]" {
		t.Fatalf("read from the start %q", got)
	}
	if p.Size() != 200 {
		t.Fatalf("size %d with a partly truncated, want 200", p.Size())
	}
	// By age: a's newest timestamp (13) is below 14, b's (53) is not.
	if n, err := p.EnforceRetention(14, 0); err != nil || n != 2 || p.StartOffset() != 4 || p.Size() != 100 {
		t.Fatalf("retention by age removed %d (%v): start %d, size %d; want 2, 4, 100", n, err, p.StartOffset(), p.Size())
	}
	if _, err := p.Append([]partition.Message{{Payload: []byte("n"), Timestamp: 60}}); err != nil {
		t.Fatal(err)
	}
	// By size: b goes whole, the native message stays.
	if n, err := p.EnforceRetention(0, 100); err != nil || n != 4 || p.StartOffset() != 8 {
		t.Fatalf("retention by size removed %d (%v), start %d; want 4, 8", n, err, p.StartOffset())
	}
	if got := readAll(t, p, 8); fmt.Sprint(got) != "[n]" {
		t.Fatalf("read %q after retention", got)
	}
	if err := p.SkipTo(20); err != nil || p.Size() != 0 {
		t.Fatalf("SkipTo: %v, size %d", err, p.Size())
	}
	if first, err := k.AppendEncoded(&testEncoded{tag: "c", n: 1, ts: 1, size: 1}, 0); err != nil || first != 20 {
		t.Fatalf("AppendEncoded after SkipTo = %d, %v; want 20", first, err)
	}
	if got := readAll(t, p, 20); fmt.Sprint(got) != "[c/0]" {
		t.Fatalf("read %q after SkipTo", got)
	}
}

// TestMemEncodedDecodeFailure: a batch that does not decode (its
// producer's validation should have refused it) is a corrupt read, and
// one that decodes to the wrong count too.
func TestMemEncodedDecodeFailure(t *testing.T) {
	p, k := memEncodedPartition(t)
	if _, err := k.AppendEncoded(&testEncoded{n: 2, size: 1, err: errors.New("garbage")}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Read(0, 10); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("read of an undecodable batch: %v, want ErrCorrupt", err)
	}
	if _, err := k.AppendEncoded(&testEncoded{n: 0, size: 1}, 0); !errors.Is(err, partition.ErrEmptyBatch) {
		t.Fatalf("an empty encoded batch: %v, want ErrEmptyBatch", err)
	}
}
