package syncmark_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/vfs"
)

// u64 is a test payload: one uint64, below 1000.
type u64 struct{}

func (u64) AppendPayload(dst []byte, v uint64) []byte {
	return binary.LittleEndian.AppendUint64(dst, v)
}
func (u64) PayloadLen(b []byte) (int, bool) { return 8, len(b) >= 8 }
func (u64) DecodePayload(b []byte) (uint64, bool) {
	v := binary.LittleEndian.Uint64(b)
	return v, v < 1000
}

var format = syncmark.Format[uint64]{Magic: 0x54534554, Stride: 64, Size: 128, Codec: u64{}}

// The first Write creates the file whole with both slots; later ones
// alternate slots, and a reader takes the highest valid one, the other
// when it is torn; with both torn there is none. A file not of its size
// is written whole again at the first Write.
func TestWriteAndRead(t *testing.T) {
	mem := vfs.NewMem()
	const path = "/m"
	w := format.Writer(mem, path, 0)
	defer w.Close()
	for v := uint64(1); v <= 5; v++ {
		if err := w.Write(v*10, syncmark.WrittenBack); err != nil {
			t.Fatal(err)
		}
		m, found, slack, err := format.Read(mem, path)
		if err != nil || !found || slack != "" || m.Seq != v || m.V != v*10 {
			t.Fatalf("after write %d: %+v found %v slack %q %v", v, m, found, slack, err)
		}
	}
	b, err := vfs.ReadFile(mem, path)
	if err != nil {
		t.Fatal(err)
	}
	// Seq 5 is in slot 1, seq 4 in slot 0.
	b[format.Stride+syncmark.Header] ^= 1
	if m, err := format.Decode(b); err != nil || m.Seq != 4 || m.V != 40 {
		t.Fatalf("slot 1 torn: %+v %v, want seq 4", m, err)
	}
	if s := format.Slack(b); s != "the slot at byte 64 fails its checksum" {
		t.Fatalf("slack %q", s)
	}
	b[syncmark.Header] ^= 1
	if _, err := format.Decode(b); !errors.Is(err, syncmark.ErrNoSlot) {
		t.Fatalf("both torn: %v", err)
	}
	b[syncmark.Header] ^= 1
	b[format.Stride+syncmark.Header] ^= 1
	b[40] = 7
	if s := format.Slack(b); s != "byte 40, after the slot's record, is not zero" {
		t.Fatalf("slack %q", s)
	}
	if s := format.Slack(append(b, 0)); s != "129 bytes, not 128" {
		t.Fatalf("slack %q", s)
	}

	// A file of another size is replaced whole, both slots the record.
	if err := vfs.WriteFileAtomic(mem, path, []byte("short")); err != nil {
		t.Fatal(err)
	}
	w2 := format.Writer(mem, path, 9)
	defer w2.Close()
	if err := w2.Write(99, syncmark.WrittenBack); err != nil {
		t.Fatal(err)
	}
	m, found, slack, err := format.Read(mem, path)
	if err != nil || !found || slack != "" || m.Seq != 10 || m.V != 99 {
		t.Fatalf("rewritten: %+v found %v slack %q %v", m, found, slack, err)
	}
	// A payload its codec refuses is no slot.
	if err := w2.Write(5000, syncmark.WrittenBack); err != nil {
		t.Fatal(err)
	}
	if m, _, _, err := format.Read(mem, path); err != nil || m.Seq != 10 {
		t.Fatalf("an invalid payload in slot 1: %+v %v, want slot 0's seq 10", m, err)
	}
	if _, found, _, err := format.Read(mem, "/none"); found || err != nil {
		t.Fatalf("missing: found %v, %v", found, err)
	}
}

// A slot written back survives a power loss once any file is synced
// after it, and not before; a durable Write survives at once.
func TestWriteBackRidesOnTheNextFlush(t *testing.T) {
	mem := vfs.NewMem()
	const path = "/m"
	w := format.Writer(mem, path, 0)
	defer w.Close()
	if err := w.Write(1, syncmark.WrittenBack); err != nil { // created whole, synced
		t.Fatal(err)
	}
	if err := w.Write(2, syncmark.WrittenBack); err != nil {
		t.Fatal(err)
	}
	if m, _, _, err := format.Read(mem.Crash(), path); err != nil || m.V != 1 {
		t.Fatalf("power loss before any flush: %+v %v, want the first slot", m, err)
	}
	if err := vfs.WriteFileAtomic(mem, "/other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if m, _, _, err := format.Read(mem.Crash(), path); err != nil || m.V != 2 {
		t.Fatalf("power loss after another file's sync: %+v %v, want the second slot", m, err)
	}
	if err := w.Write(3, syncmark.Durable); err != nil {
		t.Fatal(err)
	}
	if m, _, _, err := format.Read(mem.Crash(), path); err != nil || m.V != 3 {
		t.Fatalf("power loss after a durable write: %+v %v", m, err)
	}
}

