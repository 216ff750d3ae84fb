package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// lendFS is the operating system's filesystem, counting where the bytes
// written to its files come from: lent counts the bytes of the watched
// payloads handed to a file as those very slices (the caller's memory, not
// a copy), other all the rest. fail, when set, fails the next vectored
// write after it wrote half of its first piece.
type lendFS struct {
	vfs.FS
	watched     [][]byte
	lent, other int
	fail        error
}

type lendFile struct {
	vfs.File
	fs *lendFS
}

func (l *lendFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := l.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &lendFile{File: f, fs: l}, nil
}

func (f *lendFile) WriteAt(b []byte, off int64) (int, error) {
	f.fs.other += len(b)
	return f.File.WriteAt(b, off)
}

func (f *lendFile) WriteVectorAt(bufs [][]byte, off int64) (int, error) {
	if err := f.fs.fail; err != nil {
		f.fs.fail = nil
		n, _ := f.File.WriteAt(bufs[0][:len(bufs[0])/2], off)
		return n, err
	}
	for _, b := range bufs {
		if f.fs.isWatched(b) {
			f.fs.lent += len(b)
		} else {
			f.fs.other += len(b)
		}
	}
	return vfs.WriteVectorAt(f.File, bufs, off)
}

func (l *lendFS) isWatched(b []byte) bool {
	for _, w := range l.watched {
		if len(b) == len(w) && unsafe.SliceData(b) == unsafe.SliceData(w) {
			return true
		}
	}
	return false
}

// filled is n bytes of a pattern seeded by seed.
func filled(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

// TestAppendLendsLargePayloads: Append writes a payload of 16 KiB or more
// to the file from the caller's slice (a vectored write of the records'
// heads and the payloads, in file order), so the payload is never copied
// in user space, and copies smaller ones beside their heads; the records
// read back as appended, also after a reopen (whose scan checks every
// record's checksum), across chunks and over a failed write, which leaves
// the partition as it was. Fails with every payload copied into the
// append buffer (lent 0).
func TestAppendLendsLargePayloads(t *testing.T) {
	fsys := &lendFS{FS: vfs.Default}
	cfg := partition.FileConfig{Dir: t.TempDir(), FS: fsys}
	ns := mustNS(t, 1, 1, 1)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)

	var msgs []partition.Message
	lentBytes := 0
	for i := range 40 { // 2.6 MiB: three chunks
		m := partition.Message{Timestamp: int64(i), Payload: filled(100+i, byte(i))}
		switch i % 4 {
		case 1:
			m.Payload = filled(64<<10+i, byte(i))
		case 2:
			m.Key = []byte(fmt.Sprint("key", i))
			m.Headers = []partition.Header{{Key: "h", Value: []byte{byte(i)}}}
			m.Payload = filled(16<<10, byte(i))
		case 3:
			m.Payload = filled(16<<10-1, byte(i)) // just below: copied
		}
		if len(m.Payload) >= 16<<10 {
			fsys.watched = append(fsys.watched, m.Payload)
			lentBytes += len(m.Payload)
		}
		msgs = append(msgs, m)
	}
	if _, err := p.Append(msgs); err != nil {
		t.Fatal(err)
	}
	if fsys.lent != lentBytes {
		t.Errorf("payloads written from the caller's slices: %d bytes, want all %d of those of 16 KiB or more (%d bytes written otherwise)",
			fsys.lent, lentBytes, fsys.other)
	}

	// A failed write leaves nothing: the next append goes on where the
	// first ended.
	fsys.fail = errors.New("injected")
	if _, err := p.Append(msgs[:2]); err == nil {
		t.Fatal("append over a failed write succeeded")
	}
	if _, err := p.Append(msgs[:2]); err != nil {
		t.Fatal(err)
	}
	want := append(msgs[:len(msgs):len(msgs)], msgs[:2]...)
	check := func(p partition.Partition) {
		t.Helper()
		var got []partition.Message
		for uint64(len(got)) < p.NextOffset() {
			ms, err := p.Read(uint64(len(got)), 1000)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ms...)
		}
		if len(got) != len(want) {
			t.Fatalf("read %d messages, want %d", len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if !bytes.Equal(g.Payload, w.Payload) || !bytes.Equal(g.Key, w.Key) || len(g.Headers) != len(w.Headers) || g.Timestamp != w.Timestamp {
				t.Fatalf("message %d read back differs (payload %d bytes, want %d)", i, len(g.Payload), len(w.Payload))
			}
		}
	}
	check(p)
	mustClose(t, p)
	check(mustBuild(t, newFileStore(t, cfg), ns, 1))
}
