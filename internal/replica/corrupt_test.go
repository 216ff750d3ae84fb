package replica_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/vfs"
)

func snapWith(index, term uint64, cs *raftpb.ConfState) *raftpb.Snapshot {
	return &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: cs}}
}

// TestInconsistentLogIsCorruptionNotPanic writes, with the real encoder,
// records that pass their checksum but contradict raft's invariants, and
// opens the log the way an owner does (OpenDisk, then New): each is a
// typed corruption error naming the file and the bad record's offset —
// never a panic, which is what etcd raft does with each of them.
func TestInconsistentLogIsCorruptionNotPanic(t *testing.T) {
	const path = "/g/raft.log"
	withUnknown := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	withUnknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	good := func(d *replica.Disk) error {
		return d.Save(snapAt(1, 1, ""), entries(2, 3, 2), hardState(2, 1, 3))
	}
	cases := []struct {
		name string
		bad  func(d *replica.Disk) error
	}{
		{"snapshot with no voters", func(d *replica.Disk) error {
			return d.Save(snapWith(5, 2, &raftpb.ConfState{}), nil, nil)
		}},
		{"snapshot without a conf state", func(d *replica.Disk) error {
			return d.Save(snapWith(5, 2, nil), nil, nil)
		}},
		{"conf state with an unknown field", func(d *replica.Disk) error {
			return d.Save(snapWith(5, 2, withUnknown), nil, nil)
		}},
		{"voter listed twice", func(d *replica.Disk) error {
			return d.Save(snapWith(5, 2, &raftpb.ConfState{Voters: []uint64{1, 2, 2}}), nil, nil)
		}},
		{"a learner that is also a voter", func(d *replica.Disk) error {
			return d.Save(snapWith(5, 2, &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{2}}), nil, nil)
		}},
		{"learner 0", func(d *replica.Disk) error {
			return d.Save(snapWith(5, 2, &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{0}}), nil, nil)
		}},
		{"joint configuration", func(d *replica.Disk) error {
			return d.Save(snapWith(5, 2, &raftpb.ConfState{Voters: []uint64{1, 2, 3}, VotersOutgoing: []uint64{1, 2}}), nil, nil)
		}},
		{"snapshot of term 0", func(d *replica.Disk) error {
			return d.Save(snapWith(5, 0, &raftpb.ConfState{Voters: []uint64{1, 2, 3}}), nil, nil)
		}},
		{"voter that is not a member", func(d *replica.Disk) error { // caught by New
			return d.Save(snapWith(5, 2, &raftpb.ConfState{Voters: []uint64{1, 2, 9}}), nil, nil)
		}},
		{"hard state commit beyond the last index", func(d *replica.Disk) error {
			return d.Save(nil, nil, hardState(2, 1, 9))
		}},
		{"entries leaving a gap", func(d *replica.Disk) error {
			return d.Save(nil, entries(5, 6, 2), nil)
		}},
		{"entries whose term goes back", func(d *replica.Disk) error {
			return d.Save(nil, entries(4, 5, 1), nil)
		}},
		{"entries with an index gap inside the batch", func(d *replica.Disk) error {
			return d.Save(nil, append(entries(4, 4, 2), entries(6, 6, 2)...), nil)
		}},
		{"entry of term 0", func(d *replica.Disk) error {
			return d.Save(nil, entries(4, 4, 0), nil)
		}},
		{"entry shorter than its envelope", func(d *replica.Disk) error {
			return d.Save(nil, []*raftpb.Entry{{Index: new(uint64(4)), Term: new(uint64(2)), Data: []byte("e4")}}, nil)
		}},
		{"membership change entry", func(d *replica.Disk) error {
			return d.Save(nil, []*raftpb.Entry{{Index: new(uint64(4)), Term: new(uint64(2)), Type: raftpb.EntryConfChange.Enum()}}, nil)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			d, err := replica.OpenDisk(fsys, path, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := good(d); err != nil {
				t.Fatal(err)
			}
			at := d.Size() // the bad record is the next one
			if err := tc.bad(d); err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			err = openGroup(fsys, path)
			if !errors.Is(err, replica.ErrCorruptLog) {
				t.Fatalf("open = %v, want ErrCorruptLog", err)
			}
			var ce *wal.CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, wal.ErrCorrupt) {
				t.Fatalf("open = %v, want a *wal.CorruptError", err)
			}
			if ce.Path != path || ce.Offset != at || ce.Err == nil {
				t.Fatalf("corruption reported at %s:%d (%v), want %s:%d", ce.Path, ce.Offset, ce.Err, path, at)
			}
		})
	}
}

