package parkway_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/parkway-io/parkway"
)

// The README's producer and consumer: a producer creates the topic and
// produces to it through the topic's handle; a consumer looks the topic up
// by name, polls from its stored offset and stores where it got to. A
// handle names one incarnation of the topic: if the topic is deleted (and
// another takes its id), calls with it fail with ErrTopicNotFound instead
// of reaching the new topic.
func Example_producerConsumer() {
	node, err := parkway.Open(parkway.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()

	// Producer.
	stream, err := node.Admin().CreateStream(ctx, "shop")
	if err != nil {
		log.Fatal(err)
	}
	orders, err := node.Admin().CreateTopic(ctx, stream, "orders", 1)
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range []string{"book", "pen", "lamp"} {
		msg := parkway.Message{Key: []byte("alice"), Payload: []byte(o)}
		if _, err := node.Produce(ctx, orders, parkway.PartitionID(0), msg); err != nil {
			log.Fatal(err)
		}
	}

	// Consumer.
	shop, err := node.Stream(ctx, "shop")
	if err != nil {
		log.Fatal(err)
	}
	topic, err := node.Topic(ctx, shop, "orders")
	if err != nil {
		log.Fatal(err)
	}
	batch, err := node.Poll(ctx, topic, 0, parkway.AtConsumer("billing"), 100,
		parkway.WaitFor(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range batch.Messages {
		fmt.Printf("%d %s: %s\n", m.Offset, m.Key, m.Payload)
	}
	if err := node.Admin().StoreOffset(ctx, topic, 0, "billing", batch.Next); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 0 alice: book
	// 1 alice: pen
	// 2 alice: lamp
}

// The README's consumer group: a Consumer joins group "billing" (created
// if needed), ranges over its messages — waiting for new ones without
// using CPU — and commits every second; Close commits and leaves the
// group. Start more consumers with the same Group, on this node or any
// other, and the topic's partitions are shared among them.
func Example_consumerGroup() {
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

	consumer, err := node.NewConsumer(ctx, orders, parkway.ConsumerConfig{Group: "billing", Name: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	for d, err := range consumer.Messages(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("partition %d offset %d: %s\n", d.Partition, d.Offset, d.Payload)
		if d.Offset == 2 {
			break
		}
	}
	// Output:
	// partition 0 offset 0: book
	// partition 0 offset 1: pen
	// partition 0 offset 2: lamp
}
