package metadata

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// carriedString formats batches readably in failures.
func carriedString(cs []Carried) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("{%v epoch %d %q}", c.NS, c.Epoch, c.Records)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func sameCarried(t *testing.T, what string, got, want []Carried) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: %s, want %s", what, carriedString(got), carriedString(want))
	}
}

// logRecords returns every record of the metadata directory's logs, in
// order.
func logRecords(t *testing.T, fs vfs.FS) [][]byte {
	t.Helper()
	var out [][]byte
	for _, n := range dirNames(t, fs) {
		first, ok := parseName(n, walPrefix)
		if !ok {
			continue
		}
		l, err := wal.OpenReadOnly(fs, filepath.Join(metaDir, n), wal.Options{FirstIndex: first})
		if err != nil {
			t.Fatal(err)
		}
		err = l.Replay(func(_ uint64, data []byte) error {
			out = append(out, data)
			return nil
		})
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The record format, byte for byte.
func TestLogRecordEncoding(t *testing.T) {
	c := Carried{NS: 5, Epoch: 300, Records: []byte("ab")}
	b, err := encodeLogRecord(nil, &c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0xCA, 1, 0, 5, 0xAC, 0x02, 2, 'a', 'b'}; !bytes.Equal(b, want) {
		t.Fatalf("carried record without a command: %x, want %x", b, want)
	}
	cmd := DeleteTopic{Stream: 1, Topic: 2}
	cb, _ := EncodeCommand(cmd)
	b, err = encodeLogRecord(cmd, &c)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{0xCA, 1, byte(len(cb))}, cb...), 5, 0xAC, 0x02, 2, 'a', 'b')
	if !bytes.Equal(b, want) {
		t.Fatalf("carried record: %x, want %x", b, want)
	}
	gotCmd, gotC, err := decodeLogRecord(b)
	if err != nil || gotCmd != cmd || !reflect.DeepEqual(*gotC, c) {
		t.Fatalf("decodeLogRecord = %#v, %+v, %v", gotCmd, gotC, err)
	}
	// A plain command is the command's bytes: logs written before carried
	// records existed read the same.
	b, err = encodeLogRecord(cmd, nil)
	if err != nil || !bytes.Equal(b, cb) {
		t.Fatalf("plain record %x, %v; want %x", b, err, cb)
	}
	if gotCmd, gotC, err := decodeLogRecord(cb); err != nil || gotCmd != cmd || gotC != nil {
		t.Fatalf("decodeLogRecord(plain) = %#v, %+v, %v", gotCmd, gotC, err)
	}
	if _, err := encodeLogRecord(nil, nil); !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("encodeLogRecord(nil, nil) = %v", err)
	}
	// No command type is the carried record's type.
	for _, c := range allCommands() {
		if b, _ := EncodeCommand(c); b[0] == recCarried {
			t.Fatalf("%T encodes with the carried record's type", c)
		}
	}
}

func TestDecodeLogRecordRejects(t *testing.T) {
	rebalance, _ := EncodeCommand(Rebalance{})
	cases := []struct {
		name   string
		b      []byte
		offset int
	}{
		{"no version", []byte{0xCA}, 1},
		{"unknown version", []byte{0xCA, 2, 0, 0, 0, 0}, 1},
		{"no command length", []byte{0xCA, 1}, 2},
		{"command overruns", []byte{0xCA, 1, 5, 1, 1}, 2},
		{"command does not decode", []byte{0xCA, 1, 2, 99, 1, 0, 0, 0}, 3},
		{"command with a trailing byte", append(append([]byte{0xCA, 1, byte(len(rebalance) + 1)}, rebalance...), 0, 0, 0, 0), 3 + len(rebalance)},
		{"carried record inside", []byte{0xCA, 1, 6, 0xCA, 1, 0, 0, 0, 0, 0, 0, 0}, 3},
		{"non-minimal varint", []byte{0xCA, 1, 0, 0x81, 0x00, 1, 0}, 3},
		{"no records", []byte{0xCA, 1, 0, 1, 1}, 5},
		{"records overrun", []byte{0xCA, 1, 0, 1, 1, 5, 'a'}, 5},
		{"trailing byte", []byte{0xCA, 1, 0, 1, 1, 1, 'a', 'z'}, 7},
		{"empty", []byte{}, 0},
		{"records over MaxCarriedBytes", append(binary.AppendUvarint([]byte{0xCA, 1, 0, 1, 1}, MaxCarriedBytes+1), make([]byte, MaxCarriedBytes+1)...), 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd, carried, err := decodeLogRecord(c.b)
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrInvalidEncoding) || cmd != nil || carried != nil {
				t.Fatalf("decodeLogRecord(%x) = %#v, %+v, %v; want a *DecodeError", c.b, cmd, carried, err)
			}
			if de.Offset != c.offset {
				t.Errorf("error %+v, want offset %d", de, c.offset)
			}
		})
	}
}

