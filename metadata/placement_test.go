package metadata

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func clusterStore(t testing.TB, nodes ...uint64) *Store {
	t.Helper()
	s, err := NewStore(Config{Shards: 3, Assign: testAssign, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, CreateStream{Name: "s"})
	return s
}

// counts tallies the replicas and preferred leaderships per node.
func counts(s *Store) (load, leads map[uint64]int) {
	load, leads = map[uint64]int{}, map[uint64]int{}
	for _, p := range s.Snapshot().Partitions {
		for i, n := range p.Replicas {
			load[n]++
			if i == 0 {
				leads[n]++
			}
		}
	}
	return load, leads
}

func spread(m map[uint64]int, nodes []uint64) (lo, hi int) {
	lo = -1
	for _, n := range nodes {
		v := m[n]
		if lo < 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	return lo, hi
}

func TestPlacementIsBalanced(t *testing.T) {
	nodes := []uint64{1, 2, 3, 4, 5}
	s := clusterStore(t, nodes...)
	// Topics of awkward sizes, one after the other: the balance holds
	// across topics, not only within one.
	for i, n := range []int{100, 7, 1, 13, 29} {
		res := mustApply(t, s, CreateTopic{Stream: 0, Name: fmt.Sprint("t", i), Partitions: n, Config: TopicConfig{Replicas: 3}})
		for _, p := range res.Created {
			if len(p.Replicas) != 3 || len(slices.Compact(slices.Sorted(slices.Values(p.Replicas)))) != 3 {
				t.Fatalf("partition %v: replicas %v, want 3 distinct", p.NS, p.Replicas)
			}
			for _, r := range p.Replicas {
				if !slices.Contains(nodes, r) {
					t.Fatalf("partition %v on unknown node %d", p.NS, r)
				}
			}
		}
		load, leads := counts(s)
		if lo, hi := spread(load, nodes); hi-lo > 1 {
			t.Errorf("after topic %d: replicas per node %v, spread %d..%d", i, load, lo, hi)
		}
		if lo, hi := spread(leads, nodes); hi-lo > 1 {
			t.Errorf("after topic %d: preferred leaders per node %v, spread %d..%d", i, leads, lo, hi)
		}
	}
	// Deleting a topic frees its replicas: the next topic fills the gap
	// and the balance holds.
	mustApply(t, s, DeleteTopic{Stream: 0, Topic: 0})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "again", Partitions: 31, Config: TopicConfig{Replicas: 2}})
	mustApply(t, s, DeletePartitions{Stream: 0, Topic: 3, Count: 5})
	mustApply(t, s, CreatePartitions{Stream: 0, Topic: 3, Count: 9})
	load, leads := counts(s)
	if lo, hi := spread(load, nodes); hi-lo > 2 {
		t.Errorf("after deletes: replicas per node %v, spread %d..%d", load, lo, hi)
	}
	if lo, hi := spread(leads, nodes); hi-lo > 1 {
		t.Errorf("after deletes: preferred leaders per node %v, spread %d..%d", leads, lo, hi)
	}
	if got := s.place; !reflect.DeepEqual(got.load, load) || !reflect.DeepEqual(got.leads, leads) {
		t.Errorf("placement counts %v/%v, partitions say %v/%v", got.load, got.leads, load, leads)
	}
}

