package partition

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/parkway-io/parkway/metadata"
)

// FuzzDecodeManifest feeds decodeManifest arbitrary bytes: it never
// panics, refuses with a *CorruptError whatever it does not accept, and
// what it accepts encodes back to the same bytes.
func FuzzDecodeManifest(f *testing.F) {
	ns1, _ := metadata.NewNamespace(1, 2, 3)
	ns2, _ := metadata.NewNamespace(7, 0, 0)
	f.Add(encodeManifest(Manifest{}))
	f.Add(encodeManifest(Manifest{JournalKnown: true}))
	f.Add(encodeManifest(Manifest{Partitions: map[metadata.Namespace]uint64{ns1: 5, ns2: 9}}))
	f.Add(encodeManifest(Manifest{Partitions: map[metadata.Namespace]uint64{ns1: 5, ns2: 9}, Journal: []uint64{3, 4}, JournalKnown: true}))
	f.Add(encodeManifest(Manifest{Partitions: map[metadata.Namespace]uint64{ns1: 5, ns2: 9}, Ends: map[metadata.Namespace]uint64{ns1: 40}, JournalKnown: true}))
	f.Add([]byte("PWPM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("%x: %v is not a *CorruptError", b, err)
			}
			return
		}
		if got := encodeManifest(m); string(got) != string(b) {
			m2, err := decodeManifest(got)
			if err != nil || !maps.Equal(m.Partitions, m2.Partitions) || !maps.Equal(m.Ends, m2.Ends) || !slices.Equal(m.Journal, m2.Journal) || m.JournalKnown != m2.JournalKnown {
				t.Fatalf("%x decoded to %+v, which encodes to %x (%v)", b, m, got, err)
			}
		}
	})
}

// TestDecodeManifestRefuses: a count the bytes do not hold is refused
// before anything is allocated for it, and every kind of bad manifest is
// a *CorruptError at the right byte.
func TestDecodeManifestRefuses(t *testing.T) {
	ns, _ := metadata.NewNamespace(1, 2, 3)
	good := encodeManifest(Manifest{Partitions: map[metadata.Namespace]uint64{ns: 4}, Journal: []uint64{7}, JournalKnown: true})
	if m, err := decodeManifest(good); err != nil || m.Partitions[ns] != 4 || len(m.Partitions) != 1 || !slices.Equal(m.Journal, []uint64{7}) {
		t.Fatalf("good manifest: %+v, %v", m, err)
	}
	withEnd := encodeManifest(Manifest{Partitions: map[metadata.Namespace]uint64{ns: 4}, Ends: map[metadata.Namespace]uint64{ns: 77}, JournalKnown: true})
	if m, err := decodeManifest(withEnd); err != nil || m.Ends[ns] != 77 || m.Partitions[ns] != 4 {
		t.Fatalf("manifest with a synced end: %+v, %v", m, err)
	}
	// Version 2, whose entries have no synced end, is still read.
	v2 := append(append([]byte(nil), good[:4]...), 2)
	v2 = append(v2, good[5:9]...)
	v2 = append(append(v2, u64(uint64(ns))...), u64(4)...)
	v2 = append(v2, good[9+manifestEntry:len(good)-4]...)
	if m, err := decodeManifest(encodeRaw(v2)); err != nil || m.Partitions[ns] != 4 || len(m.Ends) != 0 || !slices.Equal(m.Journal, []uint64{7}) {
		t.Fatalf("version 2 manifest: %+v, %v", m, err)
	}
	v1 := encodeManifest(Manifest{Partitions: map[metadata.Namespace]uint64{ns: 4}})
	if m, err := decodeManifest(v1); err != nil || m.Partitions[ns] != 4 || m.JournalKnown {
		t.Fatalf("version 1 manifest: %+v, %v", m, err)
	}
	huge := append([]byte(nil), good[:5]...)
	huge = append(huge, 0xff, 0xff, 0xff, 0xff)
	body := good[:len(good)-4]
	jcount := len(body) - 12 // the journal count's offset: before one file number
	hugeJournal := append(append([]byte(nil), body[:jcount]...), 0xff, 0xff, 0xff, 0xff)
	unordered := encodeRaw(append(append(append([]byte(nil), body[:jcount]...), 2, 0, 0, 0), append(u64(5), u64(5)...)...))
	for name, c := range map[string]struct {
		b   []byte
		off int64
	}{
		"short":         {good[:8], 0},
		"magic":         {append([]byte("XWPM"), good[4:]...), 0},
		"version":       {append(append([]byte(nil), good[:4]...), append([]byte{4}, good[5:]...)...), 4},
		"checksum":      {append(append([]byte(nil), good[:len(good)-1]...), good[len(good)-1]^1), int64(len(good) - 4)},
		"count":         {encodeRaw(huge), 5},
		"journal count": {encodeRaw(hugeJournal), int64(jcount)},
		"journal order": {unordered, int64(jcount + 12)},
	} {
		_, err := decodeManifest(c.b)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Offset != c.off {
			t.Errorf("%s: %v, want a *CorruptError at byte %d", name, err, c.off)
		}
	}
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// encodeRaw appends the checksum to a manifest body.
func encodeRaw(body []byte) []byte {
	b := append([]byte(nil), body...)
	return appendCRC(b)
}
