package metadata

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/parkway-io/parkway/internal/raftid"
)

// TestReseedReplica pins the metadata side of re-seeding a replica whose
// raft log was lost: the node keeps its place in the replica set under a
// raft id the group never had (the next generation), joining as a
// newcomer, while the old id leaves as a moved replica does.
func TestReseedReplica(t *testing.T) {
	s := clusterStore(t, 1, 2, 3)
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 1, Config: TopicConfig{Replicas: 3}})
	p := s.Snapshot().Partitions[0]
	old := p.Replicas[0] // the preferred leader: the new copy must not lead until whole
	node := old
	rev := s.Revision()
	mustApply(t, s, ReseedReplica{NS: p.NS, CreatedRevision: p.CreatedRevision, Replica: old})
	q, _ := s.Partition(p.NS)
	id := raftid.ID(node, 1)
	switch {
	case s.Revision() != rev+1:
		t.Fatalf("revision %d, want %d", s.Revision(), rev+1)
	case q.Generation != 1:
		t.Fatalf("generation %d, want 1", q.Generation)
	case !reflect.DeepEqual(q.Replicas, append(slices.Clone(p.Replicas[1:]), id)):
		t.Fatalf("replicas %#x, want %#x then the new id %#x last", q.Replicas, p.Replicas[1:], id)
	case !reflect.DeepEqual(q.Leaving, []uint64{old}) || !q.Joins(id) || q.Joins(old):
		t.Fatalf("leaving %#x joined %#x: want the old id leaving, the new one joining", q.Leaving, q.Joined)
	}
	if got, ok := q.ReplicaOf(node); !ok || got != id || !q.Holds(node) {
		t.Fatalf("ReplicaOf(%d) = %#x, %v; want the new id", node, got, ok)
	}
	if !reflect.DeepEqual(NodesOf(q.Replicas), append(slices.Clone(p.Replicas[1:]), node)) {
		t.Fatalf("NodesOf(%#x) = %v", q.Replicas, NodesOf(q.Replicas))
	}
	if moving, held := s.Moving(node); moving != 1 || held != 1 {
		t.Fatalf("Moving(%d) = %d, %d; want 1 partition moving, held once", node, moving, held)
	}
	checkMoveInvariants(t, s)

	// A repeat, or a reseed of another incarnation, changes nothing.
	rev = s.Revision()
	mustApply(t, s, ReseedReplica{NS: p.NS, CreatedRevision: p.CreatedRevision, Replica: old})
	mustApply(t, s, ReseedReplica{NS: p.NS, CreatedRevision: p.CreatedRevision + 1, Replica: id})
	if s.Revision() != rev {
		t.Fatalf("a repeated reseed moved the revision from %d to %d", rev, s.Revision())
	}

	// The snapshot carries the generation (version 6), and restores.
	enc, err := EncodeSnapshot(s.Export())
	if err != nil {
		t.Fatal(err)
	}
	if enc[0] != snapshotVersion {
		t.Fatalf("snapshot version %d, want %d", enc[0], snapshotVersion)
	}
	snap, err := DecodeSnapshot(enc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(Config{Shards: 3, Assign: testAssign, Nodes: []uint64{1, 2, 3}}, snap)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Export(), s.Export()) {
		t.Fatal("restored store differs")
	}

	// Settled, the old id is gone; the node keeps its new replica.
	settleAll(t, s)
	q, _ = s.Partition(p.NS)
	if len(q.Leaving) != 0 || !q.Holds(node) {
		t.Fatalf("after settling: leaving %#x, holds %v", q.Leaving, q.Holds(node))
	}
	// A second reseed takes the next generation.
	mustApply(t, s, ReseedReplica{NS: p.NS, CreatedRevision: p.CreatedRevision, Replica: id})
	q, _ = s.Partition(p.NS)
	if got, _ := q.ReplicaOf(node); got != raftid.ID(node, 2) {
		t.Fatalf("second reseed: %#x, want %#x", got, raftid.ID(node, 2))
	}
	settleAll(t, s)
	// From then on a move allocates a new generation too: no id the group
	// had comes back.
	mustApply(t, s, AddNode{Node: 4})
	mustApply(t, s, DrainNode{Node: node})
	q, _ = s.Partition(p.NS)
	if got, ok := q.ReplicaOf(4); !ok || got != raftid.ID(4, 3) || q.Generation != 3 {
		t.Fatalf("moved onto node 4: %#x (generation %d), want %#x", got, q.Generation, raftid.ID(4, 3))
	}
	checkMoveInvariants(t, s)
}

// TestSnapshotWithoutReseedKeepsVersion5: a cluster that never re-seeded a
// replica writes the snapshot version that versions before replica ids
// read; one with a generation writes version 6.
func TestSnapshotWithoutReseedKeepsVersion5(t *testing.T) {
	s := clusterStore(t, 1, 2, 3)
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 2, Config: TopicConfig{Replicas: 3}})
	enc, err := EncodeSnapshot(s.Export())
	if err != nil {
		t.Fatal(err)
	}
	if enc[0] != snapshotVersion5 {
		t.Fatalf("snapshot version %d, want %d", enc[0], snapshotVersion5)
	}
	snap := s.Export()
	snap.Streams[0].Topics[0].Partitions[0].Generation = 1
	v6, err := EncodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeSnapshot(v6); v6[0] != snapshotVersion || err != nil || !reflect.DeepEqual(got, snap) {
		t.Fatalf("version %d with a generation: %v", v6[0], err)
	}
}