// A slot whose write was only started is not durable at the next flush:
// the next Write waits for it, and the flush after that carries it. The
// next Write's own slot, only started, is not durable yet either.
func TestStartedRidesOnTheFlushAfterTheNextWrite(t *testing.T) {
	mem := vfs.NewMem()
	const path = "/m"
	w := format.Writer(mem, path, 0)
	if err := w.Write(1, syncmark.Durable); err != nil { // created whole, synced
		t.Fatal(err)
	}
	flush := func() {
		t.Helper()
		if err := vfs.WriteFileAtomic(mem, "/other", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	durable := func() uint64 {
		t.Helper()
		m, _, _, err := format.Read(mem.Crash(), path)
		if err != nil {
			t.Fatal(err)
		}
		return m.V
	}
	if err := w.Write(2, syncmark.Started); err != nil {
		t.Fatal(err)
	}
	flush()
	if v := durable(); v != 1 {
		t.Fatalf("a started slot, then a flush: %d durable, want 1 (not waited for)", v)
	}
	if err := w.Write(3, syncmark.Started); err != nil {
		t.Fatal(err)
	}
	flush()
	if v := durable(); v != 2 {
		t.Fatalf("the next write, then a flush: %d durable, want 2", v)
	}
	if err := w.Close(); err != nil { // waits for slot 3
		t.Fatal(err)
	}
	flush()
	if v := durable(); v != 3 {
		t.Fatalf("closed, then a flush: %d durable, want 3", v)
	}
}

// u64x2 is the test payload's second version: the value and a second
// uint64, decoded as their sum (so that a test tells which codec read a
// slot).
type u64x2 struct{}

func (u64x2) AppendPayload(dst []byte, v uint64) []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(dst, v), 1)
}
func (u64x2) PayloadLen(b []byte) (int, bool) { return 16, len(b) >= 16 }
func (u64x2) DecodePayload(b []byte) (uint64, bool) {
	v := binary.LittleEndian.Uint64(b) + binary.LittleEndian.Uint64(b[8:])
	return v, v < 1000
}

// format2 is format's second version: a new magic, a longer payload, a
// larger file; format's slots still decode.
var format2 = syncmark.Format[uint64]{Magic: 0x32534554, Stride: 64, Size: 160, Codec: u64x2{},
	Older: []syncmark.Version[uint64]{{Magic: format.Magic, Size: format.Size, Codec: format.Codec}}}

