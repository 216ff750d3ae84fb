package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// smallSegment is the segment size of the crash tests (see
// partition.AllowSmallSegments): small, so every write point can replay a
// workload that rolls several segments without copying megabytes.
const smallSegment = 32 << 10

// memConfig is a FileStore config on fsys with small segments; tests
// using it call partition.AllowSmallSegments(t, smallSegment).
func memConfig(fsys vfs.FS) partition.FileConfig {
	return partition.FileConfig{Dir: "/data", SegmentSize: smallSegment, FS: fsys}
}

// sameMessage reports how got differs from want, "" if it does not.
func sameMessage(got, want partition.Message) string {
	if got.Offset != want.Offset || got.ID != want.ID || got.Timestamp != want.Timestamp || !bytes.Equal(got.Payload, want.Payload) {
		return fmt.Sprintf("offset %d ts %d %d bytes, want offset %d ts %d %d bytes",
			got.Offset, got.Timestamp, len(got.Payload), want.Offset, want.Timestamp, len(want.Payload))
	}
	if len(got.Headers) != len(want.Headers) {
		return fmt.Sprintf("%d headers, want %d", len(got.Headers), len(want.Headers))
	}
	for j := range want.Headers {
		if got.Headers[j].Key != want.Headers[j].Key || !bytes.Equal(got.Headers[j].Value, want.Headers[j].Value) {
			return fmt.Sprintf("header %d differs", j)
		}
	}
	return ""
}

// The produce workload of the crash tests: crashBatches batches of 2 to 4
// messages of crashPayload bytes (about 120 KB, so the 32 KiB segments
// roll three times), each synced before it counts as acknowledged, and a
// consumer offset stored after every fourth acknowledged batch.
const (
	crashBatches = 20
	crashPayload = 2000
)

var crashWorkload = func() (batches [][]partition.Message) {
	var next uint64
	for i := range crashBatches {
		b := batch(next, 2+i%3, crashPayload)
		for j := range b {
			b[j].Offset = next + uint64(j) // what Append will assign
		}
		batches = append(batches, b)
		next += uint64(len(b))
	}
	return batches
}()

// produceResult is what the workload got acknowledged before it stopped.
type produceResult struct {
	ackedBatches int    // batches whose Append and Sync returned nil
	tried        int    // batches whose Append was called
	err          error  // the error that stopped the workload
	consumer     uint64 // last acknowledged consumer offset
	hasConsumer  bool
	// consumerTry is the consumer offset whose store failed, if one did:
	// it may or may not have reached the disk.
	consumerTry    uint64
	hasConsumerTry bool
}

var crashNS = metadata.Namespace(0x0000_0001_0020_0003) // (1, 2, 3)

// produce runs the workload on fsys, stopping at the first error as a real
// writer would.
func produce(fsys vfs.FS) (r produceResult) {
	s, err := partition.NewFileStore(memConfig(fsys))
	if err != nil {
		r.err = err
		return r
	}
	p, err := s.Build(crashNS, 1)
	if err != nil {
		r.err = err
		return r
	}
	var next uint64
	for i, b := range crashWorkload {
		r.tried = i + 1
		if _, err := p.Append(b); err != nil {
			r.err = err
			return r
		}
		if err := p.Sync(); err != nil {
			r.err = err
			return r
		}
		r.ackedBatches = i + 1
		next += uint64(len(b))
		if i%4 == 3 {
			if err := p.StoreConsumerOffset("c", next); err != nil {
				r.err, r.consumerTry, r.hasConsumerTry = err, next, true
				return r
			}
			r.consumer, r.hasConsumer = next, true
		}
	}
	if err := p.Close(); err != nil {
		r.err = err
	}
	return r
}

