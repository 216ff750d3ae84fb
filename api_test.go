package parkway_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/spaolacci/murmur3"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/metadata"
)

// TestPartitioningKey: Key(k) always picks murmur3(k) mod the partition
// count, so one key's messages all land in one partition and come back in
// the order they were produced.
func TestPartitioningKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parts = 4
		n := open(t, parkway.Config{Shards: 2})
		stream := mustStream(t, n, "s")
		topic := mustTopic(t, n, stream, "by-key", parts)

		keys := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
		partOf := map[string]uint32{}
		for round := range 5 {
			for _, k := range keys {
				ack := mustProduce(t, n, topic, parkway.Key([]byte(k)), fmt.Sprintf("%s-%d", k, round))
				if want := murmur3.Sum32([]byte(k)) % parts; ack.Partition != want {
					t.Fatalf("key %q went to partition %d, want murmur3 mod %d = %d", k, ack.Partition, parts, want)
				}
				if p, ok := partOf[k]; ok && p != ack.Partition {
					t.Fatalf("key %q went to partition %d, earlier to %d", k, ack.Partition, p)
				}
				partOf[k] = ack.Partition
			}
		}
		used := map[uint32]bool{}
		for _, p := range partOf {
			used[p] = true
		}
		if len(used) < 2 {
			t.Fatalf("all keys landed in partitions %v: the test does not exercise spreading", used)
		}

		// Each key's messages are in its partition only, in production order.
		for p := range uint32(parts) {
			next := map[string]int{}
			for _, m := range readAll(t, n, topic, p) {
				k, r, ok := strings.Cut(string(m.Payload), "-")
				if !ok || partOf[k] != p {
					t.Fatalf("partition %d holds %q, which belongs to partition %d", p, m.Payload, partOf[k])
				}
				if want := fmt.Sprint(next[k]); r != want {
					t.Fatalf("partition %d: key %q message %s out of order, want %s", p, k, r, want)
				}
				next[k]++
			}
			for k, c := range next {
				if c != 5 {
					t.Fatalf("partition %d holds %d messages of key %q, want 5", p, c, k)
				}
			}
		}
	})
}

// TestPartitioningBalancedAndByID: Balanced spreads produces over every
// partition; PartitionID addresses one, and an id past the topic's
// partitions is ErrPartitionNotFound with nothing appended.
func TestPartitioningBalancedAndByID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parts = 4
		n := open(t, parkway.Config{Shards: 2})
		stream := mustStream(t, n, "s")
		topic := mustTopic(t, n, stream, "balanced", parts)

		counts := make([]int, parts)
		for i := range 4 * parts {
			ack := mustProduce(t, n, topic, parkway.Balanced(), fmt.Sprint(i))
			counts[ack.Partition]++
		}
		for p, c := range counts {
			if c != 4 {
				t.Fatalf("Balanced sent %v messages to partitions 0..%d, want 4 each", counts, parts-1)
			}
			if got := len(readAll(t, n, topic, uint32(p))); got != c {
				t.Fatalf("partition %d holds %d messages, acks said %d", p, got, c)
			}
		}
		// The zero Partitioning is Balanced.
		ack := mustProduce(t, n, topic, parkway.Partitioning{}, "zero")
		if ack.Partition >= parts {
			t.Fatalf("zero Partitioning went to partition %d", ack.Partition)
		}

		ack = mustProduce(t, n, topic, parkway.PartitionID(2), "direct")
		if ack.Partition != 2 {
			t.Fatalf("PartitionID(2) acked for partition %d", ack.Partition)
		}
		for _, id := range []uint32{parts, parts + 1, metadata.MaxPartitionID, metadata.MaxPartitionID + 1, ^uint32(0)} {
			_, err := n.Produce(ctxFor(t), topic, parkway.PartitionID(id), parkway.Message{Payload: []byte("x")})
			// Ids that cannot even form a namespace are invalid arguments;
			// either way the partition does not exist.
			if !errors.Is(err, parkway.ErrPartitionNotFound) && !errors.Is(err, parkway.ErrInvalidArgument) {
				t.Fatalf("PartitionID(%d) of a %d-partition topic: %v, want ErrPartitionNotFound", id, parts, err)
			}
			if id < metadata.MaxPartitionID && !errors.Is(err, parkway.ErrPartitionNotFound) {
				t.Fatalf("PartitionID(%d) of a %d-partition topic: %v, want ErrPartitionNotFound", id, parts, err)
			}
		}
		total := 0
		for p := range uint32(parts) {
			total += len(readAll(t, n, topic, p))
		}
		if total != 4*parts+2 {
			t.Fatalf("%d messages in the topic, want %d: a refused produce appended", total, 4*parts+2)
		}
	})
}

