package partition_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// memBases returns the base offsets of the segments in dir, sorted.
func memBases(t *testing.T, fsys vfs.FS, dir string) []uint64 {
	t.Helper()
	var bases []uint64
	for _, n := range memSegments(t, fsys, dir) {
		var b uint64
		if _, err := fmt.Sscanf(n, "%d.log", &b); err != nil {
			t.Fatal(err)
		}
		bases = append(bases, b)
	}
	return bases
}

func memFileSize(t *testing.T, fsys vfs.FS, path string) int64 {
	t.Helper()
	fi, err := fsys.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// flipByte inverts some bits of the byte at pos of path.
func flipByte(t *testing.T, fsys vfs.FS, path string, pos int64) {
	t.Helper()
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

// recordStart returns the file position of the record holding byte pos of
// the segment starting at base, whose messages are msg(off, size).
func recordStart(base uint64, size int, pos int64) (start int64, off uint64) {
	for off = base; ; off++ {
		n := recSize(msg(off, size))
		if start+n > pos {
			return start, off
		}
		start += n
	}
}

// smallSegmentLog builds, on a fresh MemFS with 32 KiB segments, a log of
// count messages of size bytes in batches of n, closes it and returns the
// FS, the config and the segment bases.
func smallSegmentLog(t *testing.T, ns metadata.Namespace, count, n, size int) (*vfs.MemFS, partition.FileConfig, []uint64) {
	t.Helper()
	partition.AllowSmallSegments(t, smallSegment)
	mem := vfs.NewMem()
	cfg := memConfig(mem)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	fillSegments(t, p, count, n, size)
	mustClose(t, p)
	bases := memBases(t, mem, partDir(cfg.Dir, ns))
	if len(bases) < 4 {
		t.Fatalf("only %d segments", len(bases))
	}
	return mem, cfg, bases
}

// TestFileCorruptMiddleSegment damages a record of a sealed segment.
// Wherever the damage is found — by the open (with VerifyOnOpen, or after
// the segment's last index entry) or by the read that reaches it — the
// records below it and after it are served, the read that reaches it gets
// a *CorruptError naming the file and the damaged record's byte position,
// and appends go on at the tail (the damage is not where they go, so no
// offset can be reused).
func TestFileCorruptMiddleSegment(t *testing.T) {
	const size = 500
	ns := mustNS(t, 8, 0, 1)
	for _, c := range []struct {
		name string
		at   func(segSize int64, base uint64) int64 // byte to damage in the middle segment
	}{
		{"payload", func(n int64, _ uint64) int64 { return n / 2 }},
		{"length field", func(n int64, base uint64) int64 { s, _ := recordStart(base, size, n/2); return s + 5 }},
		{"near the end", func(n int64, _ uint64) int64 { return n - 10 }},
	} {
		for _, verify := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/verify=%v", c.name, verify), func(t *testing.T) {
				mem, cfg, bases := smallSegmentLog(t, ns, 300, 5, size)
				cfg.VerifyOnOpen = verify
				dir := partDir(cfg.Dir, ns)
				mid := filepath.Join(dir, segName(bases[1], ".log"))
				pos := c.at(memFileSize(t, mem, mid), bases[1])
				// The segment's messages start at bases[1]; positions are
				// relative to the segment.
				wantPos, wantOff := recordStart(bases[1], size, pos)
				flipByte(t, mem, mid, pos)

				checkErr := func(err error, what string) {
					t.Helper()
					var ce *partition.CorruptError
					if !errors.As(err, &ce) || !errors.Is(err, partition.ErrCorrupt) || ce.Path != mid || ce.Offset != wantPos {
						t.Fatalf("%s: %v, want a *CorruptError for %s at byte %d (the record of offset %d)", what, err, mid, wantPos, wantOff)
					}
				}
				p, err := newFileStore(t, cfg).Build(ns, 1)
				if err != nil {
					t.Fatalf("Build: %v (a damaged sealed segment opens, its damage reported by the reads that reach it)", err)
				}
				defer mustClose(t, p)
				checkRead(t, p, 0, 1000, int(wantOff), size) // stops below the damage
				_, err = p.Read(wantOff, 1)
				checkErr(err, "Read of the damaged record")
				checkRead(t, p, 0, int(wantOff), int(wantOff), size)
				// The records after it, in its segment and beyond, are read.
				checkRead(t, p, wantOff+1, 1000, int(p.NextOffset()-wantOff-1), size)
				checkRead(t, p, bases[2], 1000, int(p.NextOffset()-bases[2]), size)
				// Retention by age has to read the segment for its newest
				// timestamp, and must report the damage rather than skip it:
				// it removes the segment before and stops there.
				if _, err := p.EnforceRetention(math.MaxInt64, 0); !errors.Is(err, partition.ErrCorrupt) || p.StartOffset() != bases[1] {
					t.Fatalf("EnforceRetention by age over the damaged segment: %v, start %d; want ErrCorrupt, start %d", err, p.StartOffset(), bases[1])
				}
				// The size bound still holds: the damaged segment goes too.
				if _, err := p.EnforceRetention(math.MaxInt64, 1); !errors.Is(err, partition.ErrCorrupt) || p.StartOffset() != bases[len(bases)-1] {
					t.Fatalf("EnforceRetention by size: %v, start %d; want ErrCorrupt, start %d", err, p.StartOffset(), bases[len(bases)-1])
				}
				if _, err := p.EnforceRetention(math.MaxInt64, 1); err != nil {
					t.Fatalf("EnforceRetention once the damage is gone: %v", err)
				}
				next := p.NextOffset()
				mustAppend(t, p, batch(next, 5, size))
				checkRead(t, p, next, 10, 5, size)
			})
		}
	}
}

// TestFileTailDamageIsNotTruncated damages a record in the middle of the
// tail segment: the records after it were written after it, so this is
// damage, not a torn write. Nothing is truncated, no offset is handed out
// again: NextOffset stays past the last whole record, the records below
// the damage and after it are read, the damaged one is a *CorruptError
// with file and byte position, and appends are refused with it. A purge
// lifts the fence: the damaged segment is deleted and appends go on at
// NextOffset.
func TestFileTailDamageIsNotTruncated(t *testing.T) {
	const size = 500
	ns := mustNS(t, 8, 0, 2)
	for _, c := range []struct {
		name string
		at   func(n int64) int64
	}{
		{"middle", func(n int64) int64 { return n / 2 }},
		{"second-last record", func(n int64) int64 { return n - recSize(msg(0, size)) - 100 }},
		{"length field", func(n int64) int64 { return n/2 + 5 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem, cfg, bases := smallSegmentLog(t, ns, 300, 5, size)
			dir := partDir(cfg.Dir, ns)
			tailBase := bases[len(bases)-1]
			tail := filepath.Join(dir, segName(tailBase, ".log"))
			tailSize := memFileSize(t, mem, tail)
			pos := c.at(tailSize)
			wantPos, wantOff := recordStart(tailBase, size, pos)
			if c.name == "length field" {
				wantPos, wantOff = recordStart(tailBase, size, tailSize/2)
				pos = wantPos + 5
			}
			flipByte(t, mem, tail, pos)

			p := mustBuild(t, newFileStore(t, cfg), ns, 1)
			if p.NextOffset() != 300 {
				t.Fatalf("NextOffset %d, want 300: acknowledged records after the damage were dropped", p.NextOffset())
			}
			if got := memFileSize(t, mem, tail); got != tailSize {
				t.Fatalf("tail is %d bytes, want it untouched at %d", got, tailSize)
			}
			var ce *partition.CorruptError
			_, err := p.Read(wantOff, 10)
			if !errors.As(err, &ce) || ce.Path != tail || ce.Offset != wantPos {
				t.Fatalf("Read of the damaged record: %v, want a *CorruptError for %s at byte %d", err, tail, wantPos)
			}
			checkRead(t, p, 0, 1000, int(wantOff), size)
			checkRead(t, p, wantOff+1, 1000, int(300-wantOff-1), size)
			_, err = p.Append(batch(300, 1, size))
			if !errors.As(err, &ce) || ce.Path != tail || ce.Offset != wantPos {
				t.Fatalf("Append to a partition with a damaged tail: %v, want the *CorruptError", err)
			}
			if err := p.(partition.Damaged).Damage(); !errors.As(err, &ce) || ce.Offset != wantPos {
				t.Fatalf("Damage(): %v, want the *CorruptError at byte %d", err, wantPos)
			}
			if err := p.SkipTo(400); !errors.Is(err, partition.ErrCorrupt) {
				t.Fatalf("SkipTo past a damaged tail: %v, want ErrCorrupt", err)
			}
			mustClose(t, p)

			// Reopened, the same: the damage is reported again.
			p = mustBuild(t, newFileStore(t, cfg), ns, 1)
			if _, err := p.Append(batch(300, 1, size)); !errors.Is(err, partition.ErrCorrupt) || p.NextOffset() != 300 {
				t.Fatalf("Append after a reopen: %v (next %d), want ErrCorrupt at 300", err, p.NextOffset())
			}
			// A purge accepts the loss: appends go on at 300.
			if err := p.TruncateBefore(300); err != nil {
				t.Fatal(err)
			}
			if err := p.(partition.Damaged).Damage(); err != nil {
				t.Fatalf("Damage() after the purge: %v, want nil", err)
			}
			mustAppend(t, p, batch(300, 5, size))
			mustClose(t, p)
			p = mustBuild(t, newFileStore(t, cfg), ns, 1)
			defer mustClose(t, p)
			if p.StartOffset() != 300 || p.NextOffset() != 305 {
				t.Fatalf("after the purge: start %d next %d, want 300 and 305", p.StartOffset(), p.NextOffset())
			}
			checkRead(t, p, 300, 10, 5, size)
			if _, err := mem.Stat(tail); err == nil {
				t.Fatalf("the damaged segment %s is still there after the purge", tail)
			}
		})
	}
}

