package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/parkway-io/parkway"
)

// encodedBatch is a parkway.Encoded of n messages whose payloads name
// their index ("<tag>/<i>", padded with dots), each of size bytes, timestamped from ts.
type encodedBatch struct {
	tag     string
	n       int
	ts      int64
	size    int
	decodes int
}

func (b *encodedBatch) Len() int                           { return b.n }
func (b *encodedBatch) Size() int64                        { return int64(b.n * b.size) }
func (b *encodedBatch) MessageSizes() (largest, total int) { return b.size, b.n * b.size }
func (b *encodedBatch) MaxTimestamp() int64                { return b.ts + int64(b.n) - 1 }

func (b *encodedBatch) Decode() ([]parkway.Message, error) {
	b.decodes++
	msgs := make([]parkway.Message, b.n)
	for i := range msgs {
		msgs[i].Timestamp = b.ts + int64(i)
		msgs[i].Payload = fmt.Appendf(nil, "%s/%d", b.tag, i)
		for len(msgs[i].Payload) < b.size {
			msgs[i].Payload = append(msgs[i].Payload, '.') // the size it claims
		}
	}
	return msgs, nil
}

// TestProduceAsyncEncoded: a node in memory (not clustered) keeps an
// encoded batch as it is — a Poll decodes it once, PollEncoded hands it
// back whole from any offset inside it, a native produce after it gets
// the next offsets — and checks its count and sizes against the node's
// limits; a node on disk decodes it and stores its messages, and its
// PollEncoded answers messages.
func TestProduceAsyncEncoded(t *testing.T) {
	ctx := context.Background()
	for _, disk := range []bool{false, true} {
		t.Run(fmt.Sprintf("disk=%v", disk), func(t *testing.T) {
			cfg := parkway.Config{Shards: 1, MaxBatchMessages: 10, MaxMessageSize: 100}
			if disk {
				cfg.DataDir = t.TempDir()
			}
			n, err := parkway.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if n.KeepsEncoded() == disk {
				t.Fatalf("KeepsEncoded = %v on disk=%v", n.KeepsEncoded(), disk)
			}
			st, err := n.Admin().CreateStream(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			tp, err := n.Admin().CreateTopic(ctx, st, "t", 1)
			if err != nil {
				t.Fatal(err)
			}
			to := parkway.PartitionID(0)
			if _, err := n.Produce(ctx, tp, to, parkway.Message{Payload: []byte("n0")}); err != nil {
				t.Fatal(err)
			}
			a := &encodedBatch{tag: "a", n: 3, ts: 1000, size: 10}
			ack, err := n.ProduceAsyncEncoded(ctx, tp, to, parkway.ProducerSeq{}, a).Wait(ctx)
			if err != nil || ack.FirstOffset != 1 || ack.Count != 3 || ack.Kept != !disk {
				t.Fatalf("encoded produce: %+v, %v; want offset 1, count 3, kept %v", ack, err, !disk)
			}
			if _, err := n.Produce(ctx, tp, to, parkway.Message{Payload: []byte("n4")}); err != nil {
				t.Fatal(err)
			}
			for _, bad := range []*encodedBatch{{n: 11, size: 1}, {n: 1, size: 101}, {n: 0}} {
				_, err := n.ProduceAsyncEncoded(ctx, tp, to, parkway.ProducerSeq{}, bad).Wait(ctx)
				if !errors.Is(err, parkway.ErrBatchTooLarge) && !errors.Is(err, parkway.ErrMessageTooLarge) && !errors.Is(err, parkway.ErrEmptyBatch) && !errors.Is(err, parkway.ErrInvalidArgument) {
					t.Fatalf("a batch of %d messages of %d bytes: %v, want it refused", bad.n, bad.size, err)
				}
			}
			if _, err := n.ProduceAsyncEncoded(ctx, tp, parkway.Key([]byte("k")), parkway.ProducerSeq{}, a).Wait(ctx); !errors.Is(err, parkway.ErrInvalidArgument) {
				t.Fatalf("an encoded batch partitioned by key: %v, want ErrInvalidArgument", err)
			}

			var got []string
			for from := uint64(0); from < 5; {
				b, err := n.Poll(ctx, tp, 0, parkway.AtOffset(from), 100)
				if err != nil || len(b.Messages) == 0 {
					t.Fatalf("poll at %d: %d messages, %v", from, len(b.Messages), err)
				}
				for i, m := range b.Messages {
					if m.Offset != from+uint64(i) {
						t.Fatalf("message at %d has offset %d", from+uint64(i), m.Offset)
					}
					got = append(got, strings.TrimRight(string(m.Payload), "."))
				}
				from = b.Next
			}
			if fmt.Sprint(got) != "[n0 a/0 a/1 a/2 n4]" {
				t.Fatalf("polled %q", got)
			}
			b, err := n.PollEncoded(ctx, tp, 0, parkway.AtOffset(2), 100)
			switch {
			case err != nil:
				t.Fatal(err)
			case !disk && (b.Encoded != a || b.EncodedBase != 1 || b.Next != 4 || len(b.Messages) != 0):
				t.Fatalf("PollEncoded at 2: %v from %d, next %d, %d messages; want the batch from 1, next 4", b.Encoded, b.EncodedBase, b.Next, len(b.Messages))
			case disk && (b.Encoded != nil || len(b.Messages) == 0 || !strings.HasPrefix(string(b.Messages[0].Payload), "a/1.")):
				t.Fatalf("PollEncoded at 2 on disk: %v, %d messages; want messages from a/1", b.Encoded, len(b.Messages))
			}
			if b, err := n.PollEncoded(ctx, tp, 0, parkway.AtOffset(4), 100); err != nil || b.Encoded != nil || len(b.Messages) != 1 {
				t.Fatalf("PollEncoded of a native message: %v, %d messages, %v", b.Encoded, len(b.Messages), err)
			}
			if a.decodes != 1 {
				t.Fatalf("decoded %d times, want once", a.decodes)
			}
		})
	}
}