// checkRecovered reopens fsys and checks what a crash after r may leave:
// the readable messages are a prefix of the attempted ones, with dense
// offsets, ending at a batch boundary, holding every acknowledged batch
// and no batch beyond the last one tried; the consumer offset is the last
// acknowledged one or the one whose store failed. The partition is then
// still usable.
func checkRecovered(t *testing.T, fsys vfs.FS, r produceResult, what string) {
	t.Helper()
	s, err := partition.NewFileStore(memConfig(fsys))
	if err != nil {
		t.Fatalf("%s: NewFileStore: %v", what, err)
	}
	p, err := s.Build(crashNS, 1)
	if err != nil {
		t.Fatalf("%s: Build after the crash: %v", what, err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Fatalf("%s: Close: %v", what, err)
		}
	}()
	got, err := p.Read(0, 1<<20)
	if err != nil {
		t.Fatalf("%s: Read: %v", what, err)
	}
	if p.StartOffset() != 0 || p.NextOffset() != uint64(len(got)) {
		t.Fatalf("%s: StartOffset %d NextOffset %d with %d messages readable", what, p.StartOffset(), p.NextOffset(), len(got))
	}
	var boundaries []int // message counts at batch ends: 0, after batch 1, ...
	n := 0
	boundaries = append(boundaries, 0)
	for _, b := range crashWorkload {
		n += len(b)
		boundaries = append(boundaries, n)
	}
	k := slices.Index(boundaries, len(got))
	switch {
	case k < 0:
		t.Fatalf("%s: %d messages readable, not a batch boundary: a batch is half visible", what, len(got))
	case k < r.ackedBatches:
		t.Fatalf("%s: %d batches readable, but %d were acknowledged", what, k, r.ackedBatches)
	case k > r.tried:
		t.Fatalf("%s: %d batches readable, but only %d were appended", what, k, r.tried)
	}
	var want []partition.Message
	for _, b := range crashWorkload[:k] {
		want = append(want, b...)
	}
	for i := range got {
		if d := sameMessage(got[i], want[i]); d != "" {
			t.Fatalf("%s: message %d: %s", what, i, d)
		}
	}
	off, ok, err := p.ConsumerOffset("c")
	if err != nil {
		t.Fatalf("%s: ConsumerOffset: %v", what, err)
	}
	okOffsets := []uint64{}
	if r.hasConsumer {
		okOffsets = append(okOffsets, r.consumer)
	}
	if r.hasConsumerTry {
		okOffsets = append(okOffsets, r.consumerTry)
	}
	switch {
	case !ok && r.hasConsumer:
		t.Fatalf("%s: acknowledged consumer offset %d lost", what, r.consumer)
	case ok && !slices.Contains(okOffsets, off):
		t.Fatalf("%s: consumer offset %d, want one of %v", what, off, okOffsets)
	}
	// Usable: appends continue at the recovered end.
	next := p.NextOffset()
	extra := batch(next, 2, 100)
	if first, err := p.Append(extra); err != nil || first != next {
		t.Fatalf("%s: Append after recovery: %d, %v", what, first, err)
	}
	if err := p.Sync(); err != nil {
		t.Fatalf("%s: Sync after recovery: %v", what, err)
	}
	if ms, err := p.Read(next, 10); err != nil || len(ms) != 2 || sameMessage(ms[1], func() partition.Message {
		m := extra[1]
		m.Offset = next + 1
		return m
	}()) != "" {
		t.Fatalf("%s: Read after recovery: %d messages, %v", what, len(ms), err)
	}
}

// countOps runs the workload cleanly and returns how many operations
// match kinds (mutating ones with no kinds).
func countOps(t *testing.T, kinds ...errorfs.OpKind) int64 {
	t.Helper()
	partition.AllowSmallSegments(t, smallSegment)
	count := errorfs.OnIndex(-1, nil, kinds...)
	if r := produce(errorfs.New(vfs.NewMem(), count)); r.err != nil || r.ackedBatches != crashBatches {
		t.Fatalf("clean run: %+v", r)
	}
	return count.Count()
}

