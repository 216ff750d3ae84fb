package host

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
)

// FuzzDecodeRequest feeds arbitrary bytes to the forwarded-request
// decoder: it must never panic, and what it accepts must encode again and
// decode to the same request.
func FuzzDecodeRequest(f *testing.F) {
	now := time.Unix(1000, 0)
	for _, r := range []*shard.Request{
		{Op: shard.OpProduce, NS: 1, Producer: 2, Seq: 3, Messages: []partition.Message{{Payload: []byte("x"), Key: []byte("k")}}},
		{Op: shard.OpPoll, NS: 7, Offset: 9, Count: 10, MaxWait: time.Second, MinCount: 2, MaxBytes: 64, Deadline: now.Add(time.Second)},
		{Op: shard.OpOffsets, NS: 7, Consumer: "c", FromLeader: true},
		{Op: shard.OpStoreOffset, NS: 7, Consumer: "c", Offset: 4, UseConsumer: true},
	} {
		b, err := EncodeRequest(r, now)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b, now)
		if err != nil {
			return
		}
		again, err := EncodeRequest(r, now)
		if err != nil {
			t.Fatalf("re-encoding an accepted request: %v", err)
		}
		r2, err := DecodeRequest(again, now)
		if err != nil || r2.Op != r.Op || r2.NS != r.NS || r2.Offset != r.Offset || len(r2.Messages) != len(r.Messages) {
			t.Fatalf("round trip changed the request: %+v vs %+v (%v)", r, r2, err)
		}
	})
}

// FuzzDecodeResponse feeds arbitrary bytes to the reply decoder: it must
// never panic.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(EncodeResponse(shard.Response{Offset: 5, Found: true, Start: 1, End: 9,
		Messages: []partition.Message{{Payload: []byte("m")}}}))
	f.Add(EncodeResponse(shard.Response{Err: &shard.NotLeaderError{Leader: 2}}))
	f.Add(EncodeResponse(shard.Response{Err: shard.ErrTooManyWaiters}))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeResponse(b)
	})
}
