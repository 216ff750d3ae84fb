package replica_test

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// snapsTo counts the snapshots sent to member to so far.
func (c *cluster) snapsTo(to uint64) int {
	n := 0
	for _, m := range c.sent {
		if m.GetType() == raftpb.MsgSnap && m.GetTo() == to {
			n++
		}
	}
	return n
}

// A leader whose latest snapshot does not name a learner it added (its
// owner could not compact yet: cluster seed 616's leader was still
// fetching its partition log) withholds that snapshot, which the learner
// would refuse. Sent and reported finished, the learner's answer made
// the leader probe, find the entries compacted and send it again at once:
// the two traded it for ever at one instant, and settle never returned.
// Withheld, the group settles, raft tries again once a heartbeat (each
// try withheld too), the group reports its snapshot stale — on every
// member, a restarted one included — and the first snapshot taken after
// the change reaches the learner, which installs it.
func TestSnapshotNotNamingItsRecipientIsWithheld(t *testing.T) {
	c, j := joinCluster(t)
	lead := c.members[1]
	for id := uint64(1); id <= 3; id++ {
		if c.members[id].SnapshotStale() {
			t.Fatalf("member %d reports its snapshot stale before any member was added", id)
		}
	}
	if err := lead.ProposeLearner(4, nil); err != nil {
		t.Fatal(err)
	}
	c.settle() // before the fix: "cluster did not settle"
	if !lead.IsLearner(4) {
		t.Fatalf("learner 4 not added: learners %v", lead.Learners())
	}
	if n := c.snapsTo(4); n != 0 {
		t.Fatalf("%d snapshots sent to learner 4 that do not name it", n)
	}
	c.tick(5)
	if n := c.snapsTo(4); n != 0 || c.snaps[4] != 0 {
		t.Fatalf("over 5 heartbeats, %d snapshots sent to learner 4 that do not name it, %d installed", n, c.snaps[4])
	}
	// Every member applied the change and holds a snapshot from before it;
	// one restarted from its log (the change replayed) says so too.
	if err := c.members[2].Close(); err != nil {
		t.Fatal(err)
	}
	c.start(2, 3)
	c.settle()
	for id := uint64(1); id <= 3; id++ {
		if !c.members[id].SnapshotStale() {
			t.Fatalf("member %d does not report its snapshot stale after learner 4 was added", id)
		}
	}
	if err := lead.Compact(lead.Applied(), encodeState(c.applied[1])); err != nil {
		t.Fatal(err)
	}
	if lead.SnapshotStale() {
		t.Fatal("the leader reports its snapshot stale after compacting behind the change")
	}
	c.tick(3)
	if n := c.snapsTo(4); n != 1 || c.snaps[4] != 1 {
		t.Fatalf("after the compaction, %d snapshots sent to learner 4, %d installed; want 1 and 1", n, c.snaps[4])
	}
	if !lead.Caught(4) {
		t.Fatalf("learner 4 not caught up: match %d, snapshot %d", lead.Match(4), lead.SnapshotIndex())
	}
	if j.SnapshotStale() {
		t.Fatal("the learner reports the snapshot it installed stale")
	}
}
