package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// recordHeader is the size of parkway's on-disk record header (format 2:
// checksum, length, offset, id, timestamp, append time, key, header and
// payload lengths; see partition/codec.go), so the file-append limit
// writes the same bytes per record as parkway's file store does for a
// message without key or headers.
const recordHeader = 60

// limit is one raw limit of the machine, measured in the same run.
type limit struct {
	key   string
	title string
	unit  string // what one operation is
	// floor is the limit's floor of operations per round, taken from the
	// sizes of the case it is compared with.
	floor func(Sizes) int
	// beside, when set, is the "<set>/<key>" of the case the limit is the
	// counterpart of: the limit runs whenever that case is selected, so a
	// run of the case alone measures its limit in the same run.
	beside string
	// latency: the limit records each operation's latency, and the
	// report gives its p50 and p99 as the latency cases do.
	latency bool
	run     func(ctx context.Context, dir string, count int, m *meter) error
}

func limits() []limit {
	return []limit{
		{key: "file-append", unit: "record", floor: intervalBatch,
			title: "buffered file append: bufio.Writer 64 KiB, 60 + 100 = 160-byte records, no fsync; the file is flushed and truncated to empty every 64 MiB and flushed at the end",
			run:   func(ctx context.Context, dir string, n int, m *meter) error { return fileAppend(ctx, dir, n, 0, m) }},
		{key: "file-append-fsync100", unit: "record", floor: func(s Sizes) int { return s.Always.Batch },
			title: "the same, plus Flush and fsync after every 100 records (the fsync-always counterpart of case 3)",
			run:   func(ctx context.Context, dir string, n int, m *meter) error { return fileAppend(ctx, dir, n, 100, m) }},
		{key: "chan-handoff", unit: "op", floor: intervalBatch,
			title: "channel hand-off: one goroutine sends to another over a chan of 1,024 (parkway's default shard inbox size)",
			run:   func(ctx context.Context, _ string, n int, m *meter) error { return chanHandoff(ctx, n, m) }},
		{key: bigAppendKey, unit: "record", floor: func(s Sizes) int { return s.Interval.Pipelined64K }, beside: "interval/pipelined-64KiB",
			title: "new page cache, as case 7 needs it: 60 + 64 KiB records, one unbuffered write each, appended to a new file that keeps every byte of the round (no fsync); each round's file is removed after it",
			run:   func(ctx context.Context, dir string, n int, m *meter) error { return bigAppend(ctx, dir, n, m) }},
		{key: rawFsyncKey, unit: "op", floor: func(s Sizes) int { return s.Always.Topics }, beside: "always/convergence", latency: true,
			title: "one raw fsync as case 6 pays it: write one 160-byte record to a file that already exists and fsync it, one at a time, each timed (the fsync-always counterpart of case 6)",
			run:   func(ctx context.Context, dir string, n int, m *meter) error { return rawFsyncs(ctx, dir, n, 1, m) }},
		{key: rawFsync2Key, unit: "op", floor: func(s Sizes) int { return s.Always.Topics }, beside: "always/convergence", latency: true,
			title: "two raw fsyncs in series: the same record written and fsynced in one file, then in another, each pair timed (the counterpart of case 6 with a sequential client: the metadata command's fsync, then the first message's)",
			run:   func(ctx context.Context, dir string, n int, m *meter) error { return rawFsyncs(ctx, dir, n, 2, m) }},
	}
}

// rawFsync2Key is the key of the two-fsyncs-in-series limit, which case
// 6's sequential shape (CreateTopic acknowledged, then Produce) is
// measured against.
const rawFsync2Key = "raw-fsync-2"

// rawFsyncKey is the key of the raw fsync limit, which case 6's
// fsync-always target is measured against.
const rawFsyncKey = "raw-fsync"

func intervalBatch(s Sizes) int { return s.Interval.Batch }

// bigAppendKey is the key of the new-page-cache limit, which case 7
// (64 KiB pipelined under interval fsync) is measured against.
const bigAppendKey = "file-append-64KiB"

// bigAppend appends 60 + 64 KiB records to a new file in dir, one
// unbuffered write each, at least count and until the round's time is up,
// and keeps them all: unlike fileAppend, which empties its file every 64
// MiB so the page cache it writes to stays the same few pages, every byte
// lands on a page the file did not have. That is what case 7 asks of the
// machine (each system keeps the round's half gigabyte), and on a virtual
// machine whose host takes freed memory back the rate of new pages can
// be far below the rate of writing to pages already there
// (bench/RESULTS.md, "64 KiB against the machine's rate of new pages").
// The file is removed after the round, outside the timed section.
func bigAppend(ctx context.Context, dir string, count int, m *meter) (err error) {
	name := filepath.Join(dir, "append-64KiB.log")
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("64 KiB append: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close(), os.Remove(name)) }()
	rec := make([]byte, recordHeader+64<<10)
	for i := recordHeader; i < len(rec); i++ {
		rec[i] = byte(i) // not a page of zeros
	}
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(rec)))
	if err := m.start(); err != nil {
		return err
	}
	n := 0
	for more := m.budget(count); more(n); n++ {
		if n%64 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		binary.LittleEndian.PutUint64(rec[8:], uint64(n))
		if _, err := f.Write(rec); err != nil {
			return fmt.Errorf("64 KiB append: %w", err)
		}
	}
	return m.stop(n, len(rec))
}