// TestCrashAtEveryWritePoint fails each mutating filesystem operation of
// the produce workload in turn (every create, write, fsync, truncate,
// rename, remove and directory fsync), stops the workload there, and
// then checks the recovery of both a power loss (only fsynced data and
// fsynced directory entries survive) and a process crash (everything
// written survives).
func TestCrashAtEveryWritePoint(t *testing.T) {
	n := countOps(t)
	if n < 50 {
		t.Fatalf("only %d mutating operations in the workload", n)
	}
	clean := vfs.NewMem()
	produce(clean)
	if logs := memSegments(t, clean, partDir("/data", crashNS)); len(logs) < 3 {
		t.Fatalf("the workload leaves segments %q, want at least 3 (rolls)", logs)
	}
	t.Logf("%d write points", n)
	for i := range n {
		mem := vfs.NewMem()
		inj := errorfs.OnIndex(i, syscall.EIO)
		r := produce(errorfs.New(mem, inj))
		if !inj.Fired() {
			t.Fatalf("op %d never happened", i)
		}
		if r.err != nil && !errors.Is(r.err, syscall.EIO) {
			t.Fatalf("op %d: workload stopped by %v, not the injected EIO", i, r.err)
		}
		checkRecovered(t, mem.Crash(), r, fmt.Sprintf("power loss at op %d (%v)", i, r.err))
		checkRecovered(t, mem, r, fmt.Sprintf("process crash at op %d (%v)", i, r.err))
	}
}

// TestCrashAtTornWrites tears each write of the workload at a few byte
// positions (the first bytes reach the file, then the write fails), then
// checks recovery as TestCrashAtEveryWritePoint does.
func TestCrashAtTornWrites(t *testing.T) {
	n := countOps(t, errorfs.OpWrite, errorfs.OpWriteAt)
	for i := range n {
		// Inside the first record's header, inside its payload, just
		// after it and inside the second record (the first one whole: a
		// failed batch must not leave it behind), and past most batches.
		for _, tear := range []int{1, 20, 60 + crashPayload/2, 60 + crashPayload, 2*60 + crashPayload + 10, 3 * crashPayload} {
			mem := vfs.NewMem()
			inj := errorfs.OnIndex(i, &errorfs.TornWrite{N: tear}, errorfs.OpWrite, errorfs.OpWriteAt)
			r := produce(errorfs.New(mem, inj))
			if r.err != nil && !errors.Is(r.err, syscall.EIO) {
				t.Fatalf("write %d torn at %d: workload stopped by %v", i, tear, r.err)
			}
			what := fmt.Sprintf("write %d torn at byte %d (%v)", i, tear, r.err)
			checkRecovered(t, mem.Crash(), r, "power loss after "+what)
			checkRecovered(t, mem, r, "process crash after "+what)
		}
	}
}

