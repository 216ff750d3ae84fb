package host

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
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
	f.Add(EncodeResponse(shard.Response{Offset: 5, Found: true, Start: 1, End: 9, Term: 3, InSync: []uint64{1, 2},
		Messages: []partition.Message{{Payload: []byte("m")}}}))
	f.Add(EncodeResponse(shard.Response{Err: &shard.NotLeaderError{Leader: 2}}))
	f.Add(EncodeResponse(shard.Response{Err: shard.ErrTooManyWaiters}))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeResponse(b)
	})
}

// FuzzDecodeRaftBatch feeds arbitrary bytes to the partition raft batch
// decoder: it must never panic, and what it accepts must be exactly its
// records, encoded again.
func FuzzDecodeRaftBatch(f *testing.F) {
	var seeds [][]byte
	b := newRaftBatcher(func(_ uint64, kind uint8, _ uint64, payload []byte) error {
		if kind == KindPartitionRaftBatch {
			seeds = append(seeds, append([]byte(nil), payload...))
		}
		return nil
	})
	for i := range uint64(3) {
		b.add(2, metadata.Namespace(i), i+1, &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)),
			From: new(uint64(1)), Term: new(uint64(4)), Entries: []*raftpb.Entry{{Index: new(i + 1), Data: []byte("entry")}}})
	}
	b.flush()
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		recs, err := decodeRaftBatch(in)
		if err != nil {
			return
		}
		again := binary.LittleEndian.AppendUint32(nil, uint32(len(recs)))
		for _, r := range recs {
			again = binary.LittleEndian.AppendUint64(again, uint64(r.ns))
			again = binary.LittleEndian.AppendUint64(again, r.epoch)
			again = binary.LittleEndian.AppendUint32(again, uint32(len(r.msg)))
			again = append(again, r.msg...)
		}
		if !bytes.Equal(again, in) {
			t.Fatalf("accepted %x, which re-encodes as %x", in, again)
		}
	})
}
