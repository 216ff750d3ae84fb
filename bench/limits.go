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
	// always: the limit runs as many records as case 3 of the
	// fsync-always set (it is that set's counterpart), not the interval
	// set's.
	always bool
	run    func(ctx context.Context, dir string, count int, m *meter) error
}

func limits() []limit {
	return []limit{
		{key: "file-append", unit: "record",
			title: "buffered file append: bufio.Writer 64 KiB, 60 + 100 = 160-byte records, no fsync; the file is flushed and truncated to empty every 64 MiB and flushed at the end",
			run:   func(ctx context.Context, dir string, n int, m *meter) error { return fileAppend(ctx, dir, n, 0, m) }},
		{key: "file-append-fsync100", unit: "record", always: true,
			title: "the same, plus Flush and fsync after every 100 records (the fsync-always counterpart of case 3)",
			run:   func(ctx context.Context, dir string, n int, m *meter) error { return fileAppend(ctx, dir, n, 100, m) }},
		{key: "chan-handoff", unit: "op",
			title: "channel hand-off: one goroutine sends to another over a chan of 1,024 (parkway's default shard inbox size)",
			run:   func(ctx context.Context, _ string, n int, m *meter) error { return chanHandoff(ctx, n, m) }},
	}
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
