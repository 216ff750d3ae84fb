package replica

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/vfs"
)

// markRecord is the 32 bytes of a slot's record.
const markRecord = syncmark.Header + markPayload + 4

// encodeMark is m's slot record.
func encodeMark(seq uint64, m mark) []byte {
	return markFormat.AppendSlot(nil, syncmark.Mark[mark]{Seq: seq, V: m})
}

// FuzzDecodeMark: the mark's decoder never panics and never reads past
// its bounds, whatever the mark file holds; a slot it accepts encodes
// back to the same bytes, and it picks the valid slot with the higher
// sequence.
func FuzzDecodeMark(f *testing.F) {
	two := make([]byte, markFormat.Size)
	copy(two, encodeMark(3, mark{gen: 1, size: 90}))
	copy(two[markStride:], encodeMark(4, mark{gen: 1, size: 120}))
	f.Add(two)
	f.Add(two[:markRecord])
	f.Add(two[:markFormat.Size-1])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := markFormat.Decode(b)
		if err != nil {
			return
		}
		enc := encodeMark(m.Seq, m.V)
		if !bytes.Equal(enc, b[:min(len(b), markRecord)]) && (len(b) < markFormat.Size || !bytes.Equal(enc, b[markStride:markStride+markRecord])) {
			t.Fatalf("decoded %+v from no slot of the input", m)
		}
		for _, at := range []int{0, markStride} {
			if at < len(b) {
				if o, _, ok := markFormat.DecodeSlot(b[at:min(len(b), at+markStride)]); ok && o.Seq > m.Seq {
					t.Fatalf("decoded slot seq %d, but slot at %d has seq %d", m.Seq, at, o.Seq)
				}
			}
		}
	})
}

// A mark file written before the slot format moved to package syncmark
// (golden bytes: the records the earlier encoder wrote) reads back the
// same, and the encoder writes those bytes still.
func TestMarkGoldenBytes(t *testing.T) {
	slot0, _ := hex.DecodeString("5057534d05000000000000000200000000000000001000000000000004b958c5")
	slot1, _ := hex.DecodeString("5057534d060000000000000003000000000000007b00000000000000935b3a6a")
	b := make([]byte, markStride+32)
	copy(b, slot0)
	copy(b[markStride:], slot1)
	if got := encodeMark(5, mark{gen: 2, size: 4096}); !bytes.Equal(got, slot0) {
		t.Fatalf("slot 0 encodes to %x, the earlier encoder wrote %x", got, slot0)
	}
	if got := encodeMark(6, mark{gen: 3, size: 123}); !bytes.Equal(got, slot1) {
		t.Fatalf("slot 1 encodes to %x, the earlier encoder wrote %x", got, slot1)
	}
	mem := vfs.NewMem()
	if err := vfs.WriteFileAtomic(mem, MarkName("/raft.log"), b); err != nil {
		t.Fatal(err)
	}
	m, found, slack, err := readMark(mem, "/raft.log")
	if err != nil || !found || slack != "" {
		t.Fatalf("read: found %v, slack %q, %v", found, slack, err)
	}
	if m.Seq != 6 || m.V != (mark{gen: 3, size: 123}) {
		t.Fatalf("read %+v, want seq 6 gen 3 size 123", m)
	}
	// The older slot wins once the newer one is torn.
	b[markStride+20] ^= 1
	if m, err := markFormat.Decode(b); err != nil || m.Seq != 5 || m.V != (mark{gen: 2, size: 4096}) {
		t.Fatalf("slot 1 torn: %+v, %v; want slot 0's seq 5", m, err)
	}
	if s := markFormat.Slack(b); s != "the slot at byte 512 fails its checksum" {
		t.Fatalf("slack %q", s)
	}
}
