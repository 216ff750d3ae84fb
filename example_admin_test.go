package parkway_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/parkway-io/parkway"
)

// The administration API: create a stream and a topic with its
// configuration, grow it, describe it, purge it, and read and reset a
// named consumer's stored offset.
func ExampleAdmin() {
	node, err := parkway.Open(parkway.Config{Shards: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()
	admin := node.Admin()

	stream, err := admin.CreateStream(ctx, "shop")
	if err != nil {
		log.Fatal(err)
	}
	orders, err := admin.CreateTopic(ctx, stream, "orders", 2, parkway.WithRetention(24*time.Hour, 0))
	if err != nil {
		log.Fatal(err)
	}
	if err := admin.CreatePartitions(ctx, orders, 1); err != nil {
		log.Fatal(err)
	}
	info, err := admin.TopicInfo(ctx, orders)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Topic.Name, "has", info.Partitions, "partitions, retention", info.Config.RetentionAge)

	for _, p := range []string{"book", "pen"} {
		if _, err := node.Produce(ctx, orders, parkway.PartitionID(0), parkway.Message{Payload: []byte(p)}); err != nil {
			log.Fatal(err)
		}
	}
	// A named consumer's offset lives in the partition: read it, set it.
	if err := admin.StoreOffset(ctx, orders, 0, "billing", 1); err != nil {
		log.Fatal(err)
	}
	po, err := admin.PartitionOffsets(ctx, orders, 0, "billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("partition 0: offsets [%d, %d), billing at %d, lag %d\n", po.Start, po.End, po.Stored, po.Lag)

	if err := admin.PurgeTopic(ctx, orders); err != nil {
		log.Fatal(err)
	}
	po, err = admin.PartitionOffsets(ctx, orders, 0, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after the purge: offsets [%d, %d)\n", po.Start, po.End)
	// Output:
	// orders has 3 partitions, retention 24h0m0s
	// partition 0: offsets [0, 2), billing at 1, lag 1
	// after the purge: offsets [2, 2)
}
