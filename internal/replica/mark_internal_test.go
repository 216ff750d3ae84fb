package replica

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/vfs"
)

// markRecordV1 is the 32 bytes of a version 1 slot's record.
const markRecordV1 = syncmark.Header + markPayloadV1 + 4

// markV1 is the mark file as version 1's writer wrote it.
var markV1 = syncmark.Format[mark]{
	Magic:  markMagicV1,
	Stride: markStride,
	Size:   markFormat.Older[0].Size,
	Codec:  markFormat.Older[0].Codec,
}

// encodeMark is m's slot record, version 2.
func encodeMark(seq uint64, m mark) []byte {
	return markFormat.AppendSlot(nil, syncmark.Mark[mark]{Seq: seq, V: m})
}

// encodeMarkV1 is m's slot record as a version 1 writer wrote it (no tag).
func encodeMarkV1(seq uint64, m mark) []byte {
	return markV1.AppendSlot(nil, syncmark.Mark[mark]{Seq: seq, V: m})
}

// testTag is a replicated partition's tag: incarnation 7, replica 2.
var testTag = string(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 7), 2))

// FuzzDecodeMark: the mark's decoder never panics and never reads past
// its bounds, whatever the mark file holds, of either version; a slot it
// accepts encodes back to the same bytes in its version, and it picks
// the valid slot with the higher sequence.
func FuzzDecodeMark(f *testing.F) {
	two := make([]byte, markFormat.Size)
	copy(two, encodeMark(3, mark{gen: 1, size: 90, tag: testTag}))
	copy(two[markStride:], encodeMark(4, mark{gen: 1, size: 120, tag: testTag}))
	f.Add(two)
	f.Add(two[:syncmark.Header+markFixed+len(testTag)+4])
	f.Add(two[:markFormat.Size-1])
	untagged := make([]byte, markFormat.Size)
	copy(untagged, encodeMark(1, mark{}))
	copy(untagged[markStride:], encodeMark(2, mark{size: 25}))
	f.Add(untagged)
	v1 := make([]byte, markV1.Size)
	copy(v1, encodeMarkV1(3, mark{gen: 1, size: 90}))
	copy(v1[markStride:], encodeMarkV1(4, mark{gen: 1, size: 120}))
	f.Add(v1)
	mixed := bytes.Clone(v1)
	copy(mixed[markStride:], encodeMark(4, mark{gen: 1, size: 120, tag: testTag})[:markRecordV1])
	f.Add(mixed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := markFormat.Decode(b)
		if err != nil {
			return
		}
		if len(m.V.tag) > MaxTag {
			t.Fatalf("decoded a tag of %d bytes", len(m.V.tag))
		}
		var enc []byte
		for _, at := range []int{0, markStride} {
			if at+4 > len(b) {
				continue
			}
			switch binary.LittleEndian.Uint32(b[at:]) {
			case markMagic:
				enc = encodeMark(m.Seq, m.V)
			case markMagicV1:
				if m.V.tag != "" {
					continue // not this slot: version 1 holds no tag
				}
				enc = encodeMarkV1(m.Seq, m.V)
			default:
				continue
			}
			if bytes.HasPrefix(b[at:min(len(b), at+len(enc))], enc) {
				break
			}
			enc = nil
		}
		if enc == nil {
			t.Fatalf("decoded %+v from no slot of the input", m)
		}
		for _, at := range []int{0, markStride} {
			if at < len(b) {
				end := markFormat.Size
				if at == 0 {
					end = markStride
				}
				if o, _, ok := markFormat.DecodeSlot(b[at:min(len(b), end)]); ok && o.Seq > m.Seq {
					t.Fatalf("decoded slot seq %d, but slot at %d has seq %d", m.Seq, at, o.Seq)
				}
			}
		}
	})
}

