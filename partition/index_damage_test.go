package partition_test

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// The tests in this file give the open index files that are well-formed
// (whole entries, nothing torn) but wrong, the damage a length check cannot
// see: a stray or reordered entry, an entry at the end of the log file, a
// time index naming other records or stale times. The open must notice and
// rebuild them from the log; trusted, they would make reads fail or time
// searches answer late.

// idxEntry is one entry of an offset index (v: file position) or of a
// time index (v: append time).
type idxEntry struct {
	rel uint32
	v   uint64
}

const (
	offsetEntrySize = 8  // rel u32, position u32
	timeEntrySize   = 12 // rel u32, append time i64
)

func readEntries(t *testing.T, fsys vfs.FS, path string, size int) []idxEntry {
	t.Helper()
	b, err := vfs.ReadFile(fsys, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)%size != 0 {
		t.Fatalf("%s: %d bytes, not whole entries of %d", path, len(b), size)
	}
	es := make([]idxEntry, len(b)/size)
	for i := range es {
		e := b[i*size:]
		es[i].rel = binary.LittleEndian.Uint32(e)
		if size == offsetEntrySize {
			es[i].v = uint64(binary.LittleEndian.Uint32(e[4:]))
		} else {
			es[i].v = binary.LittleEndian.Uint64(e[4:])
		}
	}
	return es
}

func writeEntries(t *testing.T, fsys vfs.FS, path string, size int, es []idxEntry) {
	t.Helper()
	b := make([]byte, 0, len(es)*size)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint32(b, e.rel)
		if size == offsetEntrySize {
			b = binary.LittleEndian.AppendUint32(b, uint32(e.v))
		} else {
			b = binary.LittleEndian.AppendUint64(b, e.v)
		}
	}
	if err := vfs.WriteFileAtomic(fsys, path, b); err != nil {
		t.Fatal(err)
	}
}

// checkWholeLog reads the log of count messages of size bytes whole and
// from many offsets, and checks OffsetForTime at and just before every
// message's append time (msg(i) is appended at i*1000 µs).
func checkWholeLog(t *testing.T, p partition.Partition, count, size int) {
	t.Helper()
	checkRead(t, p, 0, count+10, count, size)
	for from := 0; from < count; from++ {
		checkRead(t, p, uint64(from), 3, min(3, count-from), size)
	}
	for i := range uint64(count) {
		for _, at := range []int64{int64(i) * 1000, int64(i)*1000 - 1} {
			if i == 0 && at < 0 {
				continue
			}
			got, err := p.OffsetForTime(at)
			if err != nil || got != i {
				t.Fatalf("OffsetForTime(%d) = %d, %v; want %d", at, got, err, i)
			}
		}
	}
}

// TestFileWrongSealedIndexIsRebuilt damages a sealed segment's offset
// index so that exactly one plausibility rule is broken, and checks that
// the open scans the segment instead of trusting it.
func TestFileWrongSealedIndexIsRebuilt(t *testing.T) {
	const count, size = 200, 1000
	ns := mustNS(t, 8, 0, 6)
	for _, c := range []struct {
		name string
		// damage returns the wrong entries for the segment's entries es
		// (at least four) and log file size.
		damage func(es []idxEntry, fileSize int64) []idxEntry
	}{
		// An entry inside a record, closer to the previous one than the
		// index rule allows; everything else about it is in order.
		{"too close", func(es []idxEntry, _ int64) []idxEntry {
			bad := idxEntry{rel: es[0].rel + 1, v: es[0].v + 10}
			return append(append(es[:1:1], bad), es[1:]...)
		}},
		// The last entry moved to the end of the log file: the scan from
		// it reads nothing and the segment would end at its offset.
		{"at the file's end", func(es []idxEntry, fileSize int64) []idxEntry {
			es[len(es)-1].v = uint64(fileSize)
			return es
		}},
		// Two entries' offsets swapped.
		{"out of order", func(es []idxEntry, _ int64) []idxEntry {
			es[1].rel, es[2].rel = es[2].rel, es[1].rel
			return es
		}},
		// Two entries naming the same offset at different positions.
		{"duplicated", func(es []idxEntry, _ int64) []idxEntry {
			es[2].rel = es[1].rel
			return es
		}},
	} {
		// With its time index kept, and without one (a segment written
		// before time indexes existed), so that the time index's own
		// check against the record its last entry names cannot be what
		// catches the damage.
		for _, dropTimes := range []bool{false, true} {
			name := c.name
			if dropTimes {
				name += " without time index"
			}
			t.Run(name, func(t *testing.T) {
				mem, cfg, bases := smallSegmentLog(t, ns, count, 5, size)
				dir := partDir(cfg.Dir, ns)
				path := filepath.Join(dir, segName(bases[1], ".index"))
				es := readEntries(t, mem, path, offsetEntrySize)
				if len(es) < 4 {
					t.Fatalf("segment %d has %d index entries, want at least 4", bases[1], len(es))
				}
				logSize := memFileSize(t, mem, filepath.Join(dir, segName(bases[1], ".log")))
				writeEntries(t, mem, path, offsetEntrySize, c.damage(es, logSize))
				if dropTimes {
					if err := mem.Remove(filepath.Join(dir, segName(bases[1], ".timeindex"))); err != nil {
						t.Fatal(err)
					}
				}
				p := mustBuild(t, newFileStore(t, cfg), ns, 1)
				defer mustClose(t, p)
				checkWholeLog(t, p, count, size)
			})
		}
	}
}