// TestConsumerOffsets: a stored offset is read back, a poll at the consumer
// starts there (and does not move it), an unknown consumer has none (and
// polls from 0), and storing past the end is refused.
func TestConsumerOffsets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		stream := mustStream(t, n, "s")
		topic := mustTopic(t, n, stream, "t", 2)
		mustProduce(t, n, topic, parkway.PartitionID(0), "m0", "m1", "m2", "m3", "m4")

		off, ok, err := n.Admin().ConsumerOffset(ctx, topic, 0, "reader")
		if err != nil || ok || off != 0 {
			t.Fatalf("unknown consumer: %d, %v, %v; want 0, false, nil", off, ok, err)
		}
		b, err := n.Poll(ctx, topic, 0, parkway.AtConsumer("reader"), 10)
		if err != nil || len(b.Messages) != 5 || b.Messages[0].Offset != 0 || b.Next != 5 {
			t.Fatalf("poll at an unknown consumer: %v next %d, %v; want all 5 from 0", payloads(b.Messages), b.Next, err)
		}

		if err := n.Admin().StoreOffset(ctx, topic, 0, "reader", 3); err != nil {
			t.Fatal(err)
		}
		off, ok, err = n.Admin().ConsumerOffset(ctx, topic, 0, "reader")
		if err != nil || !ok || off != 3 {
			t.Fatalf("stored 3, read back %d, %v, %v", off, ok, err)
		}
		b, err = n.Poll(ctx, topic, 0, parkway.AtConsumer("reader"), 10)
		if err != nil || !slices.Equal(payloads(b.Messages), []string{"m3@3", "m4@4"}) || b.Next != 5 {
			t.Fatalf("poll at consumer stored at 3: %v next %d, %v; want m3@3 m4@4 next 5", payloads(b.Messages), b.Next, err)
		}
		b, err = n.Poll(ctx, topic, 0, parkway.AtConsumer("reader"), 1)
		if err != nil || !slices.Equal(payloads(b.Messages), []string{"m3@3"}) || b.Next != 4 {
			t.Fatalf("poll of 1 at consumer: %v next %d, %v", payloads(b.Messages), b.Next, err)
		}
		if off, _, _ := n.Admin().ConsumerOffset(ctx, topic, 0, "reader"); off != 3 {
			t.Fatalf("a poll moved the stored offset to %d", off)
		}

		// Offsets are per partition and per consumer.
		if _, ok, err := n.Admin().ConsumerOffset(ctx, topic, 1, "reader"); err != nil || ok {
			t.Fatalf("reader on partition 1: stored %v, %v; want none", ok, err)
		}
		if _, ok, err := n.Admin().ConsumerOffset(ctx, topic, 0, "other"); err != nil || ok {
			t.Fatalf("other consumer: stored %v, %v; want none", ok, err)
		}

		// Past the end is refused and leaves the stored offset alone; the end
		// itself and rewinding are fine.
		if err := n.Admin().StoreOffset(ctx, topic, 0, "reader", 6); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("storing past the end: %v, want ErrOffsetOutOfRange", err)
		}
		if err := n.Admin().StoreOffset(ctx, topic, 1, "reader", 1); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("storing past the end of an empty partition: %v, want ErrOffsetOutOfRange", err)
		}
		if off, _, _ := n.Admin().ConsumerOffset(ctx, topic, 0, "reader"); off != 3 {
			t.Fatalf("a refused store moved the offset to %d", off)
		}
		if err := n.Admin().StoreOffset(ctx, topic, 0, "reader", 5); err != nil {
			t.Fatalf("storing the end offset: %v", err)
		}
		b, err = n.Poll(ctx, topic, 0, parkway.AtConsumer("reader"), 10)
		if err != nil || len(b.Messages) != 0 || b.Next != 5 {
			t.Fatalf("poll at a consumer at the end: %v next %d, %v; want nothing, next 5", payloads(b.Messages), b.Next, err)
		}
		if err := n.Admin().StoreOffset(ctx, topic, 0, "reader", 0); err != nil {
			t.Fatalf("rewinding: %v", err)
		}
		if off, ok, _ := n.Admin().ConsumerOffset(ctx, topic, 0, "reader"); !ok || off != 0 {
			t.Fatalf("after rewinding: %d, %v", off, ok)
		}

		// A deleted offset is gone (a second delete is no error); a
		// poll at the consumer then starts by its reset policy.
		if err := n.Admin().StoreOffset(ctx, topic, 0, "reader", 4); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, false} {
			if found, err := n.Admin().DeleteConsumerOffset(ctx, topic, 0, "reader"); err != nil || found != want {
				t.Fatalf("DeleteConsumerOffset #%d: found %v, %v; want %v", i+1, found, err, want)
			}
		}
		if _, ok, err := n.Admin().ConsumerOffset(ctx, topic, 0, "reader"); err != nil || ok {
			t.Fatalf("after its delete: stored %v, %v", ok, err)
		}
		b, err = n.Poll(ctx, topic, 0, parkway.AtConsumer("reader"), 10)
		if err != nil || len(b.Messages) != 5 || b.Messages[0].Offset != 0 {
			t.Fatalf("poll at a deleted consumer: %v, %v; want all 5 from 0", payloads(b.Messages), err)
		}

		// DeleteConsumer removes the consumer's offsets in every
		// partition of the stream, and no one else's.
		other := mustTopic(t, n, stream, "u", 1)
		for _, at := range []struct {
			t parkway.Topic
			p uint32
		}{{topic, 0}, {topic, 1}, {other, 0}} {
			if err := n.Admin().StoreOffset(ctx, at.t, at.p, "reader", 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.Admin().StoreOffset(ctx, other, 0, "keep", 0); err != nil {
			t.Fatal(err)
		}
		if removed, err := n.Admin().DeleteConsumer(ctx, stream, "reader"); err != nil || removed != 3 {
			t.Fatalf("DeleteConsumer: removed %d, %v; want 3", removed, err)
		}
		if _, ok, err := n.Admin().ConsumerOffset(ctx, other, 0, "reader"); err != nil || ok {
			t.Fatalf("after DeleteConsumer: stored %v, %v", ok, err)
		}
		if _, ok, err := n.Admin().ConsumerOffset(ctx, other, 0, "keep"); err != nil || !ok {
			t.Fatalf("another consumer after DeleteConsumer: stored %v, %v", ok, err)
		}
	})
}

