// Command quickstart opens a node on a temporary data directory, creates a
// stream and a topic, produces 1,000 messages and polls them back.
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

	var got int
	next := parkway.AtOffset(0)
	for got < total {
		b, err := node.Poll(ctx, topic, 0, next, 256)
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if len(b.Messages) == 0 {
			return fmt.Errorf("poll returned nothing at offset %d of %d", got, total)
		}
		for _, m := range b.Messages {
			if want := fmt.Sprintf("message %d", got); m.Offset != uint64(got) || string(m.Payload) != want {
				return fmt.Errorf("offset %d: got %q at offset %d, want %q", got, m.Payload, m.Offset, want)
			}
			got++
		}
		next = parkway.AtOffset(b.Next)
	}
	if err := node.Admin().StoreOffset(ctx, topic, 0, "quickstart-reader", uint64(got)); err != nil {
		return fmt.Errorf("store offset: %w", err)
	}
	off, _, err := node.Admin().ConsumerOffset(ctx, topic, 0, "quickstart-reader")
	if err != nil {
		return fmt.Errorf("consumer offset: %w", err)
	}
	fmt.Printf("polled %d messages back in order; consumer offset stored at %d\n", got, off)
	fmt.Printf("quickstart: OK: %d produced, %d polled, 0 lost\n", total, got)
	return nil
}
