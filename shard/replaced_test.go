package shard

import (
	"errors"
	"testing"

	"github.com/parkway-io/parkway/metadata"
)

// A replica the metadata re-seeds while it runs (its node reported its
// raft log for a new raft id, and a later build read the log whole) is
// fenced once its shard is told of the placement: the inspection names
// it replaced, with the id it runs under, so the reconciler sets its copy
// aside and builds the new replica; a write sent to it goes to the
// group's leader; a leader hands the group to another voter first. Left
// running, it held the new replica off for good (simulator cluster seed
// 3625).
func TestReseedOfARunningReplicaFencesIt(t *testing.T) {
	for _, who := range []string{"follower", "leader", "quiesced leader"} {
		t.Run(who, func(t *testing.T) {
			n := newMoveNet(t)
			if who == "quiesced leader" {
				// The followers, told of the re-seed, wake for the
				// leader replaced (leaderReplaced) and still take its
				// hand-over.
				n = newMoveNetWith(t, func(r *Replication) { r.Quiesce = true })
			}
			info, lead := n.ledPartition(3)
			ns := info.NS
			n.produceAcked(lead, ns, 2)
			bad := lead
			if who == "follower" {
				for _, id := range info.Replicas {
					if id != lead {
						bad = id
						break
					}
				}
			}
			n.apply(metadata.ReseedReplica{NS: ns, CreatedRevision: info.CreatedRevision, Replica: bad})
			n.materialise(ns) // every node's shard is told of the placement

			st := n.nodes[bad].inspect(n.shard(bad))
			if id, ok := st.Replaced[ns]; !ok || id != bad || len(st.Failed) != 1 || st.Failed[0] != ns {
				t.Fatalf("node %d after its replica's re-seed: replaced %v, failed %v; want %v replaced from %d", bad, st.Replaced, st.Failed, ns, bad)
			}
			if o := n.shard(bad).owned[ns]; !errors.Is(o.failed, errReplaced) {
				t.Fatalf("fenced with %v", o.failed)
			}
			for id := uint64(1); id <= 4; id++ {
				if st := n.nodes[id].inspect(n.shard(id)); id != bad && (len(st.Replaced) > 0 || len(st.Failed) > 0) {
					t.Fatalf("node %d: replaced %v, failed %v; only node %d's replica was re-seeded", id, st.Replaced, st.Failed, bad)
				}
			}
			c := produce(ns, "w")
			n.shard(bad).handle(c.f)
			n.settle()
			var nl *NotLeaderError
			if r := c.answered(t); !errors.As(r.Err, &nl) && !errors.Is(r.Err, ErrRetry) {
				t.Fatalf("a write to the replaced replica: %v; want it sent to the group", r.Err)
			}
			if who != "follower" {
				for range 200 {
					if l := n.leader(ns); l != 0 && l != bad {
						break
					}
					n.tickAll()
				}
				if l := n.leader(ns); l == 0 || l == bad {
					t.Fatalf("leader %d: the replaced leader kept the group", l)
				}
			}
		})
	}
}
