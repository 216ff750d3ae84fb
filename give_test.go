package parkway_test

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/parkway-io/parkway"
)

// TestProduceAsyncGive: a batch given to a node without a DataDir is kept
// as the partition's messages (Ack.Kept; a poll returns the given bytes
// themselves), a lent one (ProduceAsync) is copied, and a node with a
// DataDir copies a given one too (Kept false: the caller may reuse it).
// A given slice is completed in place; a lent one is not written.
func TestProduceAsyncGive(t *testing.T) {
	for _, disk := range []bool{false, true} {
		t.Run(fmt.Sprintf("disk=%v", disk), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := parkway.Config{}
				if disk {
					cfg.DataDir = t.TempDir()
				}
				n := open(t, cfg)
				tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 1)
				ctx := ctxFor(t)
				given := []parkway.Message{{Key: []byte("k0"), Payload: []byte("given0"), Headers: []parkway.Header{{Key: "h", Value: []byte("v")}}}, {Payload: []byte("given1")}}
				lent := []parkway.Message{{Payload: []byte("lent0")}}
				ga, err := n.ProduceAsyncGive(ctx, tp, parkway.PartitionID(0), parkway.ProducerSeq{Producer: 7, Seq: 1}, given...).Wait(ctx)
				if err != nil || ga.FirstOffset != 0 || ga.Count != 2 || ga.Kept != !disk {
					t.Fatalf("given produce: %+v, %v; want offset 0, 2 messages, Kept %v", ga, err, !disk)
				}
				la, err := n.ProduceAsync(ctx, tp, parkway.PartitionID(0), lent...).Wait(ctx)
				if err != nil || la.FirstOffset != 2 || la.Kept {
					t.Fatalf("lent produce: %+v, %v; want offset 2, not kept", la, err)
				}
				got := readAll(t, n, tp, 0)
				if len(got) != 3 || string(got[0].Key) != "k0" || string(got[0].Payload) != "given0" || string(got[0].Headers[0].Value) != "v" ||
					string(got[1].Payload) != "given1" || string(got[2].Payload) != "lent0" {
					t.Fatalf("read back %+v", got)
				}
				if kept := &got[0].Payload[0] == &given[0].Payload[0]; kept != !disk {
					t.Fatalf("the given payload is the caller's: %v, want %v", kept, !disk)
				}
				if &got[2].Payload[0] == &lent[0].Payload[0] {
					t.Fatal("a lent payload was kept")
				}
				// The given slice was completed in place, the lent one
				// left as it was.
				if given[0].Timestamp == 0 || lent[0].Timestamp != 0 {
					t.Fatalf("timestamps after the produces: given %d (want set), lent %d (want 0)", given[0].Timestamp, lent[0].Timestamp)
				}
			})
		})
	}
}

// TestPollInMemoryAcrossChunks: an in-memory partition serves a poll up
// to the end of the chunk its start is in (its messages themselves), so
// a poll of more may return fewer; polling on from Next reads every
// message once, in order.
func TestPollInMemoryAcrossChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{})
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 1)
		ctx := ctxFor(t)
		batch := make([]parkway.Message, 1000)
		for first := 0; first < 3000; first += len(batch) {
			for i := range batch {
				batch[i] = parkway.Message{Payload: fmt.Appendf(nil, "m%d", first+i)}
			}
			if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), batch...); err != nil {
				t.Fatal(err)
			}
		}
		b, err := n.Poll(ctx, tp, 0, parkway.AtOffset(1000), 500)
		if err != nil || len(b.Messages) != 24 || b.Next != 1024 || b.End != 3000 {
			t.Fatalf("Poll(1000, 500) = %d messages, next %d, end %d, %v; want 24 up to the chunk's end", len(b.Messages), b.Next, b.End, err)
		}
		got := readAll(t, n, tp, 0)
		if len(got) != 3000 {
			t.Fatalf("read %d messages, want 3000", len(got))
		}
		for i := range got {
			if string(got[i].Payload) != fmt.Sprintf("m%d", i) {
				t.Fatalf("message %d is %q", i, got[i].Payload)
			}
		}
	})
}
