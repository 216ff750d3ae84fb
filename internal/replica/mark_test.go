package replica_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
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
// synced end, and a mark left behind the log (a power loss before the
// flush that would have carried it), still open with everything synced.
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
		// The mark as it stood after the first batch: a power loss came
		// after the log's later fsyncs, before a flush carried the mark.
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

// markSaves are syncedLog's Saves, for a Disk on any FS.
func markSaves(d *replica.Disk) []func() error {
	return []func() error{
		func() error { return d.Save(nil, entries(1, 3, 1), hardState(1, 1, 2)) },
		func() error { return d.Save(nil, entries(4, 6, 1), hardState(1, 1, 5)) },
		func() error { return d.Save(nil, nil, hardState(2, 3, 5)) },
		func() error { return d.Save(nil, entries(7, 8, 2), hardState(2, 3, 6)) },
	}
}

// cutOpen truncates the raft log at path on fsys to size and opens it as
// a member does, returning OpenDisk's error.
func cutOpen(t *testing.T, fsys vfs.FS, path string, size int64) error {
	t.Helper()
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := replica.OpenDisk(fsys, path, true)
	if err == nil {
		err = d.Close()
	}
	return err
}

// TestDiskMarkDurableBeforeSaveReturns, on MemFS's power loss: a synced
// Save flushes twice — the log, then its sync mark (fdatasynced, not
// written back to ride on the next flush) — so that when Save returns,
// and raft acts on what it saved (an acknowledgement, a vote, a leader
// counting its own copy), the mark covers it. A power loss right after
// any synced Save, followed by a cut of exactly that Save's batch, is
// refused as damage rather than opened as a torn tail (the window
// mark.go once documented: the mark lagged by one synced write, and the
// replica forgot entries it had acknowledged). Seen failing with the
// mark written back (two flushes counted as one, the cut of the last
// batch opening).
func TestDiskMarkDurableBeforeSaveReturns(t *testing.T) {
	mem := vfs.NewMem()
	var syncs, writeBacks atomic.Int64
	fsys := errorfs.New(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpSync, errorfs.OpSyncDir:
			syncs.Add(1)
		case errorfs.OpWriteBack:
			writeBacks.Add(1)
		}
		return nil
	}))
	const path = "/g/raft.log"
	d, err := replica.OpenDisk(fsys, path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var ends []int64
	for i, save := range markSaves(d) {
		syncs.Store(0)
		writeBacks.Store(0)
		if err := save(); err != nil {
			t.Fatal(err)
		}
		if s, w := syncs.Load(), writeBacks.Load(); s != 2 || w != 0 {
			t.Fatalf("save %d: %d flushes and %d write-backs, want two flushes (the log's, the mark's)", i, s, w)
		}
		ends = append(ends, d.Size())
		// A power loss now, then this Save's batch cut off (or more).
		for j := i; j >= 0; j-- {
			cut := int64(0)
			if j > 0 {
				cut = ends[j-1]
			}
			if err := cutOpen(t, mem.Crash(), path, cut); !errors.Is(err, replica.ErrCorruptLog) {
				t.Fatalf("save %d, power loss, the log cut to byte %d (below save %d's end): %v, want ErrCorruptLog", i, cut, j, err)
			}
		}
		if err := cutOpen(t, mem.Crash(), path, ends[i]); err != nil {
			t.Fatalf("save %d, power loss, log whole: %v", i, err)
		}
	}
}

