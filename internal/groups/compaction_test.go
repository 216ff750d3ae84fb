package groups_test

import (
	"testing"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
)

// The trigger is due by the policy's entry count or bytes applied;
// Compacted and Restored start the count again.
func TestCompactionDue(t *testing.T) {
	g := leader(t)
	p := replica.CompactionPolicy{Entries: 3, Bytes: 100}
	var c groups.Compaction
	propose := func(n int) {
		t.Helper()
		for range n {
			if _, err := g.Propose([]byte("0123456789abcdef")); err != nil {
				t.Fatal(err)
			}
			handle(t, g)
		}
	}
	if g.Applied() > g.SnapshotIndex() {
		compact(t, g)
	}
	c.Applied(100)
	if c.Due(g, p) {
		t.Fatal("due with nothing applied since the snapshot")
	}
	c.Compacted()
	propose(2)
	if c.Due(g, p) {
		t.Fatal("due before the entry count")
	}
	c.Applied(100)
	if !c.Due(g, p) {
		t.Fatal("not due at the byte bound")
	}
	c.Restored()
	if c.Due(g, p) {
		t.Fatal("due by bytes counted before a snapshot was installed")
	}
	propose(1)
	if !c.Due(g, p) {
		t.Fatal("not due at the entry count")
	}
}

func compact(t *testing.T, g *replica.Group) {
	t.Helper()
	if err := g.Compact(g.Applied(), nil); err != nil {
		t.Fatal(err)
	}
}

// A group whose latest snapshot leaves out a member added since is due
// whatever the policy (a joining member takes only a snapshot that names
// it), and no longer once it compacted behind the change.
func TestCompactionDueForAStaleSnapshot(t *testing.T) {
	g := dynamicLeader(t)
	var c groups.Compaction
	var never replica.CompactionPolicy
	if c.Due(g, never) {
		t.Fatal("due with no member added")
	}
	if err := g.ProposeLearner(2, nil); err != nil {
		t.Fatal(err)
	}
	handle(t, g)
	if !g.IsLearner(2) {
		t.Fatalf("learner 2 not added: learners %v", g.Learners())
	}
	if !c.Due(g, never) {
		t.Fatal("not due with a snapshot that leaves out learner 2")
	}
	compact(t, g)
	c.Compacted()
	if c.Due(g, never) {
		t.Fatal("due after compacting behind the learner's addition")
	}
}
