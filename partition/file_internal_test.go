package partition

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// failWrites returns an FS whose segment log writes, while failing is
// on, write half their buffer and fail, like a disk filling up halfway
// through a batch.
func failWrites() (vfs.FS, func(bool)) {
	var failing atomic.Bool
	fsys := errorfs.New(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && op.Kind == errorfs.OpWriteAt && strings.HasSuffix(op.Path, logExt) {
			return &errorfs.TornWrite{N: 1000}
		}
		return nil
	}))
	return fsys, failing.Store
}

func testMessages(first uint64, n, size int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Timestamp: int64(first) + int64(i), Payload: bytes.Repeat([]byte{byte(first) + byte(i)}, size)}
	}
	return msgs
}

func TestFileFailedWriteLeavesNothing(t *testing.T) {
	for _, syncOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", syncOn), func(t *testing.T) {
			fsys, fail := failWrites()
			cfg := FileConfig{Dir: "/data", SegmentSize: MinSegmentSize, Sync: syncOn, FS: fsys}
			s, err := NewFileStore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ns, _ := metadata.NewNamespace(1, 1, 1)
			pp, err := s.Build(ns, 1)
			if err != nil {
				t.Fatal(err)
			}
			p := pp.(*filePartition)
			if _, err := p.Append(testMessages(0, 50, 200)); err != nil {
				t.Fatal(err)
			}
			tail := p.tail()
			size, indexLen := tail.size, len(tail.index)
			fi, _ := tail.log.Stat()
			if fi.Size() != size {
				t.Fatalf("file size %d, logical size %d", fi.Size(), size)
			}

			fail(true)
			if _, err := p.Append(testMessages(50, 50, 200)); !errors.Is(err, syscall.EIO) {
				t.Fatalf("Append through a failing write: %v, want EIO", err)
			}
			if p.NextOffset() != 50 || tail.size != size || len(tail.index) != indexLen {
				t.Fatalf("failed Append moved state: next %d, size %d (was %d), index %d (was %d)",
					p.NextOffset(), tail.size, size, len(tail.index), indexLen)
			}
			if fi, _ := tail.log.Stat(); fi.Size() != size {
				t.Fatalf("failed Append left %d bytes in the file, want %d", fi.Size(), size)
			}
			// A batch that rolls over and then fails leaves an empty tail that
			// the next batch fills.
			if _, err := p.Append(testMessages(50, 1, int(2*MinSegmentSize))); err == nil {
				t.Fatal("Append succeeded through a failing write")
			}

			fail(false)
			if first, err := p.Append(testMessages(50, 50, 200)); err != nil || first != 50 {
				t.Fatalf("Append after a failure: first %d, %v", first, err)
			}
			msgs, err := p.Read(0, 1000)
			if err != nil || len(msgs) != 100 {
				t.Fatalf("Read: %d msgs, %v", len(msgs), err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			s, _ = NewFileStore(cfg)
			pp, err = s.Build(ns, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer pp.Close()
			msgs, err = pp.Read(0, 1000)
			if err != nil || len(msgs) != 100 || pp.NextOffset() != 100 {
				t.Fatalf("reopened: %d msgs, next %d, %v", len(msgs), pp.NextOffset(), err)
			}
			for i, m := range msgs {
				if m.Offset != uint64(i) || m.Timestamp != int64(i) || len(m.Payload) != 200 || m.Payload[0] != byte(i) {
					t.Fatalf("message %d = offset %d ts %d", i, m.Offset, m.Timestamp)
				}
			}
		})
	}
}

// TestFileIndexMatchesRule checks the in-memory index built by appends
// against the sparse index rule, and that reads use it.
func TestFileIndexMatchesRule(t *testing.T) {
	s, err := NewFileStore(FileConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := metadata.NewNamespace(0, 0, 9)
	pp, err := s.Build(ns, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()
	p := pp.(*filePartition)
	var positions []int64
	var pos int64
	for b := range 20 {
		msgs := testMessages(uint64(b*30), 30, 150+b)
		for i := range msgs {
			positions = append(positions, pos)
			n, _ := recordSize(&msgs[i])
			pos += int64(n)
		}
		if _, err := p.Append(msgs); err != nil {
			t.Fatal(err)
		}
	}
	var want []indexEntry
	var last int64
	for off, at := range positions {
		if at-last >= indexInterval {
			want = append(want, indexEntry{rel: uint32(off), pos: uint32(at)})
			last = at
		}
	}
	tail := p.tail()
	if len(want) < 5 || fmt.Sprint(tail.index) != fmt.Sprint(want) {
		t.Fatalf("index %v, want %v", tail.index, want)
	}
	for _, e := range want {
		at, off := tail.seek(uint64(e.rel) + 1)
		if at != int64(e.pos) || off != uint64(e.rel) {
			t.Fatalf("seek(%d) = %d, %d; want %d, %d", e.rel+1, at, off, e.pos, e.rel)
		}
	}
}

func TestDefaultBudget(t *testing.T) {
	for _, tc := range []struct {
		soft uint64
		want int
	}{
		{0, DefaultMaxOpenFilesFloor},
		{100, DefaultMaxOpenFilesFloor},
		{1024, 512},
		{20000, 10000},
		{1 << 20, DefaultMaxOpenFilesCeiling},
		{^uint64(0), DefaultMaxOpenFilesCeiling}, // RLIM_INFINITY
	} {
		if got := defaultBudget(tc.soft); got != tc.want {
			t.Errorf("defaultBudget(%d) = %d, want %d", tc.soft, got, tc.want)
		}
	}
}
