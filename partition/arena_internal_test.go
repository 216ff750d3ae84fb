package partition

import (
	"bytes"
	"runtime"
	"testing"
	"unsafe"
	"weak"

	"github.com/parkway-io/parkway/metadata"
)

// lentBatch is a Lent batch of one message whose bytes are raw, as its
// producer lends them; owned counts the Own calls.
type lentBatch struct {
	raw   []byte
	owned int
}

func (b *lentBatch) Len() int            { return 1 }
func (b *lentBatch) Size() int64         { return int64(len(b.raw)) }
func (b *lentBatch) MaxTimestamp() int64 { return 1 }
func (b *lentBatch) Bytes() []byte       { return b.raw }
func (b *lentBatch) Own(raw []byte)      { b.raw, b.owned = raw, b.owned+1 }

func (b *lentBatch) Decode() ([]Message, error) {
	return []Message{{Timestamp: 1, Payload: b.raw}}, nil
}

func memArenaPartition(t testing.TB) *memPartition {
	t.Helper()
	ns, err := metadata.NewNamespace(1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewMemStore().Build(ns, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p.(*memPartition)
}

// keptBytes is the batch kept at off (ReadEncoded), as the partition
// holds it.
func keptBytes(t *testing.T, p *memPartition, off uint64) []byte {
	t.Helper()
	b, _, err := p.ReadEncoded(off)
	if err != nil || b == nil {
		t.Fatalf("ReadEncoded(%d): %v, %v", off, b, err)
	}
	return b.(*lentBatch).raw
}

// TestMemLentBatchesCopiedIntoChunks pins how the in-memory store keeps a
// Lent batch: its bytes copied (the lent ones rewritten after the append
// leave it intact), handed to Own once, carved one after another out of
// a chunk of the partition's (each capped, so an append to one cannot
// reach the next), chunks doubling from the first batch's size; a batch
// of memArenaOwn or more gets memory of its own. The partition's Size
// counts the batches' bytes, not the chunks'.
func TestMemLentBatchesCopiedIntoChunks(t *testing.T) {
	p := memArenaPartition(t)
	lent := make([]byte, 100)
	var want [][]byte
	for i := range 4 {
		for j := range lent {
			lent[j] = byte(i)
		}
		b := &lentBatch{raw: lent}
		if _, err := p.AppendEncoded(b, 0); err != nil {
			t.Fatal(err)
		}
		if b.owned != 1 {
			t.Fatalf("batch %d: Own called %d times", i, b.owned)
		}
		want = append(want, bytes.Clone(lent))
	}
	for j := range lent {
		lent[j] = 0xa5 // the producer reuses its buffer
	}
	for i := range 4 {
		got := keptBytes(t, p, uint64(i))
		if !bytes.Equal(got, want[i]) {
			t.Fatalf("batch %d kept as %x, want %x", i, got[:4], want[i][:4])
		}
		if cap(got) != len(got) {
			t.Fatalf("batch %d: capacity %d past its %d bytes", i, cap(got), len(got))
		}
	}
	// Chunks of 100, 200 and 400 bytes: the first batch alone, the next
	// two side by side, the fourth at the start of the third chunk.
	addr := func(off uint64) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(keptBytes(t, p, off)))) }
	if addr(2) != addr(1)+100 {
		t.Fatalf("batches 1 and 2 not side by side in one chunk")
	}
	if p.log.arenaSize != 400 || cap(p.log.arena) != 400 || len(p.log.arena) != 100 {
		t.Fatalf("current chunk: %d of %d bytes (size %d), want 100 of 400", len(p.log.arena), cap(p.log.arena), p.log.arenaSize)
	}
	if got := p.Size(); got != 400 {
		t.Fatalf("Size %d, want the batches' 400 bytes", got)
	}
	big := &lentBatch{raw: make([]byte, memArenaOwn)}
	if _, err := p.AppendEncoded(big, 0); err != nil {
		t.Fatal(err)
	}
	if len(p.log.arena) != 100 || cap(keptBytes(t, p, 4)) != memArenaOwn {
		t.Fatalf("a batch of memArenaOwn bytes: chunk at %d bytes, kept with capacity %d", len(p.log.arena), cap(keptBytes(t, p, 4)))
	}
}

// TestMemChunkFreedWithItsLastBatch: a chunk lives as long as a batch
// carved from it is kept, and no longer: truncating (as retention does)
// past a chunk's last batch lets the collector free it while the next
// chunk stays, and past the current chunk's last batch frees that one
// too (the log lets go of it). A reader holding a batch keeps its chunk.
func TestMemChunkFreedWithItsLastBatch(t *testing.T) {
	p := memArenaPartition(t)
	// append carves a 100-byte batch and returns a weak pointer to the
	// start of the memory it landed in, holding nothing of it.
	append := func() weak.Pointer[byte] {
		if _, err := p.AppendEncoded(&lentBatch{raw: make([]byte, 100)}, 0); err != nil {
			t.Fatal(err)
		}
		return weak.Make(unsafe.SliceData(keptBytes(t, p, p.NextOffset()-1)))
	}
	first := append()  // a chunk of 100 bytes
	second := append() // the next chunk, 200 bytes
	append()           // beside it
	held := keptBytes(t, p, 2)
	alive := func(w weak.Pointer[byte]) bool {
		runtime.GC()
		return w.Value() != nil
	}
	if !alive(first) || !alive(second) {
		t.Fatal("a chunk freed while its batches are kept")
	}
	if err := p.TruncateBefore(1); err != nil {
		t.Fatal(err)
	}
	if alive(first) {
		t.Fatal("a chunk outlived its last batch")
	}
	if !alive(second) {
		t.Fatal("the current chunk freed while its batches are kept")
	}
	if err := p.TruncateBefore(3); err != nil {
		t.Fatal(err)
	}
	if !alive(second) {
		t.Fatal("a chunk freed while a reader holds one of its batches")
	}
	runtime.KeepAlive(held)
	held = nil
	if alive(second) {
		t.Fatal("the current chunk outlived its last batch")
	}
	if p.log.arena != nil {
		t.Fatal("the log still holds a chunk with no batch")
	}
	append() // a new chunk, twice the last
	if p.log.arenaSize != 400 {
		t.Fatalf("chunk after retention: %d bytes, want 400", p.log.arenaSize)
	}
}
