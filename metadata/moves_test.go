package metadata

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

// settleAll settles every leaving replica, as the groups' leaders do once
// their membership changes are applied.
func settleAll(t *testing.T, s *Store) {
	t.Helper()
	for _, p := range s.Snapshot().Partitions {
		for _, n := range p.Leaving {
			mustApply(t, s, SettleReplicas{NS: p.NS, CreatedRevision: p.CreatedRevision, Node: n})
		}
	}
}

// threeNodes is a store's configuration on nodes 1–3.
var threeNodes = Config{Shards: 3, Assign: testAssign, Nodes: []uint64{1, 2, 3}}

// checkMoveInvariants checks what every move must keep: each partition has
// its factor of distinct replicas, none of them draining, leaving nodes
// are not replicas, joined ones are replicas or leaving.
func checkMoveInvariants(t *testing.T, s *Store) {
	t.Helper()
	draining := s.Draining()
	for _, p := range s.Snapshot().Partitions {
		tp, _ := s.Topic(p.Stream, p.Topic)
		if len(p.Replicas) != tp.Config.Replicas || len(slices.Compact(slices.Sorted(slices.Values(p.Replicas)))) != len(p.Replicas) {
			t.Fatalf("partition %v: replicas %v, want %d distinct", p.NS, p.Replicas, tp.Config.Replicas)
		}
		for _, n := range p.Replicas {
			if slices.Contains(draining, n) {
				t.Fatalf("partition %v: replica on draining node %d", p.NS, n)
			}
		}
		if err := checkMoves(PartitionSnapshot{Replicas: p.Replicas, Leaving: p.Leaving, Joined: p.Joined, Generation: p.Generation}, s.Nodes()); err != nil {
			t.Fatalf("partition %v: %v", p.NS, err)
		}
		if q, _ := s.Partition(p.NS); !reflect.DeepEqual(q, p) {
			t.Fatalf("partition %v: lookup %+v, listing %+v", p.NS, q, p)
		}
	}
}

