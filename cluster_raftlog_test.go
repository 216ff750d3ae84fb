package parkway_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/parkway-io/parkway"
)

// TestBehaviour28ClusterDamageNeverReadShort: a follower whose copy is
// damaged is never answered short without an error, and is repaired even
// when its group writes nothing more.
//   - A byte flipped in the middle of its last segment: the build finds
//     it (partition.Damaged), and the copy is set aside and fetched again
//     at once, with no write or read to meet the damage (the simulator's
//     partition wrapper hid this from the reconciler: cluster lying seed
//     150 kept such a copy short for good).
//   - A byte flipped in a sealed segment (found only by a read): a local
//     poll used to be answered with the messages below the damage and no
//     error, and nothing ever read the damaged offset on that replica. It
//     is answered with the damage, and the copy repaired.
func TestBehaviour28ClusterDamageNeverReadShort(t *testing.T) {
	for _, where := range []string{"last segment", "sealed segment"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Every entry applied is compacted away: a restart applies
				// none again, so no append meets the damaged tail.
				c, dirs := newRealCluster(t, func(cfg *parkway.Config) { cfg.Cluster.CompactEntries = 1 })
				s := mustStream(t, c.nodes[1], "s")
				tp := mustTopic(t, c.nodes[1], s, "t", 1)
				want := c.produceBatches(1, tp, "a", 1500)
				c.converged(tp, want)
				leader, err := c.nodes[1].Cluster().Leader(context.Background(), tp, 0)
				if err != nil || leader == 0 {
					t.Fatalf("leader: %d, %v", leader, err)
				}
				bad := others(leader)[0]
				c.stop(bad)
				segs := segmentFiles(t, partitionDir(dirs[bad], s, tp))
				if len(segs) < 2 {
					t.Fatalf("node %d has segments %v, want at least two", bad, segs)
				}
				seg := segs[len(segs)-1]
				if where == "sealed segment" {
					seg = segs[0]
				}
				flipAt(t, seg, fileLen(t, seg)/2)
				n := c.start(bad)
				reg := registry(t, n)

				if where == "last segment" {
					// Repaired with no write and no read to find it.
					waitFor(t, "the damaged replica's repair", func() bool {
						return metricValue(t, reg, "parkway_replica_repairs_total") == 1
					})
				}
				// One poll for the whole log: every message, or the damage.
				b, err := n.Poll(context.Background(), tp, 0, parkway.AtOffset(0).Local(), len(want))
				if err == nil && len(b.Messages) < len(want) && len(b.Messages) > 0 {
					t.Fatalf("local poll of the damaged copy: %d of %d messages, next %d, and no error", len(b.Messages), len(want), b.Next)
				}
				if err != nil && !errors.Is(err, parkway.ErrCorrupt) && !errors.Is(err, parkway.ErrRetry) {
					t.Fatalf("local poll of the damaged copy: %v; want the damage", err)
				}
				waitFor(t, "the damaged replica's repair", func() bool {
					return metricValue(t, reg, "parkway_replica_repairs_total") == 1
				})
				c.converged(tp, want)
			})
		})
	}
}
