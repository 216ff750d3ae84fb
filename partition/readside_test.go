package partition_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// TestKeyAndAppendTime: every store keeps a message's key, its producer
// timestamp and its append time, across a reopen; append times never go
// backwards (a message stamped below its predecessor gets the
// predecessor's) and one stamped 0 takes its Timestamp.
func TestKeyAndAppendTime(t *testing.T) {
	for _, h := range harnesses() {
		t.Run(h.name, func(t *testing.T) {
			s, restart := h.open(t)
			ns := mustNS(t, 1, 1, 0)
			p := mustBuild(t, s, ns, 3)
			mustAppend(t, p, []partition.Message{
				{Key: []byte("k0"), Timestamp: 5, AppendTime: 100, Payload: []byte("a")},
				{Key: []byte("k1"), Timestamp: 6, AppendTime: 90, Payload: []byte("b")}, // clock stepped back
				{Timestamp: 300, Payload: []byte("c")},                                  // no append time: its Timestamp
			})
			check := func(p partition.Partition) {
				t.Helper()
				got, err := p.Read(0, 10)
				if err != nil || len(got) != 3 {
					t.Fatalf("Read: %d messages, %v", len(got), err)
				}
				want := []struct {
					key    string
					ts, at int64
				}{{"k0", 5, 100}, {"k1", 6, 100}, {"", 300, 300}}
				for i, w := range want {
					if string(got[i].Key) != w.key || got[i].Timestamp != w.ts || got[i].AppendTime != w.at {
						t.Fatalf("message %d: key %q timestamp %d append time %d, want %q %d %d",
							i, got[i].Key, got[i].Timestamp, got[i].AppendTime, w.key, w.ts, w.at)
					}
				}
				if got[2].Key != nil {
					t.Fatalf("no key decodes as %v, want nil", got[2].Key)
				}
			}
			check(p)
			mustClose(t, p)
			p = mustBuild(t, restart(), ns, 3)
			defer mustClose(t, p)
			check(p)
		})
	}
}

// TestOffsetForTime: the first readable message appended at or after t,
// in both stores, across segments, below the start and past the end.
func TestOffsetForTime(t *testing.T) {
	partition.AllowSmallSegments(t, 4<<10)
	for _, h := range []harness{harnesses()[0], {"file-small-segments", func(t *testing.T) (partition.Store, func() partition.Store) {
		cfg := partition.FileConfig{Dir: t.TempDir(), SegmentSize: 4 << 10}
		return newFileStore(t, cfg), func() partition.Store { return newFileStore(t, cfg) }
	}}} {
		t.Run(h.name, func(t *testing.T) {
			s, restart := h.open(t)
			ns := mustNS(t, 2, 0, 1)
			p := mustBuild(t, s, ns, 1)
			// 400 messages of ~100 bytes, appended 10 µs apart, several
			// per segment and many per sparse index interval.
			for i := range uint64(400) {
				m := msg(i, 40)
				m.AppendTime = 1000 + int64(i)*10
				mustAppend(t, p, []partition.Message{m})
			}
			check := func(p partition.Partition) {
				t.Helper()
				for _, c := range []struct {
					t    int64
					want uint64
				}{
					{0, p.StartOffset()}, {1000, p.StartOffset()}, {1001, max(1, p.StartOffset())},
					{1000 + 2500, 250}, {1000 + 2501, 251}, {1000 + 3990, 399}, {1000 + 3991, 400}, {1 << 40, 400},
				} {
					got, err := p.OffsetForTime(c.t)
					if err != nil || got != c.want {
						t.Fatalf("OffsetForTime(%d) = %d, %v; want %d", c.t, got, err, c.want)
					}
				}
			}
			check(p)
			if err := p.TruncateBefore(137); err != nil {
				t.Fatal(err)
			}
			check(p) // times below the start resolve to the start
			mustClose(t, p)
			p = mustBuild(t, restart(), ns, 1)
			defer mustClose(t, p)
			check(p)
		})
	}
}

// TestTimeIndexRebuiltOnRecovery damages the time index files (missing,
// torn, stale) and checks that they are rebuilt byte for byte from the
// segments — a stale last entry by the open, a missing or torn file when
// a search first needs it — and that the search answers right throughout.
func TestTimeIndexRebuiltOnRecovery(t *testing.T) {
	partition.AllowSmallSegments(t, 4<<10)
	damages := map[string]func(fsys vfs.FS, path string, b []byte) error{
		"missing": func(fsys vfs.FS, path string, _ []byte) error { return fsys.Remove(path) },
		"torn":    func(fsys vfs.FS, path string, b []byte) error { return vfs.WriteFileAtomic(fsys, path, b[:len(b)-5]) },
		"stale": func(fsys vfs.FS, path string, b []byte) error {
			b = bytes.Clone(b)
			b[len(b)-1] ^= 0x40 // the last entry's append time
			return vfs.WriteFileAtomic(fsys, path, b)
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewMem()
			cfg := partition.FileConfig{Dir: "/data", SegmentSize: 16 << 10, FS: mem}
			ns := mustNS(t, 3, 0, 0)
			p := mustBuild(t, newFileStore(t, cfg), ns, 1)
			for i := range uint64(600) {
				m := msg(i, 80)
				m.AppendTime = 5000 + int64(i)
				mustAppend(t, p, []partition.Message{m})
			}
			mustClose(t, p)
			dir := partDir(cfg.Dir, ns)
			names, err := mem.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			before := map[string][]byte{}
			for _, n := range names {
				if filepath.Ext(n) != ".timeindex" {
					continue
				}
				path := filepath.Join(dir, n)
				b, err := vfs.ReadFile(mem, path)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) < 24 {
					continue // a segment with too few entries to damage
				}
				before[path] = b
				if err := damage(mem, path, b); err != nil {
					t.Fatal(err)
				}
			}
			if len(before) < 2 {
				t.Fatalf("only %d time index files to damage", len(before))
			}
			p = mustBuild(t, newFileStore(t, cfg), ns, 1)
			if name == "missing" {
				// Rebuilt when a search needs it, not by the open: a log
				// written before time indexes existed opens without
				// being read whole.
				for path := range before {
					if _, err := mem.Stat(path); err == nil {
						t.Fatalf("%s rebuilt by the open", path)
					}
				}
			}
			for i := range uint64(600) {
				if got, err := p.OffsetForTime(5000 + int64(i)); err != nil || got != i {
					t.Fatalf("OffsetForTime(%d) = %d, %v; want %d", 5000+i, got, err, i)
				}
			}
			for path, want := range before {
				got, err := vfs.ReadFile(mem, path)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s rebuilt as %d bytes (%v), want the %d bytes written by appends", path, len(got), err, len(want))
				}
			}
			// Reopened, the rebuilt files are used as they are.
			mustClose(t, p)
			p = mustBuild(t, newFileStore(t, cfg), ns, 1)
			for _, i := range []uint64{0, 77, 599} {
				if got, err := p.OffsetForTime(5000 + int64(i)); err != nil || got != i {
					t.Fatalf("after a reopen, OffsetForTime(%d) = %d, %v; want %d", 5000+i, got, err, i)
				}
			}
			mustClose(t, p)
		})
	}
}

