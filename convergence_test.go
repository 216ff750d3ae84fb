package parkway_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
)

// The cross-shard scenario of the design's reference table: two shards and
// the namespaces (0, t, 0) for t in 0..8, whose owners straddle both shards.
const (
	convShards = 2
	convTopics = 8
)

var convOwners = []int{1, 1, 0, 0, 1, 0, 1, 0}

// TestConvergenceNamespacesStraddleBothShards pins the assignment the
// convergence tests rely on. If it changes, the scenario may silently stop
// crossing shards, so it fails loudly instead.
func TestConvergenceNamespacesStraddleBothShards(t *testing.T) {
	got := make([]int, convTopics)
	seen := map[int]bool{}
	for topic := range uint32(convTopics) {
		ns, err := metadata.NewNamespace(0, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		got[topic] = router.Assign(ns, convShards)
		seen[got[topic]] = true
		// A pure function: asking again gives the same owner.
		if again := router.Assign(ns, convShards); again != got[topic] {
			t.Fatalf("Assign(%v, 2) = %d, then %d", ns, got[topic], again)
		}
	}
	if !slices.Equal(got, convOwners) {
		t.Fatalf("owners of (0, t, 0), t in 0..8, on 2 shards = %v, want %v", got, convOwners)
	}
	for s := range convShards {
		if !seen[s] {
			t.Fatalf("no namespace lands on shard %d: the cross-shard path is not covered", s)
		}
	}
}

// TestConvergenceCreateThenProduce is the first scenario of
// examples/convergence through the public API: eight one-partition topics
// on two shards, and a produce right after each creation, when the
// partition is most likely not materialised yet. Each produce must park at
// the owner, be served once the partition lands, be acked at offset 0 and
// be readable.
func TestConvergenceCreateThenProduce(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := open(t, parkway.Config{Shards: convShards})
			stream := mustStream(t, n, "conv")
			if stream.ID != 0 {
				t.Fatalf("first stream got id %d, want 0", stream.ID)
			}
			// All creations first: the produces then race the reconcilers.
			ids := make([]parkway.Topic, convTopics)
			for i := range ids {
				ids[i] = mustTopic(t, n, stream, fmt.Sprintf("t%d", i), 1)
				if ids[i].ID != uint32(i) {
					t.Fatalf("topic %d got id %d, want %d", i, ids[i].ID, i)
				}
			}
			for i, topic := range ids {
				ack := mustProduce(t, n, topic, parkway.PartitionID(0), fmt.Sprintf("m%d", i))
				if ack.FirstOffset != 0 || ack.Partition != 0 {
					t.Fatalf("topic %d: acked at partition %d offset %d, want 0/0", i, ack.Partition, ack.FirstOffset)
				}
			}
			for i, topic := range ids {
				expectLog(t, n, topic, 0, fmt.Sprintf("m%d", i))
			}
			checkOwners(t, n, stream, ids)
		})
	})

	t.Run("interleaved", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Create, produce at once, create the next: each produce chases a
			// commit whose reconcile pass is still running.
			n := open(t, parkway.Config{Shards: convShards})
			stream := mustStream(t, n, "conv")
			ids := make([]parkway.Topic, convTopics)
			for i := range ids {
				ids[i] = mustTopic(t, n, stream, fmt.Sprintf("t%d", i), 1)
				ack := mustProduce(t, n, ids[i], parkway.PartitionID(0), fmt.Sprintf("m%d", i))
				if ack.FirstOffset != 0 {
					t.Fatalf("topic %d: acked at offset %d, want 0", i, ack.FirstOffset)
				}
			}
			for i, topic := range ids {
				expectLog(t, n, topic, 0, fmt.Sprintf("m%d", i))
			}
			checkOwners(t, n, stream, ids)
		})
	})

	t.Run("concurrent producers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Eight producers, each waiting for its topic id and producing the
			// moment it is created, while the next topics are still being
			// created.
			n := open(t, parkway.Config{Shards: convShards})
			stream := mustStream(t, n, "conv")
			ctx := ctxFor(t)
			created := make([]chan parkway.Topic, convTopics)
			acks := make([]parkway.Ack, convTopics)
			errs := make([]error, convTopics)
			var wg sync.WaitGroup
			for i := range convTopics {
				created[i] = make(chan parkway.Topic, 1)
				wg.Go(func() {
					topic := <-created[i]
					acks[i], errs[i] = n.Produce(ctx, topic, parkway.PartitionID(0),
						parkway.Message{Payload: fmt.Appendf(nil, "m%d", i)})
				})
			}
			ids := make([]parkway.Topic, convTopics)
			for i := range ids {
				ids[i] = mustTopic(t, n, stream, fmt.Sprintf("t%d", i), 1)
				created[i] <- ids[i]
			}
			wg.Wait()
			for i := range convTopics {
				if errs[i] != nil {
					t.Fatalf("produce to topic %d: %v", i, errs[i])
				}
				if acks[i].FirstOffset != 0 || acks[i].Count != 1 {
					t.Fatalf("topic %d: acked %d at offset %d, want 1 at 0", i, acks[i].Count, acks[i].FirstOffset)
				}
			}
			for i, topic := range ids {
				expectLog(t, n, topic, 0, fmt.Sprintf("m%d", i))
			}
			checkOwners(t, n, stream, ids)
		})
	})

	t.Run("concurrent creators and producers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Eight goroutines each create their own topic and produce to it
			// at once; ids are handed out in whatever order the commits land.
			n := open(t, parkway.Config{Shards: convShards})
			stream := mustStream(t, n, "conv")
			ctx := ctxFor(t)
			ids := make([]parkway.Topic, convTopics)
			acks := make([]parkway.Ack, convTopics)
			errs := make([]error, convTopics)
			var wg sync.WaitGroup
			for i := range convTopics {
				wg.Go(func() {
					ids[i], errs[i] = n.Admin().CreateTopic(ctx, stream, fmt.Sprintf("t%d", i), 1)
					if errs[i] != nil {
						return
					}
					acks[i], errs[i] = n.Produce(ctx, ids[i], parkway.PartitionID(0),
						parkway.Message{Payload: fmt.Appendf(nil, "m%d", i)})
				})
			}
			wg.Wait()
			for i := range convTopics {
				if errs[i] != nil {
					t.Fatalf("goroutine %d: %v", i, errs[i])
				}
				if acks[i].FirstOffset != 0 {
					t.Fatalf("topic %v: acked at offset %d, want 0", ids[i], acks[i].FirstOffset)
				}
			}
			var sorted []uint32
			for _, id := range ids {
				sorted = append(sorted, id.ID)
			}
			slices.Sort(sorted)
			if want := []uint32{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(sorted, want) {
				t.Fatalf("topic ids %v, want %v", sorted, want)
			}
			for i, topic := range ids {
				expectLog(t, n, topic, 0, fmt.Sprintf("m%d", i))
			}
		})
	})
}