// A file of an earlier version reads through the current format, by its
// magic, its size no slack; the first Write replaces it whole with the
// current version. Slots of both versions in one file are told apart
// and the higher sequence wins; an unknown magic is no slot.
func TestOlderVersionDecodes(t *testing.T) {
	mem := vfs.NewMem()
	const path = "/m"
	w := format.Writer(mem, path, 0)
	for v := uint64(1); v <= 2; v++ {
		if err := w.Write(v*10, syncmark.WrittenBack); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	m, found, slack, err := format2.Read(mem, path)
	if err != nil || !found || slack != "" || m.Seq != 2 || m.V != 20 {
		t.Fatalf("version 1 file read by version 2: %+v found %v slack %q %v, want seq 2 value 20", m, found, slack, err)
	}
	w2 := format2.Writer(mem, path, m.Seq)
	defer w2.Close()
	if err := w2.Write(30, syncmark.WrittenBack); err != nil {
		t.Fatal(err)
	}
	b, err := vfs.ReadFile(mem, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != format2.Size || binary.LittleEndian.Uint32(b) != format2.Magic || binary.LittleEndian.Uint32(b[format2.Stride:]) != format2.Magic {
		t.Fatalf("after version 2's first write: %d bytes, magics %x %x; want %d bytes, both slots version 2", len(b), b[:4], b[format2.Stride:format2.Stride+4], format2.Size)
	}
	if m, err := format2.Decode(b); err != nil || m.Seq != 3 || m.V != 31 {
		t.Fatalf("version 2 slot: %+v %v, want seq 3 value 31", m, err)
	}
	// One slot of each version: the higher sequence wins, each read by
	// its own codec.
	mixed := make([]byte, format2.Size)
	copy(mixed, format.AppendSlot(nil, syncmark.Mark[uint64]{Seq: 5, V: 50}))
	copy(mixed[format2.Stride:], format2.AppendSlot(nil, syncmark.Mark[uint64]{Seq: 4, V: 40}))
	if m, err := format2.Decode(mixed); err != nil || m.Seq != 5 || m.V != 50 {
		t.Fatalf("mixed, version 1 newer: %+v %v, want seq 5 value 50", m, err)
	}
	copy(mixed[format2.Stride:], format2.AppendSlot(nil, syncmark.Mark[uint64]{Seq: 6, V: 60}))
	if m, err := format2.Decode(mixed); err != nil || m.Seq != 6 || m.V != 61 {
		t.Fatalf("mixed, version 2 newer: %+v %v, want seq 6 value 61", m, err)
	}
	// Version 1 alone does not know version 2's magic.
	if m, err := format.Decode(mixed); err != nil || m.Seq != 5 {
		t.Fatalf("version 1 reading a version 2 slot: %+v %v, want only its own seq 5", m, err)
	}
	binary.LittleEndian.PutUint32(mixed, 0x33534554)
	if m, err := format2.Decode(mixed); err != nil || m.Seq != 6 {
		t.Fatalf("an unknown magic in slot 0: %+v %v, want slot 1's seq 6", m, err)
	}
	if s := format2.Slack(mixed[:format.Size+1]); s != "129 bytes, not 160" {
		t.Fatalf("slack %q", s)
	}
}

// With SeqTrailer every slot ends in its write's number, the creation's
// included: a slot failing its checksum that ends in a newer number than
// the valid slot's is damage (ErrDamagedSlot); one that ends in an older
// number, a write torn before its last bytes, reads as the valid slot.
func TestSeqTrailerTellsDamageFromATornWrite(t *testing.T) {
	trailed := format
	trailed.SeqTrailer = true
	mem := vfs.NewMem()
	const path = "/m"
	w := trailed.Writer(mem, path, 0)
	defer w.Close()
	for v := uint64(1); v <= 4; v++ {
		if err := w.Write(v*10, syncmark.Durable); err != nil {
			t.Fatal(err)
		}
		b, err := vfs.ReadFile(mem, path)
		if err != nil {
			t.Fatal(err)
		}
		for i, end := range []int{trailed.Stride, trailed.Size} {
			// Write v went to slot v%2, write v-1 to the other; the
			// creation (write 1) to both.
			want := v
			if v > 1 && uint64(i) != v%2 {
				want = v - 1
			}
			if got := binary.LittleEndian.Uint64(b[end-syncmark.SeqTrailerLen:]); got != want {
				t.Fatalf("after write %d, slot %d ends in %d, want %d", v, i, got, want)
			}
		}
		if s := trailed.Slack(b); s != "" {
			t.Fatalf("after write %d: slack %q", v, s)
		}
	}
	b, err := vfs.ReadFile(mem, path)
	if err != nil {
		t.Fatal(err)
	}
	// Seq 4 is in slot 0, seq 3 in slot 1. Slot 0 damaged: its trailer
	// says write 4 reached its end.
	damaged := append([]byte(nil), b...)
	damaged[syncmark.Header] ^= 1
	if _, err := trailed.Decode(damaged); !errors.Is(err, syncmark.ErrDamagedSlot) {
		t.Fatalf("newer slot damaged: %v, want ErrDamagedSlot", err)
	}
	// Write 5 to slot 1 torn before its last bytes: seq 4 holds.
	torn := append([]byte(nil), b...)
	rec := trailed.AppendSlot(nil, syncmark.Mark[uint64]{Seq: 5, V: 50})
	copy(torn[trailed.Stride:], rec[:len(rec)-1])
	if m, err := trailed.Decode(torn); err != nil || m.Seq != 4 {
		t.Fatalf("write 5 torn: %+v, %v; want seq 4", m, err)
	}
	// The older slot damaged: seq 4 holds.
	older := append([]byte(nil), b...)
	older[trailed.Stride+syncmark.Header] ^= 1
	if m, err := trailed.Decode(older); err != nil || m.Seq != 4 {
		t.Fatalf("older slot damaged: %+v, %v; want seq 4", m, err)
	}
	// A trailer that is not its record's number is slack.
	b[trailed.Size-1] ^= 1
	if s := trailed.Slack(b); s == "" {
		t.Fatal("a trailer changed: no slack")
	}
}
