package tail

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

func filled(n int) []byte { return bytes.Repeat([]byte{0xab}, n) }

// fixed is a format whose records state header and size whatever their
// bytes, and never check whole: the rule's other parts alone.
func fixed(header int, size uint64) Format {
	return Format{
		Size:  func([]byte) (int, uint64) { return header, size },
		Whole: func([]byte) bool { return false },
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// framed is a format like the write-ahead log's: a 4-byte length of the
// data, a CRC-32C of the length and the data, then the data.
var framed = Format{
	LengthAt: 0,
	Size: func(h []byte) (int, uint64) {
		return 8, 8 + uint64(binary.LittleEndian.Uint32(h))
	},
	Whole: func(b []byte) bool {
		if len(b) < 8 {
			return false
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-8) {
			return false
		}
		crc := crc32.Update(crc32.Checksum(b[:4], castagnoli), castagnoli, b[8:8+n])
		return crc == binary.LittleEndian.Uint32(b[4:])
	},
}

// frame is data framed as framed reads it.
func frame(data []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(data)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Update(crc32.Checksum(b, castagnoli), castagnoli, data))
	return append(b, data...)
}

// judge runs the rule through Torn and TornAt, which must agree, on a
// file whose bytes from pos are rec.
func judge(t *testing.T, rec []byte, pos int64, f Format) bool {
	t.Helper()
	file := append(make([]byte, pos), rec...)
	keep := bytes.Clone(file)
	at, err := TornAt(bytes.NewReader(file), pos, int64(len(file)), f)
	if err != nil {
		t.Fatal(err)
	}
	got := Torn(file[pos:], pos, f)
	if got != at {
		t.Fatalf("Torn = %v, TornAt = %v", got, at)
	}
	if !bytes.Equal(file, keep) {
		t.Fatal("Torn changed the record's bytes")
	}
	return got
}

// A last record written whole with one bit of its length flipped is
// damage, whichever bit: flipped back, it checks whole. Flipped up, its
// length runs past the end of the file and would read as a write cut
// short; flipped down, it ends inside the record. The same record cut
// short at every byte, or cut short in preallocated (zero) space, is a
// torn write.
func TestTornLengthFlipped(t *testing.T) {
	for _, n := range []int{1, 40, 700, 5000, 70 << 10} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i%251) + 1 // no zeros: the zero rules stay out of it
		}
		rec := frame(data)
		for _, pos := range []int64{0, 100, 509} {
			if judge(t, rec, pos, framed) {
				t.Fatalf("%d bytes at %d, whole: torn", n, pos)
			}
			for bit := range 32 {
				b := bytes.Clone(rec)
				b[bit/8] ^= 1 << (bit % 8)
				if judge(t, b, pos, framed) {
					t.Errorf("%d bytes at %d, bit %d of the length flipped: torn, want damage", n, pos, bit)
				}
			}
			step := 1
			if len(rec) > 2000 {
				step = 97 // and every byte of the header
			}
			for cut := 1; cut < len(rec); cut++ {
				if cut > 16 && cut%step != 0 {
					continue
				}
				if !judge(t, rec[:cut], pos, framed) {
					t.Errorf("%d bytes at %d, cut short at byte %d: damage, want torn", n, pos, cut)
				}
				if !judge(t, append(bytes.Clone(rec[:cut]), make([]byte, len(rec)-cut+SectorSize)...), pos, framed) {
					t.Errorf("%d bytes at %d, cut short at byte %d in preallocated space: damage, want torn", n, pos, cut)
				}
			}
		}
	}
}

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
		if got := Torn(c.rec, c.pos, fixed(c.header, c.size)); got != c.torn {
			t.Errorf("%s: Torn = %v, want %v", c.name, got, c.torn)
		}
		file := append(make([]byte, c.pos), c.rec...)
		got, err := TornAt(bytes.NewReader(file), c.pos, int64(len(file)), fixed(c.header, c.size))
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
	if torn, err := TornAt(bytes.NewReader(file), pos, int64(len(file)), fixed(60, uint64(len(rec)))); err != nil || torn {
		t.Fatalf("a whole record: %v, %v", torn, err)
	}
	clear(file[130<<10 : 130<<10+SectorSize])
	if torn, err := TornAt(bytes.NewReader(file), pos, int64(len(file)), fixed(60, uint64(len(rec)))); err != nil || !torn {
		t.Fatalf("a record with an unwritten sector at 130 KiB: %v, %v", torn, err)
	}
}

// FuzzTorn: any bytes, position and claimed size — never a panic, and
// Torn and TornAt (which reads in pieces) always agree, for a format that
// states a fixed size and for one whose records are read from their
// bytes and checked whole.
func FuzzTorn(f *testing.F) {
	f.Add(filled(100), int64(100), 8, uint64(100))
	f.Add(make([]byte, 40), int64(509), 8, uint64(0))
	f.Add(append(filled(600), make([]byte, 600)...), int64(30), 60, uint64(1000))
	f.Fuzz(func(t *testing.T, rec []byte, pos int64, header int, size uint64) {
		if pos < 0 || pos > 1<<40 || header < 0 || header > 64 {
			t.Skip()
		}
		for _, f := range []Format{fixed(header, size), framed} {
			got := Torn(bytes.Clone(rec), pos, f)
			file := append(make([]byte, pos%4096), rec...)
			at, err := TornAt(bytes.NewReader(file), pos%4096, int64(len(file)), f)
			if err != nil {
				t.Fatal(err)
			}
			// The file is shorter, but pos%4096 lies at the same place in
			// its sector as pos.
			if at != got {
				t.Fatalf("Torn = %v, TornAt = %v", got, at)
			}
		}
	})
}
