package partition

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"reflect"
	"testing"
)

func sampleMessages() []Message {
	return []Message{
		{ID: [16]byte{1, 2, 3}, Timestamp: 1_700_000_000_000_000, AppendTime: 1_700_000_000_000_007, Key: []byte("user-42"), Payload: []byte("hello")},
		{Timestamp: -5, Headers: []Header{{Key: "k", Value: []byte("v")}, {Key: "", Value: nil}, {Key: "empty"}}},
		{ID: [16]byte{15: 0xff}, Payload: bytes.Repeat([]byte{0xab}, 300), Headers: []Header{{Key: "trace", Value: []byte{0, 1, 2}}}},
		{},
	}
}

func encodeAll(msgs []Message, first uint64) []byte {
	var b []byte
	for i := range msgs {
		b = appendRecord(b, &msgs[i], first+uint64(i), msgs[i].AppendTime)
	}
	return b
}

func TestCodecRoundTrip(t *testing.T) {
	msgs := sampleMessages()
	b := encodeAll(msgs, 40)
	var want int
	for i := range msgs {
		n, ok := recordSize(&msgs[i])
		if !ok {
			t.Fatal("recordSize not ok")
		}
		want += n
	}
	if len(b) != want {
		t.Fatalf("encoded %d bytes, recordSize sums to %d", len(b), want)
	}
	got, n, err := decodeRecords(b, "x", 0)
	if err != nil || n != len(b) {
		t.Fatalf("decodeRecords: n=%d err=%v", n, err)
	}
	for i := range msgs {
		w := msgs[i]
		w.Offset = 40 + uint64(i)
		// Empty values decode as nil.
		for j := range w.Headers {
			if len(w.Headers[j].Value) == 0 {
				w.Headers[j].Value = nil
			}
		}
		if !reflect.DeepEqual(got[i], w) {
			t.Errorf("message %d: got %+v, want %+v", i, got[i], w)
		}
	}
	// Decoded slices are capped: appending must not clobber the buffer.
	before := bytes.Clone(b)
	_ = append(got[0].Payload, 'x', 'y', 'z')
	_ = append(got[2].Headers[0].Value, 'x')
	if !bytes.Equal(b, before) {
		t.Fatal("appending to a decoded slice modified the input")
	}
}

func TestCodecEndOfData(t *testing.T) {
	b := encodeAll(sampleMessages()[:2], 0)
	rec0, _ := recordSize(&sampleMessages()[0])
	withZeros := append(bytes.Clone(b), make([]byte, 100)...)
	got, n, err := decodeRecords(withZeros, "x", 0)
	if err != nil || n != len(b) || len(got) != 2 {
		t.Fatalf("zero tail: got %d msgs, n=%d, err=%v", len(got), n, err)
	}
	for _, z := range [][]byte{nil, {}, make([]byte, 10), make([]byte, recordHeaderSize)} {
		if _, _, err := decodeRecord(z, "x", 0); err != io.EOF {
			t.Errorf("decodeRecord(%d zero bytes) = %v, want io.EOF", len(z), err)
		}
	}
	// A short tail of zeros after whole records is also the end.
	if _, n, err := decodeRecords(append(b[:rec0:rec0], 0, 0, 0), "x", 0); err != nil || n != rec0 {
		t.Fatalf("short zero tail: n=%d err=%v", n, err)
	}
}

func TestCodecCorruption(t *testing.T) {
	b := encodeAll(sampleMessages(), 0)
	rec0, _ := recordSize(&sampleMessages()[0])
	cases := map[string]func([]byte) []byte{
		"torn":          func(b []byte) []byte { return b[:rec0+recordHeaderSize+2] },
		"torn header":   func(b []byte) []byte { return b[:rec0+20] },
		"bit flip":      func(b []byte) []byte { b[rec0+recordHeaderSize+2] ^= 1; return b },
		"zero length":   func(b []byte) []byte { copy(b[rec0+4:], []byte{0, 0, 0, 0}); return b },
		"length skew":   func(b []byte) []byte { b[rec0+4]++; return b },
		"checksum only": func(b []byte) []byte { b[rec0]++; return b },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			got, n, err := decodeRecords(mutate(bytes.Clone(b)), "seg.log", 1000)
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want *CorruptError", err)
			}
			if ce.Path != "seg.log" || ce.Offset != 1000+int64(rec0) {
				t.Errorf("error at %s:%d, want seg.log:%d", ce.Path, ce.Offset, 1000+rec0)
			}
			if len(got) != 1 || n != rec0 {
				t.Errorf("decoded %d msgs (%d bytes) before the damage, want 1 (%d)", len(got), n, rec0)
			}
		})
	}
}

