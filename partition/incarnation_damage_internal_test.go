package partition

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestBehaviour28IncarnationDamageKeepsTheDirectory: a partition
// directory whose incarnation file is cut short, emptied, deleted or
// rolled back to an older incarnation's record, while the store knows the
// incarnation was synced there (the partitions manifest after a clean
// close, or the journal's entries after a crash, without the manifest),
// is damaged, not dead or
// half-built: the store lists it as damaged (the orphan sweep keeps it),
// Build refuses it with a *CorruptError naming the incarnation file, and
// its files stay, on every open. On the real filesystem. Before the fix
// each case read as a half-built or older directory: List gave it
// incarnation 0 with no damage, and Build started it over, empty, its
// acknowledged messages deleted.
func TestBehaviour28IncarnationDamageKeepsTheDirectory(t *testing.T) {
	for _, how := range []string{"after a clean close", "after a crash", "after a crash, no manifest"} {
		for _, c := range []string{"cut short", "emptied", "deleted"} {
			t.Run(how+"/"+c, func(t *testing.T) {
				dir := t.TempDir()
				cfg := FileConfig{Dir: dir, MaxOpenFiles: 16, SerialSyncs: true}
				s, err := NewFileStore(cfg)
				if err != nil {
					t.Fatal(err)
				}
				j := s.NewJournal()
				ps := journalPartitions(t, s, 2)
				for k := range 4 {
					commitRound(t, j, ps, k)
				}
				img := dir
				if how != "after a clean close" {
					img = copyTree(t, dir) // the page cache, as a process crash leaves it
					if how == "after a crash, no manifest" {
						// Only the journal's entries, written once the
						// layout was durable, tell.
						if err := os.Remove(ManifestPath(img)); err != nil {
							t.Fatal(err)
						}
					}
				} else {
					for _, p := range ps {
						if err := p.Close(); err != nil {
							t.Fatal(err)
						}
					}
					if err := j.Close(); err != nil {
						t.Fatal(err)
					}
					if err := s.RecordPartitions(); err != nil {
						t.Fatal(err)
					}
				}
				rel, err := filepath.Rel(dir, partDirOf(s, journalNS(t, 0)))
				if err != nil {
					t.Fatal(err)
				}
				pdir := filepath.Join(img, rel)
				inc := filepath.Join(pdir, incarnationFile)
				switch c {
				case "cut short":
					err = os.Truncate(inc, 1)
				case "emptied":
					err = os.Truncate(inc, 0)
				case "deleted":
					err = os.Remove(inc)
				}
				if err != nil {
					t.Fatal(err)
				}
				for open := range 2 {
					s2, err := NewFileStore(FileConfig{Dir: img, MaxOpenFiles: 16, SerialSyncs: true})
					if err != nil {
						t.Fatalf("open %d: %v", open, err)
					}
					stored, err := s2.List()
					if err != nil {
						t.Fatal(err)
					}
					var damaged bool
					for _, st := range stored {
						if st.NS == journalNS(t, 0) {
							damaged = st.Damage != nil
						}
					}
					if !damaged {
						t.Fatalf("open %d: List does not report the damaged incarnation file (the orphan sweep would remove the directory): %+v", open, stored)
					}
					p, err := s2.Build(journalNS(t, 0), 1)
					var ce *CorruptError
					if !errors.As(err, &ce) || ce.Path != inc {
						if p != nil {
							t.Fatalf("open %d: Build returned a partition ending at %d (%v); want a *CorruptError naming %s", open, p.NextOffset(), err, inc)
						}
						t.Fatalf("open %d: Build: %v; want a *CorruptError naming %s", open, err, inc)
					}
					if _, err := os.Stat(filepath.Join(pdir, "00000000000000000000.log")); err != nil {
						t.Fatalf("open %d: the segment is gone: %v", open, err)
					}
					p1, err := s2.Build(journalNS(t, 1), 1)
					if err != nil {
						t.Fatalf("open %d: the undamaged partition: %v", open, err)
					}
					if n := p1.NextOffset(); n != 4 {
						t.Fatalf("open %d: the undamaged partition ends at %d, want 4", open, n)
					}
					if err := p1.Close(); err != nil {
						t.Fatal(err)
					}
					if err := s2.RecordPartitions(); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// An incarnation file rolled back to an older incarnation's record, in a
// directory where the newer one was synced, is damage too; a directory
// of an older incarnation than the one being built, where nothing of the
// newer one was synced, is started over as before (a recreated
// partition).
func TestIncarnationRolledBackToAnOlderOne(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileStore(FileConfig{Dir: dir, MaxOpenFiles: 16, SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns := journalNS(t, 0)
	old, err := s.Build(ns, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = old.Append([]Message{{Payload: []byte("a")}}); err == nil {
		err = old.Sync()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	oldRecord, err := os.ReadFile(filepath.Join(s.partitionDir(ns), incarnationFile))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(ns, 5) // recreated: started over
	if err != nil || p.NextOffset() != 0 {
		t.Fatalf("recreated as incarnation 5: %v", err)
	}
	if _, err = p.Append([]Message{{Payload: []byte("b")}, {Payload: []byte("c")}}); err == nil {
		err = p.Sync()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordPartitions(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.partitionDir(ns), incarnationFile), oldRecord, 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := NewFileStore(FileConfig{Dir: dir, MaxOpenFiles: 16, SerialSyncs: true})
	if err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if p, err := s2.Build(ns, 5); !errors.As(err, &ce) {
		if p != nil {
			t.Fatalf("Build of incarnation 5 over its rolled-back record: a partition ending at %d (%v), want a *CorruptError", p.NextOffset(), err)
		}
		t.Fatalf("Build of incarnation 5 over its rolled-back record: %v, want a *CorruptError", err)
	}
	// A newer incarnation, of which nothing was synced, starts over.
	p, err = s2.Build(ns, 7)
	if err != nil || p.NextOffset() != 0 {
		t.Fatalf("recreated as incarnation 7: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
