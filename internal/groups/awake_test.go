package groups_test

import (
	"slices"
	"testing"

	"github.com/parkway-io/parkway/internal/groups"
)

type wokeGroup struct{ name string }

// Groups wake in order; a removal moves the last into the gap; a new
// incarnation under a key replaces the old one; Turn takes turns past
// its budget and copies.
func TestAwake(t *testing.T) {
	var a groups.Awake[int, *wokeGroup]
	h := []*wokeGroup{{"a"}, {"b"}, {"c"}, {"d"}}
	for i, x := range h {
		if !a.Add(i, x) {
			t.Fatalf("Add %d: not newly awake", i)
		}
	}
	if a.Add(1, h[1]) || a.Len() != 4 || !a.Has(2, h[2]) || a.Has(2, h[1]) {
		t.Fatal("Add of an awake group, Len or Has wrong")
	}
	names := func(l []*wokeGroup) []string {
		var out []string
		for _, x := range l {
			out = append(out, x.name)
		}
		return out
	}
	// d's quiescence clock counts three ticks (not idle: never quiesces).
	for range 3 {
		a.Quiesce(3, nil, false, nil, nil)
	}
	a.Remove(0)
	if got := names(a.Turn(0)); !slices.Equal(got, []string{"d", "b", "c"}) {
		t.Fatalf("after removing the first: %v, want the last moved into its place", got)
	}
	if a.Ticks(3) != 3 || a.Ticks(1) != 0 {
		t.Fatalf("clocks after the move: d %d, b %d; want 3 and 0 (the clock moves with its group)", a.Ticks(3), a.Ticks(1))
	}
	b2 := &wokeGroup{"b2"}
	if !a.Add(1, b2) || a.Has(1, h[1]) || a.Len() != 3 {
		t.Fatal("a new incarnation did not replace the old")
	}
	if got := names(a.Turn(0)); !slices.Equal(got, []string{"d", "c", "b2"}) {
		t.Fatalf("after the new incarnation: %v", got)
	}
	var turns []string
	for range 3 {
		turns = append(turns, names(a.Turn(2))...)
	}
	if !slices.Equal(turns, []string{"d", "c", "b2", "d", "c", "b2"}) {
		t.Fatalf("turns of two: %v", turns)
	}
	l := a.Turn(0)
	a.Remove(3)
	if len(l) != 3 || a.Len() != 2 {
		t.Fatal("Turn's copy changed with the set")
	}
}