// openGroup opens the log and starts member 1 of {1, 2, 3} from it,
// turning a panic into a test failure rather than a crash of the binary.
func openGroup(fsys vfs.FS, path string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("panic: " + anyString(r))
		}
	}()
	d, err := replica.OpenDisk(fsys, path, true)
	if err != nil {
		return err
	}
	g, err := replica.New(replica.Config{Group: 1, Node: 1, Peers: []uint64{1, 2, 3}, Disk: d})
	if err != nil {
		d.Close()
		return err
	}
	defer g.Close()
	// Run it a little, as an owner would: some inconsistencies make raft
	// panic only once it campaigns or ticks.
	if err := g.Campaign(); err != nil {
		return err
	}
	for range 30 {
		if err := g.Tick(); err != nil {
			return err
		}
		for g.HasReady() {
			if err := g.Handle(nopHandler{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// nopHandler accepts everything a Ready hands it.
type nopHandler struct{}

func (nopHandler) Send(*raftpb.Message)               { /* dropped: no peers */ }
func (nopHandler) Apply(uint64, uint64, []byte) error { return nil }
func (nopHandler) LeaderChanged(uint64)               {}
func (nopHandler) ApplySnapshot(uint64, []byte) error { return nil }

func anyString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return "non-string panic"
}

// TestConsistentLogsStillOpen: the checks refuse only what raft cannot
// run from — the logs a member writes (a restore that replaced the log, a
// suffix overwritten by a new leader, a hard state torn away) open.
func TestConsistentLogsStillOpen(t *testing.T) {
	const path = "/g/raft.log"
	cases := []struct {
		name string
		save func(d *replica.Disk) error
		want string
	}{
		{"suffix overwritten", func(d *replica.Disk) error {
			if err := d.Save(snapAt(1, 1, ""), entries(2, 6, 2), hardState(2, 1, 3)); err != nil {
				return err
			}
			return d.Save(nil, entries(5, 7, 3), hardState(3, 0, 4))
		}, "snap=1/ hs=3/0/4 ents=2.2:e2 3.2:e3 4.2:e4 5.3:e5 6.3:e6 7.3:e7 "},
		{"snapshot replacing a log that does not hold its entry", func(d *replica.Disk) error {
			if err := d.Save(snapAt(1, 1, ""), entries(2, 6, 2), hardState(2, 1, 3)); err != nil {
				return err
			}
			// The leader's snapshot at 5 is of term 3: entry 5 here is of
			// term 2, so raft discarded the whole log.
			return d.Save(snapAt(5, 3, "s5"), nil, hardState(3, 0, 5))
		}, "snap=5/s5 hs=3/0/5 ents="},
		{"snapshot covering part of the log", func(d *replica.Disk) error {
			if err := d.Save(snapAt(1, 1, ""), entries(2, 6, 2), hardState(2, 1, 6)); err != nil {
				return err
			}
			return d.Save(snapAt(4, 2, "s4"), nil, nil)
		}, "snap=4/s4 hs=2/1/6 ents=5.2:e5 6.2:e6 "},
		{"entries overlapping the snapshot", func(d *replica.Disk) error {
			if err := d.Save(snapAt(3, 2, "s3"), nil, hardState(2, 1, 3)); err != nil {
				return err
			}
			return d.Save(nil, entries(2, 5, 2), hardState(2, 1, 5))
		}, "snap=3/s3 hs=2/1/5 ents=4.2:e4 5.2:e5 "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			d, err := replica.OpenDisk(fsys, path, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.save(d); err != nil {
				t.Fatal(err)
			}
			d.Close()
			if got := describe(mustRecoverAt(t, fsys, path)); got != tc.want {
				t.Fatalf("recovered %s, want %s", got, tc.want)
			}
			if err := openGroup(fsys, path); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func mustRecoverAt(t *testing.T, fsys vfs.FS, path string) replica.Recovered {
	t.Helper()
	d, err := replica.OpenDisk(fsys, path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return d.Recovered()
}

// TestFinalRecordWrittenWholeIsDamage: the raft log applies the one rule
// of package tail. Its last record (the hard state that acknowledged
// entries) with a byte flipped, whole-length, is damage: OpenDisk refuses
// it with ErrCorruptLog and a *wal.CorruptError at the record's offset —
// truncating it would forget a vote or an acknowledgement. Cut short, it
// is a torn write: OpenDisk drops it and opens.
func TestFinalRecordWrittenWholeIsDamage(t *testing.T) {
	const path = "/g/raft.log"
	write := func(t *testing.T) (*vfs.MemFS, []byte) {
		fsys := vfs.NewMem()
		d, err := replica.OpenDisk(fsys, path, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Save(snapAt(1, 1, ""), entries(2, 3, 2), hardState(2, 1, 2)); err != nil {
			t.Fatal(err)
		}
		if err := d.Save(nil, nil, hardState(2, 1, 3)); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := vfs.ReadFile(fsys, path)
		if err != nil {
			t.Fatal(err)
		}
		return fsys, b
	}
	rewrite := func(t *testing.T, fsys vfs.FS, b []byte) {
		f, err := fsys.OpenFile(path, os.O_RDWR|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	// The last record: the hard state of the second Save, a record of
	// the same size as the first Save's last one.
	fsys, b := write(t)
	d, err := replica.OpenDisk(fsys, path, true)
	if err != nil {
		t.Fatal(err)
	}
	whole := d.Recovered()
	_ = d.Close()

	t.Run("flipped", func(t *testing.T) {
		fsys, b := write(t)
		bad := slices.Clone(b)
		bad[len(bad)-1] ^= 0x01
		rewrite(t, fsys, bad)
		_, err := replica.OpenDisk(fsys, path, true)
		var ce *wal.CorruptError
		if !errors.Is(err, replica.ErrCorruptLog) || !errors.As(err, &ce) || ce.Path != path {
			t.Fatalf("OpenDisk of a log whose last record is damaged: %v, want ErrCorruptLog with a *wal.CorruptError", err)
		}
	})
	t.Run("cut short", func(t *testing.T) {
		fsys, b := write(t)
		rewrite(t, fsys, b[:len(b)-3])
		d, err := replica.OpenDisk(fsys, path, true)
		if err != nil {
			t.Fatalf("OpenDisk of a log with a torn last record: %v", err)
		}
		defer d.Close()
		if got := d.Recovered().HardState.GetCommit(); got != 2 || whole.HardState.GetCommit() != 3 {
			t.Fatalf("commit %d after the torn hard state (whole: %d), want 2", got, whole.HardState.GetCommit())
		}
	})
	_ = b
}

// TestFinalRecordLengthFlippedIsDamage, on the real filesystem: one bit
// of the raft log's last record's length flipped — whichever bit, so the
// record runs past the end of the file or ends inside itself — reads as
// a write cut short by the rest of package tail's rule, but the record
// checks whole with the bit flipped back: damage. OpenDisk refuses it
// with ErrCorruptLog and a *wal.CorruptError at the record's offset and
// leaves the file as it is; truncating would forget the hard state that
// acknowledged entries. The same record cut short at any byte is a torn
// write: OpenDisk drops it and opens.
func TestFinalRecordLengthFlippedIsDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g", "raft.log")
	d, err := replica.OpenDisk(vfs.Default, path, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Save(snapAt(1, 1, ""), entries(2, 3, 2), hardState(2, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(nil, nil, hardState(2, 1, 3)); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := 0 // the last record's offset: records are a 4-byte data length, a checksum, the data
	for pos := 0; pos < len(good); pos += wal.HeaderSize + int(binary.LittleEndian.Uint32(good[pos:])) {
		last = pos
	}
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for bit := range 32 {
		bad := slices.Clone(good)
		bad[last+bit/8] ^= 1 << (bit % 8)
		write(bad)
		_, err := replica.OpenDisk(vfs.Default, path, true)
		var ce *wal.CorruptError
		if !errors.Is(err, replica.ErrCorruptLog) || !errors.As(err, &ce) || ce.Path != path || ce.Offset != int64(last) {
			t.Fatalf("bit %d of the last record's length flipped: %v, want ErrCorruptLog with a *wal.CorruptError at %s:%d", bit, err, path, last)
		}
		if after, err := os.ReadFile(path); err != nil || !slices.Equal(after, bad) {
			t.Fatalf("bit %d of the last record's length flipped: the log changed to %d bytes of %d (%v)", bit, len(after), len(bad), err)
		}
	}
	for cut := last + 1; cut < len(good); cut++ {
		write(good[:cut])
		d, err := replica.OpenDisk(vfs.Default, path, true)
		if err != nil {
			t.Fatalf("the last record cut short at byte %d of %d: %v, want a torn write dropped", cut-last, len(good)-last, err)
		}
		got := d.Recovered().HardState.GetCommit()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if got != 2 {
			t.Fatalf("the last record cut short at byte %d: commit %d, want 2 (the record before it)", cut-last, got)
		}
	}
}