// TestDiskPowerLossAtEveryWritePointOpens fails the i-th mutating
// filesystem operation of syncedLog's Saves, then loses power, for
// i = 0, 1, … until the Saves run untouched: the mark, written after the
// log's flush and durable only with a later one, is never ahead of the
// log, so the log always opens (never refused as cut) with every Save
// that returned.
func TestDiskPowerLossAtEveryWritePointOpens(t *testing.T) {
	// want[n] is what the log may hold once n Saves returned. A hard
	// state that only moves the commit is held (Disk.Save) and written
	// with the next Save's records, in one write: the second Save's
	// (1/1/5) goes into the file with the third's, and the last Save's
	// (2/3/6) only with Close, unsynced. A third Save torn between its
	// two records leaves the held one alone.
	want := [][]string{
		{"snap=0/ hs=0/0/0 ents="},
		{"snap=0/ hs=1/1/2 ents=1.1:e1 2.1:e2 3.1:e3 "},
		{"snap=0/ hs=1/1/2 ents=1.1:e1 2.1:e2 3.1:e3 4.1:e4 5.1:e5 6.1:e6 ",
			"snap=0/ hs=1/1/5 ents=1.1:e1 2.1:e2 3.1:e3 4.1:e4 5.1:e5 6.1:e6 "},
		{"snap=0/ hs=2/3/5 ents=1.1:e1 2.1:e2 3.1:e3 4.1:e4 5.1:e5 6.1:e6 "},
		{"snap=0/ hs=2/3/5 ents=1.1:e1 2.1:e2 3.1:e3 4.1:e4 5.1:e5 6.1:e6 7.2:e7 8.2:e8 "},
	}
	for i := int64(0); ; i++ {
		mem := vfs.NewMem()
		inj := errorfs.OnIndex(i, syscall.EIO)
		const path = "/g/raft.log"
		done := 0
		d, err := replica.OpenDisk(errorfs.New(mem, inj), path, true)
		if err == nil {
			for _, save := range markSaves(d) {
				if err = save(); err != nil {
					break
				}
				done++
			}
			d.Close()
		}
		if err != nil && !errors.Is(err, syscall.EIO) {
			t.Fatalf("op %d: %v", i, err)
		}
		d2, rerr := replica.OpenDisk(mem.Crash(), path, true)
		if rerr != nil {
			t.Fatalf("op %d failed (%v) after %d saves: reopen after a power loss: %v", i, err, done, rerr)
		}
		got := describe(d2.Recovered())
		d2.Close()
		if !slices.Contains(slices.Concat(want[done:]...), got) {
			t.Fatalf("op %d failed (%v) after %d saves: recovered %s", i, err, done, got)
		}
		if !inj.Fired() {
			if done != len(want)-1 {
				t.Fatalf("untouched run saved %d times", done)
			}
			return
		}
	}
}