// TestFileTornTailIsTruncated: what is not followed by a whole record is
// a torn final write, repaired silently: a last record cut short, garbage
// after the last record, zeros after it.
func TestFileTornTailIsTruncated(t *testing.T) {
	const size = 500
	ns := mustNS(t, 8, 0, 9)
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, f vfs.File, n int64) // n: the file's size
		want   uint64                                  // NextOffset after the repair
	}{
		{"last record cut", func(t *testing.T, f vfs.File, n int64) {
			if err := f.Truncate(n - 100); err != nil {
				t.Fatal(err)
			}
		}, 299},
		{"last record's header cut", func(t *testing.T, f vfs.File, n int64) {
			if err := f.Truncate(n - recSize(msg(299, size)) + 20); err != nil {
				t.Fatal(err)
			}
		}, 299},
		{"garbage after the last record", func(t *testing.T, f vfs.File, n int64) {
			g := make([]byte, 3000)
			for i := range g {
				g[i] = byte(i*7 + 1)
			}
			if _, err := f.WriteAt(g, n); err != nil {
				t.Fatal(err)
			}
		}, 300},
		{"zeros after the last record", func(t *testing.T, f vfs.File, n int64) {
			if _, err := f.WriteAt(make([]byte, 5000), n); err != nil {
				t.Fatal(err)
			}
		}, 300},
		{"an unwritten sector in the last record", func(t *testing.T, f vfs.File, n int64) {
			// A sector of the last write that never reached the disk
			// reads as zeros (package tail's rule).
			from := (n - recSize(msg(299, size))) / 512 * 512
			if from < n-recSize(msg(299, size)) {
				from += 512
			}
			if _, err := f.WriteAt(make([]byte, min(512, n-from)), from); err != nil {
				t.Fatal(err)
			}
		}, 299},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem, cfg, bases := smallSegmentLog(t, ns, 300, 5, size)
			tail := filepath.Join(partDir(cfg.Dir, ns), segName(bases[len(bases)-1], ".log"))
			n := memFileSize(t, mem, tail)
			f, err := mem.OpenFile(tail, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			c.damage(t, f, n)
			f.Close()
			p := mustBuild(t, newFileStore(t, cfg), ns, 1)
			defer mustClose(t, p)
			if p.NextOffset() != c.want {
				t.Fatalf("NextOffset %d, want %d", p.NextOffset(), c.want)
			}
			checkRead(t, p, 0, 1000, int(c.want), size)
			mustAppend(t, p, batch(c.want, 5, size))
			checkRead(t, p, 0, 1000, int(c.want)+5, size)
		})
	}
}