// TestCrashDuringTruncation fails each write point of a truncation
// workload (an unsynced append and a TruncateBefore into it, a
// TruncateBefore inside a segment, EnforceRetention by size, a purge, then
// an append) on a synced multi-segment log, crashes, and
// checks that StartOffset is one the workload had reached or was
// attempting, that every message from it on reads back intact, and that
// offsets are never reused: NextOffset never goes back.
func TestCrashDuringTruncation(t *testing.T) {
	const size = 2000
	partition.AllowSmallSegments(t, smallSegment)
	base := vfs.NewMem()
	cfg := memConfig(base)
	p := mustBuild(t, newFileStore(t, cfg), crashNS, 1)
	fillSegments(t, p, 110, 5, size) // 220 KB: 7 segments
	end := p.NextOffset()
	mustClose(t, p)
	if logs := memSegments(t, base, partDir("/data", crashNS)); len(logs) < 4 {
		t.Fatalf("segments %q, want at least 4", logs)
	}
	segSize := int64(0)
	for i := range uint64(10) {
		segSize += recSize(msg(i, size))
	}

	type step struct {
		run    func(partition.Partition) error
		target func(p partition.Partition) uint64 // start offset it aims at
		// unsynced: success does not make NextOffset durable.
		unsynced bool
	}
	steps := []step{
		{func(p partition.Partition) error { _, err := p.Append(batch(p.NextOffset(), 10, size)); return err },
			func(p partition.Partition) uint64 { return p.StartOffset() }, true},
		// Into the unsynced messages: they must be made durable before
		// the start offset is recorded.
		{func(p partition.Partition) error { return p.TruncateBefore(p.NextOffset() - 5) },
			func(p partition.Partition) uint64 { return p.NextOffset() - 5 }, false},
		{func(p partition.Partition) error { return p.TruncateBefore(60) }, func(partition.Partition) uint64 { return 60 }, false},
		{func(p partition.Partition) error { _, err := p.EnforceRetention(0, 20*segSize); return err },
			func(p partition.Partition) uint64 { return p.NextOffset() }, false}, // at most
		{func(p partition.Partition) error { return p.TruncateBefore(p.NextOffset()) },
			func(p partition.Partition) uint64 { return p.NextOffset() }, false},
		{func(p partition.Partition) error {
			if _, err := p.Append(batch(p.NextOffset(), 3, size)); err != nil {
				return err
			}
			return p.Sync()
		}, func(p partition.Partition) uint64 { return p.StartOffset() }, false},
	}
	run := func(fsys vfs.FS) (acked, tried uint64, next uint64, err error) {
		s, err := partition.NewFileStore(memConfig(fsys))
		if err != nil {
			return 0, 0, end, err
		}
		p, err := s.Build(crashNS, 1)
		if err != nil {
			return 0, 0, end, err
		}
		next = end
		for _, st := range steps {
			tried = st.target(p)
			if err := st.run(p); err != nil {
				return acked, tried, next, err
			}
			acked = p.StartOffset()
			if !st.unsynced {
				next = p.NextOffset()
			}
		}
		return acked, tried, next, p.Close()
	}
	count := errorfs.OnIndex(-1, nil)
	if _, _, next, err := run(errorfs.New(base.Crash(), count)); err != nil || next != end+13 {
		t.Fatalf("clean run: next %d, %v", next, err)
	}
	for i := range count.Count() {
		for _, crash := range []bool{true, false} {
			mem := base.Crash() // a copy of the synced log
			acked, tried, next, err := run(errorfs.New(mem, errorfs.OnIndex(i, syscall.EIO)))
			if err != nil && !errors.Is(err, syscall.EIO) {
				t.Fatalf("op %d: %v", i, err)
			}
			fsys := vfs.FS(mem)
			if crash {
				fsys = mem.Crash()
			}
			what := fmt.Sprintf("op %d (crash %v, %v)", i, crash, err)
			p := mustBuild(t, newFileStore(t, memConfig(fsys)), crashNS, 1)
			start := p.StartOffset()
			if start < acked || start > max(tried, acked) {
				t.Fatalf("%s: StartOffset %d, want in [%d, %d]", what, start, acked, max(tried, acked))
			}
			if p.NextOffset() < next {
				t.Fatalf("%s: NextOffset %d went back below %d: offsets reused", what, p.NextOffset(), next)
			}
			if start > 0 {
				if _, err := p.Read(start-1, 1); !errors.Is(err, partition.ErrOffsetOutOfRange) {
					t.Fatalf("%s: Read below start: %v", what, err)
				}
			}
			checkRead(t, p, start, 1000, int(p.NextOffset()-start), size)
			mustClose(t, p)
		}
	}
}

// memSegments lists the .log files in dir of fsys.
func memSegments(t *testing.T, fsys vfs.FS, dir string) []string {
	t.Helper()
	names, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			logs = append(logs, n)
		}
	}
	return logs
}