// TestConvergeManyPartitionsAtOnce: one topic of 64 partitions, a produce
// to every partition from its own goroutine right after the creation, so
// dozens of namespaces are parked on both shards at once and materialised
// by the same passes. Every produce is acked at offset 0.
func TestConvergeManyPartitionsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parts = 64
		n := open(t, parkway.Config{Shards: convShards})
		ctx := ctxFor(t)
		stream := mustStream(t, n, "wide")
		topic := mustTopic(t, n, stream, "t", parts)
		errs := make([]error, parts)
		acks := make([]parkway.Ack, parts)
		var wg sync.WaitGroup
		for p := range uint32(parts) {
			wg.Go(func() {
				acks[p], errs[p] = n.Produce(ctx, topic, parkway.PartitionID(p),
					parkway.Message{Payload: fmt.Appendf(nil, "p%d", p)})
			})
		}
		wg.Wait()
		owners := map[int]int{}
		infos, err := parkway.EnginePartitions(ctxFor(t), n, topic)
		if err != nil || len(infos) != parts {
			t.Fatalf("Partitions: %d, %v", len(infos), err)
		}
		for p := range uint32(parts) {
			if errs[p] != nil {
				t.Fatalf("partition %d: %v", p, errs[p])
			}
			if acks[p].Partition != p || acks[p].FirstOffset != 0 {
				t.Fatalf("partition %d: acked %+v", p, acks[p])
			}
			expectLog(t, n, topic, p, fmt.Sprintf("p%d", p))
			owners[infos[p].Owner]++
		}
		if len(owners) != convShards {
			t.Fatalf("partitions per shard %v: want both shards used", owners)
		}
	})
}