// TestFileFinalRecordWrittenWholeIsDamage: a tail segment's last record,
// with nothing after it, of its whole length and with no unwritten sector,
// that fails its checksum (a byte flipped in its payload, its checksum or
// its header's offset) was written whole and damaged since: not a torn
// write (package tail's rule, every log's). It is not truncated: the file
// is left as it is, its offset is a hole that reads as the
// *CorruptError, the log's end stays past it and writes are refused with
// the error, so the offset is never given out again.
func TestFileFinalRecordWrittenWholeIsDamage(t *testing.T) {
	const size = 500
	ns := mustNS(t, 8, 0, 9)
	for _, c := range []struct {
		name string
		at   func(n int64) int64 // the byte flipped, in a file of n bytes
	}{
		{"payload", func(n int64) int64 { return n - 10 }},
		{"checksum", func(n int64) int64 { return n - recSize(msg(299, size)) + 1 }},
		{"offset field", func(n int64) int64 { return n - recSize(msg(299, size)) + 9 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem, cfg, bases := smallSegmentLog(t, ns, 300, 5, size)
			tail := filepath.Join(partDir(cfg.Dir, ns), segName(bases[len(bases)-1], ".log"))
			n := memFileSize(t, mem, tail)
			f, err := mem.OpenFile(tail, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			b := []byte{0}
			f.ReadAt(b, c.at(n))
			b[0] ^= 0x5a
			if _, err := f.WriteAt(b, c.at(n)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			p := mustBuild(t, newFileStore(t, cfg), ns, 1)
			defer mustClose(t, p)
			if p.NextOffset() != 300 {
				t.Fatalf("NextOffset %d, want 300: the damaged last record was dropped as a torn write", p.NextOffset())
			}
			if memFileSize(t, mem, tail) != n {
				t.Fatal("the damaged tail segment was truncated")
			}
			checkRead(t, p, 0, 1000, 299, size)
			var ce *partition.CorruptError
			if _, err := p.Read(299, 1); !errors.As(err, &ce) || ce.Path != tail || ce.Offset != n-recSize(msg(299, size)) {
				t.Fatalf("Read at the damaged offset: %v, want a *CorruptError for %s at byte %d", err, tail, n-recSize(msg(299, size)))
			}
			if _, err := p.Append(batch(300, 1, size)); !errors.As(err, &ce) {
				t.Fatalf("Append to a log whose last record is damaged: %v, want the *CorruptError", err)
			}
			if d, ok := p.(partition.Damaged); !ok || d.Damage() == nil {
				t.Fatal("Damage() reports nothing")
			}
		})
	}
}

// TestFileFinalRecordDamageAfterAHole: a tail segment's last record
// written whole and damaged since is damage whatever came before it. With
// a damaged record earlier in the file as well (a hole, with whole records
// after it), the last one is judged by the same rule as when it is the
// only damage: its offset is a hole too, the log's end stays past it and
// no offset is reused — on the node's open, on a reopen (the rebuild after
// a fence) and on a read-only open alike. (Single-node simulator seed
// 5736: the last record's field lengths damaged, another record before it
// damaged later; the rebuild judged the last one only when nothing came
// before it, and opened with the acknowledged last offset gone.) On the
// real filesystem.
func TestFileFinalRecordDamageAfterAHole(t *testing.T) {
	const size, count = 100, 20
	ns := mustNS(t, 8, 0, 11)
	pos := make([]int64, count+1) // pos[i]: where record i starts
	for i := range count {
		pos[i+1] = pos[i] + recSize(msg(uint64(i), size))
	}
	for _, c := range []struct {
		name string
		at   int64 // the byte of the last record flipped, from its start
		mask byte
	}{
		{"payload", recSize(msg(count-1, size)) - 10, 0x5a},
		{"field length", 53, 0x08}, // seed 5736's: a key/header/payload length, by 2048
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := partition.FileConfig{Dir: dir, SegmentSize: mib}
			p := mustBuild(t, newFileStore(t, cfg), ns, 1)
			mustAppend(t, p, batch(0, count, size))
			mustClose(t, p)
			seg := filepath.Join(partDir(dir, ns), segName(0, ".log"))
			n := fileSize(t, seg)
			if n < pos[count] {
				t.Fatalf("segment is %d bytes, want at least %d", n, pos[count])
			}
			flip := func(at int64, mask byte) {
				f, err := os.OpenFile(seg, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				b := []byte{0}
				if _, err := f.ReadAt(b, at); err != nil {
					t.Fatal(err)
				}
				b[0] ^= mask
				if _, err := f.WriteAt(b, at); err != nil {
					t.Fatal(err)
				}
			}
			flip(pos[count-1]+c.at, c.mask)
			flip(pos[5]+70, 0x5a) // record 5's payload

			check := func(p partition.Partition, writable bool) {
				t.Helper()
				if p.NextOffset() != count {
					t.Fatalf("NextOffset %d, want %d: the damaged last record was taken for a torn write", p.NextOffset(), count)
				}
				checkRead(t, p, 0, 1000, 5, size)
				checkRead(t, p, 6, 13, 13, size)
				for _, off := range []uint64{5, count - 1} {
					var ce *partition.CorruptError
					if _, err := p.Read(off, 1); !errors.As(err, &ce) || ce.Path != seg || ce.Offset != pos[off] {
						t.Fatalf("Read(%d): %v, want a *CorruptError for %s at byte %d", off, err, seg, pos[off])
					}
				}
				if !writable {
					return
				}
				if _, err := p.Append(batch(count, 1, size)); !errors.Is(err, partition.ErrCorrupt) || p.NextOffset() != count {
					t.Fatalf("Append: %v (next %d), want ErrCorrupt at %d", err, p.NextOffset(), count)
				}
			}
			for range 2 { // the open, then the rebuild's
				p = mustBuild(t, newFileStore(t, cfg), ns, 1)
				check(p, true)
				mustClose(t, p)
				if got := fileSize(t, seg); got != n {
					t.Fatalf("segment is %d bytes, want it untouched at %d", got, n)
				}
			}
			ro, err := partition.OpenReadOnlyStore(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			rp := mustBuild(t, ro, ns, 1)
			check(rp, false)
			mustClose(t, rp)
		})
	}
}

// Repairing a torn tail is part of opening it: if the truncation back to
// the last whole record, or its fsync, fails, the Build fails with that
// error (it never serves a tail whose repair is not durable), and a later
// Build repairs it.
func TestFileTailRepairFailureFailsTheBuild(t *testing.T) {
	const size = 500
	for _, op := range []errorfs.OpKind{errorfs.OpTruncate, errorfs.OpSync} {
		t.Run(op.String(), func(t *testing.T) {
			ns := mustNS(t, 8, 0, 4)
			mem, cfg, bases := smallSegmentLog(t, ns, 300, 5, size)
			dir := partDir(cfg.Dir, ns)
			tailBase := bases[len(bases)-1]
			tail := filepath.Join(dir, segName(tailBase, ".log"))
			// A torn last record: the tail ends 100 bytes into it.
			f, err := mem.OpenFile(tail, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(memFileSize(t, mem, tail) - recSize(msg(299, size)) + 100); err != nil {
				t.Fatal(err)
			}
			f.Close()
			const wantOff = 299

			sw := errorfs.NewSwitch(syscall.EIO, op)
			sw.Set(true)
			cfg.FS = errorfs.New(mem, sw)
			p, err := newFileStore(t, cfg).Build(ns, 1)
			sw.Set(false)
			if err == nil {
				mustClose(t, p)
			}
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("Build whose tail repair fails (%v): %v, want EIO", op, err)
			}
			p = mustBuild(t, newFileStore(t, cfg), ns, 1)
			defer mustClose(t, p)
			if p.NextOffset() != wantOff {
				t.Fatalf("NextOffset %d after the repair, want %d", p.NextOffset(), wantOff)
			}
		})
	}
}

// An empty tail segment whose offset index file is missing (its time
// index is there) opens: the index file is written again, and appends and
// reads go on.
func TestFileEmptyTailWithoutItsIndexOpens(t *testing.T) {
	mem := vfs.NewMem()
	cfg := partition.FileConfig{Dir: "/data", FS: mem}
	ns := mustNS(t, 8, 0, 5)
	mustClose(t, mustBuild(t, newFileStore(t, cfg), ns, 1))
	index := filepath.Join(partDir(cfg.Dir, ns), segName(0, ".index"))
	if err := mem.Remove(index); err != nil {
		t.Fatal(err)
	}
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	if _, err := mem.Stat(index); err != nil {
		t.Fatalf("index file not written again: %v", err)
	}
	mustAppend(t, p, batch(0, 3, 10))
	mustClose(t, p)
	p = mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	checkRead(t, p, 0, 10, 3, 10)
}

// TestFileIndexRepairMem damages every index file on MemFS (the OS variant
// is TestFileIndexRebuild): truncated to a torn entry, or missing. Reads
// stay correct and the index files are rewritten as they were.
func TestFileIndexRepairMem(t *testing.T) {
	const size = 500
	ns := mustNS(t, 8, 0, 3)
	for _, damage := range []string{"truncated", "missing"} {
		t.Run(damage, func(t *testing.T) {
			mem, cfg, bases := smallSegmentLog(t, ns, 300, 5, size)
			dir := partDir(cfg.Dir, ns)
			before := map[string][]byte{}
			for _, b := range bases {
				path := filepath.Join(dir, segName(b, ".index"))
				data, err := vfs.ReadFile(mem, path)
				if err != nil || len(data) < 16 {
					t.Fatalf("index %s: %d bytes, %v", path, len(data), err)
				}
				before[path] = data
				if damage == "missing" {
					err = mem.Remove(path)
				} else {
					err = vfs.WriteFileAtomic(mem, path, data[:len(data)-11])
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			p := mustBuild(t, newFileStore(t, cfg), ns, 1)
			defer mustClose(t, p)
			checkRead(t, p, 0, 1000, 300, size)
			for from := uint64(0); from < 300; from += 7 {
				checkRead(t, p, from, 2, 2, size)
			}
			for path, want := range before {
				if got, err := vfs.ReadFile(mem, path); err != nil || string(got) != string(want) {
					t.Fatalf("index %s rebuilt as %d bytes (%v), want %d", path, len(got), err, len(want))
				}
			}
		})
	}
}

func TestFileRetention(t *testing.T) {
	const size = 3000
	ns := mustNS(t, 8, 1, 0)
	mem, cfg, bases := smallSegmentLog(t, ns, 100, 1, size)
	dir := partDir(cfg.Dir, ns)
	segBytes := func(base uint64) int64 { return memFileSize(t, mem, filepath.Join(dir, segName(base, ".log"))) }
	var total int64
	for _, b := range bases {
		total += segBytes(b)
	}
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	if p.Size() != total {
		t.Fatalf("Size = %d, want the segments' %d bytes", p.Size(), total)
	}

	// "Older than" is strict: a bound equal to the first segment's newest
	// timestamp keeps it.
	if n, err := p.EnforceRetention(msg(bases[1]-1, size).Timestamp, 0); n != 0 || err != nil || p.StartOffset() != 0 {
		t.Fatalf("bound equal to the newest timestamp: removed %d, %v, StartOffset %d; want nothing", n, err, p.StartOffset())
	}

	// By age: msg(i) is stamped i*1000, so a segment is older than the
	// first message of bases[2] iff it ends before it.
	n, err := p.EnforceRetention(msg(bases[2], size).Timestamp, 0)
	if err != nil || n != bases[2] || p.StartOffset() != bases[2] {
		t.Fatalf("by age: removed %d, %v, StartOffset %d; want %d", n, err, p.StartOffset(), bases[2])
	}
	if got := memBases(t, mem, dir); !slices.Equal(got, bases[2:]) {
		t.Fatalf("segments %v after retention by age, want %v", got, bases[2:])
	}
	total = 0
	for _, b := range bases[2:] {
		total += segBytes(b)
	}
	if p.Size() != total {
		t.Fatalf("Size = %d after retention, want %d", p.Size(), total)
	}

	// By size: exactly one segment has to go to fit.
	seg2 := segBytes(bases[2])
	n, err = p.EnforceRetention(0, total-seg2)
	if err != nil || n != bases[3]-bases[2] || p.StartOffset() != bases[3] {
		t.Fatalf("by size: removed %d, %v, StartOffset %d; want %d, %d", n, err, p.StartOffset(), bases[3]-bases[2], bases[3])
	}
	checkRead(t, p, bases[3], 1000, int(100-bases[3]), size)

	// By size: two segments have to go at once.
	total -= seg2
	n, err = p.EnforceRetention(0, total-segBytes(bases[3])-segBytes(bases[4]))
	if err != nil || n != bases[5]-bases[3] || p.StartOffset() != bases[5] {
		t.Fatalf("by size, two segments: removed %d, %v, StartOffset %d; want %d, %d", n, err, p.StartOffset(), bases[5]-bases[3], bases[5])
	}
	if got := memBases(t, mem, dir); !slices.Equal(got, bases[5:]) {
		t.Fatalf("segments %v after retention by size, want %v", got, bases[5:])
	}

	// The active segment is never removed, however small the limit.
	tailBase := bases[len(bases)-1]
	n, err = p.EnforceRetention(math.MaxInt64, 1)
	if err != nil || n != tailBase-bases[5] || p.StartOffset() != tailBase {
		t.Fatalf("everything: removed %d, %v, StartOffset %d; want %d", n, err, p.StartOffset(), tailBase)
	}
	if n, err := p.EnforceRetention(math.MaxInt64, 1); n != 0 || err != nil {
		t.Fatalf("again: %d, %v", n, err)
	}
	if got := memBases(t, mem, dir); !slices.Equal(got, []uint64{tailBase}) {
		t.Fatalf("segments %v, want only the tail %d", got, tailBase)
	}
	checkRead(t, p, tailBase, 1000, int(100-tailBase), size)
	mustAppend(t, p, batch(100, 1, size))
	mustClose(t, p)

	p = mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	if p.StartOffset() != tailBase || p.NextOffset() != 101 {
		t.Fatalf("reopened: StartOffset %d NextOffset %d", p.StartOffset(), p.NextOffset())
	}
	checkRead(t, p, tailBase, 1000, int(101-tailBase), size)
}

// Segments left below the start by a failed deletion are not retention's
// or a time search's to judge again: they are never read (their files are
// closed), and the next retention pass deletes them along with what its
// bounds remove.
func TestFileRetentionAfterAFailedDeletion(t *testing.T) {
	const size = 3000
	ns := mustNS(t, 8, 1, 1)
	mem, cfg, bases := smallSegmentLog(t, ns, 100, 1, size)
	dir := partDir(cfg.Dir, ns)
	// The first segment has no time index (as one written before time
	// indexes were): a time search would have to read it.
	if err := mem.Remove(filepath.Join(dir, segName(bases[0], ".timeindex"))); err != nil {
		t.Fatal(err)
	}
	sw := errorfs.NewSwitch(syscall.EIO, errorfs.OpRemove)
	cfg.FS = errorfs.New(mem, sw)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	sw.Set(true)
	// The first segment ends exactly at the new start.
	if err := p.TruncateBefore(bases[1]); !errors.Is(err, syscall.EIO) {
		t.Fatalf("TruncateBefore with deletions failing: %v, want EIO", err)
	}
	sw.Set(false)
	if off, err := p.OffsetForTime(0); err != nil || off != bases[1] {
		t.Fatalf("OffsetForTime(0) after a failed deletion: %d, %v; want the start %d", off, err, bases[1])
	}
	n, err := p.EnforceRetention(msg(bases[3], size).Timestamp, 0)
	if err != nil || n != bases[3]-bases[1] || p.StartOffset() != bases[3] {
		t.Fatalf("by age after a failed deletion: removed %d, %v, StartOffset %d; want %d, %d", n, err, p.StartOffset(), bases[3]-bases[1], bases[3])
	}
	if got := memBases(t, mem, dir); !slices.Equal(got, bases[3:]) {
		t.Fatalf("segments %v, want %v", got, bases[3:])
	}
	checkRead(t, p, bases[3], 1000, int(100-bases[3]), size)
}

// Age retention reads a sealed segment whose newest timestamp is unknown;
// a segment whose records stop short of its size (zeros where records
// were: a lost write) is damage, reported, never judged by the records
// before the zeros.
func TestFileRetentionReportsAShortSealedSegment(t *testing.T) {
	const size = 3000
	ns := mustNS(t, 8, 1, 2)
	mem, cfg, bases := smallSegmentLog(t, ns, 100, 1, size)
	dir := partDir(cfg.Dir, ns)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	path := filepath.Join(dir, segName(bases[0], ".log"))
	from, _ := recordStart(bases[0], size, memFileSize(t, mem, path)/2)
	f, err := mem.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, memFileSize(t, mem, path)-from), from); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n, err := p.EnforceRetention(msg(bases[1], size).Timestamp, 0); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("retention over a zeroed sealed segment: removed %d, %v; want ErrCorrupt", n, err)
	}
}

// A record whose lengths agree with each other but run past the segment's
// logical size (damage a checksum cannot be checked for until the record
// is read whole) is a *CorruptError for Read, never a read past the end.
func TestFileReadOfARecordClaimingPastTheEnd(t *testing.T) {
	const size = 3000
	ns := mustNS(t, 8, 1, 3)
	mem, cfg, bases := smallSegmentLog(t, ns, 100, 1, size)
	i := 1
	for bases[i]%3 == 0 { // a first record without headers
		i++
	}
	path := filepath.Join(partDir(cfg.Dir, ns), segName(bases[i], ".log"))
	f, err := mem.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	const claimed = 1 << 20 // far past the 32 KiB segment
	var length, payloadLen [4]byte
	binary.LittleEndian.PutUint32(length[:], 1<<31|claimed) // format 2
	binary.LittleEndian.PutUint32(payloadLen[:], claimed-60)
	if _, err := f.WriteAt(length[:], 4); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(payloadLen[:], 56); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	if got, err := p.Read(bases[i], 10); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("Read of a record claiming %d bytes: %d messages, %v; want ErrCorrupt", claimed, len(got), err)
	}
}

