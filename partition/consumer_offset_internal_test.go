package partition

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

var consumerNS = metadata.Namespace(0x0000_0001_0002_0003)

// consumerPath is the consumer offset file of name in p's directory.
func consumerPath(p Partition, name string) string {
	return filepath.Join(p.(*filePartition).dir, consumersDir, consumerFileName(name))
}

// buildConsumerPartition builds consumerNS's partition on fsys with one
// synced message (so offsets up to 1 can be stored), and returns it.
func buildConsumerPartition(t *testing.T, fsys vfs.FS) Partition {
	t.Helper()
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(consumerNS, 1)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func appendSynced(t *testing.T, p Partition, n int) {
	t.Helper()
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Payload: []byte("m")}
	}
	if _, err := p.Append(msgs); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestConsumerOffsetStoreIsOneDatasync counts, through the vfs seam, what
// a consumer's stores cost once its offset file exists: one fdatasync each
// (an OpSync to errorfs) of a slot written in place, and no file created,
// renamed or directory synced — where replacing the file whole cost a
// creation, two fsyncs and a rename each, which the Consumer's
// CommitAfterBatch paid per batch on the shard's pump. A power loss after
// the stores keeps the last one.
func TestConsumerOffsetStoreIsOneDatasync(t *testing.T) {
	mem := vfs.NewMem()
	log := &errorfs.Log{}
	p := buildConsumerPartition(t, errorfs.New(mem, log))
	appendSynced(t, p, 20)
	if err := p.StoreConsumerOffset("c", 1); err != nil { // creates the file
		t.Fatal(err)
	}
	before := len(log.Ops())
	const stores = 10
	for i := range stores {
		if err := p.StoreConsumerOffset("c", uint64(2+i)); err != nil {
			t.Fatal(err)
		}
	}
	var syncs, writes int
	for _, op := range log.Ops()[before:] {
		switch {
		case op.Kind == errorfs.OpSync && op.Path == consumerPath(p, "c"):
			syncs++
		case op.Kind == errorfs.OpWriteAt && op.Path == consumerPath(p, "c"):
			writes++
		case op.Kind == errorfs.OpSync, op.Kind == errorfs.OpSyncDir, op.Kind == errorfs.OpRename,
			op.Kind == errorfs.OpOpen && op.Flag&(os.O_CREATE|os.O_TRUNC) != 0, op.Kind == errorfs.OpWrite:
			t.Errorf("a store did %s %s (flag %#x)", op.Kind, op.Path, op.Flag)
		}
	}
	if syncs != stores || writes != stores {
		t.Fatalf("%d stores did %d fdatasyncs and %d writes of the offset file, want one each", stores, syncs, writes)
	}
	// Power loss: the last store holds.
	q := buildConsumerPartition(t, mem.Crash())
	defer q.Close()
	if off, ok, err := q.ConsumerOffset("c"); err != nil || !ok || off != 1+stores {
		t.Fatalf("after a power loss: offset %d, %v, %v; want %d", off, ok, err, 1+stores)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// storeOffsets stores offsets 1 to 4 for consumer "c" in a partition on
// mem, closes it, and returns the offset file's bytes: seq 1 in both
// slots at its creation, then stores 2..4 to slots 0, 1, 0 (the newer
// slot, seq 4, is at byte 0).
func storeOffsets(t *testing.T, mem *vfs.MemFS) (Partition, []byte) {
	t.Helper()
	p := buildConsumerPartition(t, mem)
	appendSynced(t, p, 20)
	for off := uint64(1); off <= 4; off++ {
		if err := p.StoreConsumerOffset("c", off); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := vfs.ReadFile(mem, consumerPath(p, "c"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := consumerMarkFormat.Decode(b)
	if err != nil || m.V.offset != 4 || m.Seq != 4 {
		t.Fatalf("file decodes to %+v, %v", m, err)
	}
	return p, b
}

// verifyConsumerFile runs verify on consumerNS and returns its problems.
func verifyConsumerFile(t *testing.T, mem *vfs.MemFS) []Problem {
	t.Helper()
	ro, err := OpenReadOnlyStore("/data", mem)
	if err != nil {
		t.Fatal(err)
	}
	probs, err := ro.VerifyPartition(consumerNS)
	if err != nil {
		t.Fatal(err)
	}
	return probs
}

// TestConsumerOffsetTornSlot: a store torn by a crash (its slot's first
// bytes written, not its last: the older store's write number still ends
// the slot) leaves the other slot, the previous offset (the torn store
// was never acknowledged); the next store after the reopen wins over
// both.
func TestConsumerOffsetTornSlot(t *testing.T) {
	mem := vfs.NewMem()
	p, b := storeOffsets(t, mem)
	// Store 5 goes to slot 1 (seq 3 there): torn inside its record.
	rec := consumerMarkFormat.AppendSlot(nil, syncmark.Mark[consumerMark]{Seq: 5, V: consumerMark{offset: 5, name: "c"}})
	copy(b[consumerMarkStride:], rec[:len(rec)-2])
	writeMem(t, mem, consumerPath(p, "c"), b)
	probs := verifyConsumerFile(t, mem)
	if len(probs) != 1 || probs[0].Path != consumerPath(p, "c") || !errors.Is(probs[0].Err, ErrCorrupt) || probs[0].Repair == "" {
		t.Fatalf("verify: %+v, want the consumer offset file's torn slot, repaired by reading the valid one", probs)
	}

	q := buildConsumerPartition(t, mem)
	if off, ok, err := q.ConsumerOffset("c"); err != nil || !ok || off != 4 {
		t.Fatalf("torn slot: offset %d, %v, %v; want the valid slot's 4", off, ok, err)
	}
	if err := q.StoreConsumerOffset("c", 6); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	r := buildConsumerPartition(t, mem)
	defer r.Close()
	if off, _, err := r.ConsumerOffset("c"); err != nil || off != 6 {
		t.Fatalf("after a store over the torn slot: offset %d, %v; want 6", off, err)
	}
}

// TestConsumerOffsetDamagedNewerSlot: the newer slot damaged after its
// store was written whole (a bit of its record flipped; the slot still
// ends in its own write number) is damage, not a torn store: the
// partition's build fails with a *CorruptError, as with the file of one
// record, where taking the older slot's offset would lose an
// acknowledged store without an error. The older slot damaged loses
// nothing: the newer one's offset holds, and verify reports the slot.
func TestConsumerOffsetDamagedNewerSlot(t *testing.T) {
	t.Run("newer", func(t *testing.T) {
		mem := vfs.NewMem()
		p, b := storeOffsets(t, mem)
		b[syncmark.Header] ^= 0x01 // the newer slot's offset, at byte 0
		writeMem(t, mem, consumerPath(p, "c"), b)
		s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem})
		if err != nil {
			t.Fatal(err)
		}
		var ce *CorruptError
		if q, err := s.Build(consumerNS, 1); !errors.As(err, &ce) || ce.Path != consumerPath(p, "c") {
			if err == nil {
				off, _, _ := q.ConsumerOffset("c")
				q.Close()
				t.Fatalf("a damaged newer slot built, offset %d; want a *CorruptError", off)
			}
			t.Fatalf("a damaged newer slot: %v, want a *CorruptError naming the file", err)
		}
		probs := verifyConsumerFile(t, mem)
		if len(probs) != 1 || probs[0].Path != consumerPath(p, "c") || !errors.Is(probs[0].Err, ErrCorrupt) || probs[0].Repair != "" {
			t.Fatalf("verify: %+v, want the consumer offset file's damage, unrepaired", probs)
		}
	})
	t.Run("older", func(t *testing.T) {
		mem := vfs.NewMem()
		p, b := storeOffsets(t, mem)
		b[consumerMarkStride+syncmark.Header] ^= 0x01 // seq 3's offset
		writeMem(t, mem, consumerPath(p, "c"), b)
		q := buildConsumerPartition(t, mem)
		defer q.Close()
		if off, ok, err := q.ConsumerOffset("c"); err != nil || !ok || off != 4 {
			t.Fatalf("damaged older slot: offset %d, %v, %v; want the newer slot's 4", off, ok, err)
		}
		if probs := verifyConsumerFile(t, mem); len(probs) != 1 || !errors.Is(probs[0].Err, ErrCorrupt) {
			t.Fatalf("verify: %+v, want the consumer offset file's bad slot", probs)
		}
	})
}

// TestConsumerOffsetSingleRecordFile: a consumer offset file of the
// earlier format (one record) is read, and the first store replaces it
// with a sync mark; a name too long for a slot keeps the single record.
func TestConsumerOffsetSingleRecordFile(t *testing.T) {
	mem := vfs.NewMem()
	p := buildConsumerPartition(t, mem)
	appendSynced(t, p, 20)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", consumerMarkName+1)
	if err := mem.MkdirAll(filepath.Dir(consumerPath(p, "c")), 0o755); err != nil {
		t.Fatal(err)
	}
	writeMem(t, mem, consumerPath(p, "c"), encodeConsumerOffset("c", 7))

	q := buildConsumerPartition(t, mem)
	if off, ok, err := q.ConsumerOffset("c"); err != nil || !ok || off != 7 {
		t.Fatalf("single record: offset %d, %v, %v; want 7", off, ok, err)
	}
	for _, name := range []string{"c", long} {
		for off := uint64(8); off <= 10; off++ {
			if err := q.StoreConsumerOffset(name, off); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := vfs.ReadFile(mem, consumerPath(p, "c")); err != nil || len(b) != consumerMarkFormat.Size {
		t.Fatalf("after stores the file is %d bytes (%v), want a sync mark's %d", len(b), err, consumerMarkFormat.Size)
	}
	if b, err := vfs.ReadFile(mem, consumerPath(p, long)); err != nil || !bytes.Equal(b, encodeConsumerOffset(long, 10)) {
		t.Fatalf("a long name's file holds %x (%v), want its single record", b, err)
	}
	r := buildConsumerPartition(t, mem)
	defer r.Close()
	for _, name := range []string{"c", long} {
		if off, _, err := r.ConsumerOffset(name); err != nil || off != 10 {
			t.Fatalf("consumer of %d bytes: offset %d, %v; want 10", len(name), off, err)
		}
	}
}

func writeMem(t *testing.T, fsys vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fsys.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzDecodeConsumerFile: a consumer offset file's bytes, of either
// format, decode or are refused as damage, without a panic; what decodes
// as a sync mark is a record that one of its slots holds.
func FuzzDecodeConsumerFile(f *testing.F) {
	f.Add(encodeConsumerOffset("worker-1", 42))
	two := make([]byte, consumerMarkFormat.Size)
	copy(two, consumerMarkFormat.AppendSlot(nil, syncmark.Mark[consumerMark]{Seq: 3, V: consumerMark{offset: 9, name: "c"}}))
	copy(two[consumerMarkStride:], consumerMarkFormat.AppendSlot(nil, syncmark.Mark[consumerMark]{Seq: 4, V: consumerMark{offset: 10, name: "c"}}))
	f.Add(two)
	f.Add([]byte("PWCO"))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, off, seq, err := decodeConsumerFile(b, "f")
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("%x: %v is not a *CorruptError", b, err)
			}
			return
		}
		if seq == 0 {
			if !bytes.Equal(encodeConsumerOffset(name, off), b) {
				t.Fatalf("%x decoded to a single record %q %d that encodes differently", b, name, off)
			}
			return
		}
		_ = consumerMarkFormat.Slack(b) // verify's reading of the same bytes
		rec := consumerMarkFormat.AppendSlot(nil, syncmark.Mark[consumerMark]{Seq: seq, V: consumerMark{offset: off, name: name}})
		if len(name) > consumerMarkName || !bytes.Contains(b, rec) {
			t.Fatalf("%x decoded to %q %d seq %d, whose record is in no slot", b, name, off, seq)
		}
	})
}
