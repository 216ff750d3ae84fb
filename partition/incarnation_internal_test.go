package partition

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

// FuzzIncarnation feeds readIncarnation arbitrary file contents: it never
// panics, reads back what encodeIncarnation wrote, and accepts a record
// with a checksum only when the checksum is right; whatever it refuses is
// a torn file (errBadIncarnation) or a *CorruptError.
func FuzzIncarnation(f *testing.F) {
	for _, s := range []string{"", "7", "7\n", "7 ", "31 1a2b3c4d\n", "x", "\n", "1 2 3\n"} {
		f.Add([]byte(s))
	}
	f.Add(encodeIncarnation(42))
	f.Fuzz(func(t *testing.T, b []byte) {
		mem := vfs.NewMem()
		if err := mem.MkdirAll("/p", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := vfs.WriteFileAtomic(mem, filepath.Join("/p", incarnationFile), b); err != nil {
			t.Fatal(err)
		}
		epoch, err := readIncarnation(mem, "/p")
		var ce *CorruptError
		switch {
		case err == nil:
			if string(b) != string(encodeIncarnation(epoch)) && !legacyIncarnation(b, epoch) {
				t.Fatalf("%q read as epoch %d", b, epoch)
			}
		case errors.Is(err, errBadIncarnation), errors.As(err, &ce):
		default:
			t.Fatalf("%q: %v", b, err)
		}
		if len(b) < 24 {
			e := uint64(len(b)) * 7919
			if got, err := readIncarnation(writeInc(t, encodeIncarnation(e)), "/p"); err != nil || got != e {
				t.Fatalf("round trip of %d: %d, %v", e, got, err)
			}
		}
	})
}

// legacyIncarnation reports whether b is a record of older versions for
// epoch: the decimal alone, with space around it and a newline.
func legacyIncarnation(b []byte, epoch uint64) bool {
	var n uint64
	digits := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			n = n*10 + uint64(c-'0')
			digits++
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x85 || c == 0xA0:
		default:
			return false
		}
	}
	return digits > 0 && n == epoch
}

func writeInc(t *testing.T, b []byte) vfs.FS {
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/p", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(mem, filepath.Join("/p", incarnationFile), b); err != nil {
		t.Fatal(err)
	}
	return mem
}
