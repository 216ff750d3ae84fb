package metadata

import "github.com/google/btree"

// slab allocates ids lowest-free-first from 0..max.
//
// Its representation is canonical: next is one past the highest occupied id
// (0 when empty) and free holds exactly the unoccupied ids below next. Two
// slabs with the same occupied set are therefore identical, whatever order
// of allocations and releases produced them, and so is every id they hand
// out next. Allocation is O(log n) and never scans the id range: it takes the
// smallest hole, or next when there is none.
type slab struct {
	max  uint32
	next uint64 // uint64 so max+1 cannot overflow
	free *btree.BTreeG[uint32]
}

func newSlab(max uint32) slab {
	return slab{max: max, free: btree.NewOrderedG[uint32](8)}
}

// peek returns the id alloc would return, or false if the slab is full.
func (s *slab) peek() (uint32, bool) {
	if id, ok := s.free.Min(); ok {
		return id, true
	}
	if s.next > uint64(s.max) {
		return 0, false
	}
	return uint32(s.next), true
}

// alloc takes the lowest free id, or reports false if the slab is full.
func (s *slab) alloc() (uint32, bool) {
	if id, ok := s.free.DeleteMin(); ok {
		return id, true
	}
	if s.next > uint64(s.max) {
		return 0, false
	}
	id := uint32(s.next)
	s.next++
	return id, true
}

// release frees an occupied id.
func (s *slab) release(id uint32) {
	if uint64(id)+1 != s.next {
		s.free.ReplaceOrInsert(id)
		return
	}
	// Releasing the top id: lower the high-water mark past any holes
	// directly below it, keeping the representation canonical.
	s.next--
	for {
		top, ok := s.free.Max()
		if !ok || uint64(top)+1 != s.next {
			return
		}
		s.free.DeleteMax()
		s.next--
	}
}

// len returns the number of occupied ids.
func (s *slab) len() int { return int(s.next) - s.free.Len() }
