// Command quickstart opens a node on a temporary data directory, creates a
// stream and a topic, produces 1,000 messages and consumes them back with a
// named Consumer.
//
//	go run ./examples/quickstart
//
// It prints what happened and exits non-zero if any message is missing or
// out of order.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/parkway-io/parkway"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart: FAIL:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "parkway-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 2})
	if err != nil {
		return err
	}
	defer node.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stream, err := node.Admin().CreateStream(ctx, "quickstart")
	if err != nil {
		return err
	}
	topic, err := node.Admin().CreateTopic(ctx, stream, "events", 1)
	if err != nil {
		return err
	}
	fmt.Printf("created stream %d and topic %d in %s\n", stream.ID, topic.ID, dir)

	// Produce right after creation: the partition may not be materialised
	// yet; the first request parks at its shard until it is.
	const total = 1000
	start := time.Now()
	for i := 0; i < total; i += 100 {
		batch := make([]parkway.Message, 100)
		for j := range batch {
			batch[j].Payload = fmt.Appendf(nil, "message %d", i+j)
		}
		if _, err := node.Produce(ctx, topic, parkway.PartitionID(0), batch...); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	fmt.Printf("produced %d messages in %v\n", total, time.Since(start).Round(time.Microsecond))

	// Consume with a named consumer: it reads every partition and keeps
	// its offsets in them; Close commits what was handled.
	consumer, err := node.NewConsumer(ctx, topic, parkway.ConsumerConfig{Name: "quickstart-reader"})
	if err != nil {
		return err
	}
	var got int
	for d, err := range consumer.Messages(ctx) {
		if err != nil {
			_ = consumer.Close()
			return fmt.Errorf("consume: %w", err)
		}
		if want := fmt.Sprintf("message %d", got); d.Offset != uint64(got) || string(d.Payload) != want {
			_ = consumer.Close()
			return fmt.Errorf("offset %d: got %q at offset %d, want %q", got, d.Payload, d.Offset, want)
		}
		if got++; got == total {
			break
		}
	}
	if err := consumer.Close(); err != nil {
		return fmt.Errorf("close consumer: %w", err)
	}
	off, _, err := node.Admin().ConsumerOffset(ctx, topic, 0, "quickstart-reader")
	if err != nil {
		return fmt.Errorf("consumer offset: %w", err)
	}
	fmt.Printf("consumed %d messages in order; consumer offset stored at %d\n", got, off)
	fmt.Printf("quickstart: OK: %d produced, %d consumed, 0 lost\n", total, got)
	return nil
}
