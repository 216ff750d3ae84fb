package parkway_test

import (
	"context"
	"fmt"
	"log"

	"github.com/parkway-io/parkway"
)

// The README's first screen: the one way to produce (Node.Produce) and the
// one way to consume (a Consumer), with the stream and topic created once
// through the administration API (Node.Admin).
func Example_producerConsumer() {
	node, err := parkway.Open(parkway.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()

	// Set-up, once: a stream and a topic of one partition.
	stream, err := node.Admin().CreateStream(ctx, "shop")
	if err != nil {
		log.Fatal(err)
	}
	orders, err := node.Admin().CreateTopic(ctx, stream, "orders", 1)
	if err != nil {
		log.Fatal(err)
	}

	// Produce: one key's messages go to one partition, in order.
	for _, o := range []string{"book", "pen", "lamp"} {
		msg := parkway.Message{Payload: []byte(o)}
		if _, err := node.Produce(ctx, orders, parkway.Key([]byte("alice")), msg); err != nil {
			log.Fatal(err)
		}
	}

	// Consume: a member of group "billing" (created if needed); it waits
	// for new messages without using CPU and commits every second and on
	// Close.
	consumer, err := node.NewConsumer(ctx, orders, parkway.ConsumerConfig{Group: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	for d, err := range consumer.Messages(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s: %s\n", d.Offset, d.Key, d.Payload)
		if d.Offset == 2 {
			break
		}
	}
	// Output:
	// 0 alice: book
	// 1 alice: pen
	// 2 alice: lamp
}

// A named consumer: a Consumer without a Group reads every partition of
// the topic under its name, and keeps its offsets in the partitions
// (Admin.ConsumerOffset reads them). Close commits what was handled.
func Example_namedConsumer() {
	node, err := parkway.Open(parkway.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()
	stream, err := node.Admin().CreateStream(ctx, "shop")
	if err != nil {
		log.Fatal(err)
	}
	orders, err := node.Admin().CreateTopic(ctx, stream, "orders", 1)
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range []string{"book", "pen", "lamp"} {
		if _, err := node.Produce(ctx, orders, parkway.Balanced(), parkway.Message{Payload: []byte(o)}); err != nil {
			log.Fatal(err)
		}
	}

	consumer, err := node.NewConsumer(ctx, orders, parkway.ConsumerConfig{Name: "audit"})
	if err != nil {
		log.Fatal(err)
	}
	for d, err := range consumer.Messages(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("partition %d offset %d: %s\n", d.Partition, d.Offset, d.Payload)
		if d.Offset == 2 {
			break
		}
	}
	if err := consumer.Close(); err != nil {
		log.Fatal(err)
	}
	next, _, err := node.Admin().ConsumerOffset(ctx, orders, 0, "audit")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("audit resumes at offset", next)
	// Output:
	// partition 0 offset 0: book
	// partition 0 offset 1: pen
	// partition 0 offset 2: lamp
	// audit resumes at offset 3
}
