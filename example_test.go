package parkway_test

import (
	"context"
	"fmt"
	"log"

	"github.com/parkway-io/parkway"
)

// Open a node, create a stream and a topic, produce three messages and
// poll them back. The produce right after CreateTopic needs no waiting:
// it parks at the partition's shard until the partition is materialised.
func ExampleOpen() {
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
	for _, p := range []string{"first", "second", "third"} {
		if _, err := node.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: []byte(p)}); err != nil {
			log.Fatal(err)
		}
	}

	batch, err := node.Poll(ctx, topic, 0, parkway.AtOffset(0), 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range batch.Messages {
		fmt.Printf("%d: %s\n", m.Offset, m.Payload)
	}
	fmt.Println("next offset:", batch.Next)
	// Output:
	// 0: first
	// 1: second
	// 2: third
	// next offset: 3
}

// Produce with Key partitioning: every message of a key goes to the same
// partition, so a key's messages stay in order.
func ExampleNode_Produce() {
	node, err := parkway.Open(parkway.Config{Shards: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()

	stream, _ := node.Admin().CreateStream(ctx, "shop")
	topic, _ := node.Admin().CreateTopic(ctx, stream, "carts", 3)
	for _, ev := range []struct{ user, action string }{
		{"alice", "add book"}, {"bob", "add pen"}, {"alice", "add lamp"},
		{"carol", "add mug"}, {"bob", "checkout"}, {"alice", "checkout"},
	} {
		ack, err := node.Produce(ctx, topic, parkway.Key([]byte(ev.user)),
			parkway.Message{Payload: []byte(ev.user + ": " + ev.action)})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-20s -> partition %d, offset %d\n", ev.user+": "+ev.action, ack.Partition, ack.FirstOffset)
	}

	// One key's messages, in order, in its partition.
	ack, _ := node.Produce(ctx, topic, parkway.Key([]byte("alice")), parkway.Message{Payload: []byte("alice: pay")})
	batch, _ := node.Poll(ctx, topic, ack.Partition, parkway.AtOffset(0), 10)
	for _, m := range batch.Messages {
		fmt.Printf("partition %d @%d: %s\n", ack.Partition, m.Offset, m.Payload)
	}
	// Output:
	// alice: add book      -> partition 1, offset 0
	// bob: add pen         -> partition 0, offset 0
	// alice: add lamp      -> partition 1, offset 1
	// carol: add mug       -> partition 2, offset 0
	// bob: checkout        -> partition 0, offset 1
	// alice: checkout      -> partition 1, offset 2
	// partition 1 @0: alice: add book
	// partition 1 @1: alice: add lamp
	// partition 1 @2: alice: checkout
	// partition 1 @3: alice: pay
}

// ProduceAsync pipelines produces without a goroutine each: start many,
// then wait for their acknowledgements in order.
func ExampleNode_ProduceAsync() {
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

	// A first, synchronous produce waits for the partition to be
	// materialised: produces parked before that may be shed (the park
	// buffer is bounded) and retried, out of order.
	if _, err := node.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("first")}); err != nil {
		log.Fatal(err)
	}
	var pending []*parkway.PendingAck
	for i := range 1000 {
		pending = append(pending, node.ProduceAsync(ctx, topic, parkway.PartitionID(0),
			parkway.Message{Payload: fmt.Appendf(nil, "order-%d", i)}))
	}
	var last parkway.Ack
	for _, p := range pending {
		if last, err = p.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("acknowledged up to offset", last.FirstOffset)
	// Output:
	// acknowledged up to offset 1000
}
