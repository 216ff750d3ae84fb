package metadata

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// scanMoving is what Moving answered before the placement counted it: a
// scan of every partition. The test's oracle.
func scanMoving(s *Store, node uint64) (moving, held int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.eachPartition(func(r partitionRef) {
		p := r.t.parts[r.i]
		if len(p.Leaving) > 0 {
			moving++
		}
		if node != 0 && len(p.Replicas) > 0 && p.Holds(node) {
			held++
		}
	})
	return moving, held
}

// checkMovingCounts compares the placement's counts with a scan, for
// every node the store has or had.
func checkMovingCounts(t *testing.T, s *Store, nodes []uint64, step string) {
	t.Helper()
	for _, n := range append([]uint64{0}, nodes...) {
		m, h := s.Moving(n)
		wm, wh := scanMoving(s, n)
		if m != wm || h != wh {
			t.Fatalf("after %s: Moving(%d) = %d, %d; a scan finds %d, %d", step, n, m, h, wm, wh)
		}
	}
	load, leads := counts(s)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, n := range s.place.nodes {
		if s.place.load[n] != load[n] || s.place.leads[n] != leads[n] {
			t.Fatalf("after %s: node %d counted %d replicas and %d leads, a scan %d and %d",
				step, n, s.place.load[n], s.place.leads[n], load[n], leads[n])
		}
	}
	for n, c := range s.place.held {
		if c != 0 && !slices.Contains(s.place.nodes, n) {
			t.Fatalf("after %s: removed node %d counted holding %d partitions", step, n, c)
		}
	}
}

// randomMoveCommand is one command of a random walk over the store: a
// partition-shaping one (randomCommand) or a membership one. Many fail (a
// name taken, a node that cannot be drained), which must change no count
// either.
func randomMoveCommand(r *rand.Rand, s *Store, nextNode *uint64) Command {
	nodes := s.Nodes()
	pick := func() uint64 {
		if len(nodes) == 0 {
			return 1
		}
		return nodes[r.IntN(len(nodes))]
	}
	switch k := r.IntN(20); {
	case k < 8:
		return randomCommand(r, s)
	case k < 10:
		// Topics of every replication factor (randomCommand's take the
		// default).
		var st uint32
		if streams := s.Streams(); len(streams) > 0 {
			st = streams[r.IntN(len(streams))].ID
		}
		return CreateTopic{Stream: st, Name: fmt.Sprintf("r%d", r.IntN(8)), Partitions: 1 + r.IntN(12),
			Config: TopicConfig{Replicas: 1 + r.IntN(3)}}
	case k < 11 && len(nodes) < 6:
		*nextNode++
		return AddNode{Node: *nextNode}
	case k < 12:
		return DrainNode{Node: pick()}
	case k < 13:
		return RemoveNode{Node: pick()}
	case k < 15:
		return Rebalance{}
	default:
		// Settle a leaving replica (or, when none is, a no-op settle).
		var leaving []SettleReplicas
		for _, p := range s.Snapshot().Partitions {
			for _, n := range p.Leaving {
				leaving = append(leaving, SettleReplicas{NS: p.NS, CreatedRevision: p.CreatedRevision, Node: n})
			}
		}
		if len(leaving) == 0 {
			return SettleReplicas{Node: pick()}
		}
		return leaving[r.IntN(len(leaving))]
	}
}

// After any sequence of commands, restores and snapshot installs, the
// counts Moving answers from equal a scan of the partitions.
func TestMovingCountsMatchAScan(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0x6d6f76696e67))
			nodes := []uint64{1, 2, 3}
			if seed%8 == 7 {
				nodes = nil // a single node: nothing is placed or moves
			}
			cfg := Config{Shards: 3, Assign: testAssign, Nodes: nodes}
			s, err := NewStore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			nextNode := uint64(3)
			applied := map[string]int{} // commands applied, by type
			for step := range 400 {
				var what string
				switch k := r.IntN(40); {
				case k == 0:
					// A restart: the store is rebuilt from its encoded snapshot.
					enc, err := EncodeSnapshot(s.Export())
					if err != nil {
						t.Fatal(err)
					}
					snap, err := DecodeSnapshot(enc)
					if err != nil {
						t.Fatal(err)
					}
					if s, err = Restore(cfg, snap); err != nil {
						t.Fatal(err)
					}
					what = "a restore"
				case k == 1:
					// A lagging replica is sent the leader's state whole.
					lead, err := Restore(cfg, s.Export())
					if err != nil {
						t.Fatal(err)
					}
					for range 5 {
						_, _ = lead.Apply(randomMoveCommand(r, lead, &nextNode))
					}
					if err := s.Replace(lead.Export()); err != nil {
						t.Fatal(err)
					}
					what = "a snapshot install"
				default:
					cmd := randomMoveCommand(r, s, &nextNode)
					_, err := s.Apply(cmd)
					what = fmt.Sprintf("%#v (error %v)", cmd, err)
					if err == nil {
						applied[fmt.Sprintf("%T", cmd)]++
					}
				}
				var all []uint64 // every node the store has or had
				for n := uint64(1); n <= nextNode; n++ {
					all = append(all, n)
				}
				checkMovingCounts(t, s, all, fmt.Sprintf("step %d, %s", step, what))
			}
			m, _ := s.Moving(0)
			s.mu.RLock()
			held := maps.Clone(s.place.held)
			s.mu.RUnlock()
			t.Logf("%d partitions, %d moving, held %v; applied %v", len(s.Snapshot().Partitions), m, held, applied)
		})
	}
}

// benchStore is a store of 100,000 partitions (100 topics of 1,000) on
// five nodes, one node drained: a third of them moving.
func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := NewStore(Config{Shards: 8, Assign: testAssign, Nodes: []uint64{1, 2, 3, 4, 5}})
	if err != nil {
		b.Fatal(err)
	}
	mustApply(b, s, CreateStream{Name: "s"})
	for i := range 100 {
		mustApply(b, s, CreateTopic{Stream: 0, Name: fmt.Sprintf("t%d", i), Partitions: 1000})
	}
	mustApply(b, s, DrainNode{Node: 5})
	return s
}

func BenchmarkMoving100kPartitions(b *testing.B) {
	s := benchStore(b)
	for b.Loop() {
		s.Moving(5)
	}
}