// A length read from the bytes sizes nothing the remaining bytes cannot
// hold: a record claiming a gigabyte of records (or of command) fails
// without allocating it.
func TestDecodeLogRecordAllocationBounded(t *testing.T) {
	tail := make([]byte, 64<<10)
	records := binary.AppendUvarint([]byte{0xCA, 1, 0, 1, 1}, 1<<30)
	command := binary.AppendUvarint([]byte{0xCA, 1}, 1<<30)
	for _, in := range [][]byte{append(records, tail...), append(command, tail...)} {
		if _, _, err := decodeLogRecord(in); !errors.Is(err, ErrInvalidEncoding) {
			t.Fatalf("decodeLogRecord = %v, want ErrInvalidEncoding", err)
		}
		const runs = 20
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			_, _, _ = decodeLogRecord(in)
		}
		runtime.ReadMemStats(&after)
		if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 4<<10 {
			t.Fatalf("decoding %d bytes allocates %d bytes", len(in), per)
		}
	}
}

// FuzzDecodeLogRecord: a metadata log record decodes or is refused with a
// *DecodeError, never panics, and what decodes encodes back to the same
// bytes — from a decoded value that shares nothing with the input.
func FuzzDecodeLogRecord(f *testing.F) {
	for i, c := range allCommands() {
		b, _ := EncodeCommand(c)
		f.Add(b)
		carried := &Carried{NS: Namespace(i) << 20, Epoch: uint64(i), Records: []byte(fmt.Sprint("records ", i))}
		if b, err := encodeLogRecord(c, carried); err == nil {
			f.Add(b)
		}
	}
	b, _ := encodeLogRecord(nil, &Carried{NS: 1<<32 | 1<<20 | 7, Epoch: 1 << 40, Records: []byte("again")})
	f.Add(b)
	b, _ = encodeLogRecord(nil, &Carried{})
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0xCA})
	f.Add(binary.AppendUvarint([]byte{0xCA, 1, 0, 1, 1}, 1<<30))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := slices.Clone(b)
		cmd, carried, err := decodeLogRecord(in)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrInvalidEncoding) || cmd != nil || carried != nil {
				t.Fatalf("decodeLogRecord(%x) = %#v, %+v, %v", b, cmd, carried, err)
			}
			if de.Offset < 0 || de.Offset > len(b) {
				t.Fatalf("offset %d out of %d bytes", de.Offset, len(b))
			}
			return
		}
		if cmd == nil && carried == nil {
			t.Fatalf("decodeLogRecord(%x) decoded nothing", b)
		}
		if plain := b[0] != recCarried; plain != (carried == nil) {
			t.Fatalf("decodeLogRecord(%x): carried %+v", b, carried)
		}
		clear(in) // what decoded must not alias its input
		again, err := encodeLogRecord(cmd, carried)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("decodeLogRecord(%x) = %#v, %+v, which encodes as %x, %v", b, cmd, carried, again, err)
		}
	})
}

