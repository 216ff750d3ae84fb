package metadata_test

import (
	"fmt"

	"github.com/parkway-io/parkway/metadata"
)

func Example() {
	store, err := metadata.NewStore(metadata.Config{
		Shards: 2,
		// A stand-in; parkway's router supplies the real hash assignment.
		Assign: func(ns metadata.Namespace, shards int) int {
			return int(ns.Partition()) % shards
		},
	})
	if err != nil {
		panic(err)
	}
	wake, cancel := store.Subscribe()
	defer cancel()

	s, _ := store.Apply(metadata.CreateStream{Name: "orders"})
	t, _ := store.Apply(metadata.CreateTopic{Stream: s.Stream, Name: "eu", Partitions: 2})
	p, _ := store.Apply(metadata.CreatePartitions{Stream: s.Stream, Topic: t.Topic, Count: 1})

	fmt.Printf("stream %d, topic %d, revision %d\n", s.Stream, t.Topic, store.Revision())
	for _, part := range store.Snapshot().Partitions {
		fmt.Printf("partition %v: created at revision %d, owner shard %d\n",
			part.NS, part.CreatedRevision, part.Owner)
	}
	fmt.Println("added:", p.Created[0].NS)
	select {
	case <-wake:
		fmt.Println("woken once for both partition-shaping commits")
	default:
	}
	// Output:
	// stream 0, topic 0, revision 3
	// partition 0/0/0: created at revision 2, owner shard 0
	// partition 0/0/1: created at revision 2, owner shard 1
	// partition 0/0/2: created at revision 3, owner shard 0
	// added: 0/0/2
	// woken once for both partition-shaping commits
}
