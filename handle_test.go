package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
)

// staleRefused checks every data call with a stale topic handle is refused
// with ErrTopicNotFound wrapping ErrStaleHandle (behaviour 25).
func staleRefused(t *testing.T, n *parkway.Node, stale parkway.Topic) {
	t.Helper()
	ctx := ctxFor(t)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, parkway.ErrTopicNotFound) || !errors.Is(err, parkway.ErrStaleHandle) {
			t.Fatalf("%s with the stale handle %v: %v, want ErrTopicNotFound and ErrStaleHandle", what, stale, err)
		}
	}
	_, err := n.Produce(ctx, stale, parkway.PartitionID(0), parkway.Message{Payload: []byte("stale")})
	check("Produce", err)
	_, err = n.Poll(ctx, stale, 0, parkway.AtFirst(), 10)
	check("Poll", err)
	check("StoreOffset", n.Admin().StoreOffset(ctx, stale, 0, "c", 0))
	_, _, err = n.Admin().ConsumerOffset(ctx, stale, 0, "c")
	check("ConsumerOffset", err)
	_, err = n.Admin().PartitionOffsets(ctx, stale, 0, "")
	check("PartitionOffsets", err)
	check("DeleteTopic", n.Admin().DeleteTopic(ctx, stale))
	check("PurgeTopic", n.Admin().PurgeTopic(ctx, stale))
	check("CreatePartitions", n.Admin().CreatePartitions(ctx, stale, 1))
}

// TestStaleHandleRefusedAfterRecreate: after DeleteTopic and a CreateTopic
// that reuses the topic's id (slab ids are reused lowest first), the old
// handle reaches nothing — on the node that deleted it and on the other
// nodes of a cluster — and the new topic holds only what was produced to
// it. Before handles, a produce by id landed in the new topic.
func TestStaleHandleRefusedAfterRecreate(t *testing.T) {
	for _, clustered := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster=%v", clustered), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var nodes []*parkway.Node
				if clustered {
					_, m := threeNodes(t)
					nodes = []*parkway.Node{m[1], m[2], m[3]}
				} else {
					nodes = []*parkway.Node{open(t, parkway.Config{Shards: 2})}
				}
				n := nodes[0]
				ctx := ctxFor(t)
				s := mustStream(t, n, "s")
				old := mustTopic(t, n, s, "t", 1)
				mustProduce(t, n, old, parkway.PartitionID(0), "old")
				if err := n.Admin().DeleteTopic(ctx, old); err != nil {
					t.Fatalf("DeleteTopic: %v", err)
				}
				fresh := mustTopic(t, n, s, "t", 1)
				if fresh.ID != old.ID || fresh == old {
					t.Fatalf("recreated topic %v, old %v: want the same id, another incarnation", fresh, old)
				}
				for _, m := range nodes {
					staleRefused(t, m, old)
				}
				mustProduce(t, n, fresh, parkway.PartitionID(0), "new")
				for _, m := range nodes {
					b, err := m.Poll(ctx, fresh, 0, parkway.AtFirst(), 10)
					if err != nil || len(b.Messages) != 1 || string(b.Messages[0].Payload) != "new" {
						t.Fatalf("the recreated topic holds %v (%v), want only \"new\"", payloads(b.Messages), err)
					}
				}
				// The stale DeleteTopic above did not delete the new topic.
				if got, err := n.Topic(ctx, s, "t"); err != nil || got != fresh {
					t.Fatalf("Topic(s, t) = %v, %v; want %v", got, err, fresh)
				}
				// A stale stream handle, too.
				if err := n.Admin().DeleteStream(ctx, s); err != nil {
					t.Fatalf("DeleteStream: %v", err)
				}
				s2 := mustStream(t, n, "s")
				if s2.ID != s.ID {
					t.Fatalf("recreated stream id %d, want %d", s2.ID, s.ID)
				}
				if _, err := n.Admin().CreateTopic(ctx, s, "x", 1); !errors.Is(err, parkway.ErrStreamNotFound) || !errors.Is(err, parkway.ErrStaleHandle) {
					t.Fatalf("CreateTopic in a stale stream: %v", err)
				}
				if _, err := n.Admin().Topics(ctx, s); !errors.Is(err, parkway.ErrStreamNotFound) {
					t.Fatalf("Topics of a stale stream: %v", err)
				}
			})
		})
	}
}

