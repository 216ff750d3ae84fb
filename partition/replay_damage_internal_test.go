package partition

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

// copyTree copies the directory tree at from to a new directory: the
// image of the disk a process that stops now leaves (a kill -9: the page
// cache survives, nothing is closed or synced).
func copyTree(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
}

// TestBehaviour28ReplayDamageFencesItsPartition: damage the journal
// replay meets when a store opens fences the partitions it concerns, not
// the store (issue 26: the whole node refused to start). On the real
// filesystem, two journaled partitions of six acknowledged messages each
// (the first written directly, the other five through the journal) are
// left by a process that stops without closing, and then one file is
// damaged:
//   - partition 0's segment cut to nothing, below the journal's first
//     record of it: the store opens, partition 1 serves its six, and
//     partition 0 reports the *CorruptError at every read from 0 and
//     every append, its end at 6 (no offset handed out twice), again
//     after another open (the journal files, the damage's only record,
//     are kept);
//   - partition 0's consumer offset file flipped (both slots of its sync
//     mark, whichever is the newer): its Build reports the *CorruptError,
//     partition 1 serves its six;
//   - a byte of the journal's first frame flipped, valid frames after
//     it: no partition can be trusted to hold the damaged frame's
//     records, so each is fenced at its log's end (every read below it
//     served, the damage reported by Damage, appends answered the
//     *CorruptError);
//   - one bit of the length of the journal's last frame flipped, so that
//     the frame runs into the zeros of the preallocated file (or past its
//     end): it reads as a write cut short, but flipped back the frame
//     checks whole — damage (package tail's rule), fenced the same way,
//     the file kept as it is.
func TestBehaviour28ReplayDamageFencesItsPartition(t *testing.T) {
	for _, c := range []string{"log cut below the journal", "consumer offset file", "journal frame", "journal, last frame's length, one bit",
		"journal cut short below its synced end", "journal rolled back to an earlier frame"} {
		t.Run(c, func(t *testing.T) {
			dir := t.TempDir()
			cfg := FileConfig{Dir: dir, MaxOpenFiles: 16, SerialSyncs: true}
			s, err := NewFileStore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			j := s.NewJournal()
			ps := journalPartitions(t, s, 2)
			for k := range 6 {
				commitRound(t, j, ps, k)
				if k == 0 {
					if err := ps[0].StoreConsumerOffset("c", 1); err != nil {
						t.Fatal(err)
					}
				}
			}
			img := copyTree(t, dir)
			for _, p := range ps {
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			rel := func(p string) string {
				r, err := filepath.Rel(dir, p)
				if err != nil {
					t.Fatal(err)
				}
				return filepath.Join(img, r)
			}
			part0 := rel(partDirOf(s, journalNS(t, 0)))
			switch c {
			case "log cut below the journal":
				if err := os.Truncate(filepath.Join(part0, fmt.Sprintf("%020d.log", 0)), 0); err != nil {
					t.Fatal(err)
				}
			case "consumer offset file":
				var found string
				_ = filepath.WalkDir(filepath.Join(part0, "offsets"), func(p string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() && strings.Contains(p, "consumers") {
						found = p
					}
					return nil
				})
				flipAt(t, found, 0)
				flipAt(t, found, consumerMarkStride)
			case "journal frame":
				names, err := os.ReadDir(rel(s.journalPath()))
				if err != nil || len(names) == 0 {
					t.Fatalf("setup: journal files %v (%v)", names, err)
				}
				flipAt(t, filepath.Join(rel(s.journalPath()), names[0].Name()), 20)
			case "journal cut short below its synced end", "journal rolled back to an earlier frame":
				// The journal's mark records the end of every synced write
				// but the last (journal_mark.go): a cut inside the frame of
				// round 3, or at its start (the file as it was before round
				// 3 was written), loses rounds 3 and 4 that the mark vouches
				// for. Without the mark both read as a torn tail: the
				// replay applied rounds 0 to 2 and the partitions took
				// offsets 3 and 4 again.
				names, err := vfs.Default.ReadDir(rel(s.journalPath()))
				names = journalFileNames(names, err)
				if err != nil || len(names) != 1 {
					t.Fatalf("setup: journal files %v (%v)", names, err)
				}
				path := filepath.Join(rel(s.journalPath()), names[0])
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				var starts []int // the frames' starts: round 0's marks, then rounds 1 to 5
				for pos := 0; pos+journalFrameHeader <= len(b) && !allZero(b[pos:pos+journalFrameHeader]); {
					starts = append(starts, pos)
					pos += journalFrameHeader + int(le.Uint32(b[pos+4:])&^journalUncertain)
				}
				if len(starts) != 6 {
					t.Fatalf("setup: %d journal frames, want 6", len(starts))
				}
				to := starts[3]
				if c == "journal cut short below its synced end" {
					to += 20
				}
				if err := os.Truncate(path, int64(to)); err != nil {
					t.Fatal(err)
				}
			case "journal, last frame's length, one bit":
				names, err := vfs.Default.ReadDir(rel(s.journalPath()))
				names = journalFileNames(names, err)
				if err != nil || len(names) == 0 {
					t.Fatalf("setup: journal files %v (%v)", names, err)
				}
				path := filepath.Join(rel(s.journalPath()), names[len(names)-1])
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				// The file is preallocated: its frames end where zeros start.
				last := 0 // the last frame's start
				for pos := 0; pos+journalFrameHeader <= len(b) && !allZero(b[pos:pos+journalFrameHeader]); {
					last = pos
					pos += journalFrameHeader + int(le.Uint32(b[pos+4:])&^journalUncertain)
				}
				b[last+5] ^= 0x40 // +16 KiB: into the zeros after the frames, or past the end of the file
				if err := vfs.WriteFileAtomic(vfs.Default, path, b); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, b) {
						t.Errorf("the damaged journal file changed: %d bytes of %d (%v)", len(after), len(b), err)
					}
				}()
			}

			for open := range 2 { // the second open finds the damage again
				s2, err := NewFileStore(FileConfig{Dir: img, MaxOpenFiles: 16, SerialSyncs: true})
				if err != nil {
					t.Fatalf("open %d: the store refused to open: %v", open, err)
				}
				checkFenced(t, s2, c)
			}
		})
	}
}

