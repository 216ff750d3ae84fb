package kafka

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// The protocol's cost: franz-go producing 100-byte records through the
// listener (idempotent, acks=all, default batching) against the same
// records through parkway's ProduceAsync in the same process, on an
// in-memory node with the same shards. Compare records/s:
//
//	go test -run XXX -bench 'ProduceKafka|ProduceAsyncNode' -benchtime 200000x ./kafka

func BenchmarkProduceKafka(b *testing.B) {
	f := serve(b, Config{DefaultPartitions: 4})
	cl := f.client(b, kgo.DefaultProduceTopic("bench"), kgo.AllowAutoTopicCreation())
	value := bytes.Repeat([]byte("x"), 100)
	ctx := ctxFor(b)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	var failed error
	b.ResetTimer()
	for range b.N {
		cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil && failed == nil {
				failed = err
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkProduceAsyncNode(b *testing.B) {
	node, err := parkway.Open(parkway.Config{Shards: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer node.Close()
	ctx := ctxFor(b)
	s, err := node.Admin().CreateStream(ctx, "kafka")
	if err != nil {
		b.Fatal(err)
	}
	topic, err := node.Admin().CreateTopic(ctx, s, "bench", 4)
	if err != nil {
		b.Fatal(err)
	}
	value := bytes.Repeat([]byte("x"), 100)
	const window = 512 // acks outstanding, as a client pipelines
	pending := make([]*parkway.PendingAck, 0, window)
	b.ResetTimer()
	for i := range b.N {
		pending = append(pending, node.ProduceAsync(ctx, topic, parkway.PartitionID(uint32(i%4)), parkway.Message{Payload: value}))
		if len(pending) == window {
			for _, p := range pending {
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			pending = pending[:0]
		}
	}
	for _, p := range pending {
		if _, err := p.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAutoCreateFirstProduce times a franz-go ProduceSync to a topic
// that does not exist yet: the Metadata request creates it, the produce
// parks at the partition's owner until the partition lands. Reports the
// median and 99th percentile to the first ack.
//
//	go test -run XXX -bench AutoCreate -benchtime 200x ./kafka
func BenchmarkAutoCreateFirstProduce(b *testing.B) {
	f := serve(b, Config{})
	// No linger: the time is the round trips and the creation, not the
	// client waiting to fill a batch.
	cl := f.client(b, kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	ctx := ctxFor(b)
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		r := &kgo.Record{Topic: fmt.Sprint("fresh-", i), Value: []byte("first")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkNodeCreateFirstProduce is the same through parkway's own API:
// CreateTopic, then the first Produce, on an in-memory node.
func BenchmarkNodeCreateFirstProduce(b *testing.B) {
	node, err := parkway.Open(parkway.Config{Shards: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer node.Close()
	ctx := ctxFor(b)
	s, err := node.Admin().CreateStream(ctx, "kafka")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		tp, err := node.Admin().CreateTopic(ctx, s, fmt.Sprint("fresh-", i), 1)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := node.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("first")}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeKeptBatch is the listener's check of a produced batch a
// node in memory keeps as sent (decodeBatches with encoded set): a
// batch of 100-byte or 1 KiB random values, as a busy franz-go producer
// sends them (about 16 KiB of records), uncompressed and snappy (kgo's
// default codec). ns/record is the figure to compare.
func BenchmarkDecodeKeptBatch(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, codec := range []string{"none", "snappy"} {
			b.Run(fmt.Sprintf("%dB/%s", size, codec), func(b *testing.B) {
				n := max(16<<10/size, 1)
				var recs []byte
				for i := range n {
					v := make([]byte, size)
					_, _ = rand.Read(v)
					one := (&kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: int64(i), Value: v}).AppendTo(nil)[1:]
					recs = append(binary.AppendVarint(recs, int64(len(one))), one...)
				}
				attrs := int16(0)
				if codec == "snappy" {
					attrs, recs = 2, snappy.Encode(nil, recs)
				}
				raw := batch(attrs, recs, int32(n), false)
				var pool bufPool
				b.SetBytes(int64(len(raw)))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					d := decoder{left: 1 << 20, encoded: true, bufs: &pool}
					if _, err := d.decodeBatches(raw); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
			})
		}
	}
}
