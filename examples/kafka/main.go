// Command kafka runs a parkway node with a Kafka listener and talks to it
// with franz-go, a Kafka client that knows nothing of parkway: a producer
// writes keyed records with headers to a topic the first produce
// auto-creates, and a consumer group member reads them back and commits.
//
//	go run ./examples/kafka
//
// It exits non-zero if a record is missing, altered or out of order.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/kafka"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kafka example: FAIL:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "parkway-kafka-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 2})
	if err != nil {
		return err
	}
	defer node.Close()

	// The listener: topics live in the stream "kafka"; a produce to an
	// unknown topic creates it with three partitions.
	srv, err := kafka.NewServer(node, kafka.Config{Stream: "kafka", DefaultPartitions: 3})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-served; !errors.Is(err, kafka.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "serve:", err)
		}
	}()
	addr := l.Addr().String()
	fmt.Println("Kafka listener on", addr)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A franz-go producer: idempotent by default, batching, zstd.
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("orders"),
		kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err != nil {
		return err
	}
	defer prod.Close()
	const n = 1000
	for i := range n {
		r := &kgo.Record{
			Key:     []byte(fmt.Sprintf("customer-%d", i%10)),
			Value:   []byte(fmt.Sprintf("order %d", i)),
			Headers: []kgo.RecordHeader{{Key: "seq", Value: []byte(fmt.Sprint(i))}},
		}
		prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				fmt.Fprintln(os.Stderr, "produce:", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	fmt.Printf("produced %d records\n", n)

	// A consumer group member (franz-go's cooperative-sticky assignor)
	// from the earliest offset; it commits what it consumed.
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("orders"),
		kgo.ConsumerGroup("billing"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit())
	if err != nil {
		return err
	}
	defer cons.Close()
	next := map[int32]int64{} // per partition: the next offset expected
	lastSeq := map[string]int{}
	for got := 0; got < n; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("consumed %d of %d records: %w", got, n, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return fmt.Errorf("fetch: %v", errs[0].Err)
		}
		for _, r := range fs.Records() {
			if r.Offset != next[r.Partition] {
				return fmt.Errorf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
			var seq int
			if _, err := fmt.Sscan(string(r.Headers[0].Value), &seq); err != nil {
				return fmt.Errorf("header %q: %w", r.Headers[0].Value, err)
			}
			if want := fmt.Sprintf("order %d", seq); string(r.Value) != want {
				return fmt.Errorf("record %q carries header seq %d", r.Value, seq)
			}
			// One key's records stay in one partition, in produce order.
			if prev, ok := lastSeq[string(r.Key)]; ok && seq <= prev {
				return fmt.Errorf("key %s: seq %d after %d", r.Key, seq, prev)
			}
			lastSeq[string(r.Key)] = seq
			got++
		}
	}
	fmt.Printf("consumed %d records from %d partitions, each key in order\n", n, len(next))
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}

	// The same records through parkway's own API, and the group's
	// commits as a Kafka admin client reads them (they are records of the
	// group's coordinator partition, not parkway named consumer offsets).
	fetched, err := kadm.NewClient(cons).FetchOffsets(ctx, "billing")
	if err != nil {
		return fmt.Errorf("fetch the group's offsets: %w", err)
	}
	stream, err := node.Stream(ctx, "kafka")
	if err != nil {
		return err
	}
	topic, err := node.Topic(ctx, stream, "orders")
	if err != nil {
		return err
	}
	total := uint64(0)
	for p := range uint32(3) {
		po, err := node.Admin().PartitionOffsets(ctx, topic, p, "")
		if err != nil {
			return err
		}
		total += po.End - po.Start
		committed, ok := fetched.Lookup("orders", int32(p))
		if !ok || committed.Err != nil || committed.At != int64(po.End) {
			return fmt.Errorf("partition %d: group billing committed %+v (found: %v), want the end %d", p, committed, ok, po.End)
		}
	}
	if total != n {
		return fmt.Errorf("parkway holds %d messages, want %d", total, n)
	}
	fmt.Printf("parkway's topic %q holds the same %d messages; group \"billing\" committed the end of every partition\n", topic.Name, total)
	return nil
}
