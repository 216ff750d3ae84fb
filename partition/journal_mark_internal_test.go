package partition

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// encodeJournalMark is the slot record of m (its ends sorted).
func encodeJournalMark(m journalMark) []byte {
	var files []journalEnd
	for f, e := range m.ends {
		files = append(files, journalEnd{file: f, end: e})
	}
	slices.SortFunc(files, func(a, b journalEnd) int { return cmp.Compare(a.file, b.file) })
	return journalMarkFormat.AppendSlot(nil, syncmark.Mark[journalMarkSlot]{Seq: m.seq, V: journalMarkSlot{high: m.high, files: files}})
}

// FuzzDecodeJournalMark feeds the journal mark's decoder arbitrary bytes:
// it never panics, and a slot it accepts encodes back to the same bytes.
func FuzzDecodeJournalMark(f *testing.F) {
	slot := encodeJournalMark(journalMark{seq: 3, high: 9, ends: map[uint64]int64{8: 4096, 9: 120}})
	two := make([]byte, 2*journalMarkStride)
	copy(two, slot)
	copy(two[journalMarkStride:], encodeJournalMark(journalMark{seq: 4, high: 9, ends: map[uint64]int64{9: 200}}))
	f.Add(slot)
	f.Add(two)
	f.Add(encodeJournalMark(journalMark{seq: 1}))
	f.Add([]byte("PWJM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sm, err := journalMarkFormat.Decode(b)
		if err != nil {
			if !errors.Is(err, syncmark.ErrNoSlot) {
				t.Fatalf("%x: %v", b, err)
			}
			return
		}
		m := journalMarkOf(sm)
		if m.seq == 0 || len(m.ends) > journalMarkFiles {
			t.Fatalf("%x decoded to %+v", b, m)
		}
		got := encodeJournalMark(m)
		sm2, _, ok := journalMarkFormat.DecodeSlot(got)
		m2 := journalMarkOf(sm2)
		if !ok || m2.seq != m.seq || m2.high != m.high || !maps.Equal(m2.ends, m.ends) {
			t.Fatalf("%x decoded to %+v, which encodes to %x", b, m, got)
		}
		if !bytes.Contains(b, got) {
			t.Fatalf("%x decoded to %+v, whose record %x is in no slot of the input", b, m, got)
		}
	})
}

// A mark file written before the slot format moved to package syncmark
// (golden bytes: the records the earlier encoder wrote, zeros after
// them) reads back the same, and the encoder writes those bytes still.
func TestJournalMarkGoldenBytes(t *testing.T) {
	slot0, _ := hex.DecodeString("50574a4d07000000000000000c00000000000000020000000b0000000000000000001000000000000c00000000000000e1100000000000009890fe85")
	slot1, _ := hex.DecodeString("50574a4d08000000000000000d00000000000000020000000c0000000000000000200000000000000d000000000000004d000000000000003f98ce79")
	m0 := journalMark{seq: 7, high: 12, ends: map[uint64]int64{11: 1 << 20, 12: 4321}}
	m1 := journalMark{seq: 8, high: 13, ends: map[uint64]int64{12: 8192, 13: 77}}
	if got := encodeJournalMark(m0); !bytes.Equal(got, slot0) {
		t.Fatalf("slot 0 encodes to %x, the earlier encoder wrote %x", got, slot0)
	}
	if got := encodeJournalMark(m1); !bytes.Equal(got, slot1) {
		t.Fatalf("slot 1 encodes to %x, the earlier encoder wrote %x", got, slot1)
	}
	b := make([]byte, 2*journalMarkStride)
	copy(b, slot0)
	copy(b[journalMarkStride:], slot1)
	mem := vfs.NewMem()
	const path = "/" + journalMarkName
	if err := vfs.WriteFileAtomic(mem, path, b); err != nil {
		t.Fatal(err)
	}
	m, found, slack, bad := readJournalMark(mem, path)
	if !found || bad != nil || slack != "" {
		t.Fatalf("read: found %v, slack %q, %v", found, slack, bad)
	}
	if m.seq != 8 || m.high != 13 || !maps.Equal(m.ends, m1.ends) {
		t.Fatalf("read %+v, want %+v", m, m1)
	}
	// The older slot wins once the newer one is torn; verify reports it.
	b[journalMarkStride+30] ^= 1
	if err := vfs.WriteFileAtomic(mem, path, b); err != nil {
		t.Fatal(err)
	}
	m, found, slack, bad = readJournalMark(mem, path)
	if !found || bad != nil || m.seq != 7 || m.high != 12 || !maps.Equal(m.ends, m0.ends) {
		t.Fatalf("slot 1 torn: %+v, found %v, %v; want slot 0's %+v", m, found, bad, m0)
	}
	if slack != "the slot at byte 512 fails its checksum" {
		t.Fatalf("slack %q", slack)
	}
	// Both torn: none, reported as damage.
	b[30] ^= 1
	if err := vfs.WriteFileAtomic(mem, path, b); err != nil {
		t.Fatal(err)
	}
	if _, found, _, bad = readJournalMark(mem, path); found || !errors.Is(bad, ErrCorrupt) {
		t.Fatalf("both slots torn: found %v, %v; want none and ErrCorrupt", found, bad)
	}
}