func TestDrainAndRemoveNode(t *testing.T) {
	nodes := []uint64{1, 2, 3, 4}
	s := clusterStore(t, nodes...)
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 40, Config: TopicConfig{Replicas: 3}})
	if _, err := s.Apply(RemoveNode{Node: 2}); !errors.Is(err, ErrNodeBusy) {
		t.Fatalf("RemoveNode before draining: %v, want ErrNodeBusy", err)
	}
	before := s.Revision()
	mustApply(t, s, DrainNode{Node: 2})
	if s.Revision() != before+1 {
		t.Fatalf("revision %d after DrainNode, want %d", s.Revision(), before+1)
	}
	checkMoveInvariants(t, s)
	moved := 0
	for _, p := range s.Snapshot().Partitions {
		if slices.Contains(p.Replicas, 2) {
			t.Fatalf("partition %v still placed on drained node 2: %v", p.NS, p.Replicas)
		}
		if slices.Contains(p.Leaving, 2) {
			moved++
			if !p.Holds(2) || len(p.Joined) != 1 || !p.Joins(p.Joined[0]) || p.Joins(2) {
				t.Fatalf("partition %v: leaving %v joined %v", p.NS, p.Leaving, p.Joined)
			}
		}
	}
	if moved != 30 { // 40 partitions × 3 replicas over 4 nodes
		t.Fatalf("%d partitions moved off node 2, want 30", moved)
	}
	load, _ := counts(s)
	if lo, hi := spread(load, []uint64{1, 3, 4}); hi-lo > 1 || load[2] != 0 {
		t.Fatalf("replicas per node after draining 2: %v", load)
	}
	// New topics avoid the drained node, and so does the default factor.
	res := mustApply(t, s, CreateTopic{Stream: 0, Name: "u", Partitions: 6})
	for _, p := range res.Created {
		if slices.Contains(p.Replicas, 2) || len(p.Replicas) != 3 {
			t.Fatalf("new partition on %v", p.Replicas)
		}
	}
	if _, err := s.Apply(CreateTopic{Stream: 0, Name: "v", Partitions: 1, Config: TopicConfig{Replicas: 4}}); !errors.Is(err, ErrInvalidTopicConfig) {
		t.Fatalf("factor 4 with a node draining: %v", err)
	}
	// Still leaving: not removable.
	if _, err := s.Apply(RemoveNode{Node: 2}); !errors.Is(err, ErrNodeBusy) {
		t.Fatalf("RemoveNode while replicas leave: %v, want ErrNodeBusy", err)
	}
	if _, held := s.Moving(2); held != 30 {
		t.Fatalf("Moving(2) holds %d", held)
	}
	// A settle of the wrong incarnation, or of a node not leaving, is a
	// no-op that does not bump the revision.
	p := s.Snapshot().Partitions[0]
	rev := s.Revision()
	mustApply(t, s, SettleReplicas{NS: p.NS, CreatedRevision: p.CreatedRevision + 1, Node: 2})
	mustApply(t, s, SettleReplicas{NS: p.NS, CreatedRevision: p.CreatedRevision, Node: 9})
	if s.Revision() != rev {
		t.Fatalf("no-op settles bumped the revision %d → %d", rev, s.Revision())
	}
	settleAll(t, s)
	checkMoveInvariants(t, s)
	if moving, held := s.Moving(2); moving != 0 || held != 0 {
		t.Fatalf("after settling: moving %d, node 2 holds %d", moving, held)
	}
	mustApply(t, s, RemoveNode{Node: 2})
	if got := s.Nodes(); !slices.Equal(got, []uint64{1, 3, 4}) || len(s.Draining()) != 0 {
		t.Fatalf("nodes %v draining %v after RemoveNode", got, s.Draining())
	}
	// Down to three nodes, a factor-3 partition cannot leave another one.
	before = s.Revision()
	if _, err := s.Apply(DrainNode{Node: 3}); !errors.Is(err, ErrNotEnoughNodes) {
		t.Fatalf("draining below the factor: %v, want ErrNotEnoughNodes", err)
	}
	if s.Revision() != before || len(s.Draining()) != 0 {
		t.Fatal("a failed DrainNode changed the store")
	}
	// The node can come back.
	mustApply(t, s, AddNode{Node: 2})
	for _, bad := range []Command{DrainNode{Node: 9}, RemoveNode{Node: 0}, DrainNode{}} {
		if _, err := s.Apply(bad); !errors.Is(err, ErrInvalidNode) {
			t.Errorf("%#v: %v, want ErrInvalidNode", bad, err)
		}
	}
}

func TestRebalanceAfterAddNode(t *testing.T) {
	s := clusterStore(t, 1, 2, 3)
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 60, Config: TopicConfig{Replicas: 3}})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "u", Partitions: 7, Config: TopicConfig{Replicas: 2}})
	mustApply(t, s, AddNode{Node: 4})
	mustApply(t, s, AddNode{Node: 5})
	nodes := []uint64{1, 2, 3, 4, 5}
	for round := 0; ; round++ {
		if round > 10 {
			t.Fatal("Rebalance does not converge")
		}
		mustApply(t, s, Rebalance{})
		checkMoveInvariants(t, s)
		if moving, _ := s.Moving(0); moving == 0 {
			break
		}
		settleAll(t, s)
	}
	load, leads := counts(s)
	if lo, hi := spread(load, nodes); hi-lo > 1 {
		t.Errorf("replicas per node after rebalancing: %v", load)
	}
	if lo, hi := spread(leads, nodes); hi-lo > 1 {
		t.Errorf("preferred leaders per node after rebalancing: %v", leads)
	}
	// Balanced: one more Rebalance moves nothing and wakes no one.
	wake, cancel := s.Subscribe()
	defer cancel()
	mustApply(t, s, Rebalance{})
	select {
	case <-wake:
		t.Fatal("a Rebalance that moved nothing woke the subscribers")
	default:
	}
	if moving, _ := s.Moving(0); moving != 0 {
		t.Fatalf("a balanced store moved %d partitions", moving)
	}
}

