package metadata

import (
	"math/rand/v2"
	"testing"
)

func allocN(t *testing.T, s *slab, n int) []uint32 {
	t.Helper()
	var ids []uint32
	for range n {
		id, ok := s.alloc()
		if !ok {
			t.Fatalf("alloc failed after %v", ids)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestSlabLowestFirst(t *testing.T) {
	s := newSlab(9)
	if got := allocN(t, &s, 5); !equalIDs(got, 0, 1, 2, 3, 4) {
		t.Fatalf("first ids = %v", got)
	}
	s.release(3)
	s.release(1)
	if id, _ := s.peek(); id != 1 {
		t.Errorf("peek = %d, want 1", id)
	}
	if got := allocN(t, &s, 3); !equalIDs(got, 1, 3, 5) {
		t.Errorf("after releasing 3 and 1: %v, want [1 3 5]", got)
	}
	if s.len() != 6 {
		t.Errorf("len = %d, want 6", s.len())
	}
}

func TestSlabFull(t *testing.T) {
	s := newSlab(2)
	allocN(t, &s, 3)
	if _, ok := s.peek(); ok {
		t.Error("peek on a full slab succeeded")
	}
	if _, ok := s.alloc(); ok {
		t.Error("alloc on a full slab succeeded")
	}
	s.release(2)
	if id, ok := s.alloc(); !ok || id != 2 {
		t.Errorf("alloc after release = %d, %v; want 2, true", id, ok)
	}
	full := newSlab(MaxStreamID)
	full.next = uint64(MaxStreamID) + 1
	if _, ok := full.alloc(); ok {
		t.Error("alloc past MaxStreamID succeeded")
	}
}

// TestSlabCanonical checks that the slab's state is a pure function of its
// occupied set, whatever history produced it.
func TestSlabCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		a := newSlab(63)
		occupied := map[uint32]bool{}
		for range 100 {
			if rng.IntN(3) > 0 {
				if id, ok := a.alloc(); ok {
					occupied[id] = true
				}
			} else if len(occupied) > 0 {
				// Release a pseudo-random occupied id, chosen without
				// iterating the map.
				for id := uint32(rng.IntN(64)); ; id = (id + 1) % 64 {
					if occupied[id] {
						a.release(id)
						delete(occupied, id)
						break
					}
				}
			}
		}
		// Build the same occupied set the direct way.
		b := newSlab(63)
		allocN(t, &b, 64)
		for id := uint32(0); id < 64; id++ {
			if !occupied[id] {
				b.release(id)
			}
		}
		if a.next != b.next || a.len() != b.len() || a.len() != len(occupied) {
			t.Fatalf("round %d: next %d/%d len %d/%d, want len %d", round, a.next, b.next, a.len(), b.len(), len(occupied))
		}
		for {
			x, okA := a.alloc()
			y, okB := b.alloc()
			if x != y || okA != okB {
				t.Fatalf("round %d: slabs diverge: %d,%v vs %d,%v", round, x, okA, y, okB)
			}
			if !okA {
				break
			}
			if occupied[x] {
				t.Fatalf("round %d: alloc returned occupied id %d", round, x)
			}
		}
	}
}

func equalIDs(got []uint32, want ...uint32) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
