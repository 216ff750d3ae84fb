package groups_test

import (
	"slices"
	"testing"

	"github.com/parkway-io/parkway/internal/groups"
)

// A follower that sleeps is handed to its host HibernateAfterTicks ticks
// later, not a tick sooner; one woken in between is not, nor is one
// whose group went; one that slept again waits from its latest sleep;
// ticks counted in one call (a driver that slept through them) count
// alike; and once none waits, Sleeping is false.
func TestAwakeHibernatesAfterTicks(t *testing.T) {
	var a groups.Awake[int, *wokeGroup]
	h := []*wokeGroup{{"a"}, {"b"}, {"c"}, {"d"}}
	var got []string
	hib := func(k int, g *wokeGroup) {
		if h[k] != g {
			t.Fatalf("key %d handed with %s", k, g.name)
		}
		got = append(got, g.name)
	}
	for i, g := range h {
		a.Add(i, g)
	}
	a.Sleep(0, h[0]) // at tick 0
	a.Sleep(1, h[1])
	a.Sleep(3, h[3])
	if a.Has(0, h[0]) || a.Len() != 1 || !a.Sleeping() {
		t.Fatal("a sleeping follower is awake, or nothing sleeps")
	}
	a.Add(1, h[1]) // woken
	a.Remove(3)    // gone
	a.Hibernate(10, hib)
	a.Sleep(2, h[2])                                // at tick 10
	a.Add(0, h[0])                                  // 0 wakes at tick 10 ...
	a.Sleep(0, h[0])                                // ... and sleeps again
	a.Hibernate(groups.HibernateAfterTicks-11, hib) // tick 49
	if len(got) != 0 {
		t.Fatalf("hibernated before %d ticks: %v", groups.HibernateAfterTicks, got)
	}
	a.Hibernate(1, hib) // tick 50: 0's first sleep is stale
	if len(got) != 0 {
		t.Fatalf("tick 50 hibernated %v, want none (b woken, d gone, a asleep again since 10)", got)
	}
	a.Hibernate(groups.HibernateAfterTicks-1, hib) // tick 99: 10 + 50 passed
	if !slices.Equal(got, []string{"c", "a"}) {
		t.Fatalf("hibernated %v, want c then a, in the order they slept", got)
	}
	if a.Sleeping() {
		t.Fatal("a follower waits to hibernate after every wait ended")
	}
}