// A carried batch is listed from its command's commit until it is
// settled; settling is not logged, so a reopened Durable lists it again,
// with its command in the store.
func TestDurableCarryRoundTrip(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 0)
	if _, err := d.Apply(CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	records := []byte("the first messages")
	var (
		ann         []AnnouncedPartition
		toldCarried bool
	)
	res, carried, err := d.ApplyCarrying(CreateTopic{Stream: 0, Name: "t", Partitions: 3}, 1, records,
		func(a []AnnouncedPartition, c bool) { ann, toldCarried = a, c })
	if err != nil || !carried || !toldCarried {
		t.Fatalf("ApplyCarrying = %v (logged told %v), %v", carried, toldCarried, err)
	}
	if len(ann) != 3 || len(res.Created) != 3 {
		t.Fatalf("announced %+v, created %+v", ann, res.Created)
	}
	want := []Carried{{NS: res.Created[1].NS, Epoch: res.Created[1].CreatedRevision, Records: []byte("the first messages")}}
	records[0] = 'T' // the caller's buffer is its own again
	sameCarried(t, "after ApplyCarrying", d.Carried(), want)
	// The one record holds both.
	recs := logRecords(t, mem)
	if cmd, c, err := decodeLogRecord(recs[len(recs)-1]); err != nil || cmd == nil || c == nil || !reflect.DeepEqual(*c, want[0]) {
		t.Fatalf("last record: %#v, %+v, %v", cmd, c, err)
	}
	d.Settle(want[0].NS, want[0].Epoch)
	sameCarried(t, "after Settle", d.Carried(), nil)
	d.Settle(want[0].NS, want[0].Epoch) // not pending: nothing happens
	d.Settle(want[0].NS, want[0].Epoch+1)
	closeDurable(t, d)

	fs := mem.Crash()
	d = openDurable(t, fs, 0)
	sameCarried(t, "after a restart", d.Carried(), want)
	if rev, ok := d.Store().CreatedRevision(want[0].NS); !ok || rev != want[0].Epoch {
		t.Fatalf("CreatedRevision(%v) = %d, %v; want %d", want[0].NS, rev, ok, want[0].Epoch)
	}
	closeDurable(t, d)
	_, files, err := ReadDurable(vfs.ReadOnly(fs), metaDir, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	sameCarried(t, "ReadDurable", files.Carried, want)
}

// The partition's owner may settle a batch while the command that carries
// it is still being synced (it gets the records from logged): Settle does
// not wait for the sync, and the settle is not lost.
func TestDurableSettleDuringTheLogSync(t *testing.T) {
	var settle func()
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpSync && settle != nil {
			// Under the Durable's lock, in its fsync: were Settle to
			// wait for that lock, this would never return.
			settle()
			settle = nil
		}
		return nil
	})
	mem := vfs.NewMem()
	d := openDurable(t, errorfs.New(mem, inj), 0)
	if _, err := d.Apply(CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	_, carried, err := d.ApplyCarrying(CreateTopic{Stream: 0, Name: "t", Partitions: 1}, 0, []byte("m"),
		func(a []AnnouncedPartition, _ bool) {
			settle = func() { d.Settle(a[0].NS, a[0].CreatedRevision) }
		})
	if err != nil || !carried {
		t.Fatalf("ApplyCarrying = %v, %v", carried, err)
	}
	if settle != nil {
		t.Fatal("the log was not synced after logged")
	}
	sameCarried(t, "settled during the sync", d.Carried(), nil)
	closeDurable(t, d)
}