// TestFileWrongSealedTimeIndexIsNotTrusted gives a sealed segment a time
// index whose last entry names the right time but whose entries name
// other offsets than the offset index's, and whose earlier times are
// stale (too early): trusted, a search would start at the last entry and
// answer late. The open must treat it as missing.
func TestFileWrongSealedTimeIndexIsNotTrusted(t *testing.T) {
	const count, size = 200, 1000
	ns := mustNS(t, 8, 0, 7)
	mem, cfg, bases := smallSegmentLog(t, ns, count, 5, size)
	dir := partDir(cfg.Dir, ns)
	path := filepath.Join(dir, segName(bases[1], ".timeindex"))
	es := readEntries(t, mem, path, timeEntrySize)
	if len(es) < 3 {
		t.Fatalf("segment %d has %d time index entries, want at least 3", bases[1], len(es))
	}
	for i := range es {
		es[i].rel += 1 << 20 // names no entry of the offset index
		if i < len(es)-1 {
			es[i].v = 0
		}
	}
	writeEntries(t, mem, path, timeEntrySize, es)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	checkWholeLog(t, p, count, size)
}

// TestFileStaleTailTimeIndexIsRewritten gives the tail a time index that
// matches its offset index entry for entry but holds stale (too early)
// times except in its last entry. The open must rewrite it: kept, the
// file would be trusted once the tail is sealed and the partition
// reopened, and time searches in that segment would answer late.
func TestFileStaleTailTimeIndexIsRewritten(t *testing.T) {
	const count, size = 230, 1000
	ns := mustNS(t, 8, 0, 8)
	mem, cfg, bases := smallSegmentLog(t, ns, count, 5, size)
	dir := partDir(cfg.Dir, ns)
	tail := bases[len(bases)-1]
	path := filepath.Join(dir, segName(tail, ".timeindex"))
	good, err := vfs.ReadFile(mem, path)
	if err != nil {
		t.Fatal(err)
	}
	es := readEntries(t, mem, path, timeEntrySize)
	if len(es) < 3 {
		t.Fatalf("tail %d has %d time index entries, want at least 3", tail, len(es))
	}
	for i := range es[:len(es)-1] {
		es[i].v = 0
	}
	writeEntries(t, mem, path, timeEntrySize, es)

	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	if got, err := vfs.ReadFile(mem, path); err != nil || string(got) != string(good) {
		t.Errorf("tail time index after open: %d stale bytes (%v), want the %d bytes rebuilt from the log", len(got), err, len(good))
	}
	// Seal the tail, then reopen: its time index is now trusted if its
	// offsets match.
	more := count + 60
	fillSegments(t, p, more, 5, size)
	mustClose(t, p)
	if after := memBases(t, mem, dir); after[len(after)-1] == tail {
		t.Fatalf("segment %d not sealed by %d more messages", tail, more-count)
	}
	p = mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	checkWholeLog(t, p, more, size)
}

// TestFileDamagedSealedTimeIndexEntry damages one middle entry of a sealed
// segment's time index, which the open's checks (entries naming the
// offset index's, the last entry's time) cannot see: its time made too
// early, a search would start at that entry and answer late. The search
// checks the record it starts at and, finding the index wrong, searches
// the segment from its start.
func TestFileDamagedSealedTimeIndexEntry(t *testing.T) {
	const count, size = 200, 1000
	ns := mustNS(t, 8, 0, 10)
	mem, cfg, bases := smallSegmentLog(t, ns, count, 5, size)
	dir := partDir(cfg.Dir, ns)
	path := filepath.Join(dir, segName(bases[1], ".timeindex"))
	es := readEntries(t, mem, path, timeEntrySize)
	if len(es) < 3 {
		t.Fatalf("segment %d has %d time index entries, want at least 3", bases[1], len(es))
	}
	es[1].v = 0
	writeEntries(t, mem, path, timeEntrySize, es)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	checkWholeLog(t, p, count, size)
}