func TestCorruptErrorIs(t *testing.T) {
	err := error(&CorruptError{Path: "p", Offset: 7, Err: errors.New("bad")})
	if !errors.Is(err, ErrCorrupt) || errors.Unwrap(err) != ErrCorrupt {
		t.Fatal("CorruptError does not unwrap to ErrCorrupt")
	}
	if errors.Is(err, ErrClosed) {
		t.Fatal("CorruptError matches ErrClosed")
	}
}

func TestConsumerFileName(t *testing.T) {
	for name, want := range map[string]string{
		"group-1_a.b": "group-1_a.b",
		".":           "%2E",
		"..":          "%2E.",
		"a/b":         "a%2Fb",
		"~x":          "%7Ex",
	} {
		if got := consumerFileName(name); got != want {
			t.Errorf("consumerFileName(%q) = %q, want %q", name, got, want)
		}
	}
	long := string(bytes.Repeat([]byte{'/'}, 100))
	for _, name := range []string{"", long} {
		if got := consumerFileName(name); got[0] != '~' || len(got) != 65 {
			t.Errorf("consumerFileName(%q) = %q, want a hashed name", name, got)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to the decoder: it must never panic or
// over-read, must classify every failure, and whatever it accepts must
// re-encode to exactly the bytes it consumed.
func FuzzDecode(f *testing.F) {
	f.Add(encodeAll(sampleMessages(), 0))
	f.Add(encodeAll(sampleMessages()[:1], 1<<40)[:30])
	f.Add(make([]byte, recordHeaderSize+5))
	f.Add([]byte{1, 2, 3, 4, 48, 0, 0, 0})
	corrupt := encodeAll(sampleMessages()[1:2], 9)
	corrupt[recordHeaderSize] ^= 0x80
	f.Add(corrupt)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, n, err := decodeRecord(b, "f", 0)
		switch {
		case err == nil:
			if n < recordHeaderSize || n > len(b) {
				t.Fatalf("decodeRecord consumed %d of %d bytes", n, len(b))
			}
			if re := reencode(nil, &m, b); !bytes.Equal(re, b[:n]) {
				t.Fatalf("re-encoding differs:\n got %x\nwant %x", re, b[:n])
			}
		case err == io.EOF, err == errIncomplete, errors.Is(err, ErrCorrupt):
		default:
			t.Fatalf("unexpected error %v", err)
		}
		msgs, used, err := decodeRecords(b, "f", 0)
		if used < 0 || used > len(b) {
			t.Fatalf("decodeRecords used %d of %d", used, len(b))
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeRecords error %v is not ErrCorrupt", err)
		}
		var again []byte
		for i := range msgs {
			again = reencode(again, &msgs[i], b[len(again):])
		}
		if !bytes.Equal(again, b[:used]) {
			t.Fatalf("decodeRecords output does not re-encode to the %d bytes it used", used)
		}
	})
}

// reencode appends m's record in the format of the record at the start of
// orig (the one m was decoded from).
func reencode(dst []byte, m *Message, orig []byte) []byte {
	if _, size := recordLength(orig); size == recordHeaderSizeV1 {
		return appendRecordV1(dst, m, m.Offset)
	}
	return appendRecord(dst, m, m.Offset, m.AppendTime)
}

// appendRecordV1 appends m's record in format 1 (no key, no append time),
// as segments, raft logs and forwarded batches held it before format 2.
func appendRecordV1(dst []byte, m *Message, offset uint64) []byte {
	hl := headersSize(m.Headers)
	n := recordHeaderSizeV1 + int(hl) + len(m.Payload)
	start := len(dst)
	dst = append(dst, make([]byte, recordHeaderSizeV1)...)
	h := dst[start:]
	le.PutUint32(h[4:], uint32(n))
	le.PutUint64(h[8:], offset)
	copy(h[16:32], m.ID[:])
	le.PutUint64(h[32:], uint64(m.Timestamp))
	le.PutUint32(h[40:], uint32(hl))
	le.PutUint32(h[44:], uint32(len(m.Payload)))
	for i := range m.Headers {
		hd := &m.Headers[i]
		dst = le.AppendUint32(dst, uint32(len(hd.Key)))
		dst = append(dst, hd.Key...)
		dst = le.AppendUint32(dst, uint32(len(hd.Value)))
		dst = append(dst, hd.Value...)
	}
	dst = append(dst, m.Payload...)
	le.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst
}
