package raftid

import (
	"errors"
	"testing"
)

func TestGenerationZeroIsTheNodeID(t *testing.T) {
	for _, n := range []uint64{1, 2, 3, 1000, MaxNode} {
		if id := ID(n, 0); id != n {
			t.Fatalf("ID(%d, 0) = %d, want the node id (raft logs written before replica ids name node ids)", n, id)
		}
	}
}

func TestIDRoundTrips(t *testing.T) {
	seen := map[uint64][2]uint64{}
	for _, n := range []uint64{1, 2, 3, 7, 1 << 20, MaxNode} {
		for _, g := range []uint64{0, 1, 2, 255, 1 << 20, MaxGen} {
			id := ID(n, g)
			if Node(id) != n || Gen(id) != g {
				t.Fatalf("ID(%d, %d) = %#x, decodes to node %d gen %d", n, g, id, Node(id), Gen(id))
			}
			if err := Check(id); err != nil {
				t.Fatalf("Check(ID(%d, %d)): %v", n, g, err)
			}
			if p, dup := seen[id]; dup {
				t.Fatalf("ID(%d, %d) = ID(%d, %d) = %#x", n, g, p[0], p[1], id)
			}
			seen[id] = [2]uint64{n, g}
		}
	}
	// A new generation is an id the group never saw, on the same node.
	if a, b := ID(3, 0), ID(3, 1); a == b || Node(a) != Node(b) {
		t.Fatalf("generations 0 and 1 of node 3: %#x, %#x", a, b)
	}
}

func TestCheckNode(t *testing.T) {
	for _, n := range []uint64{1, 42, MaxNode} {
		if err := CheckNode(n); err != nil {
			t.Fatalf("CheckNode(%d): %v", n, err)
		}
	}
	for _, n := range []uint64{0, MaxNode + 1, 1 << 40, ^uint64(0)} {
		if err := CheckNode(n); !errors.Is(err, ErrInvalid) {
			t.Fatalf("CheckNode(%d) = %v, want ErrInvalid", n, err)
		}
	}
	if err := Check(1 << NodeBits); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Check of an id naming node 0 = %v, want ErrInvalid", err)
	}
}

func TestIDRefusesOutOfRange(t *testing.T) {
	for _, c := range []struct{ node, gen uint64 }{{0, 0}, {MaxNode + 1, 0}, {1, MaxGen + 1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ID(%d, %d) did not panic", c.node, c.gen)
				}
			}()
			ID(c.node, c.gen)
		}()
	}
}
