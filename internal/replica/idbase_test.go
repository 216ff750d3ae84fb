package replica

import "testing"

// Drawing an id base allocates nothing (every raft group draws one when
// it starts; see IDBase).
func TestIDBaseAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation makes the random bytes escape")
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := IDBase(); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("IDBase allocated %v objects, want 0", allocs)
	}
}