// A mark file of version 1, written before marks carried the tag (golden
// bytes: the records the earlier encoder wrote), reads back the same, as
// a mark naming no tag, and its size is no slack; version 1's encoder
// writes those bytes still.
func TestMarkGoldenBytesV1(t *testing.T) {
	slot0, _ := hex.DecodeString("5057534d05000000000000000200000000000000001000000000000004b958c5")
	slot1, _ := hex.DecodeString("5057534d060000000000000003000000000000007b00000000000000935b3a6a")
	b := make([]byte, markStride+32)
	copy(b, slot0)
	copy(b[markStride:], slot1)
	if got := encodeMarkV1(5, mark{gen: 2, size: 4096}); !bytes.Equal(got, slot0) {
		t.Fatalf("slot 0 encodes to %x, the earlier encoder wrote %x", got, slot0)
	}
	if got := encodeMarkV1(6, mark{gen: 3, size: 123}); !bytes.Equal(got, slot1) {
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

// Version 2's golden bytes: the tag's length, then the tag, after gen and
// size; a mark naming no tag has a zero length.
func TestMarkGoldenBytesV2(t *testing.T) {
	slot0, _ := hex.DecodeString("5057533205000000000000000200000000000000001000000000000010070000000000000002000000000000008b8ebe89")
	slot1, _ := hex.DecodeString("50575332060000000000000003000000000000007b0000000000000000d1027547")
	if got := encodeMark(5, mark{gen: 2, size: 4096, tag: testTag}); !bytes.Equal(got, slot0) {
		t.Fatalf("slot 0 encodes to %x, want %x", got, slot0)
	}
	if got := encodeMark(6, mark{gen: 3, size: 123}); !bytes.Equal(got, slot1) {
		t.Fatalf("slot 1 encodes to %x, want %x", got, slot1)
	}
	b := make([]byte, markFormat.Size)
	copy(b, slot0)
	copy(b[markStride:], slot1)
	mem := vfs.NewMem()
	if err := vfs.WriteFileAtomic(mem, MarkName("/raft.log"), b); err != nil {
		t.Fatal(err)
	}
	m, found, slack, err := readMark(mem, "/raft.log")
	if err != nil || !found || slack != "" || m.Seq != 6 || m.V != (mark{gen: 3, size: 123}) {
		t.Fatalf("read %+v found %v slack %q %v; want seq 6 gen 3 size 123, no tag", m, found, slack, err)
	}
	b[markStride+20] ^= 1
	if m, err := markFormat.Decode(b); err != nil || m.Seq != 5 || m.V != (mark{gen: 2, size: 4096, tag: testTag}) {
		t.Fatalf("slot 1 torn: %+v, %v; want slot 0's seq 5 with its tag", m, err)
	}
	// A tag length past MaxTag is no slot, whatever its checksum says.
	long := encodeMark(7, mark{tag: strings.Repeat("x", MaxTag+1)})
	if _, _, ok := markFormat.DecodeSlot(long); ok {
		t.Fatalf("a slot with a tag of %d bytes decoded", MaxTag+1)
	}
}

// A Disk that opens a log beside a version 1 mark writes the mark whole
// again as version 2, naming the log's tag, and the log's checks hold
// across the change: the mark still says how much was synced.
func TestMarkV1UpgradedOnOpen(t *testing.T) {
	mem := vfs.NewMem()
	d, err := OpenDisk(mem, "/g/raft.log", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetTag([]byte(testTag)); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	size := uint64(d.Size())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// As a version 1 writer left it: the size synced, no tag.
	b := make([]byte, markV1.Size)
	copy(b, encodeMarkV1(8, mark{size: size}))
	copy(b[markStride:], encodeMarkV1(7, mark{size: size}))
	if err := vfs.WriteFileAtomic(mem, MarkName("/g/raft.log"), b); err != nil {
		t.Fatal(err)
	}
	if tag, err := OwnerTag(mem, "/g/raft.log"); err != nil || string(tag) != testTag {
		t.Fatalf("OwnerTag beside a version 1 mark: %x, %v; want the log's own %x", tag, err, testTag)
	}
	d, err = OpenDisk(mem, "/g/raft.log", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := vfs.ReadFile(mem, MarkName("/g/raft.log"))
	if err != nil {
		t.Fatal(err)
	}
	m, found, slack, err := readMark(mem, "/g/raft.log")
	if err != nil || !found || slack != "" || len(raw) != markFormat.Size || m.Seq != 9 || m.V != (mark{size: size, tag: testTag}) {
		t.Fatalf("after the open: %d bytes, %+v found %v slack %q %v; want version 2, seq 9, size %d, the tag", len(raw), m, found, slack, err, size)
	}
}
