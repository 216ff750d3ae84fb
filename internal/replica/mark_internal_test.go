package replica

import (
	"bytes"
	"testing"
)

// FuzzDecodeMark: decodeMark never panics and never reads past its
// bounds, whatever the mark file holds; a slot it accepts encodes back to
// the same bytes, and it picks the valid slot with the higher sequence.
func FuzzDecodeMark(f *testing.F) {
	two := make([]byte, markStride+markSize)
	copy(two, mark{seq: 3, gen: 1, size: 90}.encode())
	copy(two[markStride:], mark{seq: 4, gen: 1, size: 120}.encode())
	f.Add(two)
	f.Add(two[:markSize])
	f.Add(two[:markStride+markSize-1])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMark(b)
		if err != nil {
			return
		}
		enc := m.encode()
		if !bytes.Equal(enc, b[:markSize]) && (len(b) < markStride+markSize || !bytes.Equal(enc, b[markStride:markStride+markSize])) {
			t.Fatalf("decoded %+v from no slot of the input", m)
		}
		for _, at := range []int{0, markStride} {
			if at < len(b) {
				if o, ok := decodeSlot(b[at:]); ok && o.seq > m.seq {
					t.Fatalf("decoded slot seq %d, but slot at %d has seq %d", m.seq, at, o.seq)
				}
			}
		}
	})
}