// TestFileBackedNode runs produce, poll and consumer offsets end to end on
// a node that stores partitions on disk, with small segments so the log
// rolls over, and checks the reference layout on disk.
func TestFileBackedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		n := open(t, parkway.Config{DataDir: dir, Shards: 2, SegmentSize: parkway.MinSegmentSize})
		ctx := ctxFor(t)
		stream := mustStream(t, n, "files")
		big := mustTopic(t, n, stream, "big", 1)     // namespace 0/0/0, shard 1
		small := mustTopic(t, n, stream, "small", 2) // 0/1/0 and 0/1/1

		payload := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 64<<10+i) }
		const total = 40 // 40 × ~64 KiB: about 2.5 segments of 1 MiB
		for i := 0; i < total; i += 8 {
			batch := make([]parkway.Message, 8)
			for j := range batch {
				batch[j] = parkway.Message{
					ID:      [16]byte{byte(i + j), 0xfe},
					Payload: payload(i + j),
					Headers: []parkway.Header{{Key: "seq", Value: []byte(fmt.Sprint(i + j))}, {Key: "empty"}},
				}
			}
			ack, err := n.Produce(ctx, big, parkway.PartitionID(0), batch...)
			if err != nil || ack.FirstOffset != uint64(i) {
				t.Fatalf("batch at %d: %+v, %v", i, ack, err)
			}
		}
		mustProduce(t, n, small, parkway.PartitionID(1), "x", "y")

		got := readAll(t, n, big, 0)
		if len(got) != total {
			t.Fatalf("read %d messages, want %d", len(got), total)
		}
		for i, m := range got {
			if !bytes.Equal(m.Payload, payload(i)) {
				t.Fatalf("message %d: payload of %d bytes differs", i, len(m.Payload))
			}
			if m.ID != [16]byte{byte(i), 0xfe} {
				t.Fatalf("message %d: id %x", i, m.ID)
			}
			if len(m.Headers) != 2 || m.Headers[0].Key != "seq" || string(m.Headers[0].Value) != fmt.Sprint(i) ||
				m.Headers[1].Key != "empty" || len(m.Headers[1].Value) != 0 {
				t.Fatalf("message %d: headers %+v", i, m.Headers)
			}
			if m.Timestamp == 0 {
				t.Fatalf("message %d: no timestamp", i)
			}
		}
		expectLog(t, n, small, 1, "x", "y")
		expectLog(t, n, small, 0)

		if err := n.Admin().StoreOffset(ctx, big, 0, "reader", 17); err != nil {
			t.Fatal(err)
		}
		b, err := n.Poll(ctx, big, 0, parkway.AtConsumer("reader"), 2)
		if err != nil || len(b.Messages) != 2 || b.Messages[0].Offset != 17 || !bytes.Equal(b.Messages[1].Payload, payload(18)) {
			t.Fatalf("poll at consumer: %d messages, %v", len(b.Messages), err)
		}

		// The reference layout: <dir>/streams/<s>/topics/<t>/partitions/<p>/,
		// 20-digit segment names, offsets directories.
		pdir := filepath.Join(dir, "streams", "0", "topics", "0", "partitions", "0")
		logs, err := filepath.Glob(filepath.Join(pdir, "*.log"))
		if err != nil || len(logs) < 2 {
			t.Fatalf("segments in %s: %v, %v; want the log rolled over into several", pdir, logs, err)
		}
		if first := filepath.Base(logs[0]); first != "00000000000000000000.log" {
			t.Fatalf("first segment %q", first)
		}
		for _, sub := range []string{"offsets/consumers", "offsets/groups"} {
			if fi, err := os.Stat(filepath.Join(pdir, sub)); err != nil || !fi.IsDir() {
				t.Fatalf("%s: %v", sub, err)
			}
		}

		// Delete and recreate on disk: only the new incarnation is served.
		if err := n.Admin().DeleteTopic(ctx, big); err != nil {
			t.Fatal(err)
		}
		id := mustTopic(t, n, stream, "big", 1)
		if id.ID != big.ID || id == big {
			t.Fatalf("recreated topic %v, want id %d in a new incarnation", id, big.ID)
		}
		big = id
		if ack := mustProduce(t, n, big, parkway.PartitionID(0), "reborn"); ack.FirstOffset != 0 {
			t.Fatalf("recreated topic acked at %d, want 0", ack.FirstOffset)
		}
		expectLog(t, n, big, 0, "reborn")
		if _, ok, err := n.Admin().ConsumerOffset(ctx, big, 0, "reader"); err != nil || ok {
			t.Fatalf("the dead incarnation's consumer offset survived: %v, %v", ok, err)
		}
	})
}

