package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

const path = "/log/wal"

func newFS(t *testing.T) *vfs.MemFS {
	t.Helper()
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/log", 0o755); err != nil {
		t.Fatal(err)
	}
	return fs
}

func records(n int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, bytes.Repeat([]byte{byte('a' + i%26)}, i*7%40))
	}
	return out
}

// writeLog creates a log holding recs, synced, and closes it.
func writeLog(t *testing.T, fs vfs.FS, first uint64, recs [][]byte) {
	t.Helper()
	l, err := Create(fs, path, Options{FirstIndex: first})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		idx, err := l.Append(r)
		if err != nil {
			t.Fatal(err)
		}
		if idx != first+uint64(i) {
			t.Fatalf("Append #%d returned index %d, want %d", i, idx, first+uint64(i))
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// readLog opens the log and returns its records (nil on error).
func readLog(t *testing.T, fs vfs.FS, first uint64) (*Log, [][]byte, error) {
	t.Helper()
	l, err := Open(fs, path, Options{FirstIndex: first})
	if err != nil {
		return nil, nil, err
	}
	var got [][]byte
	next := first
	err = l.Replay(func(index uint64, data []byte) error {
		if index != next {
			t.Fatalf("replayed index %d, want %d", index, next)
		}
		next++
		got = append(got, data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, got, nil
}

func equalRecords(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, bytes.Equal)
}

func fileBytes(t *testing.T, fs vfs.FS) []byte {
	t.Helper()
	b, err := vfs.ReadFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, fs vfs.FS, b []byte) {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir("/log"); err != nil {
		t.Fatal(err)
	}
}

func TestAppendReplayReopen(t *testing.T) {
	fs := newFS(t)
	want := records(50)
	writeLog(t, fs, 7, want)
	l, got, err := readLog(t, fs.Crash(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if !equalRecords(got, want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	if l.Len() != 50 || l.FirstIndex() != 7 || l.NextIndex() != 57 || l.Err() != nil {
		t.Errorf("Len %d FirstIndex %d NextIndex %d Err %v", l.Len(), l.FirstIndex(), l.NextIndex(), l.Err())
	}
	var size int64
	for _, r := range want {
		size += int64(HeaderSize + len(r))
	}
	if l.Size() != size {
		t.Errorf("Size %d, want %d", l.Size(), size)
	}
	// Appending after reopen continues the numbering.
	if idx, err := l.Append([]byte("more")); err != nil || idx != 57 {
		t.Fatalf("Append after reopen = %d, %v", idx, err)
	}
	// A replay error stops the replay and is returned as is.
	stop := errors.New("stop")
	calls := 0
	if err := l.Replay(func(uint64, []byte) error { calls++; return stop }); err != stop || calls != 1 {
		t.Errorf("Replay with failing fn = %v after %d calls", err, calls)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v", err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
}

func TestRecordFormat(t *testing.T) {
	// Pinned: length, CRC-32C over length+data, data; little endian.
	got := appendRecord(nil, []byte("hi"))
	want := []byte{2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i'}
	crc := crc32c(append([]byte{2, 0, 0, 0}, "hi"...))
	binary.LittleEndian.PutUint32(want[4:], crc)
	if !bytes.Equal(got, want) {
		t.Fatalf("record = %x, want %x", got, want)
	}
	// An all-zero header is not a (valid, empty) record.
	if _, _, ok := decodeRecord(make([]byte, 64), DefaultMaxRecordSize); ok {
		t.Fatal("zeros decode as a record")
	}
	if data, n, ok := decodeRecord(appendRecord(nil, nil), DefaultMaxRecordSize); !ok || n != HeaderSize || len(data) != 0 {
		t.Fatalf("empty record: %q %d %v", data, n, ok)
	}
	// Behind what dst holds, the same bytes; with room, no allocation
	// (Append frames every record in the buffer its Log reuses).
	dst := append(make([]byte, 0, 64), "x"...)
	if got := appendRecord(dst, []byte("hi")); !bytes.Equal(got[1:], want) || got[0] != 'x' {
		t.Fatalf("record behind a byte = %x, want x then %x", got, want)
	}
	hi := []byte("hi")
	if n := testing.AllocsPerRun(10, func() { _ = appendRecord(dst[:0], hi) }); n != 0 {
		t.Fatalf("appendRecord with room: %v allocations", n)
	}
}

func TestEmptyRecordsAndEmptyLog(t *testing.T) {
	fs := newFS(t)
	writeLog(t, fs, 0, nil)
	l, got, err := readLog(t, fs.Crash(), 0)
	if err != nil || len(got) != 0 || l.Size() != 0 {
		t.Fatalf("empty log: %v, %d records, size %d", err, len(got), l.Size())
	}
	fs = newFS(t)
	writeLog(t, fs, 0, [][]byte{{}, {}, []byte("x"), {}})
	if _, got, err := readLog(t, fs, 0); err != nil || len(got) != 4 || string(got[2]) != "x" {
		t.Fatalf("empty records: %v, %q", err, got)
	}
}

// Torn tails of every shape are truncated away, durably, and the log
// appends right behind the last good record.
func TestTornTailIsTruncated(t *testing.T) {
	good := records(5)
	var base []byte
	for _, r := range good {
		base = appendRecord(base, r)
	}
	next := appendRecord(nil, []byte("the record being written"))
	// A record of 2,000 bytes at byte 110: its bytes [402, 914) are the
	// second sector of the file.
	large := appendRecord(nil, bytes.Repeat([]byte{7}, 2000-HeaderSize))
	unwritten := slices.Clone(large)
	clear(unwritten[402:914])
	tails := map[string][]byte{
		"partial header":      next[:5],
		"header only":         next[:HeaderSize],
		"partial data":        next[:len(next)-3],
		"zeros":               make([]byte, 4096),
		"zero header":         make([]byte, HeaderSize),
		"huge length":         {0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 5},
		"one byte":            {0},
		"an unwritten sector": unwritten,
		"large, cut short":    large[:1500],
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			fs := newFS(t)
			writeFile(t, fs, append(slices.Clone(base), tail...))
			l, got, err := readLog(t, fs, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !equalRecords(got, good) || l.Size() != int64(len(base)) {
				t.Fatalf("recovered %d records, size %d; want %d, %d", len(got), l.Size(), len(good), len(base))
			}
			// The truncation is durable.
			if b := fileBytes(t, fs.Crash()); !bytes.Equal(b, base) {
				t.Fatalf("after recovery and crash the file has %d bytes, want %d", len(b), len(base))
			}
			if idx, err := l.Append([]byte("after")); err != nil || idx != 6 {
				t.Fatalf("Append after recovery = %d, %v", idx, err)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			_, got, err = readLog(t, fs.Crash(), 1)
			if err != nil || len(got) != 6 || string(got[5]) != "after" {
				t.Fatalf("after append: %v, %d records", err, len(got))
			}
		})
	}
}

// A bad record followed by a valid one is corruption in the middle: Open
// refuses, with the offset, and changes nothing.
func TestCorruptMiddle(t *testing.T) {
	recs := records(6)
	var b []byte
	var offsets []int
	for _, r := range recs {
		offsets = append(offsets, len(b))
		b = appendRecord(b, r)
	}
	for _, victim := range []int{0, 2, 4} {
		for _, field := range []string{"length", "crc", "data"} {
			t.Run(fmt.Sprint(victim, field), func(t *testing.T) {
				bad := slices.Clone(b)
				switch field {
				case "length":
					bad[offsets[victim]] ^= 0x01
				case "crc":
					bad[offsets[victim]+5] ^= 0x10
				case "data":
					bad[offsets[victim+1]-1] ^= 0x80
				}
				fs := newFS(t)
				writeFile(t, fs, bad)
				_, err := Open(fs, path, Options{FirstIndex: 1})
				var ce *CorruptError
				if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open = %v, want a *CorruptError", err)
				}
				if ce.Offset != int64(offsets[victim]) || ce.Path != path {
					t.Errorf("CorruptError %+v, want offset %d", ce, offsets[victim])
				}
				if got := fileBytes(t, fs); !bytes.Equal(got, bad) {
					t.Error("Open changed a corrupt log")
				}
			})
		}
	}
	// Garbage between two valid records, too.
	fs := newFS(t)
	writeFile(t, fs, slices.Concat(appendRecord(nil, []byte("a")), []byte("junk"), appendRecord(nil, []byte("b"))))
	if _, err := Open(fs, path, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("garbage between records: %v", err)
	}
}

// A final record with nothing after it, of its whole length and no
// unwritten sector, that fails its checksum (a byte flipped in its data,
// its checksum or its length; garbage of a record's length) was written
// whole and damaged since: not a torn write (package tail's rule). Open
// refuses with its offset and changes nothing; the records before it are
// not dropped silently.
func TestFinalRecordWrittenWholeIsDamage(t *testing.T) {
	recs := records(5)
	var base []byte
	for _, r := range recs {
		base = appendRecord(base, r)
	}
	last := appendRecord(nil, []byte("the last acknowledged record"))
	flip := func(i int, bit byte) []byte { b := slices.Clone(last); b[i] ^= bit; return b }
	tails := map[string][]byte{
		"data flipped":        flip(len(last)-1, 0x01),
		"checksum flipped":    flip(5, 0x10),
		"length made shorter": flip(0, 0x04),
		"last byte zeroed":    append(slices.Clone(last[:len(last)-1]), 0),
		"then zeros":          append(flip(len(last)-1, 0x01), make([]byte, 100)...),
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			fs := newFS(t)
			bad := slices.Concat(base, tail)
			writeFile(t, fs, bad)
			_, err := Open(fs, path, Options{FirstIndex: 1})
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Offset != int64(len(base)) || ce.Path != path {
				t.Fatalf("Open = %v, want a *CorruptError at byte %d", err, len(base))
			}
			if got := fileBytes(t, fs); !bytes.Equal(got, bad) {
				t.Error("Open changed a damaged log")
			}
		})
	}
}

func TestCreateIsExclusiveAndDurable(t *testing.T) {
	fs := newFS(t)
	l, err := Create(fs, path, Options{FirstIndex: 3})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := Create(fs, path, Options{}); !errors.Is(err, os.ErrExist) {
		t.Errorf("Create over an existing log = %v", err)
	}
	// Create synced the directory: the empty log survives a crash.
	crashed := fs.Crash()
	if l, err := Open(crashed, path, Options{FirstIndex: 3}); err != nil || l.Len() != 0 || l.NextIndex() != 3 {
		t.Fatalf("after crash: %v", err)
	}
	if _, err := Open(fs, "/log/missing", Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing log = %v", err)
	}
	if _, err := Open(fs, path, Options{MaxRecordSize: -1}); err == nil {
		t.Error("negative MaxRecordSize accepted")
	}
}

func TestUnsyncedRecordsAreLostInACrash(t *testing.T) {
	fs := newFS(t)
	writeLog(t, fs, 1, records(3))
	l, _, err := readLog(t, fs, 1)
	if err != nil {
		t.Fatal(err)
	}
	l.Append([]byte("unsynced"))
	if _, got, err := readLog(t, fs.Crash(), 1); err != nil || len(got) != 3 {
		t.Fatalf("after crash: %v, %d records, want 3", err, len(got))
	}
}

func TestTooLarge(t *testing.T) {
	fs := newFS(t)
	l, err := Create(fs, path, Options{MaxRecordSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(make([]byte, 11)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Append of 11 bytes = %v", err)
	}
	if idx, err := l.Append(bytes.Repeat([]byte{1}, 10)); err != nil || idx != 0 {
		t.Fatalf("Append after ErrTooLarge = %d, %v (it must not break the log)", idx, err)
	}
	l.Sync()
	if _, got, err := readLog(t, fs, 0); err != nil || len(got) != 1 {
		t.Fatalf("reopen: %v, %d", err, len(got))
	}
	// A whole record claiming more than the maximum is not a torn write:
	// the log is refused.
	if _, err := Open(fs, path, Options{MaxRecordSize: 9}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reopen with a smaller maximum: %v, want ErrCorrupt", err)
	}
}

// A failed or torn write is cut back off the file: the next append lands
// behind the last good record, and nothing of the failed one survives.
func TestFailedAppendIsTruncatedBack(t *testing.T) {
	for _, fail := range []error{syscall.EIO, &errorfs.TornWrite{N: 11}, &errorfs.TornWrite{N: 3}} {
		t.Run(fmt.Sprint(fail), func(t *testing.T) {
			mem := newFS(t)
			writeLog(t, mem, 1, records(2))
			sw := errorfs.NewSwitch(fail, errorfs.OpWriteAt)
			fs := errorfs.New(mem, sw)
			l, _, err := readLog(t, fs, 1)
			if err != nil {
				t.Fatal(err)
			}
			size := l.Size()
			sw.Set(true)
			if _, err := l.Append([]byte("doomed record")); err == nil || errors.Is(err, ErrBroken) {
				t.Fatalf("failed Append = %v", err)
			}
			sw.Set(false)
			if l.Size() != size || l.Len() != 2 || l.Err() != nil {
				t.Fatalf("after failed append: size %d (want %d), len %d, err %v", l.Size(), size, l.Len(), l.Err())
			}
			if st, _ := mem.Stat(path); st.Size() != size {
				t.Fatalf("file is %d bytes after the failed append, want %d", st.Size(), size)
			}
			if idx, err := l.Append([]byte("next")); err != nil || idx != 3 {
				t.Fatalf("Append after failure = %d, %v", idx, err)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			_, got, err := readLog(t, mem.Crash(), 1)
			if err != nil || len(got) != 3 || string(got[2]) != "next" {
				t.Fatalf("after crash: %v, %q", err, got)
			}
		})
	}
}

func TestFailedTruncateBreaksTheLog(t *testing.T) {
	mem := newFS(t)
	writeLog(t, mem, 1, records(2))
	sw := errorfs.NewSwitch(syscall.EIO, errorfs.OpWriteAt, errorfs.OpTruncate)
	fs := errorfs.New(mem, sw)
	l, _, err := readLog(t, fs, 1)
	if err != nil {
		t.Fatal(err)
	}
	sw.Set(true)
	if _, err := l.Append([]byte("x")); !errors.Is(err, ErrBroken) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append with failing write and truncate = %v", err)
	}
	sw.Set(false)
	if _, err := l.Append([]byte("y")); !errors.Is(err, ErrBroken) {
		t.Errorf("Append on a broken log = %v", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrBroken) {
		t.Errorf("Sync on a broken log = %v", err)
	}
	if l.Err() == nil {
		t.Error("Err() = nil on a broken log")
	}
}

func TestFailedSyncBreaksTheLog(t *testing.T) {
	mem := newFS(t)
	writeLog(t, mem, 1, records(2))
	sw := errorfs.NewSwitch(syscall.EIO, errorfs.OpSync)
	l, _, err := readLog(t, errorfs.New(mem, sw), 1)
	if err != nil {
		t.Fatal(err)
	}
	l.Append([]byte("x"))
	sw.Set(true)
	if err := l.Sync(); err == nil {
		t.Fatal("Sync succeeded")
	}
	sw.Set(false)
	if err := l.Sync(); !errors.Is(err, ErrBroken) {
		t.Errorf("Sync after a failed Sync = %v, want ErrBroken (fsync errors are not retried)", err)
	}
	if _, err := l.Append([]byte("y")); !errors.Is(err, ErrBroken) {
		t.Errorf("Append after a failed Sync = %v", err)
	}
	// Reopening recovers what reached the disk.
	if _, got, err := readLog(t, mem.Crash(), 1); err != nil || len(got) != 2 {
		t.Fatalf("reopen after crash: %v, %d", err, len(got))
	}
}

func TestOpenRecoveryFailures(t *testing.T) {
	mem := newFS(t)
	writeFile(t, mem, append(appendRecord(nil, []byte("a")), 1, 2, 3))
	// Truncating the torn tail fails: Open fails, and leaves the file.
	fs := errorfs.New(mem, errorfs.OnIndex(0, syscall.EIO, errorfs.OpTruncate))
	if _, err := Open(fs, path, Options{}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Open with failing truncate = %v", err)
	}
	fs = errorfs.New(mem, errorfs.OnIndex(0, syscall.EIO, errorfs.OpSync))
	if _, err := Open(fs, path, Options{}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Open with failing sync = %v", err)
	}
	fs = errorfs.New(mem, errorfs.OnIndex(0, syscall.EIO, errorfs.OpReadAt))
	if _, err := Open(fs, path, Options{}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Open with failing read = %v", err)
	}
	if l, got, err := readLog(t, mem, 0); err != nil || len(got) != 1 || l.Size() != HeaderSize+1 {
		t.Fatalf("clean reopen: %v, %d", err, len(got))
	}
}

// Create's durability steps fail cleanly.
func TestCreateFailures(t *testing.T) {
	for _, kind := range []errorfs.OpKind{errorfs.OpOpen, errorfs.OpSync, errorfs.OpSyncDir} {
		mem := newFS(t)
		fs := errorfs.New(mem, errorfs.OnIndex(0, syscall.EIO, kind))
		if _, err := Create(fs, path, Options{}); !errors.Is(err, syscall.EIO) {
			t.Errorf("Create failing %v = %v", kind, err)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to the scanner (and to Open): it never
// panics, and what it reports is consistent with the bytes.
func FuzzDecode(f *testing.F) {
	var b []byte
	for _, r := range records(4) {
		b = appendRecord(b, r)
	}
	f.Add([]byte{})
	f.Add(b)
	f.Add(b[:len(b)-2])
	f.Add(append(slices.Clone(b), 0, 0, 0, 0, 0, 0, 0, 0, 0))
	f.Add(appendRecord(nil, nil))
	f.Add(make([]byte, HeaderSize))
	bad := slices.Clone(b)
	bad[9] ^= 1
	f.Add(bad)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 1 << 10
		var recs [][]byte
		n, good, tail := scan(b, max, func(i uint64, data []byte) bool {
			if i != uint64(len(recs)) {
				t.Fatalf("record %d reported as %d", len(recs), i)
			}
			recs = append(recs, data)
			return true
		})
		if n != uint64(len(recs)) || good < 0 || good > len(b) {
			t.Fatalf("n %d (saw %d), good %d of %d", n, len(recs), good, len(b))
		}
		var again []byte
		for _, r := range recs {
			again = appendRecord(again, r)
		}
		if !bytes.Equal(again, b[:good]) {
			t.Fatal("re-encoding the records does not give the valid prefix")
		}
		found := false
		for off := good + 1; off < len(b); off++ {
			if _, _, ok := decodeRecord(b[off:], max); ok {
				found = true
				break
			}
		}
		switch tail {
		case tailClean:
			if good != len(b) {
				t.Fatalf("clean tail, but %d of %d bytes valid", good, len(b))
			}
		case tailTorn:
			if good == len(b) || found {
				t.Fatalf("torn tail at %d of %d, valid record after: %v", good, len(b), found)
			}
		case tailCorrupt:
			if !found {
				t.Fatal("corrupt, but no valid record after the bad one")
			}
		case tailDamaged:
			if good == len(b) || found {
				t.Fatalf("damaged final record at %d of %d, valid record after: %v", good, len(b), found)
			}
		}
		// Open agrees, and never panics either.
		fs := newFS(t)
		writeFile(t, fs, b)
		l, err := Open(fs, path, Options{MaxRecordSize: max})
		if tail == tailCorrupt || tail == tailDamaged {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want corruption", err)
			}
			return
		}
		if err != nil || l.Len() != n || l.Size() != int64(good) {
			t.Fatalf("Open = %v (len %d, size %d), want %d records, %d bytes", err, l.Len(), l.Size(), n, good)
		}
		// ReplayAt hands out the same records, each at its offset.
		var i, at int
		if err := l.ReplayAt(func(index uint64, off int64, data []byte) error {
			if index != uint64(i) || off != int64(at) || !bytes.Equal(data, recs[i]) {
				t.Fatalf("record %d replayed as index %d at %d, want at %d", i, index, off, at)
			}
			i++
			at += HeaderSize + len(data)
			return nil
		}); err != nil || i != len(recs) {
			t.Fatalf("ReplayAt = %v after %d of %d records", err, i, len(recs))
		}
		l.Close()
	})
}

// TestReplayAtReportsOffsets: ReplayAt passes each record's file offset,
// so a reader can name a record it cannot use in a *CorruptError, which
// unwraps to the reason and matches ErrCorrupt.
func TestReplayAtReportsOffsets(t *testing.T) {
	fs := newFS(t)
	recs := records(5)
	writeLog(t, fs, 10, recs)
	l, err := Open(fs, path, Options{FirstIndex: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	why := errors.New("record 12 contradicts record 11")
	var want int64
	err = l.ReplayAt(func(index uint64, off int64, data []byte) error {
		if off != want {
			t.Fatalf("record %d at offset %d, want %d", index, off, want)
		}
		if index == 12 {
			return &CorruptError{Path: l.Path(), Offset: off, Err: why}
		}
		want += int64(HeaderSize + len(data))
		return nil
	})
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || !errors.Is(err, why) {
		t.Fatalf("ReplayAt = %v, want the reader's *CorruptError", err)
	}
	if wantOff := int64(2*HeaderSize + len(recs[0]) + len(recs[1])); ce.Offset != wantOff {
		t.Fatalf("offset %d, want %d", ce.Offset, wantOff)
	}
	if msg := err.Error(); msg != fmt.Sprintf("wal: corrupt log %s: record at offset %d: %v", path, ce.Offset, why) {
		t.Fatalf("message %q", msg)
	}
}

// Records a previous process wrote but never synced (still in the page
// cache) are made durable by Open: what Replay hands out survives a crash.
func TestOpenSyncsWhatItFinds(t *testing.T) {
	fs := newFS(t)
	writeLog(t, fs, 1, records(2))
	l, _, err := readLog(t, fs, 1)
	if err != nil {
		t.Fatal(err)
	}
	l.Append([]byte("unsynced")) // the process dies here, the page cache survives
	l2, got, err := readLog(t, fs, 1)
	if err != nil || len(got) != 3 {
		t.Fatalf("reopen: %v, %d records", err, len(got))
	}
	l2.Close()
	if _, got, err := readLog(t, fs.Crash(), 1); err != nil || len(got) != 3 {
		t.Fatalf("after reopen and crash: %v, %d records, want 3", err, len(got))
	}
}

// WriteBack writes back a log written since its last Sync or WriteBack,
// and only such a log (a clean one's writeback would be a system call
// for nothing on every quiesce); a failed writeback breaks the log, as a
// failed Sync does: pages it could not write may be lost, and a later
// fsync need not say so.
func TestWriteBack(t *testing.T) {
	mem := newFS(t)
	writeLog(t, mem, 1, records(2))
	fail := errorfs.NewSwitch(syscall.EIO, errorfs.OpWriteBack)
	l, _, err := readLog(t, errorfs.New(mem, fail), 1)
	if err != nil {
		t.Fatal(err)
	}
	// Clean: nothing to write back, so the failing writeback is not
	// called.
	fail.Set(true)
	if err := l.WriteBack(); err != nil {
		t.Fatalf("WriteBack of a log not written since it was opened: %v", err)
	}
	if _, err := l.Append([]byte("x")); err != nil {
		t.Fatal(err)
	}
	fail.Set(false)
	if err := l.WriteBack(); err != nil {
		t.Fatal(err)
	}
	fail.Set(true)
	if err := l.WriteBack(); err != nil {
		t.Fatalf("WriteBack of a log written back since its last append: %v", err)
	}
	if _, err := l.Append([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteBack(); err == nil {
		t.Fatal("a failing writeback of a written log succeeded")
	}
	fail.Set(false)
	if err := l.Sync(); !errors.Is(err, ErrBroken) {
		t.Errorf("Sync after a failed WriteBack = %v, want ErrBroken", err)
	}
}

// AppendBatch writes its records with one write and numbers them as
// Appends one by one would; the log reads them back as separate records;
// an empty batch writes nothing; a record over the maximum fails the
// batch before anything is written.
func TestAppendBatch(t *testing.T) {
	fs := newFS(t)
	writes := 0
	count := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpWriteAt || op.Kind == errorfs.OpWrite {
			writes++
		}
		return nil
	})
	l, err := Create(errorfs.New(fs, count), path, Options{FirstIndex: 3, MaxRecordSize: 40})
	if err != nil {
		t.Fatal(err)
	}
	want := records(9)
	writes = 0
	for i := 0; i < len(want); i += 3 {
		idx, err := l.AppendBatch(want[i : i+3]...)
		if err != nil || idx != uint64(3+i) {
			t.Fatalf("AppendBatch of records %d–%d = %d, %v; want index %d", i, i+2, idx, err, 3+i)
		}
	}
	if writes != 3 {
		t.Fatalf("%d writes for 3 batches", writes)
	}
	if idx, err := l.AppendBatch(); err != nil || idx != 12 || writes != 3 {
		t.Fatalf("empty AppendBatch = %d, %v, %d writes; want 12 and none", idx, err, writes-3)
	}
	if _, err := l.AppendBatch([]byte("ok"), make([]byte, 41)); !errors.Is(err, ErrTooLarge) || writes != 3 || l.NextIndex() != 12 {
		t.Fatalf("AppendBatch with a record too large = %v, %d writes, next index %d", err, writes-3, l.NextIndex())
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, got, err := readLog(t, fs.Crash(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if !equalRecords(got, want) {
		t.Fatalf("replayed %d records, want the %d appended in batches", len(got), len(want))
	}
}
