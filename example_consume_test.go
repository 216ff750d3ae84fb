package parkway_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/parkway-io/parkway"
)

// A waiting poll: the consumer asks for the next message and waits up to
// five seconds for it instead of polling in a loop. It is woken by the
// produce, which needs no sleep on either side; the key given to Key
// partitioning comes back with the message.
func ExampleNode_Poll_wait() {
	node, err := parkway.Open(parkway.Config{Shards: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()
	stream, err := node.Admin().CreateStream(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	topic, err := node.Admin().CreateTopic(ctx, stream, "created", 1)
	if err != nil {
		log.Fatal(err)
	}

	polled := make(chan parkway.Batch, 1)
	go func() {
		// AtLast on an empty partition waits for the next message.
		b, err := node.Poll(ctx, topic, 0, parkway.AtLast(), 10, parkway.WaitFor(5*time.Second))
		if err != nil {
			log.Fatal(err)
		}
		polled <- b
	}()

	if _, err := node.Produce(ctx, topic, parkway.Key([]byte("customer-7")),
		parkway.Message{Payload: []byte("order 1001")}); err != nil {
		log.Fatal(err)
	}
	b := <-polled
	for _, m := range b.Messages {
		fmt.Printf("%d: %s (key %s)\n", m.Offset, m.Payload, m.Key)
	}
	fmt.Println("next offset:", b.Next)
	// Output:
	// 0: order 1001 (key customer-7)
	// next offset: 1
}
