package wal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

// TestOpenReadOnly: a torn tail is reported and left in place, damage in
// the middle is refused as Open refuses it, and nothing can be written.
func TestOpenReadOnly(t *testing.T) {
	fs := newFS(t)
	recs := records(5)
	writeLog(t, fs, 7, recs)
	whole, err := vfs.ReadFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	torn := append(bytes.Clone(whole), 9, 0, 0, 0, 1, 2)
	replaceFile(t, fs, torn)

	l, err := OpenReadOnly(vfs.ReadOnly(fs), path, Options{FirstIndex: 7})
	if err != nil {
		t.Fatal(err)
	}
	if off, n := l.TornTail(); off != int64(len(whole)) || n != 6 {
		t.Fatalf("TornTail = %d, %d; want %d, 6", off, n, len(whole))
	}
	var got [][]byte
	if err := l.Replay(func(_ uint64, d []byte) error { got = append(got, d); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) || l.NextIndex() != 12 {
		t.Fatalf("replayed %d records, next %d", len(got), l.NextIndex())
	}
	if _, err := l.Append([]byte("x")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Append: %v, want ErrReadOnly", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Sync: %v, want ErrReadOnly", err)
	}
	l.Close()
	if b, _ := vfs.ReadFile(fs, path); !bytes.Equal(b, torn) {
		t.Fatal("OpenReadOnly changed the file")
	}

	bad := bytes.Clone(whole)
	bad[4] ^= 0xff // the first record's checksum: valid ones follow
	replaceFile(t, fs, bad)
	_, err = OpenReadOnly(fs, path, Options{})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != 0 {
		t.Fatalf("OpenReadOnly of a log damaged in the middle: %v", err)
	}
}

func replaceFile(t *testing.T, fs vfs.FS, b []byte) {
	t.Helper()
	if err := fs.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(fs, path, b); err != nil {
		t.Fatal(err)
	}
}
