package sim

import (
	"slices"
	"testing"

	"github.com/parkway-io/parkway/metadata"
)

// A moving group is judged in every configuration its learners-first
// move can be in: the old voters, those with the newcomer promoted, and
// — only once the newcomer votes — without the leaving replica; never
// without the leaving replica while the newcomer is a learner. It must
// elect only where a majority of each survives.
func TestMoveConfigs(t *testing.T) {
	p := metadata.PartitionInfo{Replicas: []uint64{1, 2, 4}, Leaving: []uint64{3}, Joined: []uint64{4}}
	var got []string
	for _, cfg := range moveConfigs(p) {
		got = append(got, string(rune('0'+len(cfg)))+":"+fmtIDs(slices.Sorted(slices.Values(cfg))))
	}
	slices.Sort(got)
	want := []string{"3:1,2,3", "3:1,2,4", "4:1,2,3,4"}
	if !slices.Equal(got, want) {
		t.Fatalf("configs %v, want %v", got, want)
	}
	g := ledGroup{configs: moveConfigs(p)}
	nodes := func(ids ...uint64) []uint64 { return ids } // generation 0: a replica's raft id is its node's
	if !g.electable(nodes(1, 2, 4)) {
		t.Fatal("the staying voters and the newcomer alive: not electable")
	}
	if g.electable(nodes(1, 2)) {
		t.Fatal("two of the four voters the group has between the promotion and the removal: judged electable")
	}
	if !g.electable(nodes(2, 3, 4)) {
		t.Fatal("a majority of every configuration alive: not electable")
	}
	if g.electable(nodes(1, 3)) {
		t.Fatal("the configuration {1,2,4} has one voter alive: judged electable")
	}
}

func fmtIDs(ids []uint64) string {
	var b []byte
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, byte('0'+id))
	}
	return string(b)
}