// checkOwners checks that the committed owner of each topic's partition 0
// is the hash assignment, and that the set spans both shards.
func checkOwners(t *testing.T, n *parkway.Node, stream parkway.Stream, ids []parkway.Topic) {
	t.Helper()
	seen := map[int]bool{}
	for _, topic := range ids {
		parts, err := parkway.EnginePartitions(ctxFor(t), n, topic)
		if err != nil || len(parts) != 1 {
			t.Fatalf("Partitions(%v in %v) = %v, %v; want one", topic, stream, parts, err)
		}
		if want := router.Assign(parts[0].NS, convShards); parts[0].Owner != want {
			t.Fatalf("partition %v committed on shard %d, assignment says %d", parts[0].NS, parts[0].Owner, want)
		}
		seen[parts[0].Owner] = true
	}
	if len(seen) != convShards {
		t.Fatalf("partitions on shards %v only, want both", seen)
	}
}

// TestConvergenceDeleteRecreateServesOnlyNewIncarnation is the second
// scenario of examples/convergence: delete and recreate every topic. The
// recreated topics get the same slab ids, hence byte-identical namespaces,
// but new incarnations (created revisions). A poll from offset 0 must serve
// only the new incarnation's message — none of the dead one's — and the new
// message must be acked at offset 0.
func TestConvergenceDeleteRecreateServesOnlyNewIncarnation(t *testing.T) {
	for _, mode := range []string{"delete all then recreate all", "delete and recreate one by one"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := open(t, parkway.Config{Shards: convShards})
				stream := mustStream(t, n, "conv")
				ids := make([]parkway.Topic, convTopics)
				for i := range ids {
					ids[i] = mustTopic(t, n, stream, fmt.Sprintf("t%d", i), 1)
					// Several messages, so a leak of the old log would show as
					// extra messages or a non-zero offset.
					mustProduce(t, n, ids[i], parkway.PartitionID(0), "old-a", "old-b", "old-c")
				}
				incarnations := map[uint32]metadata.PartitionInfo{} // by topic id
				for _, topic := range ids {
					parts, err := parkway.EnginePartitions(ctxFor(t), n, topic)
					if err != nil {
						t.Fatal(err)
					}
					incarnations[topic.ID] = parts[0]
				}

				for round := 1; round <= 3; round++ {
					deleteTopic := func(i int) {
						if err := n.Admin().DeleteTopic(ctxFor(t), ids[i]); err != nil {
							t.Fatalf("round %d: DeleteTopic(%v): %v", round, ids[i], err)
						}
						if _, err := parkway.EnginePartitions(ctxFor(t), n, ids[i]); err == nil {
							t.Fatalf("round %d: topic %v still listed after delete", round, ids[i])
						}
					}
					create := func(i int) {
						id := mustTopic(t, n, stream, fmt.Sprintf("t%d", i), 1)
						if id.ID != ids[i].ID || id.Revision <= ids[i].Revision {
							t.Fatalf("round %d: recreated t%d is %v, want the reused slab id of %v in a newer incarnation", round, i, id, ids[i])
						}
						ids[i] = id
					}
					produce := func(i int) {
						payload := fmt.Sprintf("new-%d-%d", round, i)
						ack := mustProduce(t, n, ids[i], parkway.PartitionID(0), payload)
						if ack.FirstOffset != 0 {
							t.Fatalf("round %d: produce to recreated t%d acked at offset %d, want 0 (fresh incarnation)", round, i, ack.FirstOffset)
						}
					}
					if mode == "delete all then recreate all" {
						for i := range ids {
							deleteTopic(i)
						}
						for i := range ids {
							create(i)
						}
						for i := range ids {
							produce(i)
						}
					} else {
						for i := range ids {
							deleteTopic(i)
							create(i)
							produce(i)
						}
					}
					for i, topic := range ids {
						expectLog(t, n, topic, 0, fmt.Sprintf("new-%d-%d", round, i))
						parts, err := parkway.EnginePartitions(ctxFor(t), n, topic)
						if err != nil {
							t.Fatal(err)
						}
						old := incarnations[topic.ID]
						if parts[0].NS != old.NS {
							t.Fatalf("round %d: recreated t%d has namespace %v, want the old %v", round, i, parts[0].NS, old.NS)
						}
						if parts[0].CreatedRevision <= old.CreatedRevision {
							t.Fatalf("round %d: recreated t%d has incarnation %d, not newer than %d", round, i, parts[0].CreatedRevision, old.CreatedRevision)
						}
						incarnations[topic.ID] = parts[0]
					}
				}
			})
		})
	}
}