// ProduceAsync pipelines: many produces are started before any is waited
// for, each is acknowledged at its own offset, in the order started, and
// bad input is reported by Wait without costing the others.
func TestProduceAsyncPipelines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2, InboxSize: 8})
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1)
		ctx := ctxFor(t)
		var pending []*parkway.PendingAck
		for i := range 100 {
			pending = append(pending, n.ProduceAsync(ctx, tp, parkway.PartitionID(0),
				parkway.Message{Payload: fmt.Appendf(nil, "m%d", i)}))
		}
		bad := n.ProduceAsync(ctx, tp, parkway.PartitionID(0))
		for i, p := range pending {
			ack, err := p.Wait(ctx)
			if err != nil || ack.FirstOffset != uint64(i) || ack.Count != 1 {
				t.Fatalf("produce %d: %+v %v", i, ack, err)
			}
			if again, err := p.Wait(ctx); err != nil || again != ack {
				t.Fatalf("second Wait: %+v %v", again, err)
			}
		}
		if _, err := bad.Wait(ctx); !errors.Is(err, parkway.ErrEmptyBatch) {
			t.Fatalf("empty async produce: %v", err)
		}
		got := readAll(t, n, tp, 0)
		if len(got) != 100 || string(got[99].Payload) != "m99" {
			t.Fatalf("partition holds %v", payloads(got))
		}
	})
}