func TestMovesRestoreAndReplay(t *testing.T) {
	// Two stores applying the same commands agree, and a restore of the
	// exported state mid-move applies the rest identically.
	cmds := []Command{
		CreateTopic{Stream: 0, Name: "t", Partitions: 20, Config: TopicConfig{Replicas: 2}},
		AddNode{Node: 4}, Rebalance{}, DrainNode{Node: 1},
	}
	a, b := clusterStore(t, 1, 2, 3), clusterStore(t, 1, 2, 3)
	for _, c := range cmds {
		mustApply(t, a, c)
		mustApply(t, b, c)
	}
	if !reflect.DeepEqual(a.Export(), b.Export()) {
		t.Fatal("two stores applying the same moves disagree")
	}
	r := roundTrip(t, a, threeNodes)
	if !reflect.DeepEqual(r.Export(), a.Export()) || !reflect.DeepEqual(r.Snapshot(), a.Snapshot()) {
		t.Fatal("restored store differs")
	}
	settleAll(t, a)
	settleAll(t, r)
	mustApply(t, a, RemoveNode{Node: 1})
	mustApply(t, r, RemoveNode{Node: 1})
	if !reflect.DeepEqual(r.Export(), a.Export()) {
		t.Fatal("restored store applies later moves differently")
	}
}

func TestRestoreRejectsBadMoves(t *testing.T) {
	valid := func() StoreSnapshot {
		return StoreSnapshot{Revision: 5, Nodes: []uint64{1, 2, 3, 4}, Streams: []StreamSnapshot{{ID: 0, Name: "s", CreatedRevision: 1, Topics: []TopicSnapshot{
			{ID: 0, Name: "t", CreatedRevision: 2, Config: TopicConfig{Replicas: 2}, Partitions: []PartitionSnapshot{
				{CreatedRevision: 2, Replicas: []uint64{1, 2}, Leaving: []uint64{3}, Joined: []uint64{2}}}},
		}}}}
	}
	if _, err := Restore(Config{Shards: 3, Assign: testAssign}, valid()); err != nil {
		t.Fatalf("valid snapshot: %v", err)
	}
	cases := map[string]func(*StoreSnapshot){
		"draining a stranger":    func(s *StoreSnapshot) { s.Draining = []uint64{9} },
		"draining not ascending": func(s *StoreSnapshot) { s.Draining = []uint64{3, 2} },
		"leaving a stranger":     func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Leaving = []uint64{9} },
		"leaving a replica":      func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Leaving = []uint64{1} },
		"leaving twice":          func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Leaving = []uint64{3, 3} },
		"joined a stranger":      func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Joined = []uint64{4} },
		"joined twice":           func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Joined = []uint64{2, 2} },
		"generation beyond":      func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Replicas = []uint64{1, 1<<32 | 2} },
		"node twice by id":       func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Replicas = []uint64{1, 1<<32 | 1} },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			snap := valid()
			mutate(&snap)
			if _, err := Restore(Config{Shards: 3, Assign: testAssign}, snap); !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("Restore: %v, want ErrInvalidSnapshot", err)
			}
		})
	}
}

func TestMoveCommandsRoundTrip(t *testing.T) {
	for _, c := range []Command{
		DrainNode{Node: 7}, RemoveNode{Node: 300}, Rebalance{},
		SettleReplicas{NS: 1<<40 | 5, CreatedRevision: 12, Node: 3},
		&DrainNode{Node: 1}, &Rebalance{},
	} {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommand(b)
		want, _ := deref(c)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeCommand(EncodeCommand(%#v)) = %#v, %v", c, got, err)
		}
		// A version 2 (a revision) of a command naming no incarnation is
		// not canonical.
		v2 := slices.Clone(b)
		v2[1] = 2
		v2 = append(v2, 1)
		if _, err := DecodeCommand(v2); !errors.Is(err, ErrInvalidEncoding) {
			t.Fatalf("version 2 of %#v decoded: %v", c, err)
		}
	}
}