// A failed sync fails the command and drops its batch; what reached the
// disk decides what a reopened Durable holds, the command and its batch
// together.
func TestDurableCarryWithAFailedSync(t *testing.T) {
	for _, powerLoss := range []bool{true, false} {
		t.Run(fmt.Sprint("power loss ", powerLoss), func(t *testing.T) {
			mem := vfs.NewMem()
			sw := errorfs.NewSwitch(syscall.EIO, errorfs.OpSync)
			d := openDurable(t, errorfs.New(mem, sw), 0)
			if _, err := d.Apply(CreateStream{Name: "s"}); err != nil {
				t.Fatal(err)
			}
			sw.Set(true)
			var ann []AnnouncedPartition
			_, carried, err := d.ApplyCarrying(CreateTopic{Stream: 0, Name: "t", Partitions: 1}, 0, []byte("m"),
				func(a []AnnouncedPartition, _ bool) { ann = a })
			if !errors.Is(err, syscall.EIO) || carried {
				t.Fatalf("ApplyCarrying with a failing sync = %v, %v", carried, err)
			}
			sameCarried(t, "after the failed sync", d.Carried(), nil)
			d.Close()
			fs := mem
			if powerLoss {
				fs = mem.Crash()
			}
			d = openDurable(t, fs, 0)
			defer closeDurable(t, d)
			_, ok := d.Store().CreatedRevision(ann[0].NS)
			if ok == powerLoss {
				t.Fatalf("the topic is in the store: %v", ok)
			}
			var want []Carried
			if ok {
				want = []Carried{{NS: ann[0].NS, Epoch: ann[0].CreatedRevision, Records: []byte("m")}}
			}
			sameCarried(t, "after reopening", d.Carried(), want)
		})
	}
}

// A batch not settled is logged again by every snapshot and listed once
// after a restart; one settled before a snapshot is gone after it.
func TestDurableCarriedSurvivesSnapshots(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 2)
	ref := newTestStore(t)
	applyBoth(t, d, ref, CreateStream{Name: "s"})
	cmd := CreateTopic{Stream: 0, Name: "t", Partitions: 1}
	res, carried, err := d.ApplyCarrying(cmd, 0, []byte("first"), nil)
	if err != nil || !carried {
		t.Fatalf("ApplyCarrying = %v, %v", carried, err)
	}
	mustApply(t, ref, cmd)
	want := []Carried{{NS: res.Created[0].NS, Epoch: res.Created[0].CreatedRevision, Records: []byte("first")}}
	// The command was the second: a snapshot at index 2, and the batch
	// logged again as index 3, the new log's first record.
	if got, wantFiles := dirNames(t, mem), []string{snapshotName(ref.Revision()), walName(3)}; !slices.Equal(got, wantFiles) {
		t.Fatalf("files %v, want %v", got, wantFiles)
	}
	if d.applied != 3 || d.snapIndex != 2 || d.log.Len() != 1 {
		t.Fatalf("applied %d, snapshot index %d, %d records in the log", d.applied, d.snapIndex, d.log.Len())
	}
	for _, name := range []string{"a", "b", "c", "d"} { // two more snapshots
		applyBoth(t, d, ref, CreateStream{Name: name})
	}
	if got, wantFiles := dirNames(t, mem), []string{snapshotName(ref.Revision()), walName(9)}; !slices.Equal(got, wantFiles) {
		t.Fatalf("files %v, want %v", got, wantFiles)
	}
	sameCarried(t, "after two snapshots", d.Carried(), want)
	closeDurable(t, d)

	fs := mem.Crash()
	d = openDurable(t, fs, 2)
	sameStores(t, ref, d.Store())
	sameCarried(t, "after a restart", d.Carried(), want)
	// Settled, then reopened before a snapshot: still in the log.
	d.Settle(want[0].NS, want[0].Epoch)
	closeDurable(t, d)
	fs = fs.Crash()
	d = openDurable(t, fs, 2)
	sameCarried(t, "settled, then restarted before a snapshot", d.Carried(), want)
	d.Settle(want[0].NS, want[0].Epoch)
	applyBoth(t, d, ref, CreateStream{Name: "e"})
	applyBoth(t, d, ref, CreateStream{Name: "f"}) // a snapshot
	sameCarried(t, "settled", d.Carried(), nil)
	closeDurable(t, d)
	d = openDurable(t, fs.Crash(), 2)
	sameStores(t, ref, d.Store())
	sameCarried(t, "settled before a snapshot, then restarted", d.Carried(), nil)
	for _, rec := range logRecords(t, fs) {
		if _, c, _ := decodeLogRecord(rec); c != nil {
			t.Fatalf("the log still holds %+v", c)
		}
	}
	closeDurable(t, d)
}

