package partition_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// SetAside moves a partition's data into damaged-N inside its directory,
// keeping the incarnation and the files named (a raft log): the next Build
// opens an empty log of the same incarnation, the moved files are there
// to inspect, and a second SetAside uses the next number. An open
// partition is refused, and so is one whose incarnation is damaged.
func TestSetAside(t *testing.T) {
	dir := t.TempDir()
	s := newFileStore(t, partition.FileConfig{Dir: dir, SegmentSize: 1 << 20})
	ns := mustNS(t, 1, 2, 3)
	p := mustBuild(t, s, ns, 7)
	for range 20 {
		if _, err := p.Append([]partition.Message{{Payload: make([]byte, 500)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.StoreConsumerOffset("c", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetAside(ns, "raft.log"); !errors.Is(err, partition.ErrInUse) {
		t.Fatalf("SetAside of an open partition: %v, want ErrInUse", err)
	}
	loc, _ := p.(partition.Located)
	_, pdir := loc.Location()
	if err := os.WriteFile(filepath.Join(pdir, "raft.log"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	aside, err := s.SetAside(ns, "raft.log")
	if err != nil || aside != filepath.Join(pdir, "damaged-1") {
		t.Fatalf("SetAside: %q, %v; want %s", aside, err, filepath.Join(pdir, "damaged-1"))
	}
	if _, err := os.Stat(filepath.Join(aside, "00000000000000000000.log")); err != nil {
		t.Fatalf("first segment not set aside: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(pdir, "raft.log")); err != nil || string(b) != "kept" {
		t.Fatalf("raft log: %q, %v; want it kept in place", b, err)
	}
	p = mustBuild(t, s, ns, 7)
	if p.NextOffset() != 0 || p.StartOffset() != 0 {
		t.Fatalf("rebuilt after SetAside: [%d, %d), want an empty log", p.StartOffset(), p.NextOffset())
	}
	if off, ok, err := p.ConsumerOffset("c"); err != nil || ok {
		t.Fatalf("consumer offset %d, %v, %v after SetAside, want none", off, ok, err)
	}
	if _, err := p.Append([]partition.Message{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if aside, err := s.SetAside(ns, "raft.log"); err != nil || filepath.Base(aside) != "damaged-2" {
		t.Fatalf("second SetAside: %q, %v; want damaged-2", aside, err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "incarnation"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if aside, err := s.SetAside(ns, "raft.log"); err == nil {
		t.Fatalf("SetAside under a damaged incarnation file: %q, want an error", aside)
	}
}

// Reincarnate sets aside the copy of a partition whose incarnation file
// is damaged, the damaged file included, and rewrites the file for the
// incarnation its caller names, keeping the files named: the next Build
// opens an empty log at that incarnation. A whole file naming another
// incarnation is refused, and one naming this one is SetAside's case.
func TestReincarnate(t *testing.T) {
	s, ns, p, pdir := oneMessagePartition(t)
	if err := os.WriteFile(filepath.Join(pdir, "raft.log"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reincarnate(ns, 8, "raft.log"); err == nil {
		t.Fatal("Reincarnate at another incarnation than the whole file's was taken")
	}
	inc := filepath.Join(pdir, "incarnation")
	damaged := []byte("7 0000000\x31\n")
	if err := os.WriteFile(inc, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetAside(ns, "raft.log"); !errors.Is(err, partition.ErrIncarnationDamaged) || !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("SetAside under a damaged incarnation file: %v, want ErrIncarnationDamaged and ErrCorrupt", err)
	}
	if _, err := s.Build(ns, 7); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("Build under a damaged incarnation file: %v, want ErrCorrupt", err)
	}
	aside, err := s.Reincarnate(ns, 7, "raft.log")
	if err != nil || aside != filepath.Join(pdir, "damaged-1") {
		t.Fatalf("Reincarnate: %q, %v", aside, err)
	}
	if b, err := os.ReadFile(filepath.Join(aside, "incarnation")); err != nil || string(b) != string(damaged) {
		t.Fatalf("damaged incarnation file set aside as %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(aside, "00000000000000000000.log")); err != nil {
		t.Fatalf("first segment not set aside: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(pdir, "raft.log")); err != nil || string(b) != "kept" {
		t.Fatalf("raft log: %q, %v; want it kept in place", b, err)
	}
	p = mustBuild(t, s, ns, 7)
	if p.NextOffset() != 0 || p.StartOffset() != 0 {
		t.Fatalf("rebuilt after Reincarnate: [%d, %d), want an empty log", p.StartOffset(), p.NextOffset())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := s.List(); err != nil || len(st) != 1 || st[0].Epoch != 7 || st[0].Damage != nil {
		t.Fatalf("List after Reincarnate: %+v, %v", st, err)
	}
}

// A torn incarnation file (a prefix of its record) beside the data it
// was built for is refused by SetAside as a damaged one is, with
// ErrIncarnationDamaged, and taken by Reincarnate: the data goes aside
// and the file is written again. The reconciler sets aside the old copy
// of a re-seeded replica (its raft log damaged) through exactly these
// two calls; refused with an error of its own, the copy stayed, and the
// new replica was never built (a lie had cut the file from 11 to 6
// bytes: the partition stayed down on that node for good).
func TestReincarnateTornIncarnationFile(t *testing.T) {
	s, ns, p, pdir := oneMessagePartition(t)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	inc := filepath.Join(pdir, "incarnation")
	whole, err := os.ReadFile(inc)
	if err != nil || len(whole) < 6 {
		t.Fatalf("incarnation file %q, %v", whole, err)
	}
	torn := whole[:6]
	if err := os.WriteFile(inc, torn, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetAside(ns); !errors.Is(err, partition.ErrIncarnationDamaged) {
		t.Fatalf("SetAside under a torn incarnation file: %v, want ErrIncarnationDamaged", err)
	}
	aside, err := s.Reincarnate(ns, 7)
	if err != nil || aside != filepath.Join(pdir, "damaged-1") {
		t.Fatalf("Reincarnate under a torn incarnation file: %q, %v", aside, err)
	}
	if b, err := os.ReadFile(filepath.Join(aside, "incarnation")); err != nil || string(b) != string(torn) {
		t.Fatalf("torn incarnation file set aside as %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(aside, "00000000000000000000.log")); err != nil {
		t.Fatalf("first segment not set aside: %v", err)
	}
	if b, err := os.ReadFile(inc); err != nil || string(b) != string(whole) {
		t.Fatalf("incarnation file after Reincarnate: %q, %v; want %q", b, err, whole)
	}
	p = mustBuild(t, s, ns, 7)
	if p.NextOffset() != 0 {
		t.Fatalf("rebuilt after Reincarnate: next offset %d, want an empty log", p.NextOffset())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// oneMessagePartition builds partition 1/2/3 at incarnation 7 in a file
// store on the real filesystem and appends one message: the set-up of
// the Reincarnate tests. pdir is the partition's directory.
func oneMessagePartition(t *testing.T) (s *partition.FileStore, ns metadata.Namespace, p partition.Partition, pdir string) {
	t.Helper()
	s = newFileStore(t, partition.FileConfig{Dir: t.TempDir(), SegmentSize: 1 << 20})
	ns = mustNS(t, 1, 2, 3)
	p = mustBuild(t, s, ns, 7)
	if _, err := p.Append([]partition.Message{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	loc, _ := p.(partition.Located)
	_, pdir = loc.Location()
	return s, ns, p, pdir
}