// TestNodeIDsBoundedByReplicaIDs: a node id above 2^32-1 would be read
// as another node's replica of a later generation (internal/raftid): the
// store refuses it in AddNode, its config and a snapshot.
func TestNodeIDsBoundedByReplicaIDs(t *testing.T) {
	s := clusterStore(t, 1, 2, 3)
	if _, err := s.Apply(AddNode{Node: 1<<32 | 1}); !errors.Is(err, ErrInvalidNode) {
		t.Fatalf("AddNode of node 2^32+1: %v, want ErrInvalidNode", err)
	}
	mustApply(t, s, AddNode{Node: raftid.MaxNode})
	if _, err := NewStore(Config{Shards: 3, Assign: testAssign, Nodes: []uint64{1, 1 << 32}}); err == nil {
		t.Fatal("a config naming node 2^32 accepted")
	}
	snap := s.Export()
	snap.Nodes = append(snap.Nodes, 1<<33)
	if _, err := Restore(Config{Shards: 3, Assign: testAssign}, snap); !errors.Is(err, ErrInvalidSnapshot) {
		t.Fatalf("Restore of a snapshot naming node 2^33: %v, want ErrInvalidSnapshot", err)
	}
}

// TestReseedOfAJoiningReplicaRestores: a node whose re-seeded replica's
// raft log is damaged again before the first re-seed settled asks for a
// second one, and its node then has two ids leaving, the first
// generation's and the joiner's, beside the newest in the replica set:
// both are members of the group until it drops them. A snapshot of that
// state must restore, or a node that joins, or restarts from it, refuses
// it for good (cluster simulator seed 7060: a joiner refused the leader's
// snapshot, "node 1 leaving twice", and never learned the metadata).
func TestReseedOfAJoiningReplicaRestores(t *testing.T) {
	s := clusterStore(t, 1, 2, 3)
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 1, Config: TopicConfig{Replicas: 3}})
	p := s.Snapshot().Partitions[0]
	old := p.Replicas[0]
	node := old
	mustApply(t, s, ReseedReplica{NS: p.NS, CreatedRevision: p.CreatedRevision, Replica: old})
	joiner := raftid.ID(node, 1)
	mustApply(t, s, ReseedReplica{NS: p.NS, CreatedRevision: p.CreatedRevision, Replica: joiner})
	q, _ := s.Partition(p.NS)
	newest := raftid.ID(node, 2)
	if got, ok := q.ReplicaOf(node); !ok || got != newest || !slices.Contains(q.Leaving, old) || !slices.Contains(q.Leaving, joiner) {
		t.Fatalf("after the second re-seed: replicas %#x, leaving %#x; want %#x placed, %#x and %#x leaving", q.Replicas, q.Leaving, newest, old, joiner)
	}
	checkMoveInvariants(t, s)
	r := roundTrip(t, s, threeNodes)
	if !reflect.DeepEqual(r.Export(), s.Export()) {
		t.Fatal("restored store differs")
	}
	if moving, held := s.Moving(node); moving != 1 || held != 1 {
		t.Fatalf("Moving(%d) = %d, %d; want 1 partition moving, held once", node, moving, held)
	}
	settleAll(t, s)
	q, _ = s.Partition(p.NS)
	if len(q.Leaving) != 0 || !q.Holds(node) {
		t.Fatalf("after settling: leaving %#x, holds %v", q.Leaving, q.Holds(node))
	}
}

// TestReplicaOfALeavingNodeIsItsNewestID: a node whose replica was
// re-seeded twice and which then left the replica set has three ids
// leaving; its replica is the newest, whatever their order in Leaving.
func TestReplicaOfALeavingNodeIsItsNewestID(t *testing.T) {
	g0, g1, g2 := raftid.ID(2, 0), raftid.ID(2, 1), raftid.ID(2, 2)
	for _, leaving := range [][]uint64{{g0, g1, g2}, {g2, g0, g1}, {g1, 7, g2, g0}} {
		p := PartitionInfo{Replicas: []uint64{1, 3, raftid.ID(4, 3)}, Leaving: leaving}
		if got, ok := p.ReplicaOf(2); !ok || got != g2 {
			t.Errorf("Leaving %#x: ReplicaOf(2) = %#x, %v; want %#x", leaving, got, ok, g2)
		}
	}
	p := PartitionInfo{Replicas: []uint64{g2, 3}, Leaving: []uint64{g0, g1}}
	if got, _ := p.ReplicaOf(2); got != g2 {
		t.Errorf("ReplicaOf(2) = %#x, want the replica set's %#x", got, g2)
	}
	if _, ok := p.ReplicaOf(5); ok {
		t.Errorf("ReplicaOf(5) found a replica of a node holding none")
	}
}
