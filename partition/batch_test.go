package partition_test

import (
	"errors"
	"testing"

	"github.com/parkway-io/parkway/partition"
)

func TestBatchRoundTrip(t *testing.T) {
	in := []partition.Message{
		{ID: [16]byte{1}, Timestamp: 42, Payload: []byte("a")},
		{Headers: []partition.Header{{Key: "k", Value: []byte("v")}}, Payload: []byte("bb")},
	}
	b, err := partition.EncodeBatch(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := partition.DecodeBatch(b)
	if err != nil || len(out) != 2 || string(out[1].Payload) != "bb" || out[0].Timestamp != 42 ||
		out[0].ID != in[0].ID || string(out[1].Headers[0].Value) != "v" {
		t.Fatalf("round trip: %+v %v", out, err)
	}
	b[len(b)-1] ^= 1
	if _, err := partition.DecodeBatch(b); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("flipped byte: %v", err)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	b, _ := partition.EncodeBatch(nil, []partition.Message{{Payload: []byte("seed")}})
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = partition.DecodeBatch(data)
	})
}

// AppendDecodedBatch appends after what dst holds, without allocating
// when dst has room, and leaves dst as it was when the batch is damaged,
// trailing bytes included.
func TestAppendDecodedBatch(t *testing.T) {
	b, err := partition.EncodeBatch(nil, []partition.Message{{Payload: []byte("a")}, {Payload: []byte("bb")}})
	if err != nil {
		t.Fatal(err)
	}
	dst := append(make([]partition.Message, 0, 8), partition.Message{Payload: []byte("kept")})
	out, err := partition.AppendDecodedBatch(dst, b)
	if err != nil || len(out) != 3 || string(out[0].Payload) != "kept" || string(out[1].Payload) != "a" || string(out[2].Payload) != "bb" {
		t.Fatalf("append: %+v %v", out, err)
	}
	if n := testing.AllocsPerRun(10, func() { _, _ = partition.AppendDecodedBatch(dst, b) }); n != 0 {
		t.Fatalf("%v allocations appending into room", n)
	}
	for _, bad := range [][]byte{append(b[:len(b):len(b)], 1), b[:len(b)-1]} {
		got, err := partition.AppendDecodedBatch(dst, bad)
		if !errors.Is(err, partition.ErrCorrupt) || len(got) != 1 || string(got[0].Payload) != "kept" {
			t.Fatalf("damaged batch: %+v %v", got, err)
		}
	}
}