// SnapshotEvery counts commands: the batches a snapshot logs again do not
// bring the next snapshot closer (with as many pending as SnapshotEvery,
// every command would snapshot).
func TestDurableCarriedBatchesDoNotHastenSnapshots(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 3)
	if _, err := d.Apply(CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, carried, err := d.ApplyCarrying(CreateTopic{Stream: 0, Name: name, Partitions: 1}, 0, []byte(name), nil); err != nil || !carried {
			t.Fatalf("ApplyCarrying = %v, %v", carried, err)
		}
	}
	// A snapshot at 3, the two batches at 4 and 5.
	if d.snapIndex != 3 || d.applied != 5 {
		t.Fatalf("snapshot index %d, applied %d; want 3, 5", d.snapIndex, d.applied)
	}
	if _, err := d.Apply(CreateStream{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if d.snapIndex != 3 {
		t.Fatalf("one command after a snapshot took another, at %d", d.snapIndex)
	}
	closeDurable(t, d)
	// The count survives a restart: two more commands snapshot.
	d = openDurable(t, mem.Crash(), 3)
	if _, err := d.Apply(CreateStream{Name: "y"}); err != nil {
		t.Fatal(err)
	}
	if d.snapIndex != 3 {
		t.Fatalf("two commands after a snapshot took another, at %d", d.snapIndex)
	}
	if _, err := d.Apply(CreateStream{Name: "z"}); err != nil {
		t.Fatal(err)
	}
	if d.snapIndex != 8 || d.applied != 10 {
		t.Fatalf("snapshot index %d, applied %d; want 8, 10", d.snapIndex, d.applied)
	}
	if got := d.Carried(); len(got) != 2 {
		t.Fatalf("listed %s", carriedString(got))
	}
	closeDurable(t, d)
}

// ApplyCarrying is ApplyLogged, logging the command alone, when there is
// nothing to carry or no partition to carry it for.
func TestDurableCarriesOnlyWhatItShould(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 0)
	ref := newTestStore(t)
	applyBoth(t, d, ref, CreateStream{Name: "s"})
	applyBoth(t, d, ref, CreateTopic{Stream: 0, Name: "one", Partitions: 1})
	small := []byte("m")
	cases := []struct {
		name    string
		cmd     Command
		part    uint32
		records []byte
		carried bool
	}{
		{"no partitions", CreateStream{Name: "x"}, 0, small, false},
		{"no partition part", CreateTopic{Stream: 0, Name: "t", Partitions: 2}, 2, small, false},
		{"a failing command", CreateTopic{Stream: 7, Name: "t", Partitions: 1}, 0, small, false},
		{"a partition that exists", CreatePartitions{Stream: 0, Topic: 0, Count: 1}, 0, small, false},
		{"no records", CreateTopic{Stream: 0, Name: "u", Partitions: 1}, 0, nil, false},
		{"records past the bound", CreateTopic{Stream: 0, Name: "v", Partitions: 1}, 0, make([]byte, MaxCarriedBytes+1), false},
		{"records at the bound", CreateTopic{Stream: 0, Name: "w", Partitions: 1}, 0, make([]byte, MaxCarriedBytes), true},
		{"a new partition", CreatePartitions{Stream: 0, Topic: 0, Count: 2}, 3, small, true},
	}
	var want []Carried
	for _, c := range cases {
		before := len(logRecords(t, mem))
		loggedCalls, toldCarried := 0, false
		res, carried, err := d.ApplyCarrying(c.cmd, c.part, c.records, func(_ []AnnouncedPartition, told bool) {
			loggedCalls++
			toldCarried = told
		})
		rr, rerr := ref.Apply(c.cmd)
		if outcome(res, err) != outcome(rr, rerr) || carried != c.carried {
			t.Fatalf("%s: ApplyCarrying = %s, %v; want %s, %v", c.name, outcome(res, err), carried, outcome(rr, rerr), c.carried)
		}
		if wantCalls := min(len(res.Created), 1); loggedCalls != wantCalls {
			t.Errorf("%s: logged called %d times, want %d", c.name, loggedCalls, wantCalls)
		}
		if toldCarried != c.carried {
			t.Errorf("%s: logged told carried=%v, want %v", c.name, toldCarried, c.carried)
		}
		recs := logRecords(t, mem)
		if len(recs) != before+1 {
			t.Fatalf("%s: %d records logged", c.name, len(recs)-before)
		}
		cmd, got, err := decodeLogRecord(recs[len(recs)-1])
		if err != nil || cmd == nil || (got != nil) != c.carried {
			t.Fatalf("%s: logged %#v, %+v, %v", c.name, cmd, got, err)
		}
		if c.carried {
			p := res.Created[len(res.Created)-1]
			if p.Partition != c.part {
				t.Fatalf("%s: created %+v", c.name, res.Created)
			}
			want = append(want, Carried{NS: p.NS, Epoch: p.CreatedRevision, Records: slices.Clone(c.records)})
		}
		sameCarried(t, c.name, d.Carried(), want)
	}
	// Unlogged commands (they fail whatever the state) carry nothing.
	before := len(logRecords(t, mem))
	long := CreateTopic{Stream: 0, Name: strings.Repeat("n", MaxNameLength+1), Partitions: 1}
	if _, carried, err := d.ApplyCarrying(long, 0, small, nil); err == nil || carried {
		t.Fatalf("ApplyCarrying of an over-long name = %v, %v", carried, err)
	}
	if len(logRecords(t, mem)) != before {
		t.Fatal("an over-long name was logged")
	}
	closeDurable(t, d)
	if _, carried, err := d.ApplyCarrying(CreateTopic{Stream: 0, Name: "z", Partitions: 1}, 0, small, nil); !errors.Is(err, ErrDurableClosed) || carried {
		t.Fatalf("ApplyCarrying after Close = %v, %v", carried, err)
	}
	sameCarried(t, "after Close", d.Carried(), want)
	d = openDurable(t, mem.Crash(), 0)
	sameStores(t, ref, d.Store())
	sameCarried(t, "after a restart", d.Carried(), want)
	closeDurable(t, d)
}