// TestBehaviour01FreshTopicReachesOwner checks DESIGN behaviour 1 through
// the node's Prometheus counters: a produce right after CreateTopic (no
// routing row yet, so the router falls back to the hash) reaches the shard
// router.Assign names, which materialises the partition; no shard has to
// forward it, and nothing is dropped.
func TestBehaviour01FreshTopicReachesOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: convShards})
		reg := registry(t, n)
		stream := mustStream(t, n, "b01")

		const materialised = "parkway_partitions_materialised_total"
		for shard := range convShards {
			if v := metricValue(t, reg, materialised, "shard", fmt.Sprint(shard)); v != 0 {
				t.Fatalf("shard %d materialised %v partitions before any topic exists", shard, v)
			}
		}
		want := make([]float64, convShards)
		for topic := range uint32(4) { // owners 1 1 0 0: both shards, twice each
			id := mustTopic(t, n, stream, fmt.Sprintf("t%d", topic), 1)
			mustProduce(t, n, id, parkway.PartitionID(0), "hello")
			ns, _ := metadata.NewNamespace(stream.ID, id.ID, 0)
			owner := router.Assign(ns, convShards)
			want[owner]++
			// The produce was served, so its partition exists, and only on the
			// owner: the counters are exact, not eventually so.
			for shard := range convShards {
				if got := metricValue(t, reg, materialised, "shard", fmt.Sprint(shard)); got != want[shard] {
					t.Fatalf("after producing to %v (owner %d): shard %d materialised %v partitions, want %v",
						ns, owner, shard, got, want[shard])
				}
			}
		}
		if v := metricValue(t, reg, "parkway_frames_forwarded_total"); v != 0 {
			t.Fatalf("%v frames were forwarded: a fresh topic's frame did not reach its owner directly", v)
		}
		if v := metricValue(t, reg, "parkway_frame_drops_total"); v != 0 {
			t.Fatalf("%v frames dropped", v)
		}
	})
}