func TestReplicationFactor(t *testing.T) {
	s := clusterStore(t, 7, 3)
	res := mustApply(t, s, CreateTopic{Stream: 0, Name: "default", Partitions: 2})
	if ti, _ := s.Topic(0, res.Topic); ti.Config.Replicas != 2 || len(res.Created[0].Replicas) != 2 {
		t.Errorf("default factor on 2 nodes: config %d, replicas %v; want 2", ti.Config.Replicas, res.Created[0].Replicas)
	}
	if _, err := s.Apply(CreateTopic{Stream: 0, Name: "big", Partitions: 1, Config: TopicConfig{Replicas: 3}}); !errors.Is(err, ErrInvalidTopicConfig) {
		t.Errorf("factor 3 on 2 nodes: %v, want ErrInvalidTopicConfig", err)
	}
	if _, err := s.Apply(CreateTopic{Stream: 0, Name: "huge", Partitions: 1, Config: TopicConfig{Replicas: MaxReplicas + 1}}); !errors.Is(err, ErrInvalidTopicConfig) {
		t.Errorf("factor %d: %v, want ErrInvalidTopicConfig", MaxReplicas+1, err)
	}
	one := mustApply(t, s, CreateTopic{Stream: 0, Name: "one", Partitions: 4, Config: TopicConfig{Replicas: 1}})
	for _, p := range one.Created {
		if len(p.Replicas) != 1 {
			t.Errorf("factor 1: replicas %v", p.Replicas)
		}
	}
	// The factor is fixed: 0 keeps it, another value is refused.
	if _, err := s.Apply(SetTopicConfig{Stream: 0, Topic: one.Topic, Config: TopicConfig{Replicas: 2}}); !errors.Is(err, ErrInvalidTopicConfig) {
		t.Errorf("changing the factor: %v, want ErrInvalidTopicConfig", err)
	}
	mustApply(t, s, SetTopicConfig{Stream: 0, Topic: one.Topic, Config: TopicConfig{Fsync: FsyncAlways}})
	if ti, _ := s.Topic(0, one.Topic); ti.Config.Replicas != 1 || ti.Config.Fsync != FsyncAlways {
		t.Errorf("config after SetTopicConfig with factor 0: %+v", ti.Config)
	}
	grown := mustApply(t, s, CreatePartitions{Stream: 0, Topic: one.Topic, Count: 2})
	if len(grown.Created[0].Replicas) != 1 {
		t.Errorf("added partition of a factor-1 topic: replicas %v", grown.Created[0].Replicas)
	}

	// A single node: no replica sets; a factor above 1 is refused.
	single := newTestStore(t)
	mustApply(t, single, CreateStream{Name: "s"})
	if _, err := single.Apply(CreateTopic{Stream: 0, Name: "r2", Partitions: 1, Config: TopicConfig{Replicas: 2}}); !errors.Is(err, ErrInvalidTopicConfig) {
		t.Errorf("factor 2 on a single node: %v, want ErrInvalidTopicConfig", err)
	}
	r1 := mustApply(t, single, CreateTopic{Stream: 0, Name: "r1", Partitions: 1, Config: TopicConfig{Replicas: 1}})
	if r1.Created[0].Replicas != nil || !r1.Created[0].Holds(12345) {
		t.Errorf("single node partition: replicas %v", r1.Created[0].Replicas)
	}
}

func TestNodesConfigValidated(t *testing.T) {
	for _, nodes := range [][]uint64{{0, 1}, {1, 2, 1}} {
		if _, err := NewStore(Config{Shards: 1, Assign: testAssign, Nodes: nodes}); err == nil {
			t.Errorf("nodes %v accepted", nodes)
		}
	}
}

// TestPlacementRestores: a cluster store restored from its snapshot places
// the next partitions exactly as the original does — the placement counts
// are rebuilt from the replica sets.
func TestPlacementRestores(t *testing.T) {
	cfg := Config{Shards: 3, Assign: testAssign, Nodes: []uint64{4, 1, 9}}
	rng := rand.New(rand.NewPCG(3, 9))
	orig, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 600 {
		orig.Apply(randomCommandWithConfig(rng, orig)) //nolint:errcheck
	}
	if len(orig.Snapshot().Partitions) == 0 {
		t.Fatal("workload created no partitions")
	}
	// Restored with another node list: the snapshot's own wins.
	restored := roundTrip(t, orig, Config{Shards: 3, Assign: testAssign, Nodes: []uint64{5}})
	sameStores(t, orig, restored)
	if !reflect.DeepEqual(restored.Nodes(), []uint64{1, 4, 9}) {
		t.Errorf("restored nodes %v", restored.Nodes())
	}
	for i := range 600 {
		cmd := randomCommandWithConfig(rng, orig)
		ra, ea := orig.Apply(cmd)
		rb, eb := restored.Apply(cmd)
		if !reflect.DeepEqual(ra, rb) || fmt.Sprint(ea) != fmt.Sprint(eb) {
			t.Fatalf("step %d %#v: %+v %v vs %+v %v", i, cmd, ra, ea, rb, eb)
		}
	}
	sameStores(t, orig, restored)
}