// A sealed segment opened without its time index rebuilds it at the
// first search by time; writing the rebuilt file is best effort, so a
// failed write costs the search nothing.
func TestFileTimeIndexRebuildSurvivesAFailedWrite(t *testing.T) {
	const size = 3000
	ns := mustNS(t, 8, 1, 4)
	mem, cfg, bases := smallSegmentLog(t, ns, 100, 1, size)
	if err := mem.Remove(filepath.Join(partDir(cfg.Dir, ns), segName(bases[0], ".timeindex"))); err != nil {
		t.Fatal(err)
	}
	sw := errorfs.NewSwitch(syscall.EIO, errorfs.OpWrite, errorfs.OpWriteAt)
	cfg.FS = errorfs.New(mem, sw)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	sw.Set(true)
	off, err := p.OffsetForTime(msg(bases[0]+1, size).Timestamp)
	sw.Set(false)
	defer mustClose(t, p)
	if err != nil || off != bases[0]+1 {
		t.Fatalf("OffsetForTime with the time index write failing: %d, %v; want %d", off, err, bases[0]+1)
	}
}

// TestFileRetentionTimestamps checks age retention with timestamps that
// are not monotonic (producers set them): a segment's newest timestamp is
// its largest, found by reading the segment after a reopen (the open
// only scans sealed segments from their last index entry).
func TestFileRetentionTimestamps(t *testing.T) {
	const size = 3000
	partition.AllowSmallSegments(t, smallSegment)
	mem := vfs.NewMem()
	cfg := memConfig(mem)
	ns := mustNS(t, 8, 1, 1)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	for i := range uint64(60) {
		m := msg(i, size)
		if i == 3 {
			m.Timestamp = 1 << 50 // far in the future, early in segment 0
		}
		mustAppend(t, p, []partition.Message{m})
	}
	mustClose(t, p)
	// The outlier must sit in a sealed segment with later ones behind it,
	// or keeping everything proves nothing.
	if bases := memBases(t, mem, partDir(cfg.Dir, ns)); len(bases) < 3 {
		t.Fatalf("segments %v: want at least 3", bases)
	}
	for _, reopen := range []bool{false, true} {
		st := newFileStore(t, cfg)
		p := mustBuild(t, st, ns, 1)
		if n, err := p.EnforceRetention(60_000, 0); n != 0 || err != nil {
			t.Fatalf("reopen %v: a new message in the first segment must keep it (and the later ones): removed %d, %v", reopen, n, err)
		}
		mustClose(t, p)
	}
	// Rewrite without the outlier: now the first two segments go, also
	// after a reopen that has not read their timestamps yet.
	mem = vfs.NewMem()
	cfg = memConfig(mem)
	p = mustBuild(t, newFileStore(t, cfg), ns, 1)
	fillSegments(t, p, 60, 1, size)
	mustClose(t, p)
	bases := memBases(t, mem, partDir(cfg.Dir, ns))
	p = mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	if n, err := p.EnforceRetention(msg(bases[2], size).Timestamp, 0); n != bases[2] || err != nil {
		t.Fatalf("after reopen: removed %d, %v; want %d", n, err, bases[2])
	}
}

func TestFileTruncateDeletesSegments(t *testing.T) {
	const size = 500
	ns := mustNS(t, 8, 2, 0)
	mem, cfg, bases := smallSegmentLog(t, ns, 300, 5, size)
	dir := partDir(cfg.Dir, ns)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	before := p.Size()
	cut := bases[2] + 3 // inside segment 2
	if err := p.TruncateBefore(cut); err != nil {
		t.Fatal(err)
	}
	if got := memBases(t, mem, dir); !slices.Equal(got, bases[2:]) {
		t.Fatalf("segments %v, want %v", got, bases[2:])
	}
	var gone int64
	for _, b := range bases[:2] {
		for off := b; off < bases[slices.Index(bases, b)+1]; off++ {
			gone += recSize(msg(off, size))
		}
	}
	if p.Size() != before-gone {
		t.Fatalf("Size %d, want %d", p.Size(), before-gone)
	}
	checkRead(t, p, cut, 1000, int(300-cut), size)
	if start, err := vfs.ReadFile(mem, filepath.Join(dir, "start")); err != nil || strings.TrimSpace(string(start)) != fmt.Sprint(cut) {
		t.Fatalf("start file %q, %v", start, err)
	}
	mustClose(t, p)

	// The same at a segment boundary: a start offset that is exactly the
	// next segment's base leaves every message of the segment before it
	// below the start, so that segment is deleted too — unread: damage in
	// it (it was being deleted) cannot fail the Build.
	if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, "start"), []byte(fmt.Sprint(bases[3]))); err != nil {
		t.Fatal(err)
	}
	below := filepath.Join(dir, fmt.Sprintf("%020d.log", bases[2]))
	flipByte(t, mem, below, memFileSize(t, mem, below)-1)
	p = mustBuild(t, newFileStore(t, cfg), ns, 1)
	if p.StartOffset() != bases[3] {
		t.Fatalf("StartOffset %d, want %d", p.StartOffset(), bases[3])
	}
	if got := memBases(t, mem, dir); !slices.Equal(got, bases[3:]) {
		t.Fatalf("segments %v after reopen at a segment boundary, want %v", got, bases[3:])
	}
	checkRead(t, p, bases[3], 1000, int(300-bases[3]), size)
	mustClose(t, p)

	// A crash after the start file was written but before the segments
	// below it were deleted: the reopen deletes them.
	if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, "start"), []byte(fmt.Sprint(bases[4]+1))); err != nil {
		t.Fatal(err)
	}
	p = mustBuild(t, newFileStore(t, cfg), ns, 1)
	if p.StartOffset() != bases[4]+1 {
		t.Fatalf("StartOffset %d, want %d", p.StartOffset(), bases[4]+1)
	}
	if got := memBases(t, mem, dir); !slices.Equal(got, bases[4:]) {
		t.Fatalf("segments %v after reopen, want %v", got, bases[4:])
	}
	checkRead(t, p, bases[4]+1, 1000, int(300-bases[4]-1), size)
	mustClose(t, p)

	// A start offset past the log's end (an fsync that lied): the log
	// restarts empty there, and offsets are not reused.
	if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, "start"), []byte("310\n")); err != nil {
		t.Fatal(err)
	}
	p = mustBuild(t, newFileStore(t, cfg), ns, 1)
	if p.StartOffset() != 310 || p.NextOffset() != 310 || p.Size() != 0 {
		t.Fatalf("StartOffset %d NextOffset %d Size %d, want 310, 310, 0", p.StartOffset(), p.NextOffset(), p.Size())
	}
	mustAppend(t, p, batch(310, 2, size))
	checkRead(t, p, 310, 10, 2, size)
	mustClose(t, p)
	if got := memBases(t, mem, dir); !slices.Equal(got, []uint64{310}) {
		t.Fatalf("segments %v, want [310]", got)
	}

	// An unparsable start file is damage, reported with its path.
	if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, "start"), []byte("x1")); err != nil {
		t.Fatal(err)
	}
	var ce *partition.CorruptError
	if _, err := newFileStore(t, cfg).Build(ns, 1); !errors.As(err, &ce) || ce.Path != filepath.Join(dir, "start") {
		t.Fatalf("Build with a damaged start file: %v", err)
	}
}

// A truncation whose segment files cannot be deleted reports the error;
// the segments stay listed and the next truncation deletes them.
func TestFileTruncateReportsAFailedSegmentDeletion(t *testing.T) {
	const size = 500
	ns := mustNS(t, 8, 2, 1)
	mem, cfg, bases := smallSegmentLog(t, ns, 300, 5, size)
	dir := partDir(cfg.Dir, ns)
	sw := errorfs.NewSwitch(syscall.EIO, errorfs.OpRemove)
	cfg.FS = errorfs.New(mem, sw)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	cut := bases[2] + 3
	sw.Set(true)
	if err := p.TruncateBefore(cut); !errors.Is(err, syscall.EIO) {
		t.Fatalf("TruncateBefore with deletions failing: %v, want EIO", err)
	}
	sw.Set(false)
	if got := memBases(t, mem, dir); !slices.Equal(got, bases) {
		t.Fatalf("segments %v after failed deletions, want all of %v", got, bases)
	}
	if p.StartOffset() != cut {
		t.Fatalf("StartOffset %d, want %d", p.StartOffset(), cut)
	}
	if err := p.TruncateBefore(cut); err != nil {
		t.Fatalf("TruncateBefore retried: %v", err)
	}
	if got := memBases(t, mem, dir); !slices.Equal(got, bases[2:]) {
		t.Fatalf("segments %v after the retry, want %v", got, bases[2:])
	}
	checkRead(t, p, cut, 1000, int(300-cut), size)
}