// TestReadFormat1Segment opens a segment written by the format 1 codec
// (testdata/v1-segment.log, kept as it was written: three messages, one
// with a header, one empty) and reads it back: no keys, append times equal
// to the producer timestamps; then appends format 2 records after them in
// the same segment and reads the mixed segment across a reopen.
func TestReadFormat1Segment(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "v1-segment.log"))
	if err != nil {
		t.Fatal(err)
	}
	mem := vfs.NewMem()
	cfg := partition.FileConfig{Dir: "/data", FS: mem}
	ns := mustNS(t, 1, 2, 3)
	dir := partDir(cfg.Dir, ns)
	if err := mem.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, "incarnation"), []byte("7\n")); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, segName(0, ".log")), golden); err != nil {
		t.Fatal(err)
	}
	check := func(p partition.Partition, n int) {
		t.Helper()
		got, err := p.Read(0, 10)
		if err != nil || len(got) != n {
			t.Fatalf("Read: %d messages, %v; want %d", len(got), err, n)
		}
		const ts0 = 1_700_000_000_000_000
		if string(got[0].Payload) != "alpha" || got[0].ID[0] != 1 || got[0].Timestamp != ts0 || got[0].AppendTime != ts0 || got[0].Key != nil {
			t.Fatalf("message 0: %+v", got[0])
		}
		if string(got[1].Payload) != "beta" || len(got[1].Headers) != 1 || got[1].Headers[0].Key != "k" ||
			string(got[1].Headers[0].Value) != "v" || got[1].AppendTime != ts0+100 {
			t.Fatalf("message 1: %+v", got[1])
		}
		if got[2].Payload != nil || got[2].Offset != 2 || got[2].Timestamp != ts0+200 {
			t.Fatalf("message 2: %+v", got[2])
		}
		if off, err := p.OffsetForTime(ts0 + 150); err != nil || off != 2 {
			t.Fatalf("OffsetForTime over format 1 records = %d, %v; want 2", off, err)
		}
		if n > 3 {
			if string(got[3].Key) != "new" || got[3].AppendTime != ts0+500 {
				t.Fatalf("format 2 message after format 1 ones: %+v", got[3])
			}
		}
	}
	p := mustBuild(t, newFileStore(t, cfg), ns, 7)
	if p.NextOffset() != 3 {
		t.Fatalf("format 1 segment recovered to next offset %d, want 3", p.NextOffset())
	}
	check(p, 3)
	mustAppend(t, p, []partition.Message{{Key: []byte("new"), Timestamp: 1, AppendTime: 1_700_000_000_000_500, Payload: []byte("gamma")}})
	check(p, 4)
	mustClose(t, p)
	p = mustBuild(t, newFileStore(t, cfg), ns, 7)
	defer mustClose(t, p)
	check(p, 4)
}

// A search by time returns the first message appended at or after t, even
// when many messages share that append time across several index entries
// (the index is sparse: one entry per 4 KiB): it must start decoding before
// the first of them, not at the last index entry with that time.
func TestOffsetForTimeWithARunOfEqualAppendTimes(t *testing.T) {
	for _, h := range harnesses() {
		t.Run(h.name, func(t *testing.T) {
			store, _ := h.open(t)
			p := mustBuild(t, store, mustNS(t, 1, 2, 4), 1)
			defer mustClose(t, p)
			var msgs []partition.Message
			for i, at := range []int64{100, 100, 200, 200, 200, 200, 200, 200, 200, 200, 300, 300} {
				msgs = append(msgs, partition.Message{AppendTime: at, Payload: payload(uint64(i), 2000)})
			}
			mustAppend(t, p, msgs)
			for _, c := range []struct {
				t    int64
				want uint64
			}{{50, 0}, {100, 0}, {150, 2}, {200, 2}, {250, 10}, {300, 10}, {301, 12}} {
				if off, err := p.OffsetForTime(c.t); err != nil || off != c.want {
					t.Errorf("OffsetForTime(%d) = %d, %v; want %d", c.t, off, err, c.want)
				}
			}
		})
	}
}
