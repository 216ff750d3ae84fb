package wal

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

// TestScanPrefixStopsAtTheFirstBadRecord: ScanPrefix hands over the
// records before the first one that fails its checksum — which Open
// refuses as damage in the middle — and nothing from it on, and never
// fails on the bytes themselves.
func TestScanPrefixStopsAtTheFirstBadRecord(t *testing.T) {
	fsys := vfs.NewMem()
	l, err := Create(fsys, "log", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 6 {
		want = append(want, fmt.Sprintf("record-%d", i))
		if _, err := l.Append([]byte(want[i])); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(l.Sync(), l.Close()); err != nil {
		t.Fatal(err)
	}
	b, err := vfs.ReadFile(fsys, "log")
	if err != nil {
		t.Fatal(err)
	}
	// A byte of the fourth record's data flipped.
	at := 3*(HeaderSize+len(want[0])) + HeaderSize + 2
	b[at] ^= 0x04
	if err := vfs.WriteFileAtomic(fsys, "log", b); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(fsys, "log", Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of the damaged log: %v, want ErrCorrupt", err)
	}
	var got []string
	if err := ScanPrefix(fsys, "log", Options{}, func(i uint64, data []byte) bool {
		if i != uint64(len(got)) {
			t.Errorf("record %d given as %d", len(got), i)
		}
		got = append(got, string(data))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want[:3]) {
		t.Fatalf("ScanPrefix gave %q, want the three records before the damage", got)
	}
}