// TestOwnerTagOfALogCutBelowItsTag, on the real filesystem: a tagged log
// cut below its tag record (down to nothing, or inside the record) is
// refused as damage and its valid prefix names no owner, but its sync
// mark, which survives the cut, does (OwnerTag). A log whose file was
// replaced by another log's copy is the mark's owner's, not the copy's:
// it is the mark's log whose synced bytes are missing.
func TestOwnerTagOfALogCutBelowItsTag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, tag string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		d, err := replica.OpenDisk(vfs.Default, path, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.SetTag([]byte(tag)); err != nil {
			t.Fatal(err)
		}
		for _, save := range markSaves(d) {
			if err := save(); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const tagA, tagB = "incarnation A, replica 1", "incarnation B, replica 2"
	tagEnd := int64(8 + 1 + len(tagA)) // the first record: a wal header, the type, the tag
	for _, cut := range []int64{0, tagEnd / 2, tagEnd - 1} {
		path := write("a.log", tagA)
		if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		if _, err := replica.ReadDisk(vfs.Default, path); !errors.Is(err, replica.ErrCorruptLog) {
			t.Fatalf("cut to %d: ReadDisk %v, want ErrCorruptLog", cut, err)
		}
		if tag, err := replica.PrefixTag(vfs.Default, path); err != nil || tag != nil {
			t.Fatalf("cut to %d: the prefix holds tag %q (%v), want none", cut, tag, err)
		}
		if tag, err := replica.OwnerTag(vfs.Default, path); err != nil || string(tag) != tagA {
			t.Fatalf("cut to %d: OwnerTag %q, %v; want %q from the mark", cut, tag, err, tagA)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(replica.MarkName(path)); err != nil {
			t.Fatal(err)
		}
	}

	// Another log's copy put in its place, shorter than the mark says.
	pathA, pathB := write("a.log", tagA), write("b.log", tagB)
	b, err := os.ReadFile(pathB)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pathA, b[:tagEnd+1], 0o644); err != nil {
		t.Fatal(err)
	}
	if tag, err := replica.PrefixTag(vfs.Default, pathA); err != nil || string(tag) != tagB {
		t.Fatalf("the copy's prefix: %q, %v; want %q", tag, err, tagB)
	}
	if tag, err := replica.OwnerTag(vfs.Default, pathA); err != nil || string(tag) != tagA {
		t.Fatalf("OwnerTag of a log replaced by another's copy: %q, %v; want the mark's %q", tag, err, tagA)
	}
	// Without a mark naming a tag, the prefix's.
	if err := os.Remove(replica.MarkName(pathA)); err != nil {
		t.Fatal(err)
	}
	if tag, err := replica.OwnerTag(vfs.Default, pathA); err != nil || string(tag) != tagB {
		t.Fatalf("OwnerTag without a mark: %q, %v; want the prefix's %q", tag, err, tagB)
	}
}

// TestDiskMarkCutShortIsDamage, on the real filesystem: a synced raft log
// cut back to the size its mark's older slot records, and the mark file
// cut short below its newer slot. The older slot is valid, and the log
// is as long as it says: read alone, it vouched for the cut log, which
// opened having forgotten entries it acknowledged (cluster simulator seed
// 555: the member came back behind what its leader knew it held, and the
// two exchanged appends and rejections forever). A mark file is never
// shortened by a write, torn or not, so a short one is damage: refused
// as ErrCorruptLog.
func TestDiskMarkCutShortIsDamage(t *testing.T) {
	path, _, ends := syncedLog(t)
	last := ends[len(ends)-1]
	mp := path + ".mark"
	b, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	const stride = 512 // the second slot's byte
	// The size the first slot records, read from a copy whose second
	// slot is blank.
	probe := filepath.Join(t.TempDir(), "raft.log")
	if err := os.WriteFile(probe+".mark", append(b[:stride:stride], make([]byte, len(b)-stride)...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, size, found, err := replica.SyncedSize(vfs.Default, probe)
	if err != nil || !found {
		t.Fatalf("the first slot: found %v, err %v", found, err)
	}
	if int64(size) >= last {
		t.Fatalf("the first slot records %d bytes, the log's end %d: not the older slot", size, last)
	}
	if err := os.Truncate(path, int64(size)); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(mp, 152); err != nil {
		t.Fatal(err)
	}
	rec, err := openBoth(t, path)
	if !errors.Is(err, replica.ErrCorruptLog) {
		t.Fatalf("opened with %s: err %v, want ErrCorruptLog", describe(rec), err)
	}
}

// TestDiskOpenMarksDurably: a process that crashed with writes of its
// raft log in the page cache finds them at OpenDisk, which syncs them,
// and raft may acknowledge them as soon as the member is open; so a
// synced Disk's OpenDisk makes its mark cover them durably, and a power
// loss then a cut of those writes is refused, not opened as a torn tail.
// Seen failing with the mark written back at open.
func TestDiskOpenMarksDurably(t *testing.T) {
	mem := vfs.NewMem()
	const path = "/g/raft.log"
	d, err := replica.OpenDisk(mem, path, true)
	if err != nil {
		t.Fatal(err)
	}
	saves := markSaves(d)
	if err := saves[0](); err != nil {
		t.Fatal(err)
	}
	synced := d.Size()
	d.SetSync(false) // the next Save's fsync never came: the process crashed
	if err := saves[1](); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d, err = replica.OpenDisk(mem, path, true) // the process restarts
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if err := cutOpen(t, mem.Crash(), path, synced); !errors.Is(err, replica.ErrCorruptLog) {
		t.Fatalf("reopened, power loss, the writes OpenDisk synced cut off: %v, want ErrCorruptLog", err)
	}
}
