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
	stream, err := node.CreateStream(ctx, "shop")
	if err != nil {
		log.Fatal(err)
	}
	orders, err := node.CreateTopic(ctx, stream, "orders", 1)
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
	if err := node.StoreOffset(ctx, "billing", topic, 0, batch.Next); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 0 alice: book
	// 1 alice: pen
	// 2 alice: lamp
}