// The journal's mark survives a power loss with everything but the last
// two synced writes (its write is started before each fdatasync, not
// waited for: journal_mark.go), and a journal file found shorter than it
// is damage: the partitions are fenced, nothing acknowledged given out
// again. A journal cut only past the mark (the last two synced writes,
// the documented window) reads as a torn tail; one not cut reads whole,
// with no false alarm.
func TestJournalMarkAfterPowerLoss(t *testing.T) {
	for _, c := range []string{"whole", "cut below the mark", "cut past the mark"} {
		t.Run(c, func(t *testing.T) {
			mem := vfs.NewMem()
			s, err := NewFileStore(FileConfig{Dir: "/data", FS: mem, MaxOpenFiles: 16, SerialSyncs: true})
			if err != nil {
				t.Fatal(err)
			}
			j := s.NewJournal()
			ps := journalPartitions(t, s, 2)
			for k := range 6 {
				commitRound(t, j, ps, k)
			}
			crashed := mem.Crash()
			m, found, _, bad := readJournalMark(crashed, "/data/journal/"+journalMarkName)
			if !found || bad != nil {
				t.Fatalf("no mark after the power loss: %v", bad)
			}
			path := "/data/journal/" + journalFileName(1)
			b, err := vfs.ReadFile(crashed, path)
			if err != nil {
				t.Fatal(err)
			}
			_, end, err := decodeJournalTo(b, path)
			if err != nil {
				t.Fatal(err)
			}
			// Rounds 1 to 5 are journal frames; the mark holds the end of
			// round 3's (the cut past it below ends the partition at 4).
			if want := m.ends[1]; want <= 0 || want >= int64(end) {
				t.Fatalf("the mark says %d bytes of the journal were synced, its frames end at %d: want the end of all but the last two", want, end)
			}
			switch c {
			case "cut below the mark":
				if err := vfs.WriteFileAtomic(crashed, path, b[:m.ends[1]-1]); err != nil {
					t.Fatal(err)
				}
			case "cut past the mark":
				if err := vfs.WriteFileAtomic(crashed, path, b[:m.ends[1]+1]); err != nil {
					t.Fatal(err)
				}
			}
			s2, err := NewFileStore(FileConfig{Dir: "/data", FS: crashed, MaxOpenFiles: 16, SerialSyncs: true})
			if err != nil {
				t.Fatal(err)
			}
			p0, err := s2.Build(journalNS(t, 0), 1)
			if err != nil {
				t.Fatal(err)
			}
			defer p0.Close()
			var ce *CorruptError
			d, _ := p0.(Damaged)
			switch fenced := d != nil && errors.As(d.Damage(), &ce); {
			case c == "cut below the mark" && !fenced:
				t.Fatalf("journal cut below its synced end: the partition reads as whole up to %d, not fenced", p0.NextOffset())
			case c == "cut below the mark":
				if _, err := p0.Append([]Message{{Payload: []byte("x")}}); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("append to the fenced partition: %v", err)
				}
			case fenced:
				t.Fatalf("%s: a false alarm: %v", c, d.Damage())
			case c == "whole" && p0.NextOffset() != 6, c == "cut past the mark" && p0.NextOffset() != 4:
				t.Fatalf("%s: the partition ends at %d", c, p0.NextOffset())
			}
		})
	}
}

// The mark is never durable ahead of the journal frames it names: a
// power loss in the middle of any of the journal's fdatasyncs — modelled
// as every write under way completing (the mark's started slot too) and
// another file's sync flushing the device (which makes them durable),
// then the journal's fdatasync failing, then the power loss — reopens
// with no false alarm:
// no partition fenced, every acknowledged commit there. A mark written
// with the end of the frame its fdatasync is about to make durable (the
// broken order) fails this: the flush carries the mark, not the frame.
func TestJournalMarkNeverAheadOfTheJournal(t *testing.T) {
	for fail := int64(1); fail <= 5; fail++ {
		t.Run(fmt.Sprintf("fdatasync %d", fail), func(t *testing.T) {
			mem := vfs.NewMem()
			var syncs atomic.Int64
			fsys := errorfs.New(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
				if _, ok := parseJournalName(filepath.Base(op.Path)); op.Kind != errorfs.OpSync || !ok {
					return nil
				}
				if syncs.Add(1) != fail {
					return nil
				}
				mem.CompleteWriteBacks()
				if err := vfs.WriteFileAtomic(mem, "/other", []byte("x")); err != nil {
					return err
				}
				return syscall.EIO
			}))
			s, err := NewFileStore(FileConfig{Dir: "/data", FS: fsys, MaxOpenFiles: 16, SerialSyncs: true})
			if err != nil {
				t.Fatal(err)
			}
			j := s.NewJournal()
			ps := journalPartitions(t, s, 2)
			acked := 0
		rounds:
			for k := range 8 {
				for i, p := range ps {
					if _, err := p.Append([]Message{{Payload: fmt.Appendf(nil, "%d/%d", i, k)}}); err != nil {
						break rounds
					}
				}
				for _, err := range j.Commit(ps) {
					if err != nil {
						break rounds
					}
				}
				acked++
			}
			if syncs.Load() < fail {
				t.Fatalf("%d journal fdatasyncs, none failed", syncs.Load())
			}
			s2, err := NewFileStore(FileConfig{Dir: "/data", FS: mem.Crash(), MaxOpenFiles: 16, SerialSyncs: true})
			if err != nil {
				t.Fatal(err)
			}
			for i := range ps {
				p, err := s2.Build(journalNS(t, uint32(i)), 1)
				if err != nil {
					t.Fatal(err)
				}
				if d, ok := p.(Damaged); ok && d.Damage() != nil {
					t.Fatalf("partition %d after %d acknowledged rounds: a false alarm: %v", i, acked, d.Damage())
				}
				if n := p.NextOffset(); n < uint64(acked) {
					t.Fatalf("partition %d ends at %d, %d rounds were acknowledged", i, n, acked)
				}
				p.Close()
			}
		})
	}
}
