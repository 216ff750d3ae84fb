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