// A purge (TruncateBefore(NextOffset)) or SkipTo(NextOffset) of a log
// whose tail is empty — a crash right after a roll created it — keeps that
// tail: it holds nothing to seal, and sealing it would leave a new segment
// with the same base, whose files the deletion of the old one would take.
// Messages appended afterwards survive a reopen.
func TestFilePurgeAndSkipKeepAnEmptyTail(t *testing.T) {
	const size = 500
	for _, c := range []struct {
		name string
		cut  func(partition.Partition) error
	}{
		{"purge", func(p partition.Partition) error { return p.TruncateBefore(p.NextOffset()) }},
		{"skip to the end", func(p partition.Partition) error { return p.SkipTo(p.NextOffset()) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := mustNS(t, 8, 2, 2)
			mem, cfg, _ := smallSegmentLog(t, ns, 300, 5, size)
			dir := partDir(cfg.Dir, ns)
			// The crash point: a roll created the next segment, nothing
			// was written to it.
			f, err := mem.OpenFile(filepath.Join(dir, segName(300, ".log")), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			p := mustBuild(t, newFileStore(t, cfg), ns, 1)
			if p.NextOffset() != 300 {
				t.Fatalf("NextOffset %d, want 300", p.NextOffset())
			}
			if err := c.cut(p); err != nil {
				t.Fatal(err)
			}
			if got := memBases(t, mem, dir); !slices.Equal(got, []uint64{300}) {
				t.Fatalf("segments %v, want [300]", got)
			}
			mustAppend(t, p, batch(300, 3, size))
			if err := p.Sync(); err != nil {
				t.Fatal(err)
			}
			mustClose(t, p)
			p = mustBuild(t, newFileStore(t, cfg), ns, 1)
			defer mustClose(t, p)
			if p.StartOffset() != 300 || p.NextOffset() != 303 {
				t.Fatalf("after a reopen: start %d next %d, want 300 and 303", p.StartOffset(), p.NextOffset())
			}
			checkRead(t, p, 300, 10, 3, size)
		})
	}
}

// TestFileFirstSyncENOSPC: a build syncs nothing, so a directory fsync
// that fails surfaces at the partition's first Sync, which makes its
// layout durable: the Sync fails (the partition is broken, so nothing
// unsynced is acknowledged), and once space returns a Build of the same
// incarnation recovers it and its first Sync succeeds.
func TestFileFirstSyncENOSPC(t *testing.T) {
	mem := vfs.NewMem()
	sw := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool { return op.Kind == errorfs.OpSyncDir })
	cfg := partition.FileConfig{Dir: "/data", FS: errorfs.New(mem, sw)}
	s := newFileStore(t, cfg)
	ns := mustNS(t, 9, 0, 0)
	sw.Set(true)
	p := mustBuild(t, s, ns, 2)
	mustAppend(t, p, batch(0, 3, 100))
	if err := p.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("first Sync while directory fsyncs fail: %v, want ENOSPC", err)
	}
	if _, err := p.Append(batch(3, 1, 100)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append after the failed first Sync: %v, want the partition broken", err)
	}
	_ = p.Close()
	sw.Set(false)
	p = mustBuild(t, s, ns, 2)
	mustAppend(t, p, batch(p.NextOffset(), 1, 100))
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	n := p.NextOffset()
	mustClose(t, p)
	q := mustBuild(t, newFileStore(t, partition.FileConfig{Dir: "/data", FS: mem.Crash()}), ns, 2)
	defer mustClose(t, q)
	if q.NextOffset() != n {
		t.Fatalf("after a power loss: %d messages, want the %d synced", q.NextOffset(), n)
	}
}

// TestFileBuildENOSPC runs out of space while building a partition in
// several ways: Build reports an error matching ENOSPC, and once space
// returns a Build succeeds (nothing half-built is in its way) and the
// partition survives a crash.
func TestFileBuildENOSPC(t *testing.T) {
	createOpen := func(op errorfs.Op) bool { return op.Kind == errorfs.OpOpen && op.Flag&os.O_CREATE != 0 }
	for _, c := range []struct {
		name        string
		match       func(errorfs.Op) bool
		preallocate bool
	}{
		{"every write", errorfs.Op.Mutating, false},
		{"file creation", createOpen, false},
		{"data writes", func(op errorfs.Op) bool { return op.Kind == errorfs.OpWrite || op.Kind == errorfs.OpWriteAt }, false},
		{"preallocation", func(op errorfs.Op) bool { return op.Kind == errorfs.OpPreallocate }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			sw := errorfs.NewSwitchFunc(syscall.ENOSPC, c.match)
			cfg := partition.FileConfig{Dir: "/data", FS: errorfs.New(mem, sw), Preallocate: c.preallocate}
			s := newFileStore(t, cfg)
			ns := mustNS(t, 9, 0, 0)
			old := mustNS(t, 9, 0, 1) // an existing partition, rebuilt at a new epoch
			mustClose(t, mustBuild(t, s, old, 1))

			sw.Set(true)
			for _, n := range []metadata.Namespace{ns, old} {
				_, err := s.Build(n, 2)
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("Build(%v) while the disk is full: %v, want ENOSPC", n, err)
				}
				var pe *os.PathError
				if !errors.As(err, &pe) || pe.Path == "" {
					t.Fatalf("Build error %v carries no path", err)
				}
			}
			sw.Set(false)
			for _, n := range []metadata.Namespace{ns, old} {
				p := mustBuild(t, s, n, 2)
				if p.NextOffset() != 0 || p.Epoch() != 2 {
					t.Fatalf("Build after space returned: next %d epoch %d", p.NextOffset(), p.Epoch())
				}
				mustAppend(t, p, batch(0, 3, 100))
				if err := p.Sync(); err != nil {
					t.Fatal(err)
				}
				mustClose(t, p)
			}
			crashed := mem.Crash()
			cfg.FS = crashed
			s = newFileStore(t, cfg)
			for _, n := range []metadata.Namespace{ns, old} {
				p := mustBuild(t, s, n, 2)
				checkRead(t, p, 0, 10, 3, 100)
				mustClose(t, p)
			}
			if got, err := s.List(); err != nil || len(got) != 2 || got[0].Epoch != 2 || got[1].Epoch != 2 {
				t.Fatalf("List = %v, %v", got, err)
			}
		})
	}
}

// TestFileAppendENOSPC fills the disk under appends and rolls: each
// failing Append reports ENOSPC and changes nothing; once space returns
// appends continue at the same offsets.
func TestFileAppendENOSPC(t *testing.T) {
	partition.AllowSmallSegments(t, smallSegment)
	mem := vfs.NewMem()
	// What a full disk fails: writes that need space and creations
	// (truncating down and deleting still work).
	sw := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool {
		switch op.Kind {
		case errorfs.OpWrite, errorfs.OpWriteAt, errorfs.OpPreallocate, errorfs.OpMkdirAll:
			return true
		case errorfs.OpOpen:
			return op.Flag&os.O_CREATE != 0
		}
		return false
	})
	cfg := memConfig(errorfs.New(mem, sw))
	ns := mustNS(t, 9, 1, 0)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	var next uint64
	for round := range 12 { // crosses several segment rolls
		sw.Set(true)
		size := p.Size()
		if _, err := p.Append(batch(next, 4, 1500)); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("round %d: Append on a full disk: %v", round, err)
		}
		if p.NextOffset() != next || p.Size() != size {
			t.Fatalf("round %d: failed Append moved NextOffset to %d, Size %d → %d", round, p.NextOffset(), size, p.Size())
		}
		sw.Set(false)
		mustAppend(t, p, batch(next, 4, 1500))
		next += 4
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	checkRead(t, p, 0, 1000, int(next), 1500)
	p2 := mustBuild(t, newFileStore(t, memConfig(mem.Crash())), ns, 1)
	defer mustClose(t, p2)
	checkRead(t, p2, 0, 1000, int(next), 1500)
	mustClose(t, p)
}

// TestFileSyncFailure checks that a failed fsync makes the partition
// refuse further writes (what is durable is unknown), and that closing
// and building it again recovers.
func TestFileSyncFailure(t *testing.T) {
	mem := vfs.NewMem()
	sw := errorfs.NewSwitch(syscall.EIO, errorfs.OpSync)
	cfg := partition.FileConfig{Dir: "/data", FS: errorfs.New(mem, sw)}
	ns := mustNS(t, 9, 2, 0)
	s := newFileStore(t, cfg)
	p := mustBuild(t, s, ns, 1)
	mustAppend(t, p, batch(0, 5, 100))
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, batch(5, 5, 100))
	sw.Set(true)
	if err := p.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync: %v, want EIO", err)
	}
	sw.Set(false)
	if _, err := p.Append(batch(10, 1, 100)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append after a failed Sync: %v, want the fsync error", err)
	}
	if err := p.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync after a failed Sync: %v, want the fsync error", err)
	}
	if err := p.TruncateBefore(1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("TruncateBefore after a failed Sync: %v", err)
	}
	checkRead(t, p, 0, 100, 10, 100) // reads still work
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = mustBuild(t, s, ns, 1)
	defer mustClose(t, p)
	if p.NextOffset() < 5 {
		t.Fatalf("synced messages lost: NextOffset %d", p.NextOffset())
	}
	mustAppend(t, p, batch(p.NextOffset(), 1, 100))
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}

	// With FileConfig.Sync, every Append syncs, and a failing fsync fails it.
	cfg.Sync = true
	ns2 := mustNS(t, 9, 2, 1)
	p2 := mustBuild(t, newFileStore(t, cfg), ns2, 1)
	defer mustClose(t, p2)
	mustAppend(t, p2, batch(0, 2, 10))
	c := mem.Crash() // no explicit Sync: Append synced
	sw.Set(true)
	if _, err := p2.Append(batch(2, 2, 10)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append with Sync on a failing fsync: %v", err)
	}
	sw.Set(false)
	if p2.NextOffset() != 2 {
		t.Fatalf("an Append whose fsync failed moved NextOffset to %d", p2.NextOffset())
	}
	checkRead(t, p2, 0, 10, 2, 10)
	if _, err := p2.Append(batch(2, 2, 10)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append after the failed fsync: %v, want the partition broken", err)
	}
	q := mustBuild(t, newFileStore(t, partition.FileConfig{Dir: "/data", FS: c}), ns2, 1)
	defer mustClose(t, q)
	checkRead(t, q, 0, 10, 2, 10)
}