// A snapshot's two crash windows: between its new log (holding the
// batches logged again) and its file, the older snapshot's logs chain on
// to the new log; between its file and the removal of what it supersedes,
// the older logs are skipped. Either way the batch is listed once, and
// ReadDurable agrees.
func TestDurableCarriedInASnapshotsCrashWindows(t *testing.T) {
	for _, window := range []string{"before the snapshot file", "before the cleanup"} {
		t.Run(window, func(t *testing.T) {
			mem := vfs.NewMem()
			sw := errorfs.NewSwitchFunc(syscall.EIO, func(op errorfs.Op) bool {
				if window == "before the snapshot file" {
					return op.Kind == errorfs.OpOpen && strings.Contains(op.Path, "/."+snapshotPrefix)
				}
				return op.Kind == errorfs.OpRemove
			})
			d := openDurable(t, errorfs.New(mem, sw), 2)
			ref := newTestStore(t)
			applyBoth(t, d, ref, CreateStream{Name: "s"})
			cmd := CreateTopic{Stream: 0, Name: "t", Partitions: 1}
			res, carried, err := d.ApplyCarrying(cmd, 0, []byte("first"), nil) // snapshot at 2, the batch at 3
			if err != nil || !carried {
				t.Fatalf("ApplyCarrying = %v, %v", carried, err)
			}
			mustApply(t, ref, cmd)
			want := []Carried{{NS: res.Created[0].NS, Epoch: res.Created[0].CreatedRevision, Records: []byte("first")}}
			applyBoth(t, d, ref, CreateStream{Name: "a"})
			sw.Set(true)
			applyBoth(t, d, ref, CreateStream{Name: "b"}) // the snapshot at 5 stops in the window
			failed := d.Err() != nil
			if failed != (window == "before the snapshot file") {
				t.Fatalf("Err() = %v", d.Err())
			}
			d.Close()

			fs := mem.Crash()
			var wantLogs []string
			if failed {
				// The old snapshot, its log, and the new one.
				wantLogs = []string{walName(3), walName(6)}
			} else {
				wantLogs = []string{walName(6)}
			}
			_, files, err := ReadDurable(vfs.ReadOnly(fs), metaDir, testConfig)
			if err != nil {
				t.Fatal(err)
			}
			var logs []string
			for _, l := range files.Logs {
				logs = append(logs, filepath.Base(l))
			}
			if !slices.Equal(logs, wantLogs) {
				t.Fatalf("ReadDurable replayed %v, want %v (files %v)", logs, wantLogs, dirNames(t, fs))
			}
			sameCarried(t, "ReadDurable", files.Carried, want)
			d = openDurable(t, fs, 2)
			sameStores(t, ref, d.Store())
			sameCarried(t, "reopened", d.Carried(), want)
			if d.applied != 6 {
				t.Fatalf("applied %d, want 6", d.applied)
			}
			applyBoth(t, d, ref, CreateStream{Name: "c"})
			applyBoth(t, d, ref, CreateStream{Name: "d"}) // a clean snapshot
			closeDurable(t, d)
			fs = fs.Crash()
			if names := dirNames(t, fs); len(names) != 2 {
				t.Fatalf("files after a clean snapshot: %v", names)
			}
			d = openDurable(t, fs, 2)
			sameStores(t, ref, d.Store())
			sameCarried(t, "after the next snapshot", d.Carried(), want)
			closeDurable(t, d)
		})
	}
}

