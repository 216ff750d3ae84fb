package partition_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// TestReadOnlyStore opens a partition whose tail is damaged without
// repairing it: Build reads up to the damage, VerifyPartition reports it
// with what a node would do, and not a byte changes.
func TestReadOnlyStore(t *testing.T) {
	mem := vfs.NewMem()
	ns, _ := metadata.NewNamespace(1, 2, 3)
	s, err := partition.NewFileStore(partition.FileConfig{Dir: "/d", FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(ns, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := p.Append([]partition.Message{{Payload: []byte(strings.Repeat("x", i+1))}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.StoreConsumerOffset("c", 4); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(partDir("/d", ns), segName(0, ".log"))
	b, _ := vfs.ReadFile(mem, seg)
	b[len(b)-2] ^= 0xff // the last record
	if err := vfs.WriteFileAtomic(mem, seg, b); err != nil {
		t.Fatal(err)
	}

	ro, err := partition.OpenReadOnlyStore("/d", mem)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := ro.List()
	if err != nil || len(stored) != 1 || stored[0].Epoch != 7 {
		t.Fatalf("List = %v, %v", stored, err)
	}
	if _, err := ro.Build(ns, 8); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only Build at another epoch: %v", err)
	}
	rp, err := ro.Build(ns, 7)
	if err != nil {
		t.Fatal(err)
	}
	if rp.NextOffset() != 10 {
		t.Fatalf("NextOffset = %d, want 10 (the damaged last record, written whole, is a hole, as the node opens it)", rp.NextOffset())
	}
	msgs, err := rp.Read(0, 100)
	if err != nil || len(msgs) != 9 {
		t.Fatalf("Read = %d messages, %v", len(msgs), err)
	}
	if _, err := rp.Read(9, 1); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("Read of the damaged last record: %v, want ErrCorrupt", err)
	}
	lay := rp.(partition.Layout)
	if segs := lay.Segments(); len(segs) != 1 || segs[0].Next != 10 {
		t.Fatalf("Segments = %+v", segs)
	}
	if c := lay.ConsumerOffsets(); c["c"] != 4 {
		t.Fatalf("ConsumerOffsets = %v", c)
	}
	if _, err := rp.Append([]partition.Message{{Payload: []byte("y")}}); err == nil {
		t.Fatal("Append to a read-only partition succeeded")
	}
	if err := rp.Close(); err != nil {
		t.Fatal(err)
	}
	problems, err := ro.VerifyPartition(ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].Path != seg || problems[0].Repair == "" {
		t.Fatalf("VerifyPartition = %v", problems)
	}
	if after, _ := vfs.ReadFile(mem, seg); string(after) != string(b) {
		t.Fatal("the read-only store changed the segment")
	}
}

// VerifyPartition reports a damaged incarnation record (a flipped digit
// its checksum catches) as a problem naming the file, with what the node
// does, instead of failing.
func TestReadOnlyStoreDamagedIncarnation(t *testing.T) {
	mem := vfs.NewMem()
	ns, _ := metadata.NewNamespace(1, 2, 3)
	s, err := partition.NewFileStore(partition.FileConfig{Dir: "/d", FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(ns, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Append([]partition.Message{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	inc := filepath.Join(partDir("/d", ns), "incarnation")
	if err := errorfs.FlipStored(mem, inc, 0, 0x01); err != nil {
		t.Fatal(err)
	}
	ro, err := partition.OpenReadOnlyStore("/d", mem)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := ro.VerifyPartition(ns)
	if err != nil {
		t.Fatal(err)
	}
	var ce *partition.CorruptError
	if len(problems) != 1 || problems[0].Path != inc || !errors.As(problems[0].Err, &ce) || problems[0].Repair == "" {
		t.Fatalf("VerifyPartition = %+v", problems)
	}
}
