package metadata

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/vfs"
)

// contents is every file of the metadata directory, byte for byte.
func contents(t *testing.T, fs vfs.FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range dirNames(t, fs) {
		b, err := vfs.ReadFile(fs, filepath.Join(metaDir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = string(b)
	}
	return out
}

// TestReadDurable: ReadDurable loads what OpenDurable would — through a
// snapshot, past a torn tail, skipping a damaged snapshot — and changes
// nothing, reporting the torn tail and the skipped snapshot instead.
func TestReadDurable(t *testing.T) {
	fs := vfs.NewMem()
	d := openDurable(t, fs, 4)
	for i := range 6 {
		if _, err := d.Apply(CreateStream{Name: string(rune('a' + i))}); err != nil {
			t.Fatal(err)
		}
	}
	want := d.Store().Export()
	closeDurable(t, d)
	// A torn tail: half a record's header after the last one.
	var wals []string
	for _, n := range dirNames(t, fs) {
		if _, ok := parseName(n, walPrefix); ok {
			wals = append(wals, filepath.Join(metaDir, n))
		}
	}
	last := wals[len(wals)-1]
	b, _ := vfs.ReadFile(fs, last)
	if err := fs.Remove(last); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(fs, last, append(b, 7, 0, 0)); err != nil {
		t.Fatal(err)
	}
	before := contents(t, fs)

	s, files, err := ReadDurable(vfs.ReadOnly(fs), metaDir, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Export(); !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadDurable store:\n%+v\nwant\n%+v", got, want)
	}
	if files.Snapshot == "" || len(files.Torn) != 1 || files.Torn[0].Path != last || files.Torn[0].Size != 3 || files.Applied != 6 {
		t.Fatalf("DurableFiles = %+v", files)
	}
	if !reflect.DeepEqual(contents(t, fs), before) {
		t.Fatal("ReadDurable changed the directory")
	}

	// A damaged snapshot is skipped, as OpenDurable skips it, and named.
	snap := files.Snapshot
	b, _ = vfs.ReadFile(fs, snap)
	b[len(b)-1] ^= 0xff
	if err := fs.Remove(snap); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(fs, snap, b); err != nil {
		t.Fatal(err)
	}
	_, files, err = ReadDurable(fs, metaDir, testConfig)
	if len(files.Skipped) != 1 || files.Skipped[0].Path != snap {
		t.Fatalf("Skipped = %+v", files.Skipped)
	}
	// Without the snapshot the log does not reach back to the start.
	var we *wal.CorruptError
	if !errors.Is(err, ErrCorruptLog) || errors.As(err, &we) {
		t.Fatalf("ReadDurable without a usable snapshot: %v", err)
	}
	if _, _, err := ReadDurable(fs, "/nowhere", testConfig); err == nil {
		t.Fatal("ReadDurable of a missing directory succeeded")
	}
}
