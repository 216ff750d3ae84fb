package replica_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/vfs"
)

// syncedLog writes a synced raft log on the real filesystem in a new
// directory: a hard state, then batches of entries and hard states (a
// vote in term 2 last), each Save synced. It returns the log's path, its
// content after the first batch (an older synced copy), and the file's
// size after every Save (each the end of a synced batch).
func syncedLog(t *testing.T) (path string, older []byte, ends []int64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "raft.log")
	d, err := replica.OpenDisk(vfs.Default, path, true)
	if err != nil {
		t.Fatal(err)
	}
	saves := []func() error{
		func() error { return d.Save(nil, entries(1, 3, 1), hardState(1, 1, 2)) },
		func() error { return d.Save(nil, entries(4, 6, 1), hardState(1, 1, 5)) },
		func() error { return d.Save(nil, nil, hardState(2, 3, 5)) },
		func() error { return d.Save(nil, entries(7, 8, 2), hardState(2, 3, 6)) },
	}
	for i, save := range saves {
		if err := save(); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, d.Size())
		if i == 0 {
			if older, err = os.ReadFile(path); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return path, older, ends
}

// openBoth opens the log as a member does (OpenDisk) and as offline tools
// do (ReadDisk, first, as it changes nothing) and returns OpenDisk's
// error; ReadDisk must agree on whether the log is damaged.
func openBoth(t *testing.T, path string) (replica.Recovered, error) {
	t.Helper()
	rd, rerr := replica.ReadDisk(vfs.Default, path)
	if rerr == nil {
		rd.Close()
	}
	d, err := replica.OpenDisk(vfs.Default, path, true)
	if errors.Is(rerr, replica.ErrCorruptLog) != errors.Is(err, replica.ErrCorruptLog) {
		t.Fatalf("ReadDisk: %v, OpenDisk: %v: they disagree", rerr, err)
	}
	if err != nil {
		return replica.Recovered{}, err
	}
	rec := d.Recovered()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return rec, nil
}

// TestDiskCutOrRolledBackIsDamage, on the real filesystem: a synced raft
// log cut short — at the end of an earlier synced batch, inside a record,
// down to nothing — or rolled back to an older synced copy of itself ends
// on whole records, as a log whose last write was torn does; without the
// sync mark it opened as that log, its last vote and acknowledged entries
// forgotten. Each is refused as ErrCorruptLog. A write torn after the
// synced end, and a mark left behind the log by a crash between the
// log's fsync and the mark's, still open with everything synced.
func TestDiskCutOrRolledBackIsDamage(t *testing.T) {
	path, older, ends := syncedLog(t)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := ends[len(ends)-1]
	cuts := map[string]func() error{
		"cut to 0 bytes":                        func() error { return os.Truncate(path, 0) },
		"cut at the end of the first batch":     func() error { return os.Truncate(path, ends[0]) },
		"cut at the end of the vote's batch":    func() error { return os.Truncate(path, ends[2]) },
		"cut inside the last record":            func() error { return os.Truncate(path, last-2) },
		"cut inside the first batch":            func() error { return os.Truncate(path, ends[0]/2) },
		"rolled back to the first batch's copy": func() error { return os.WriteFile(path, older, 0o644) },
	}
	for name, cut := range cuts {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, whole, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := cut(); err != nil {
				t.Fatal(err)
			}
			rec, err := openBoth(t, path)
			if !errors.Is(err, replica.ErrCorruptLog) {
				t.Fatalf("opened with %s: err %v, want ErrCorruptLog", describe(rec), err)
			}
			// Refused again at the next open: the refusal changed nothing.
			if _, err := openBoth(t, path); !errors.Is(err, replica.ErrCorruptLog) {
				t.Fatalf("second open: err %v, want ErrCorruptLog", err)
			}
		})
	}

	want := "snap=0/ hs=2/3/6 ents=1.1:e1 2.1:e2 3.1:e3 4.1:e4 5.1:e5 6.1:e6 7.2:e7 8.2:e8 "
	t.Run("torn write after the synced end", func(t *testing.T) {
		if err := os.WriteFile(path, whole, 0o644); err != nil {
			t.Fatal(err)
		}
		// A record header whose length runs past the end of the file: an
		// incomplete final write.
		torn := append(append([]byte(nil), whole...), 200, 0, 0, 0, 1, 2, 3, 4, 5)
		if err := os.WriteFile(path, torn, 0o644); err != nil {
			t.Fatal(err)
		}
		rec, err := openBoth(t, path)
		if err != nil || describe(rec) != want {
			t.Fatalf("got %s, %v; want %s", describe(rec), err, want)
		}
	})
	t.Run("mark behind the log", func(t *testing.T) {
		// The mark as it stood after the first batch: a crash came after
		// the log's later fsyncs, before the mark's.
		mp := replica.MarkName(path)
		if err := os.WriteFile(path, older, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(mp); err != nil {
			t.Fatal(err)
		}
		if _, err := openBoth(t, path); err != nil { // a mark written afresh
			t.Fatal(err)
		}
		oldMark, err := os.ReadFile(mp)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, whole, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mp, oldMark, 0o644); err != nil {
			t.Fatal(err)
		}
		rec, err := openBoth(t, path)
		if err != nil || describe(rec) != want {
			t.Fatalf("got %s, %v; want %s", describe(rec), err, want)
		}
	})
	t.Run("mark damaged", func(t *testing.T) {
		if err := os.WriteFile(replica.MarkName(path), []byte("not a mark"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := openBoth(t, path); !errors.Is(err, replica.ErrCorruptLog) {
			t.Fatalf("err %v, want ErrCorruptLog", err)
		}
	})
	t.Run("log missing beside its mark", func(t *testing.T) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if _, err := replica.OpenDisk(vfs.Default, path, true); !errors.Is(err, replica.ErrCorruptLog) {
			t.Fatalf("err %v, want ErrCorruptLog", err)
		}
	})
}

// TestDiskRolledBackPastRewriteIsDamage: after a compaction rewrote the
// log (a new file, the next generation), the file it replaced put back is
// refused, even though it is longer than the new one; a crash between the
// rename and the mark's write (the mark still naming the old file) opens.
func TestDiskRolledBackPastRewriteIsDamage(t *testing.T) {
	path, _, _ := syncedLog(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	markBefore, err := os.ReadFile(replica.MarkName(path))
	if err != nil {
		t.Fatal(err)
	}
	d, err := replica.OpenDisk(vfs.Default, path, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Rewrite(snapAt(6, 1, "s6"), hardState(2, 3, 6), entries(7, 8, 2)); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) >= len(before) {
		t.Fatalf("rewritten log of %d bytes, the old one %d: the case needs it shorter", len(after), len(before))
	}
	if err := os.WriteFile(replica.MarkName(path), markBefore, 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := openBoth(t, path)
	if want := "snap=6/s6 hs=2/3/6 ents=7.2:e7 8.2:e8 "; err != nil || describe(rec) != want {
		t.Fatalf("mark naming the old file: got %s, %v; want %s", describe(rec), err, want)
	}
	if err := os.WriteFile(path, before, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openBoth(t, path); !errors.Is(err, replica.ErrCorruptLog) {
		t.Fatalf("old file put back: err %v, want ErrCorruptLog", err)
	}
}
