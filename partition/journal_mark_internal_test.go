package partition

import (
	"errors"
	"maps"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

// FuzzDecodeJournalMark feeds decodeJournalMark arbitrary bytes: it never
// panics, and a slot it accepts encodes back to the same bytes.
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
		m, err := decodeJournalMark(b)
		if err != nil {
			if !errors.Is(err, errNoJournalMark) {
				t.Fatalf("%x: %v", b, err)
			}
			return
		}
		if m.seq == 0 || len(m.ends) > journalMarkFiles {
			t.Fatalf("%x decoded to %+v", b, m)
		}
		got := encodeJournalMark(m)
		m2, ok := decodeJournalMarkSlot(got)
		if !ok || m2.seq != m.seq || m2.high != m.high || !maps.Equal(m2.ends, m.ends) {
			t.Fatalf("%x decoded to %+v, which encodes to %x", b, m, got)
		}
	})
}

// The journal's mark survives a power loss with everything but the last
// synced write, and a journal file found shorter than it is damage: the
// partitions are fenced, nothing acknowledged given out again. A journal
// cut only past the mark (the last synced write, the documented window)
// reads as a torn tail; one not cut reads whole, with no false alarm.
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
			m, found, bad := readJournalMark(crashed, "/data/journal/"+journalMarkName)
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
			// round 4's.
			if want := m.ends[1]; want <= 0 || want >= int64(end) {
				t.Fatalf("the mark says %d bytes of the journal were synced, its frames end at %d: want the end of all but the last", want, end)
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
			case c == "whole" && p0.NextOffset() != 6, c == "cut past the mark" && p0.NextOffset() != 5:
				t.Fatalf("%s: the partition ends at %d", c, p0.NextOffset())
			}
		})
	}
}