func TestFileListSkipsForeignEntries(t *testing.T) {
	mem := vfs.NewMem()
	cfg := partition.FileConfig{Dir: "/data", FS: mem}
	s := newFileStore(t, cfg)
	good := mustNS(t, 3, 4, 5)
	mustClose(t, mustBuild(t, s, good, 11))
	halfBuilt := mustNS(t, 3, 4, 6)
	mustClose(t, mustBuild(t, s, halfBuilt, 12))
	if err := mem.Remove(filepath.Join(partDir("/data", halfBuilt), "incarnation")); err != nil {
		t.Fatal(err)
	}
	badInc := mustNS(t, 3, 4, 7)
	mustClose(t, mustBuild(t, s, badInc, 13))
	if err := vfs.WriteFileAtomic(mem, filepath.Join(partDir("/data", badInc), "incarnation"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{
		"/data/streams/x/topics/1/partitions/1",        // not an id
		"/data/streams/01/topics/1/partitions/1",       // not canonical
		"/data/streams/3/topics/4/partitions/99999999", // out of range
		"/data/streams/7/topics",                       // no partitions
		"/data/other",
	} {
		if err := mem.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := mem.OpenFile("/data/streams/3/topics/4/partitions/8", os.O_CREATE|os.O_RDWR, 0o644) // a file, not a dir
	f.Close()
	got, err := s.List()
	want := []partition.Stored{{NS: good, Epoch: 11}, {NS: halfBuilt}, {NS: badInc}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("List = %v, %v; want %v", got, err, want)
	}
	// The node removes orphans it lists.
	for _, st := range got[1:] {
		if err := s.Remove(st.NS); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := newFileStore(t, partition.FileConfig{Dir: "/data", FS: mem.Crash()}).List(); err != nil || !slices.Equal(got, want[:1]) {
		t.Fatalf("List after removing orphans and a crash = %v, %v", got, err)
	}
	empty := newFileStore(t, partition.FileConfig{Dir: "/empty", FS: mem})
	if got, err := empty.List(); err != nil || len(got) != 0 {
		t.Fatalf("List of an empty store = %v, %v", got, err)
	}
}

func TestMemRetention(t *testing.T) {
	s := partition.NewMemStore()
	p := mustBuild(t, s, mustNS(t, 1, 0, 0), 1)
	defer mustClose(t, p)
	fillSegments(t, p, 100, 7, 30)
	n, err := p.EnforceRetention(msg(50, 30).Timestamp, 0)
	if err != nil || n != 50 || p.StartOffset() != 50 {
		t.Fatalf("by age: removed %d, %v, StartOffset %d", n, err, p.StartOffset())
	}
	var size int64
	for i := range uint64(50) {
		size += recSize(msg(50+i, 30))
	}
	if p.Size() != size {
		t.Fatalf("Size %d, want %d", p.Size(), size)
	}
	n, err = p.EnforceRetention(0, size-recSize(msg(50, 30)))
	if err != nil || n != 1 || p.StartOffset() != 51 {
		t.Fatalf("by size: removed %d, %v, StartOffset %d", n, err, p.StartOffset())
	}
	checkRead(t, p, 51, 100, 49, 30)
	// Both at once: age first, then size. Mem may remove everything.
	n, err = p.EnforceRetention(msg(60, 30).Timestamp, 1)
	if err != nil || n != 49 || p.StartOffset() != 100 || p.Size() != 0 {
		t.Fatalf("everything: removed %d, %v, StartOffset %d Size %d", n, err, p.StartOffset(), p.Size())
	}
	mustAppend(t, p, batch(100, 3, 30))
	checkRead(t, p, 100, 10, 3, 30)
	// By age alone, everything.
	n, err = p.EnforceRetention(msg(200, 30).Timestamp, 0)
	if err != nil || n != 3 || p.StartOffset() != 103 || p.Size() != 0 {
		t.Fatalf("everything by age: removed %d, %v, StartOffset %d Size %d", n, err, p.StartOffset(), p.Size())
	}

	// Timestamps are not monotonic: an outlier stops age retention.
	q := mustBuild(t, s, mustNS(t, 1, 0, 1), 1)
	defer mustClose(t, q)
	mustAppend(t, q, batch(0, 5, 10))
	mustAppend(t, q, []partition.Message{{Timestamp: 1 << 50}})
	mustAppend(t, q, batch(6, 5, 10))
	if n, err := q.EnforceRetention(1<<40, 0); n != 5 || err != nil {
		t.Fatalf("with an outlier: removed %d, %v; want 5", n, err)
	}
}

// TestMemTruncateChunks truncates across MemStore's internal chunks.
func TestMemTruncateChunks(t *testing.T) {
	p := mustBuild(t, partition.NewMemStore(), mustNS(t, 1, 1, 0), 1)
	defer mustClose(t, p)
	fillSegments(t, p, 3000, 250, 4)
	for _, cut := range []uint64{1, 1023, 1024, 1025, 2048, 2999} {
		if err := p.TruncateBefore(cut); err != nil {
			t.Fatal(err)
		}
		checkReadOn(t, p, cut, 5000, int(3000-cut), 4)
	}
	if err := p.TruncateBefore(3000); err != nil {
		t.Fatal(err)
	}
	fillSegments(t, p, 5000, 333, 4)
	checkReadOn(t, p, 3000, 5000, 2000, 4)
	if err := p.TruncateBefore(4096); err != nil { // a chunk boundary
		t.Fatal(err)
	}
	checkReadOn(t, p, 4096, 5000, 904, 4)
	if err := p.TruncateBefore(5000); err != nil {
		t.Fatal(err)
	}
	fillSegments(t, p, 5121, 121, 4) // 5000 is not a chunk boundary, 5120 is
	checkReadOn(t, p, 5000, 500, 121, 4)
}

// TestFileReopenReadErrors fails each read-side operation (open for
// reading, read, stat, directory listing) of reopening a partition in
// turn: Build either succeeds or returns the injected error, never
// panics, and never loses data — the next clean Build finds everything.
func TestFileReopenReadErrors(t *testing.T) {
	const size = 500
	ns := mustNS(t, 9, 3, 0)
	base, _, _ := smallSegmentLog(t, ns, 200, 5, size)
	reads := []errorfs.OpKind{errorfs.OpOpen, errorfs.OpRead, errorfs.OpReadAt, errorfs.OpStat, errorfs.OpReadDir}
	isRead := func(op errorfs.Op) bool { return slices.Contains(reads, op.Kind) && !op.Mutating() }
	count := errorfs.OnIndex(-1, nil, reads...)
	// NewFileStore's reads (the journal directory) are counted too: the
	// crash points past Build's own fail nothing, and Build succeeds.
	p := mustBuild(t, newFileStore(t, memConfig(errorfs.New(base.Crash(), count))), ns, 1)
	mustClose(t, p)
	for i := range count.Count() {
		mem := base.Crash()
		var n int64 = -1
		active := false // only during Build (one goroutine: no atomics needed)
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if active && isRead(op) {
				if n++; n == i {
					return syscall.EIO
				}
			}
			return nil
		})
		s := newFileStore(t, memConfig(errorfs.New(mem, inj)))
		active = true
		p, err := s.Build(ns, 1)
		active = false
		if err == nil {
			checkRead(t, p, 0, 1000, 200, size)
			mustClose(t, p)
		} else if !errors.Is(err, syscall.EIO) {
			t.Fatalf("read %d: Build: %v, want the injected EIO", i, err)
		}
		p = mustBuild(t, newFileStore(t, memConfig(mem)), ns, 1)
		if p.NextOffset() != 200 {
			t.Fatalf("read %d failed (%v): the next Build finds NextOffset %d, want 200", i, err, p.NextOffset())
		}
		checkRead(t, p, 0, 1000, 200, size)
		mustClose(t, p)
	}
}

// A build syncs nothing: the new partition's layout (its incarnation file
// and directories) is made durable by its first Sync, before any message
// it holds is. A crash before that leaves a half-built directory that the
// next Build starts over; after it, synced messages survive.
func TestBuildDefersLayoutSync(t *testing.T) {
	mem := vfs.NewMem()
	log := &errorfs.Log{}
	s := newFileStore(t, partition.FileConfig{Dir: "/data", FS: errorfs.New(mem, log)})
	ns := mustNS(t, 4, 5, 6)
	p := mustBuild(t, s, ns, 3)
	for _, op := range log.Ops() {
		if op.Kind == errorfs.OpSync || op.Kind == errorfs.OpSyncDir {
			t.Fatalf("Build synced %s %s", op.Kind, op.Path)
		}
	}
	mustAppend(t, p, batch(0, 2, 10))

	// Power loss before any Sync: the directory is half-built, the next
	// Build starts it over, empty.
	q := mustBuild(t, newFileStore(t, partition.FileConfig{Dir: "/data", FS: mem.Crash()}), ns, 3)
	if q.NextOffset() != 0 {
		t.Fatalf("unsynced partition came back with %d messages", q.NextOffset())
	}
	mustClose(t, q)

	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	synced := map[string]bool{}
	for _, op := range log.Ops() {
		if op.Kind == errorfs.OpSyncDir {
			synced[op.Path] = true
		}
	}
	for _, d := range []string{"/data/streams/4/topics/5/partitions/6", "/data/streams/4/topics/5/partitions",
		"/data/streams/4/topics/5", "/data/streams", "/data"} {
		if !synced[d] {
			t.Fatalf("first Sync did not sync new directory %s (synced %v)", d, synced)
		}
	}
	mustAppend(t, p, batch(2, 1, 10))
	r := mustBuild(t, newFileStore(t, partition.FileConfig{Dir: "/data", FS: mem.Crash()}), ns, 3)
	defer mustClose(t, r)
	if r.NextOffset() != 2 {
		t.Fatalf("after the first Sync and a power loss: %d messages, want the 2 synced", r.NextOffset())
	}
	checkRead(t, r, 0, 10, 2, 10)
	mustClose(t, p)
}

// Remove returns only once the removal is durable: if the parent
// directory cannot be synced the error is returned (the partition may
// come back after a power loss), and after a Remove that returned nil a
// power loss does not bring the partition back.
func TestFileRemoveIsDurableOrAnError(t *testing.T) {
	mem := vfs.NewMem()
	eio := errorfs.NewSwitch(syscall.EIO, errorfs.OpSyncDir)
	cfg := partition.FileConfig{Dir: "/data", FS: errorfs.New(mem, eio)}
	s := newFileStore(t, cfg)
	ns := mustNS(t, 4, 0, 0)
	p := mustBuild(t, s, ns, 1)
	mustAppend(t, p, batch(0, 3, 10))
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, p)
	eio.Set(true)
	if err := s.Remove(ns); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Remove whose directory sync failed: %v, want EIO", err)
	}
	eio.Set(false)
	if err := s.Remove(ns); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	cfg.FS = mem.Crash()
	if got, err := newFileStore(t, cfg).List(); err != nil || len(got) != 0 {
		t.Fatalf("after a Remove and a power loss, List = %v, %v; want nothing", got, err)
	}
}