// TestRecreatedStreamAndPartitionsServeOnlyNewIncarnation extends the
// second scenario to the other ways a namespace comes back: deleting and
// recreating the whole stream (its slab id is reused too), and shrinking a
// topic's partitions and growing them again (partition ids are dense, so
// the regrown partitions have the old namespaces). Either way only the new
// incarnation's messages and consumer offsets may be served.
func TestRecreatedStreamAndPartitionsServeOnlyNewIncarnation(t *testing.T) {
	t.Run("stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := open(t, parkway.Config{Shards: convShards})
			ctx := ctxFor(t)
			stream := mustStream(t, n, "conv")
			var last parkway.Topic
			for i := range convTopics {
				topic := mustTopic(t, n, stream, fmt.Sprintf("t%d", i), 1)
				last = topic
				mustProduce(t, n, topic, parkway.PartitionID(0), "old")
				if err := n.Admin().StoreOffset(ctx, topic, 0, "reader", 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := n.Admin().DeleteStream(ctx, stream); err != nil {
				t.Fatal(err)
			}
			if _, err := n.Poll(ctx, last, 0, parkway.AtOffset(0), 10); !errors.Is(err, parkway.ErrStreamNotFound) {
				t.Fatalf("poll of a deleted stream: %v, want ErrStreamNotFound", err)
			}
			again := mustStream(t, n, "conv")
			if again.ID != stream.ID || again == stream {
				t.Fatalf("recreated stream is %v, want the reused slab id of %v in a new incarnation", again, stream)
			}
			for i := range convTopics {
				topic := mustTopic(t, n, again, fmt.Sprintf("t%d", i), 1)
				if topic.ID != uint32(i) {
					t.Fatalf("recreated topic t%d got id %d", i, topic.ID)
				}
				if ack := mustProduce(t, n, topic, parkway.PartitionID(0), "new"); ack.FirstOffset != 0 {
					t.Fatalf("t%d: acked at %d, want 0", i, ack.FirstOffset)
				}
				expectLog(t, n, topic, 0, "new")
				if _, ok, err := n.Admin().ConsumerOffset(ctx, topic, 0, "reader"); err != nil || ok {
					t.Fatalf("t%d: the dead incarnation's consumer offset is served (stored %v, %v)", i, ok, err)
				}
			}
		})
	})

	t.Run("partitions", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := open(t, parkway.Config{Shards: convShards})
			ctx := ctxFor(t)
			stream := mustStream(t, n, "conv")
			topic := mustTopic(t, n, stream, "t", 4)
			for p := range uint32(4) {
				mustProduce(t, n, topic, parkway.PartitionID(p), fmt.Sprintf("old-%d", p))
			}
			before, _ := parkway.EnginePartitions(ctxFor(t), n, topic)
			// Shrink to one partition, then grow back to four.
			if err := n.Admin().DeletePartitions(ctx, topic, 3); err != nil {
				t.Fatal(err)
			}
			if _, err := n.Produce(ctx, topic, parkway.PartitionID(3), parkway.Message{Payload: []byte("x")}); !errors.Is(err, parkway.ErrPartitionNotFound) {
				t.Fatalf("produce to a deleted partition: %v, want ErrPartitionNotFound", err)
			}
			if err := n.Admin().CreatePartitions(ctx, topic, 3); err != nil {
				t.Fatal(err)
			}
			after, _ := parkway.EnginePartitions(ctxFor(t), n, topic)
			if len(after) != 4 {
				t.Fatalf("%d partitions after regrowing, want 4", len(after))
			}
			for p := range uint32(4) {
				if after[p].NS != before[p].NS {
					t.Fatalf("partition %d: namespace %v, was %v", p, after[p].NS, before[p].NS)
				}
				regrown := p > 0
				if regrown != (after[p].CreatedRevision != before[p].CreatedRevision) {
					t.Fatalf("partition %d: incarnation %d, was %d", p, after[p].CreatedRevision, before[p].CreatedRevision)
				}
				mustProduce(t, n, topic, parkway.PartitionID(p), fmt.Sprintf("new-%d", p))
				if regrown {
					expectLog(t, n, topic, p, fmt.Sprintf("new-%d", p))
				} else {
					expectLog(t, n, topic, p, "old-0", "new-0")
				}
			}
		})
	})
}
