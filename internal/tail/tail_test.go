package tail

import (
	"bytes"
	"testing"
)

func filled(n int) []byte { return bytes.Repeat([]byte{0xab}, n) }

// The rule, case by case, the same through Torn and TornAt.
func TestTorn(t *testing.T) {
	withZeros := func(b []byte, from, to int) []byte {
		b = bytes.Clone(b)
		clear(b[from:to])
		return b
	}
	cases := []struct {
		name   string
		rec    []byte
		pos    int64
		header int
		size   uint64
		torn   bool
	}{
		{"header cut", filled(5), 100, 8, 0, true},
		{"length past the end", filled(100), 100, 8, 101, true},
		{"whole length, flipped", filled(100), 100, 8, 100, false},
		{"whole length, trailing bytes, flipped", filled(200), 100, 8, 100, false},
		{"whole length, an unwritten sector", withZeros(filled(2000), 412, 924), 100, 8, 2000, true},
		{"whole length, zeros short of a sector boundary", withZeros(filled(2000), 420, 700), 100, 8, 2000, false},
		{"whole length, its end in an unwritten sector", withZeros(filled(2000), 1948, 2000), 100, 8, 2000, true},
		{"whole length, 4 zero bytes into the last sector", withZeros(filled(416), 412, 416), 100, 8, 416, false},
		{"stopped part way, zeros after", withZeros(filled(300), 40, 300), 100, 8, 200, true},
		{"whole length, its last 20 bytes zeros to the end", withZeros(filled(60), 40, 60), 100, 8, 60, true},
		{"whole length, its last 4 bytes zeros to the end", withZeros(filled(60), 56, 60), 100, 8, 60, false},
		{"whole length, zeros after it only", append(filled(60), make([]byte, 100)...), 100, 8, 60, false},
		{"zeros where a header should be", make([]byte, 300), 100, 8, 0, true},
		{"a small length, not zeros", filled(300), 100, 8, 3, false},
		{"a tiny record of zeros", make([]byte, 6), 100, 4, 6, true},
		{"zeros to the end, across a sector boundary", make([]byte, 300), 508, 8, 0, true},
		{"a zero header across a sector boundary, then garbage", append(make([]byte, 8), filled(100)...), 508, 8, 8, false},
	}
	for _, c := range cases {
		if got := Torn(c.rec, c.pos, c.header, c.size); got != c.torn {
			t.Errorf("%s: Torn = %v, want %v", c.name, got, c.torn)
		}
		file := append(make([]byte, c.pos), c.rec...)
		got, err := TornAt(bytes.NewReader(file), c.pos, int64(len(file)), c.header, c.size)
		if err != nil || got != c.torn {
			t.Errorf("%s: TornAt = %v, %v, want %v", c.name, got, err, c.torn)
		}
	}
}

// TornAt reads a record larger than its buffer in pieces that never split
// a sector.
func TestTornAtLargeRecord(t *testing.T) {
	const pos = 300
	rec := filled(300 << 10)
	file := append(make([]byte, pos), rec...)
	if torn, err := TornAt(bytes.NewReader(file), pos, int64(len(file)), 60, uint64(len(rec))); err != nil || torn {
		t.Fatalf("a whole record: %v, %v", torn, err)
	}
	clear(file[130<<10 : 130<<10+SectorSize])
	if torn, err := TornAt(bytes.NewReader(file), pos, int64(len(file)), 60, uint64(len(rec))); err != nil || !torn {
		t.Fatalf("a record with an unwritten sector at 130 KiB: %v, %v", torn, err)
	}
}

// FuzzTorn: any bytes, position and claimed size — never a panic, and
// Torn and TornAt (which reads in pieces) always agree.
func FuzzTorn(f *testing.F) {
	f.Add(filled(100), int64(100), 8, uint64(100))
	f.Add(make([]byte, 40), int64(509), 8, uint64(0))
	f.Add(append(filled(600), make([]byte, 600)...), int64(30), 60, uint64(1000))
	f.Fuzz(func(t *testing.T, rec []byte, pos int64, header int, size uint64) {
		if pos < 0 || pos > 1<<40 || header < 0 || header > 64 {
			t.Skip()
		}
		got := Torn(rec, pos, header, size)
		file := append(make([]byte, pos%4096), rec...)
		at, err := TornAt(bytes.NewReader(file), pos%4096, int64(len(file)), header, size)
		if err != nil {
			t.Fatal(err)
		}
		// The file is shorter, but pos%4096 lies at the same place in its
		// sector as pos.
		if at != got {
			t.Fatalf("Torn = %v, TornAt = %v", got, at)
		}
	})
}
