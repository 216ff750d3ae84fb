package groups_test

import (
	"testing"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
)

// The trigger is due by the policy's entry count or bytes applied, or
// when forced; a forced compaction with nothing applied since the last
// snapshot is dropped; Compacted starts the count again.
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
	c.Force()
	if g.Applied() > g.SnapshotIndex() {
		compact(t, g)
	}
	if c.Due(g, p) {
		t.Fatal("a forced compaction was due with nothing applied since the snapshot")
	}
	propose(1)
	if c.Due(g, p) {
		t.Fatal("the dropped forced compaction came back")
	}
	c.Force()
	if !c.Due(g, p) {
		t.Fatal("a forced compaction was not due after an entry applied")
	}
	compact(t, g)
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