// checkFenced checks s, opened over the damage of case c (see
// TestBehaviour28ReplayDamageFencesItsPartition).
func checkFenced(t *testing.T, s *FileStore, c string) {
	t.Helper()
	p1, err := s.Build(journalNS(t, 1), 1)
	if err != nil {
		t.Fatalf("partition 1, undamaged: %v", err)
	}
	defer p1.Close()
	msgs, err := p1.Read(0, 10)
	journal := strings.HasPrefix(c, "journal")
	if want := []string{"1/0", "1/1", "1/2", "1/3", "1/4", "1/5"}; !journal && (err != nil || !slices.Equal(payloadsOf(msgs), want)) {
		t.Fatalf("partition 1: %v, %v; want %v", payloadsOf(msgs), err, want)
	}
	p0, err := s.Build(journalNS(t, 0), 1)
	var ce *CorruptError
	if c == "consumer offset file" {
		if !errors.As(err, &ce) {
			t.Fatalf("partition 0 with a damaged consumer offset file: %v, want a *CorruptError", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("partition 0: %v", err)
	}
	defer p0.Close()
	for _, p := range []Partition{p0, p1} {
		if !journal && p == p1 {
			continue
		}
		end := p.NextOffset()
		if c == "log cut below the journal" && end != 6 {
			t.Fatalf("partition 0 ends at %d, want 6: offsets would be handed out again", end)
		}
		if end == 0 {
			t.Fatal("a fenced partition with no hole")
		}
		if c == "log cut below the journal" {
			if _, err := p.Read(end-1, 10); !errors.As(err, &ce) {
				t.Fatalf("read in the hole (offset %d): %v, want a *CorruptError", end-1, err)
			}
		} else if msgs, err := p.Read(0, 10); err != nil || uint64(len(msgs)) != end {
			t.Fatalf("read below the damage: %v, %v; want %d messages", payloadsOf(msgs), err, end)
		}
		if d, ok := p.(Damaged); !ok || !errors.As(d.Damage(), &ce) {
			t.Fatal("the fenced partition does not report its damage (Damaged)")
		}
		if _, err := p.Append([]Message{{Payload: []byte("x")}}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("append to a fenced partition: %v, want ErrCorrupt", err)
		}
	}
}

// flipByte flips the bits of the byte at off in the file at path.
func flipAt(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) <= off {
		t.Fatalf("setup: %s: %d bytes (%v)", path, len(b), err)
	}
	b[off] ^= 0xff
	if err := vfs.WriteFileAtomic(vfs.Default, path, b); err != nil {
		t.Fatal(err)
	}
}