// TestFileAppendLargeBatchIsWrittenInChunks appends a batch far larger
// than one write's buffer (48 records of 64 KiB): it is written in
// several writes, reads back whole, and survives a crash after a Sync.
// When a later write of such a batch fails, the writes before it are
// truncated away: the log file is back at its size before the Append,
// nothing of the batch is readable, and the next Append and a crash
// after it see only what was acknowledged.
func TestFileAppendLargeBatchIsWrittenInChunks(t *testing.T) {
	const n, size = 48, 64 << 10
	mem := vfs.NewMem()
	var (
		logWrites atomic.Int64
		failAt    atomic.Int64 // the log write to fail (1-based), 0 for none
	)
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind != errorfs.OpWriteAt || !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		if w := logWrites.Add(1); w == failAt.Load() {
			return syscall.EIO
		}
		return nil
	})
	cfg := partition.FileConfig{Dir: "/data", FS: errorfs.New(mem, inj)}
	ns := mustNS(t, 9, 2, 0)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	log := filepath.Join(partDir(cfg.Dir, ns), memSegments(t, mem, partDir(cfg.Dir, ns))[0])

	mustAppend(t, p, batch(0, n, size))
	if w := logWrites.Load(); w < 3 {
		t.Fatalf("a %d MiB batch took %d write(s), want it in chunks", n*size>>20, w)
	}
	checkRead(t, p, 0, n, n, size)

	// Fail the second write of the next batch: its first chunk is on
	// the file by then.
	before := memFileSize(t, mem, log)
	logWrites.Store(0)
	failAt.Store(2)
	if _, err := p.Append(batch(n, n, size)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append with a failing second write: %v, want EIO", err)
	}
	failAt.Store(0)
	if got := logWrites.Load(); got != 2 {
		t.Fatalf("the failed Append made %d log writes, want 2 (one written, one failed)", got)
	}
	if p.NextOffset() != n {
		t.Fatalf("failed Append moved NextOffset to %d, want %d", p.NextOffset(), n)
	}
	if got := memFileSize(t, mem, log); got != before {
		t.Fatalf("after the failed Append the log is %d bytes, want %d: its first chunk was left behind", got, before)
	}
	checkRead(t, p, 0, 2*n, n, size)

	mustAppend(t, p, batch(n, 2, size))
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	q := mustBuild(t, newFileStore(t, partition.FileConfig{Dir: "/data", FS: mem.Crash()}), ns, 1)
	defer mustClose(t, q)
	checkRead(t, q, 0, 2*n, n+2, size)
}

// TestFileTailIndexIsWrittenInBatches: appends leave the tail's new index
// entries unwritten until a batch of them is pending (they are written
// then, and on a roll and Close), and a crash with entries unwritten
// loses nothing: the reopened tail is rebuilt from its scan and reads
// from any offset.
func TestFileTailIndexIsWrittenInBatches(t *testing.T) {
	const size = 4 << 10 // every record is far enough from the last to be indexed
	mem := vfs.NewMem()
	cfg := partition.FileConfig{Dir: "/data", FS: mem}
	ns := mustNS(t, 9, 3, 0)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	index := filepath.Join(partDir(cfg.Dir, ns), segName(0, ".index"))
	var next uint64
	appendN := func(n int) {
		for range n {
			mustAppend(t, p, batch(next, 1, size))
			next++
		}
	}
	appendN(100)
	if got := memFileSize(t, mem, index); got != 0 {
		t.Fatalf("after 100 appends the tail's index file holds %d bytes, want none yet (written in batches)", got)
	}
	appendN(300)
	if got := memFileSize(t, mem, index); got < 256*8 {
		t.Fatalf("after 400 appends the tail's index file holds %d bytes, want at least a batch of 256 entries", got)
	}
	appendN(50)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	q := mustBuild(t, newFileStore(t, partition.FileConfig{Dir: "/data", FS: mem.Crash()}), ns, 1)
	defer mustClose(t, q)
	for _, from := range []uint64{0, 123, 399, 420, 449} {
		checkRead(t, q, from, 5, min(5, int(next-from)), size)
	}
}

// TestFileLogShorterThanItsSyncedEnd: the manifest records how far each
// partition's log was synced, so a last segment cut short inside a synced
// record, or rolled back to an earlier synced copy, no longer reads as a
// torn tail: Build reports the *CorruptError, the offsets up to the
// synced end are a hole, writes are refused and no offset is given out
// again — on the node's open, on a reopen and on a read-only open. (It
// used to be truncated back to the last whole record, the acknowledged
// messages after it lost and their offsets reused.) A torn tail past the
// synced end is still truncated. On the real filesystem.
func TestFileLogShorterThanItsSyncedEnd(t *testing.T) {
	const size, count = 100, 20
	ns := mustNS(t, 8, 0, 12)
	pos := make([]int64, count+1)
	for i := range count {
		pos[i+1] = pos[i] + recSize(msg(uint64(i), size))
	}
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, seg string, early []byte)
		want   uint64 // the log's end as found: offsets from it to count are the hole
	}{
		{"cut inside a record", func(t *testing.T, seg string, _ []byte) {
			if err := os.Truncate(seg, pos[15]+30); err != nil {
				t.Fatal(err)
			}
		}, 15},
		{"cut at a record's start", func(t *testing.T, seg string, _ []byte) {
			if err := os.Truncate(seg, pos[12]); err != nil {
				t.Fatal(err)
			}
		}, 12},
		{"rolled back to an earlier synced copy", func(t *testing.T, seg string, early []byte) {
			if err := os.WriteFile(seg, early, 0o644); err != nil {
				t.Fatal(err)
			}
		}, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := partition.FileConfig{Dir: dir, SegmentSize: mib}
			s := newFileStore(t, cfg)
			p := mustBuild(t, s, ns, 1)
			seg := filepath.Join(partDir(dir, ns), segName(0, ".log"))
			mustAppend(t, p, batch(0, 10, size))
			if err := p.Sync(); err != nil {
				t.Fatal(err)
			}
			early, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			mustAppend(t, p, batch(10, count-10, size))
			if err := p.Sync(); err != nil {
				t.Fatal(err)
			}
			mustClose(t, p)
			if err := s.RecordPartitions(); err != nil {
				t.Fatal(err)
			}
			c.damage(t, seg, early)

			check := func(p partition.Partition, writable bool) {
				t.Helper()
				if p.NextOffset() != count {
					t.Fatalf("NextOffset %d, want %d: the log was cut back below its synced end", p.NextOffset(), count)
				}
				checkRead(t, p, 0, int(c.want), int(c.want), size)
				var ce *partition.CorruptError
				if _, err := p.Read(c.want, 1); !errors.As(err, &ce) || ce.Path != seg {
					t.Fatalf("Read(%d): %v, want a *CorruptError for %s", c.want, err, seg)
				}
				if d, ok := p.(partition.Damaged); !ok || !errors.As(d.Damage(), &ce) {
					t.Fatal("Damage() reports nothing")
				}
				if !writable {
					return
				}
				if _, err := p.Append(batch(count, 1, size)); !errors.Is(err, partition.ErrCorrupt) || p.NextOffset() != count {
					t.Fatalf("Append: %v (next %d), want ErrCorrupt at %d", err, p.NextOffset(), count)
				}
			}
			for range 2 { // the open, then a reopen: the manifest keeps the synced end
				s := newFileStore(t, cfg)
				p := mustBuild(t, s, ns, 1)
				check(p, true)
				mustClose(t, p)
				if err := s.RecordPartitions(); err != nil {
					t.Fatal(err)
				}
			}
			ro, err := partition.OpenReadOnlyStore(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			rp := mustBuild(t, ro, ns, 1)
			check(rp, false)
			mustClose(t, rp)

			// A purge accepts the loss: appends go on at the synced end.
			p = mustBuild(t, newFileStore(t, cfg), ns, 1)
			if err := p.TruncateBefore(count); err != nil {
				t.Fatal(err)
			}
			mustAppend(t, p, batch(count, 1, size))
			mustClose(t, p)
		})
	}

	t.Run("torn past the synced end", func(t *testing.T) {
		dir := t.TempDir()
		cfg := partition.FileConfig{Dir: dir, SegmentSize: mib}
		s := newFileStore(t, cfg)
		p := mustBuild(t, s, ns, 1)
		mustAppend(t, p, batch(0, 10, size))
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
		mustClose(t, p)
		if err := s.RecordPartitions(); err != nil {
			t.Fatal(err)
		}
		seg := filepath.Join(partDir(dir, ns), segName(0, ".log"))
		f, err := os.OpenFile(seg, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Half of an eleventh record: a write past the synced end that a
		// crash tore.
		rec := make([]byte, recSize(msg(10, size)))
		for i := range rec[:len(rec)/2] {
			rec[i] = byte(i + 1)
		}
		if _, err := f.WriteAt(rec[:len(rec)/2], pos[10]); err != nil {
			t.Fatal(err)
		}
		f.Close()
		p = mustBuild(t, newFileStore(t, cfg), ns, 1)
		defer mustClose(t, p)
		if p.NextOffset() != 10 {
			t.Fatalf("NextOffset %d, want 10", p.NextOffset())
		}
		mustAppend(t, p, batch(10, 1, size))
	})
}

