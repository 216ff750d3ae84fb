package transport

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	msgs := []Message{
		{From: 1, To: 2, Kind: 1, Group: 1 << 63, Payload: []byte("raft")},
		{From: ^NodeID(0), To: 3, Kind: 255, Group: 0},
		{From: 5, To: 6, Kind: 2, Group: 9, Payload: bytes.Repeat([]byte{7}, 1000)},
	}
	var buf bytes.Buffer
	var h [frameOverhead]byte
	for i := range msgs {
		if err := writeFrame(&buf, &h, &msgs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range msgs {
		got, err := readFrame(&buf, &h, DefaultMaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		if got.From != want.From || got.To != want.To || got.Kind != want.Kind ||
			got.Group != want.Group || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("got %+v want %+v", got, want)
		}
	}
	if _, err := readFrame(&buf, &h, DefaultMaxFrame); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

func TestFrameLimits(t *testing.T) {
	var h [frameOverhead]byte
	m := Message{From: 1, To: 2, Payload: make([]byte, 10)}
	enc := appendFrame(nil, &m)
	if _, err := readFrame(bytes.NewReader(enc), &h, headerLen+9); !errors.Is(err, errBadFrame) {
		t.Fatalf("over limit: %v", err)
	}
	if _, err := readFrame(bytes.NewReader(enc), &h, headerLen+10); err != nil {
		t.Fatalf("at limit: %v", err)
	}
	if _, err := readFrame(bytes.NewReader([]byte{0, 0, 0, headerLen - 1}), &h, DefaultMaxFrame); !errors.Is(err, errBadFrame) {
		t.Fatalf("short length: %v", err)
	}
	for cut := 1; cut < len(enc); cut++ {
		if _, err := readFrame(bytes.NewReader(enc[:cut]), &h, DefaultMaxFrame); err != io.ErrUnexpectedEOF {
			t.Fatalf("truncated at %d: %v", cut, err)
		}
	}
}

// FuzzReadFrame: the decoder never panics, never accepts a length outside
// its bounds, and every frame it accepts re-encodes to exactly the bytes it
// consumed.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, &Message{From: 1, To: 2, Kind: 1, Group: 3, Payload: []byte("hello")}))
	f.Add(appendFrame(appendFrame(nil, &Message{From: 1, To: 2}), &Message{From: 3, To: 4, Payload: []byte{0}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, headerLen, 1})
	const maxFrame = 1 << 12
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var h [frameOverhead]byte
		for {
			start := len(data) - r.Len()
			m, err := readFrame(r, &h, maxFrame)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, errBadFrame) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			consumed := data[start : len(data)-r.Len()]
			if len(consumed) > prefixLen+maxFrame {
				t.Fatalf("accepted %d bytes past the limit", len(consumed))
			}
			if enc := appendFrame(nil, &m); !bytes.Equal(enc, consumed) {
				t.Fatalf("re-encoding differs:\n got %x\nwant %x", enc, consumed)
			}
		}
	})
}