func TestRestoreRejectsBadReplicas(t *testing.T) {
	base := func() StoreSnapshot {
		return StoreSnapshot{Revision: 5, Nodes: []uint64{1, 2, 3}, Streams: []StreamSnapshot{{ID: 0, Name: "s", CreatedRevision: 1, Topics: []TopicSnapshot{
			{ID: 0, Name: "t", CreatedRevision: 2, Config: TopicConfig{Replicas: 2}, Partitions: []PartitionSnapshot{{CreatedRevision: 2, Replicas: []uint64{2, 3}}}},
		}}}}
	}
	cfg := Config{Shards: 3, Assign: testAssign}
	if _, err := Restore(cfg, base()); err != nil {
		t.Fatalf("valid snapshot refused: %v", err)
	}
	cases := map[string]func(*StoreSnapshot){
		"unknown node":        func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Replicas = []uint64{2, 4} },
		"node twice":          func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Replicas = []uint64{2, 2} },
		"count not factor":    func(s *StoreSnapshot) { s.Streams[0].Topics[0].Partitions[0].Replicas = []uint64{1} },
		"nodes unsorted":      func(s *StoreSnapshot) { s.Nodes = []uint64{3, 1, 2} },
		"node zero":           func(s *StoreSnapshot) { s.Nodes = []uint64{0, 1, 2, 3} },
		"replicas, 1 node":    func(s *StoreSnapshot) { s.Nodes = nil },
		"factor out of range": func(s *StoreSnapshot) { s.Streams[0].Topics[0].Config.Replicas = MaxReplicas + 1 },
	}
	for name, mutate := range cases {
		snap := base()
		mutate(&snap)
		if _, err := Restore(cfg, snap); !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrInvalidSnapshot", name, err)
		}
	}
}

// AddNode grows the node set: partitions created after it are placed over
// the new node too, the ones before stay; the nodes survive a snapshot.
func TestAddNode(t *testing.T) {
	s := clusterStore(t, 1, 2, 3)
	before := mustApply(t, s, CreateTopic{Stream: 0, Name: "before", Partitions: 6})
	for _, c := range []AddNode{{Node: 0}, {Node: 2}} {
		if _, err := s.Apply(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := s.Apply(AddNode{Node: 2}); !errors.Is(err, ErrNodeExists) {
		t.Errorf("AddNode of a member: %v, want ErrNodeExists", err)
	}
	res := mustApply(t, s, AddNode{Node: 4})
	if res.Revision != s.Revision() || !reflect.DeepEqual(s.Nodes(), []uint64{1, 2, 3, 4}) {
		t.Fatalf("after AddNode: revision %d/%d, nodes %v", res.Revision, s.Revision(), s.Nodes())
	}
	for _, p := range before.Created {
		got, _ := s.Partition(p.NS)
		if !reflect.DeepEqual(got.Replicas, p.Replicas) {
			t.Errorf("partition %v moved: %v -> %v", p.NS, p.Replicas, got.Replicas)
		}
	}
	after := mustApply(t, s, CreateTopic{Stream: 0, Name: "after", Partitions: 6})
	on4 := 0
	for _, p := range after.Created {
		if slices.Contains(p.Replicas, 4) {
			on4++
		}
	}
	// The new node holds nothing yet: it takes replicas first.
	if on4 != 6 {
		t.Errorf("the new node holds %d of the 6 new partitions, want all 6", on4)
	}
	restored := roundTrip(t, s, threeNodes)
	if !reflect.DeepEqual(restored.Nodes(), []uint64{1, 2, 3, 4}) {
		t.Errorf("restored nodes %v", restored.Nodes())
	}
	single := newTestStore(t)
	if _, err := single.Apply(AddNode{Node: 2}); !errors.Is(err, ErrInvalidNode) {
		t.Errorf("AddNode on a single node: %v, want ErrInvalidNode", err)
	}
}