// Settle and Carried run beside Applies and their snapshots (the race
// detector watches), and every settled batch is gone.
func TestDurableSettleConcurrently(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 3)
	if _, err := d.Apply(CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	announced := make(chan AnnouncedPartition, n)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for p := range announced {
			d.Settle(p.NS, p.CreatedRevision)
			d.Carried()
		}
	}()
	go func() {
		defer wg.Done()
		defer close(announced)
		for i := range n {
			cmd := CreateTopic{Stream: 0, Name: fmt.Sprint("t", i), Partitions: 1}
			_, carried, err := d.ApplyCarrying(cmd, 0, []byte("m"), func(a []AnnouncedPartition, _ bool) { announced <- a[0] })
			if err != nil || !carried {
				t.Errorf("ApplyCarrying = %v, %v", carried, err)
				return
			}
		}
	}()
	wg.Wait()
	sameCarried(t, "all settled", d.Carried(), nil)
	closeDurable(t, d)
}

// A carried batch whose incarnation is gone (its topic deleted before the
// partition's fsync settled it) is not logged again by a snapshot: there
// is no partition to give it back to.
func TestDurableSnapshotDropsTheBatchesOfGoneIncarnations(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 4)
	ref := newTestStore(t)
	applyBoth(t, d, ref, CreateStream{Name: "s"})
	for _, name := range []string{"keep", "gone"} {
		cmd := CreateTopic{Stream: 0, Name: name, Partitions: 1}
		if _, carried, err := d.ApplyCarrying(cmd, 0, []byte(name), nil); err != nil || !carried {
			t.Fatalf("ApplyCarrying %s = %v, %v", name, carried, err)
		}
		mustApply(t, ref, cmd)
	}
	all := d.Carried()
	if len(all) != 2 {
		t.Fatalf("carried %+v, want two", all)
	}
	applyBoth(t, d, ref, DeleteTopic{Stream: 0, Topic: all[1].NS.Topic()}) // the fourth command: a snapshot
	if d.snapIndex == 0 {
		t.Fatal("no snapshot taken")
	}
	sameCarried(t, "after the snapshot", d.Carried(), all[:1])
	closeDurable(t, d)
	d = openDurable(t, mem.Crash(), 4)
	sameStores(t, ref, d.Store())
	sameCarried(t, "after a restart", d.Carried(), all[:1])
	closeDurable(t, d)
}