// TestLookupReadYourWritesAcrossNodes: a stream created through node 1 is
// found by name on node 3 at once (the lookup's metadata read barrier),
// every time.
func TestLookupReadYourWritesAcrossNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := threeNodes(t)
		ctx := ctxFor(t)
		for i := range 50 {
			name := fmt.Sprintf("s%d", i)
			s := mustStream(t, nodes[1], name)
			got, err := nodes[3].Stream(ctx, name)
			if err != nil || got != s {
				t.Fatalf("try %d: Stream(%q) on node 3 = %v, %v; want %v", i, name, got, err, s)
			}
		}
	})
}

// TestCallsOnClosedNodeAndNilContext: every call on a closed node is
// ErrClosed, lookups included; a nil context is ErrInvalidArgument.
func TestCallsOnClosedNodeAndNilContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, err := parkway.Open(parkway.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t)
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1)
		//lint:ignore SA1012 a nil context on purpose: the call must refuse it
		if _, err := n.Produce(nil, tp, parkway.Balanced(), parkway.Message{}); !errors.Is(err, parkway.ErrInvalidArgument) {
			t.Fatalf("Produce(nil ctx): %v", err)
		}
		//lint:ignore SA1012 a nil context on purpose: the call must refuse it
		if _, err := n.Stream(nil, "s"); !errors.Is(err, parkway.ErrInvalidArgument) {
			t.Fatalf("Stream(nil ctx): %v", err)
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Admin().Streams(ctx); !errors.Is(err, parkway.ErrClosed) {
			t.Fatalf("Streams after Close: %v", err)
		}
		if _, err := n.Admin().Topics(ctx, s); !errors.Is(err, parkway.ErrClosed) {
			t.Fatalf("Topics after Close: %v", err)
		}
		if _, err := n.Stream(ctx, "s"); !errors.Is(err, parkway.ErrClosed) {
			t.Fatalf("Stream after Close: %v", err)
		}
		if _, err := n.Produce(ctx, tp, parkway.Balanced(), parkway.Message{}); !errors.Is(err, parkway.ErrClosed) {
			t.Fatalf("Produce after Close: %v", err)
		}
	})
}

var _ = context.Background

// TestHandleAheadOfClusterRefused (issue 26 item 9): a handle whose
// revision the cluster never committed — forged, or from another cluster
// or from before a data loss — is refused as stale (ErrTopicNotFound or
// ErrStreamNotFound, wrapping ErrStaleHandle) after one metadata read
// barrier, well before the caller's deadline, on one node and on every
// node of a 3-node cluster. It used to wait out the whole deadline and
// return a bare context.DeadlineExceeded in a cluster.
func TestHandleAheadOfClusterRefused(t *testing.T) {
	for _, clustered := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster=%v", clustered), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var nodes []*parkway.Node
				if clustered {
					_, m := threeNodes(t)
					nodes = []*parkway.Node{m[1], m[2], m[3]}
				} else {
					nodes = []*parkway.Node{open(t, parkway.Config{Shards: 2})}
				}
				s := mustStream(t, nodes[0], "s")
				tp := mustTopic(t, nodes[0], s, "t", 1)
				mustProduce(t, nodes[0], tp, parkway.PartitionID(0), "m")
				aheadTopic := tp
				aheadTopic.Revision += 1000
				aheadStream := s
				aheadStream.Revision += 1000
				for i, n := range nodes {
					// A deadline far beyond the cluster's request timeout:
					// the refusal must not depend on it.
					ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
					check := func(what string, err error, notFound error) {
						t.Helper()
						if !errors.Is(err, notFound) || !errors.Is(err, parkway.ErrStaleHandle) {
							t.Fatalf("node %d: %s with a handle ahead of the cluster: %v, want %v wrapping ErrStaleHandle", i+1, what, err, notFound)
						}
						if ctx.Err() != nil {
							t.Fatalf("node %d: %s waited out the caller's deadline", i+1, what)
						}
					}
					_, err := n.Produce(ctx, aheadTopic, parkway.PartitionID(0), parkway.Message{Payload: []byte("x")})
					check("Produce", err, parkway.ErrTopicNotFound)
					_, err = n.Poll(ctx, aheadTopic, 0, parkway.AtFirst(), 10)
					check("Poll", err, parkway.ErrTopicNotFound)
					check("DeleteTopic", n.Admin().DeleteTopic(ctx, aheadTopic), parkway.ErrTopicNotFound)
					_, err = n.Admin().CreateTopic(ctx, aheadStream, "x", 1)
					check("CreateTopic", err, parkway.ErrStreamNotFound)
					cancel()
				}
				// The real handles still work.
				mustProduce(t, nodes[len(nodes)-1], tp, parkway.PartitionID(0), "n")
			})
		})
	}
}
