package partition_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// fuzzNS is the partition FuzzSegment rewrites.
var fuzzNS = func() metadata.Namespace {
	ns, err := metadata.NewNamespace(1, 2, 3)
	if err != nil {
		panic(err)
	}
	return ns
}()

// writtenSegment builds a partition holding a few messages and returns
// the store's filesystem and the path of its segment.
func writtenSegment(t testing.TB) (*vfs.MemFS, string) {
	fsys := vfs.NewMem()
	s, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(fuzzNS, 1)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []partition.Message{
		{Payload: []byte("one")},
		{Timestamp: 7, Headers: []partition.Header{{Key: "k", Value: []byte("v")}}, Payload: []byte("two")},
		{ID: [16]byte{1}},
	}
	if _, err := p.Append(msgs); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return fsys, filepath.Join(partDir("/data", fuzzNS), segName(0, ".log"))
}

// FuzzSegment replaces a partition's segment file with arbitrary bytes
// and opens and reads the partition: damage is a *CorruptError (or the
// partition opens with what it could verify), never a panic.
func FuzzSegment(f *testing.F) {
	fsys, path := writtenSegment(f)
	good, err := vfs.ReadFile(fsys, path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, false)
	f.Add(good, true)
	f.Add(good[:len(good)-5], false)
	f.Add(append(slices.Clone(good), make([]byte, 100)...), true)
	bad := slices.Clone(good)
	bad[60] ^= 1
	f.Add(bad, true)
	zeroed := slices.Clone(good) // zeros where records were, whole records after
	clear(zeroed[40:200])
	f.Add(zeroed, false)
	f.Add([]byte{}, false)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, false)
	f.Fuzz(func(t *testing.T, seg []byte, verify bool) {
		fsys, path := writtenSegment(t)
		file, err := fsys.OpenFile(path, os.O_RDWR|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := file.Write(seg); err != nil {
			t.Fatal(err)
		}
		if err := file.Close(); err != nil {
			t.Fatal(err)
		}
		s, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys, VerifyOnOpen: verify})
		if err != nil {
			t.Fatal(err)
		}
		checkFuzzedPartition(t, s)
	})
}

// checkFuzzedPartition builds fuzzNS from s and reads it whole: the build
// succeeds or is a *CorruptError; every read below NextOffset returns
// messages at dense offsets or a *CorruptError (a hole, read past); an
// append lands at NextOffset or is refused for damage.
func checkFuzzedPartition(t *testing.T, s *partition.FileStore) {
	p, err := s.Build(fuzzNS, 1)
	if err != nil {
		if !errors.Is(err, partition.ErrCorrupt) {
			t.Fatalf("Build over a rewritten segment: %v, want nil or ErrCorrupt", err)
		}
		return
	}
	defer p.Close()
	for from := p.StartOffset(); from < p.NextOffset(); {
		msgs, err := p.Read(from, 2)
		if err != nil {
			if !errors.Is(err, partition.ErrCorrupt) {
				t.Fatalf("Read(%d): %v, want nil or ErrCorrupt", from, err)
			}
			from++ // a hole: the reads past it go on
			continue
		}
		if len(msgs) == 0 {
			t.Fatalf("Read(%d) returned nothing below NextOffset %d", from, p.NextOffset())
		}
		for i, m := range msgs {
			if m.Offset != from+uint64(i) {
				t.Fatalf("Read(%d): message %d has offset %d", from, i, m.Offset)
			}
		}
		from += uint64(len(msgs))
	}
	// Appends go at NextOffset, or are refused for damage: never at an
	// offset the log holds.
	next := p.NextOffset()
	first, err := p.Append([]partition.Message{{Payload: []byte("x")}})
	if err != nil {
		if !errors.Is(err, partition.ErrCorrupt) {
			t.Fatalf("Append: %v, want nil or ErrCorrupt", err)
		}
	} else if first != next {
		t.Fatalf("Append at %d, want NextOffset %d", first, next)
	}
}

// sealedSegmentSize keeps FuzzSealedSegment's inputs small: the fuzzer
// minimizes every new input, one execution per step.
const sealedSegmentSize = 2 << 10

// sealedLog builds a partition of several small segments and returns the
// store's filesystem and the path of its first (sealed) segment.
func sealedLog(t testing.TB) (*vfs.MemFS, string) {
	partition.AllowSmallSegments(t, sealedSegmentSize)
	fsys := vfs.NewMem()
	s, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys, SegmentSize: sealedSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(fuzzNS, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		msgs := make([]partition.Message, 4)
		for j := range msgs {
			msgs[j] = partition.Message{Timestamp: int64(i*4 + j), Payload: make([]byte, 60+j)}
		}
		if _, err := p.Append(msgs); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return fsys, filepath.Join(partDir("/data", fuzzNS), segName(0, ".log"))
}

// FuzzSealedSegment replaces a partition's first, sealed segment with
// arbitrary bytes (its index files left as they were), then opens the
// partition, with and without VerifyOnOpen, and reads it whole: damage is
// a *CorruptError for the reads that reach it, never a panic, and the
// other segments are read.
func FuzzSealedSegment(f *testing.F) {
	fsys, path := sealedLog(f)
	good, err := vfs.ReadFile(fsys, path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, false)
	f.Add(good, true)
	f.Add(good[:len(good)/2], false)
	flipped := slices.Clone(good)
	flipped[len(good)/3] ^= 0x40
	f.Add(flipped, false)
	f.Add(flipped, true)
	zeroed := slices.Clone(good)
	clear(zeroed[len(good)/4 : len(good)/4+200])
	f.Add(zeroed, false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, seg []byte, verify bool) {
		fsys, path := sealedLog(t)
		if err := vfs.WriteFileAtomic(fsys, path, seg); err != nil {
			t.Fatal(err)
		}
		s, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys, SegmentSize: sealedSegmentSize, VerifyOnOpen: verify})
		if err != nil {
			t.Fatal(err)
		}
		checkFuzzedPartition(t, s)
	})
}
