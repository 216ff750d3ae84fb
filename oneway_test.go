package parkway_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// One-way links: a node that can send but not hear (deaf), and one that
// is heard but cannot send (mute). Either way the two others form a
// majority linked both ways, and writes through them must go on within a
// few seconds — whichever node led the partition and the metadata group
// — even though a deaf node keeps sending heartbeats and votes to nodes
// it never hears back from. When the link heals the three converge.
func TestClusterWritesThroughOneWayPartitions(t *testing.T) {
	for _, kind := range []string{"deaf", "mute"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net, nodes := threeNodes(t)
				ctx := context.Background()
				s := mustStream(t, nodes[1], "s")
				tp := mustTopic(t, nodes[1], s, "t", 1)
				var acked []string
				produce := func(via transport.NodeID, p string) error {
					_, err := nodes[via].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte(p)})
					if err == nil {
						acked = append(acked, p)
					}
					return err
				}
				for i := range 3 {
					if err := produce(2, fmt.Sprintf("a%d", i)); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(2 * time.Second) // virtual: the groups quiesce
				for _, victim := range []transport.NodeID{1, 2, 3} {
					if kind == "deaf" {
						net.DisconnectGroups(others(victim), []transport.NodeID{victim})
					} else {
						net.DisconnectGroups([]transport.NodeID{victim}, others(victim))
					}
					p := fmt.Sprintf("%s-%d", kind, victim)
					var err error
					for range 20 {
						cctx, cancel := context.WithTimeout(ctx, time.Second)
						_, err = nodes[others(victim)[0]].Produce(cctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte(p)})
						cancel()
						if err == nil {
							acked = append(acked, p)
							break
						}
					}
					if err != nil {
						t.Fatalf("node %d %s for 20 s: a write through node %d still fails: %v", victim, kind, others(victim)[0], err)
					}
					net.Heal()
					time.Sleep(2 * time.Second)
				}
				for id, n := range nodes {
					waitFor(t, fmt.Sprintf("node %d to converge", id), func() bool { return len(readAll(t, n, tp, 0)) == len(acked) })
					expectLog(t, n, tp, 0, acked...)
				}
			})
		})
	}
}