// rawFsyncs appends one 160-byte record to each of files files in turn
// with an unbuffered write and fsyncs it before the next, at least count
// times and until the round's time is up, timing each round of files
// write+fsyncs as the latency cases time a call.
//
// It appends to files created (and synced, with their directory) before
// the clock starts, rather than fsyncing a fresh file each time, because
// that is what case 6 pays under fsync on every write: a new partition
// creates no file on the path to its first ack (DESIGN behaviour 32); its
// records go to the node's shared journal, a file that already exists, and
// the metadata command to the metadata log, another one. A fresh file per
// operation would add a file creation and a directory fsync to the limit,
// work case 6 no longer does, and make the limit easier to come near.
// fsync rather than fdatasync: the metadata log pays fsync, the journal
// fdatasync, and on a file that only grows by appends both commit the
// new size, so they cost about the same.
func rawFsyncs(ctx context.Context, dir string, count, files int, m *meter) (err error) {
	fs := make([]*os.File, files)
	for k := range fs {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("fsync-%d.log", k)))
		if err != nil {
			return fmt.Errorf("raw fsync: %w", err)
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		fs[k] = f
		// The file and its directory entry are durable before the
		// clock, so the first timed fsync pays for its record, not for
		// the creation.
		if err := f.Sync(); err != nil {
			return fmt.Errorf("raw fsync: %w", err)
		}
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("raw fsync: %w", err)
	}
	rec := make([]byte, recordHeader+100)
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(rec)))
	if err := m.start(); err != nil {
		return err
	}
	n, err := timeEach(m, m.budget(count), func(i int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(rec[8:], uint64(i))
		for _, f := range fs {
			if _, err := f.Write(rec); err != nil {
				return fmt.Errorf("raw fsync: %w", err)
			}
			if err := f.Sync(); err != nil {
				return fmt.Errorf("raw fsync: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return m.stop(n, len(rec)*files)
}

// syncDir fsyncs a directory, making the entries created in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// appendWrap is the size at which the no-fsync file append truncates its
// file to empty and goes on: appending to the page cache at gigabytes per
// second for a whole round would otherwise leave gigabytes of dirty pages
// whose writeback the following rounds would pay for.
const appendWrap = 64 << 20

// limitChunk is how many operations a limit does between two looks at the
// clock and the context.
const limitChunk = 4096

// fileAppend writes 160-byte records to a new file in dir through a 64 KiB
// bufio.Writer, in chunks of limitChunk records, until at least count are
// written and the round's time is up; with syncEvery > 0 it flushes and
// fsyncs after every syncEvery records, without it the file is truncated
// to empty (after a Flush) whenever it reaches appendWrap. The timed
// section ends after the final Flush (and fsync), excluding the file's
// close and removal.
func fileAppend(ctx context.Context, dir string, count, syncEvery int, m *meter) (err error) {
	f, err := os.Create(filepath.Join(dir, "append.log"))
	if err != nil {
		return fmt.Errorf("file append: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	w := bufio.NewWriterSize(f, 64<<10)
	// A record is its 60-byte header followed by a 100-byte payload;
	// the header carries a length and an offset like parkway's, so the
	// bytes are not all zero (some filesystems treat zero pages
	// specially).
	rec := make([]byte, recordHeader+100)
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(rec)))
	wrap := appendWrap / len(rec)
	if err := m.start(); err != nil {
		return err
	}
	n := 0
	for more := m.budget(count); more(n); {
		if err := ctx.Err(); err != nil {
			return err
		}
		for range limitChunk {
			binary.LittleEndian.PutUint64(rec[8:], uint64(n))
			if _, err := w.Write(rec); err != nil {
				return fmt.Errorf("file append: %w", err)
			}
			n++
			if syncEvery > 0 && n%syncEvery == 0 {
				if err := flushSync(w, f); err != nil {
					return err
				}
			}
			if syncEvery == 0 && n%wrap == 0 {
				if err := rewind(w, f); err != nil {
					return err
				}
			}
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("file append: %w", err)
	}
	if syncEvery > 0 {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("file append: %w", err)
		}
	}
	// bytes counted as record bytes written (160 per record), not payload.
	return m.stop(n, len(rec))
}

func flushSync(w *bufio.Writer, f *os.File) error {
	if err := w.Flush(); err != nil {
		return fmt.Errorf("file append: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("file append: %w", err)
	}
	return nil
}

// rewind flushes w and empties f, so the next record is appended at
// offset 0 of an empty file again.
func rewind(w *bufio.Writer, f *os.File) error {
	if err := w.Flush(); err != nil {
		return fmt.Errorf("file append: %w", err)
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("file append: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("file append: %w", err)
	}
	return nil
}

// chanHandoff sends values from one goroutine to another over a buffered
// channel, in chunks of limitChunk, until at least count are sent and the
// round's time is up, and stops the clock when the receiver has taken the
// last one. The value is a small struct standing in for a frame pointer.
func chanHandoff(ctx context.Context, count int, m *meter) error {
	type frame struct{ count int }
	ch := make(chan *frame, 1024)
	f := &frame{count: 1} // the receiver reads it, as it would a frame's fields
	var (
		wg  sync.WaitGroup
		got int
	)
	if err := m.start(); err != nil {
		return err
	}
	wg.Go(func() {
		for fr := range ch {
			got += fr.count
		}
	})
	var err error
	n := 0
	for more := m.budget(count); more(n); n += limitChunk {
		if err = ctx.Err(); err != nil {
			break
		}
		for range limitChunk {
			ch <- f
		}
	}
	close(ch)
	wg.Wait()
	if err != nil {
		return err
	}
	if err := m.stop(n, 0); err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("channel hand-off: received %d of %d", got, n)
	}
	return nil
}