// TestFileFirstCommitIsMarkedInTheJournal: a partition's first Commit
// after a build or reopen is a direct fsync, whose records are in no
// journal entry, and the manifest records their end only from its next
// write. The commit writes a synced-end mark to the journal before it
// returns, so a crash, then the last segment cut below what it
// acknowledged, is reported at the next open (the journal's replay finds
// the log ending before the mark) rather than truncated as a torn tail.
// On the real filesystem.
func TestFileFirstCommitIsMarkedInTheJournal(t *testing.T) {
	const size, count = 100, 10
	ns := mustNS(t, 8, 0, 13)
	for _, reopen := range []bool{false, true} {
		t.Run(fmt.Sprintf("reopened=%v", reopen), func(t *testing.T) {
			dir := t.TempDir()
			cfg := partition.FileConfig{Dir: dir, SegmentSize: mib}
			base := uint64(0)
			if reopen {
				// A partition with messages, cleanly closed: its next
				// build's first commit is direct too.
				s := newFileStore(t, cfg)
				p := mustBuild(t, s, ns, 1)
				mustAppend(t, p, batch(0, 3, size))
				if err := p.Sync(); err != nil {
					t.Fatal(err)
				}
				mustClose(t, p)
				if err := s.RecordPartitions(); err != nil {
					t.Fatal(err)
				}
				base = 3
			}
			s := newFileStore(t, cfg)
			j := s.NewJournal()
			p := mustBuild(t, s, ns, 1)
			mustAppend(t, p, batch(base, count, size))
			if errs := j.Commit([]partition.Partition{p}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			// The process stops here (no Close, no manifest); then the
			// last segment loses its last records.
			seg := filepath.Join(partDir(dir, ns), segName(0, ".log"))
			var cut int64
			for i := range base + 5 {
				cut += recSize(msg(i, size))
			}
			if err := os.Truncate(seg, cut); err != nil {
				t.Fatal(err)
			}
			p2 := mustBuild(t, newFileStore(t, cfg), ns, 1)
			defer mustClose(t, p2)
			if p2.NextOffset() != base+count {
				t.Fatalf("NextOffset %d, want %d: acknowledged messages cut off were taken for a torn tail", p2.NextOffset(), base+count)
			}
			checkRead(t, p2, 0, 100, int(base+5), size)
			if _, err := p2.Read(base+5, 1); !errors.Is(err, partition.ErrCorrupt) {
				t.Fatalf("Read(%d): %v, want ErrCorrupt", base+5, err)
			}
			if _, err := p2.Append(batch(base+count, 1, size)); !errors.Is(err, partition.ErrCorrupt) {
				t.Fatalf("Append: %v, want ErrCorrupt", err)
			}
			_ = p.Close()
			_ = j.Close()
		})
	}
}

// TestFileReplayKeepsTheMarksSyncedEnd: a reopen whose journal replay
// finds a log holding all its journal entries already (a direct first
// commit, synced, then a crash) removes the journal files, with the
// synced-end mark; the manifest it writes first must record the end the
// mark gave, so that the log cut short after another crash is reported,
// not taken for a torn tail.
func TestFileReplayKeepsTheMarksSyncedEnd(t *testing.T) {
	const size, count = 100, 10
	ns := mustNS(t, 8, 0, 14)
	dir := t.TempDir()
	cfg := partition.FileConfig{Dir: dir, SegmentSize: mib}
	s := newFileStore(t, cfg)
	j := s.NewJournal()
	// Another partition's first commit opens the journal file (and
	// writes the manifest, as a new journal file does), so that p's mark
	// goes to a file already there and no manifest records p's end.
	other := mustBuild(t, s, mustNS(t, 8, 0, 15), 1)
	mustAppend(t, other, batch(0, 1, size))
	if errs := j.Commit([]partition.Partition{other}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	p := mustBuild(t, s, ns, 1)
	mustAppend(t, p, batch(0, count, size))
	if errs := j.Commit([]partition.Partition{p}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// A crash, then a reopen whose replay applies nothing and removes
	// the journal files; then another crash.
	_ = newFileStore(t, cfg)
	seg := filepath.Join(partDir(dir, ns), segName(0, ".log"))
	var cut int64
	for i := range uint64(5) {
		cut += recSize(msg(i, size))
	}
	if err := os.Truncate(seg, cut); err != nil {
		t.Fatal(err)
	}
	p2 := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p2)
	if p2.NextOffset() != count {
		t.Fatalf("NextOffset %d, want %d: acknowledged messages cut off after a replay were taken for a torn tail", p2.NextOffset(), count)
	}
	if _, err := p2.Read(5, 1); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("Read(5): %v, want ErrCorrupt", err)
	}
	_ = p.Close()
	_ = other.Close()
	_ = j.Close()
}

// TestFileFirstCommitFailsWithoutItsMark: a direct first commit whose
// synced-end mark cannot be made durable (the journal's fdatasync fails)
// is not acknowledged — nothing durable would record its end, and a
// segment cut short after a crash would lose it silently — and, the mark
// possibly in the journal, its records are not taken back (their outcome
// is unknown, not "not appended").
func TestFileFirstCommitFailsWithoutItsMark(t *testing.T) {
	const size, count = 100, 4
	var fail atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail.Load() && op.Kind == errorfs.OpSync && strings.HasSuffix(op.Path, ".journal") {
			return syscall.EIO
		}
		return nil
	})
	cfg := partition.FileConfig{Dir: "/data", FS: errorfs.New(vfs.NewMem(), inj), SegmentSize: mib}
	s := newFileStore(t, cfg)
	j := s.NewJournal()
	defer func() { _ = j.Close() }()
	p := mustBuild(t, s, mustNS(t, 8, 0, 16), 1)
	defer func() { _ = p.Close() }()
	mustAppend(t, p, batch(0, count, size))
	fail.Store(true)
	err := j.Commit([]partition.Partition{p})[0]
	if err == nil {
		t.Fatal("Commit acknowledged a first commit whose synced-end mark failed")
	}
	if !errors.Is(err, syscall.EIO) || errors.Is(err, partition.ErrRolledBack) {
		t.Fatalf("Commit: %v, want the journal's EIO, not ErrRolledBack", err)
	}
	if p.NextOffset() != count {
		t.Fatalf("NextOffset %d after the failed mark, want %d (records kept)", p.NextOffset(), count)
	}
}

// TestFileCheckpointCoveredCommitIsMarkedInTheJournal: a Commit that finds
// its handle's checkpoint due (a partition's records are in an older
// journal file than the current one) syncs the partitions' own files
// first, and the records it acknowledges are then in no journal entry —
// as after a direct first commit — while the manifest records their end
// only from its next write. The commit writes a synced-end mark for them,
// so a crash, then the last segment cut below what it acknowledged, is
// reported at the next open, not truncated as a torn tail (single-node
// seed 62323). On the real filesystem.
func TestFileCheckpointCoveredCommitIsMarkedInTheJournal(t *testing.T) {
	const size = 100
	dir := t.TempDir()
	// Every journal write starts a new file, so that files age.
	cfg := partition.FileConfig{Dir: dir, SegmentSize: mib, SerialSyncs: true, JournalFileSize: 1}
	s := newFileStore(t, cfg)
	jp, jq, jr := s.NewJournal(), s.NewJournal(), s.NewJournal()
	ns := mustNS(t, 8, 0, 16)
	p := mustBuild(t, s, ns, 1)
	q := mustBuild(t, s, mustNS(t, 8, 0, 17), 1)
	r := mustBuild(t, s, mustNS(t, 8, 0, 18), 1)
	commit := func(j *partition.Journal, x partition.Partition, from uint64, n int) {
		t.Helper()
		mustAppend(t, x, batch(from, n, size))
		if errs := j.Commit([]partition.Partition{x}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	commit(jq, q, 0, 1) // direct: its mark is journal file 1
	commit(jq, q, 1, 1) // file 2: q's records keep files from 2 on
	commit(jp, p, 0, 1) // direct: file 3
	commit(jp, p, 1, 1) // file 4: p's records
	commit(jr, r, 0, 1) // direct: file 5, now the current one
	// r's checkpoint prunes file 1 (and writes the manifest, with p's
	// end at 2): the checkpoint below prunes nothing, and writes none.
	if err := jr.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// p's records are in file 4, older than 5: this Commit checkpoints
	// first, which syncs p's segment with offsets 2-4 in it.
	commit(jp, p, 2, 3)
	// The process stops here (no Close); then the last segment loses
	// its last records.
	seg := filepath.Join(partDir(dir, ns), segName(0, ".log"))
	var cut int64
	for i := range uint64(3) {
		cut += recSize(msg(i, size))
	}
	if err := os.Truncate(seg, cut); err != nil {
		t.Fatal(err)
	}
	p2 := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p2)
	if p2.NextOffset() != 5 {
		t.Fatalf("NextOffset %d, want 5: acknowledged messages cut off were taken for a torn tail", p2.NextOffset())
	}
	checkRead(t, p2, 0, 100, 3, size)
	if _, err := p2.Read(3, 1); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("Read(3): %v, want ErrCorrupt", err)
	}
	if _, err := p2.Append(batch(5, 1, size)); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("Append: %v, want ErrCorrupt", err)
	}
	for _, x := range []partition.Partition{p, q, r} {
		_ = x.Close()
	}
	for _, j := range []*partition.Journal{jp, jq, jr} {
		_ = j.Close()
	}
}
