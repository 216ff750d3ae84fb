package partition

import (
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
	stored := []Stored{{NS: ns2}, {NS: ns1}}
	f.Add(encodeManifest(nil, nil))
	f.Add(encodeManifest(stored, map[metadata.Namespace]uint64{ns1: 5, ns2: 9}))
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
		// Re-encode in namespace order, as RecordPartitions lists.
		var st []Stored
		for _, ns := range slices.Sorted(maps.Keys(m)) {
			st = append(st, Stored{NS: ns})
		}
		if got := encodeManifest(st, m); string(got) != string(b) {
			m2, err := decodeManifest(got)
			if err != nil || !maps.Equal(m, m2) {
				t.Fatalf("%x decoded to %v, which encodes to %x (%v)", b, m, got, err)
			}
		}
	})
}

// TestDecodeManifestRefuses: a count the bytes do not hold is refused
// before anything is allocated for it, and every kind of bad manifest is
// a *CorruptError at the right byte.
func TestDecodeManifestRefuses(t *testing.T) {
	ns, _ := metadata.NewNamespace(1, 2, 3)
	good := encodeManifest([]Stored{{NS: ns}}, map[metadata.Namespace]uint64{ns: 4})
	if m, err := decodeManifest(good); err != nil || m[ns] != 4 || len(m) != 1 {
		t.Fatalf("good manifest: %v, %v", m, err)
	}
	huge := append([]byte(nil), good[:5]...)
	huge = append(huge, 0xff, 0xff, 0xff, 0xff)
	for name, c := range map[string]struct {
		b   []byte
		off int64
	}{
		"short":    {good[:8], 0},
		"magic":    {append([]byte("XWPM"), good[4:]...), 0},
		"version":  {append(append([]byte(nil), good[:4]...), append([]byte{2}, good[5:]...)...), 4},
		"checksum": {append(append([]byte(nil), good[:len(good)-1]...), good[len(good)-1]^1), int64(len(good) - 4)},
		"count":    {encodeRaw(huge), 5},
	} {
		_, err := decodeManifest(c.b)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Offset != c.off {
			t.Errorf("%s: %v, want a *CorruptError at byte %d", name, err, c.off)
		}
	}
}

// encodeRaw appends the checksum to a manifest body.
func encodeRaw(body []byte) []byte {
	b := append([]byte(nil), body...)
	return appendCRC(b)
}
