package metadata

import (
	"errors"
	"fmt"
	"slices"

	"github.com/parkway-io/parkway/internal/raftid"
)

// Moving replicas. A partition's replica set (PartitionInfo.Replicas) is
// the set its raft group should have; these commands change it, and the
// group's leader then changes the group's membership to match with raft
// configuration changes, one member at a time: the new replica is added
// first (it starts empty and is sent a snapshot, then fetches the
// partition log), the old one removed after. While that happens the old
// replica stays in PartitionInfo.Leaving — its node keeps it and serves
// the group as a voter — until the leader reports the group no longer
// counts it (SettleReplicas); only then does that node remove its copy.
// So every step keeps a quorum of replicas that hold every acknowledged
// write.
//
// Removing a node is two commands: DrainNode moves every replica off it
// and stops placing new ones on it; RemoveNode, once nothing is left on
// it, drops it from the cluster (in a replicated metadata group, inside
// the configuration change that removes it from the group). Rebalance
// spreads replicas and preferred leaderships evenly over the nodes, for
// example after AddNode, which only places new partitions on the new node.
//
// Every choice is a function of the store's state and iterates the
// partitions in namespace order, so every replica of the metadata makes
// the same moves.

// DrainNode moves every replica off a node, to the nodes holding the
// fewest replicas, and places no new partition on it. It fails, changing
// nothing, when some partition on the node cannot keep its replication
// factor on the other nodes. Draining a drained node moves what is left.
type DrainNode struct {
	Node uint64
}

// RemoveNode removes a drained node that holds no replica (none in
// Replicas or Leaving of any partition) from the cluster.
type RemoveNode struct {
	Node uint64
}

// Rebalance moves replicas from the nodes holding the most to those
// holding the fewest, until no two nodes differ by more than one, at most
// one move per partition per command and never a partition that is
// moving already; then it evens out the preferred leaderships by
// reordering replica sets (no data moves for that). Partitions keep
// serving while their replicas move.
type Rebalance struct{}

// SettleReplicas reports that the raft group of the partition NS, at
// incarnation CreatedRevision, no longer counts the replica of raft id
// Node (the node id for a replica of generation 0, see
// PartitionInfo.Replicas) among its voters: it leaves
// PartitionInfo.Leaving and its node removes its copy, unless the node
// holds a newer replica of the partition (ReseedReplica). Proposed by the
// group's leader; a settle that finds nothing to do (a repeat, another
// incarnation) is a no-op that does not bump the revision.
type SettleReplicas struct {
	NS              Namespace
	CreatedRevision uint64
	Node            uint64
}

// ReseedReplica replaces the replica of raft id Replica of the partition
// NS, at incarnation CreatedRevision, by a new replica on the same node
// under a raft id the group never had (the partition's next Generation,
// internal/raftid): the node reports it when its copy's raft log is
// damaged — cut short, rolled back past its sync mark, or failing its
// checksum — and so lost what the replica promised its group (its term,
// its vote, entries it acknowledged). The replica cannot rejoin under its
// id: empty, it could vote twice in a term, and a quorum counting it
// could miss a committed entry. Under a new id it is a newcomer, moved in
// as any other (Joined, then added as a learner, sent a snapshot and the
// partition log, and promoted once whole), and the old id leaves the
// group as a leaving replica does (Leaving, then SettleReplicas). A
// reseed that finds Replica no longer in the replica set (a repeat, a
// move since, another incarnation) is a no-op.
type ReseedReplica struct {
	NS              Namespace
	CreatedRevision uint64
	Replica         uint64
}

func (DrainNode) isCommand()      {}
func (RemoveNode) isCommand()     {}
func (Rebalance) isCommand()      {}
func (SettleReplicas) isCommand() {}
func (ReseedReplica) isCommand()  {}

// ErrNodeBusy reports a RemoveNode of a node that was not drained or
// still holds replicas, and ErrNotEnoughNodes a DrainNode that would
// leave a partition with fewer nodes than its replication factor.
var (
	ErrNodeBusy       = errors.New("parkway: node still holds replicas")
	ErrNotEnoughNodes = errors.New("parkway: not enough nodes for the replication factor")
)

// Draining reports the nodes being drained (DrainNode), ascending.
func (s *Store) Draining() []uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.place.draining)
}

// Moving reports how many partitions have replicas still leaving, and how
// many partitions hold a replica on node (in Replicas or Leaving; node 0
// counts none).
func (s *Store) Moving(node uint64) (moving, held int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if node != 0 {
		held = s.place.held[node]
	}
	return s.place.moving, held
}

// Members are the nodes holding p's replicas: its replica set, the
// preferred leader first, then the replicas leaving it (nil on a single
// node). The slice may be p's own: never modify it.
func (p PartitionInfo) Members() []uint64 {
	if len(p.Leaving) == 0 {
		return p.Replicas
	}
	return slices.Concat(p.Replicas, p.Leaving)
}

// Joins reports whether the replica of raft id id joined p after p was
// created: it starts empty and waits for the leader's snapshot, where a
// founding replica starts from the group's initial state.
func (p PartitionInfo) Joins(id uint64) bool { return slices.Contains(p.Joined, id) }

// knownNode checks the node a membership command names.
func (s *Store) knownNode(node uint64) error {
	switch {
	case node == 0:
		return fmt.Errorf("%w: node id 0", ErrInvalidNode)
	case len(s.place.nodes) == 0:
		return fmt.Errorf("%w: node %d: a single node's metadata has no nodes", ErrInvalidNode, node)
	case !slices.Contains(s.place.nodes, node):
		return fmt.Errorf("%w: node %d is not a member", ErrInvalidNode, node)
	}
	return nil
}

// partitionRef locates a partition for a move: its topic and index.
type partitionRef struct {
	t *topic
	i int
}

// eachPartition calls fn for every partition, in namespace order.
func (s *Store) eachPartition(fn func(partitionRef)) {
	s.streams.Ascend(func(st *stream) bool {
		st.topics.Ascend(func(t *topic) bool {
			for i := range t.parts {
				fn(partitionRef{t, i})
			}
			return true
		})
		return true
	})
}

// set replaces the partition at r with p, in both indexes. The caller
// counts the change in the placement that becomes the store's: the old
// partition removed, p added.
func (s *Store) set(r partitionRef, p PartitionInfo) {
	r.t.parts[r.i] = p
}

// moved is p with its replica from (at index i) replaced by one on node
// to: the new replica goes last, so the preferred leader is an existing
// replica when the old one led; from is left in Leaving, and to joins
// (unless its replica was still leaving, and so still a member: it takes
// that replica's id back). A new replica's raft id is the node id while
// the partition never re-seeded a replica (Generation 0, the ids every
// replica had before replica ids existed), and the next generation from
// then on.
func moved(p PartitionInfo, i int, to uint64) PartitionInfo {
	if j := indexOfNode(p.Leaving, to); j >= 0 {
		to = p.Leaving[j]
	} else if p.Generation > 0 {
		p.Generation++
		to = raftid.ID(to, p.Generation)
	}
	return movedTo(p, i, to)
}

// movedTo is moved with the new replica's raft id chosen.
func movedTo(p PartitionInfo, i int, to uint64) PartitionInfo {
	from := p.Replicas[i]
	reps := make([]uint64, 0, len(p.Replicas))
	reps = append(reps, p.Replicas[:i]...)
	reps = append(reps, p.Replicas[i+1:]...)
	p.Replicas = append(reps, to)
	wasLeaving := slices.Contains(p.Leaving, to)
	leaving := slices.DeleteFunc(slices.Clone(p.Leaving), func(n uint64) bool { return n == to })
	p.Leaving = append(leaving, from)
	if !wasLeaving && !slices.Contains(p.Joined, to) {
		p.Joined = append(slices.Clone(p.Joined), to)
	}
	return p
}

// replacement chooses the node that takes p's replica on from: an active
// node without a replica of p, preferring one p is not leaving, then the
// fewest replicas, ties rotating from the namespace as in place. 0: none.
func (pl *placement) replacement(p PartitionInfo) uint64 {
	n := len(pl.nodes)
	start := int(uint64(p.NS) % uint64(n))
	best, bestLeaving := uint64(0), false
	for k := range n {
		c := pl.nodes[(start+k)%n]
		if pl.isDraining(c) || indexOfNode(p.Replicas, c) >= 0 {
			continue
		}
		leaving := indexOfNode(p.Leaving, c) >= 0
		switch {
		case best == 0,
			bestLeaving && !leaving,
			bestLeaving == leaving && pl.load[c] < pl.load[best]:
			best, bestLeaving = c, leaving
		}
	}
	return best
}

func (s *Store) drainNode(c DrainNode) (Result, bool, error) {
	if err := s.knownNode(c.Node); err != nil {
		return Result{}, false, err
	}
	// Plan on a copy first: a partition that cannot move fails the whole
	// command before anything changed.
	pl := s.place.clone()
	pl.draining = insertSorted(pl.draining, c.Node)
	type move struct {
		ref partitionRef
		p   PartitionInfo
	}
	var moves []move
	var err error
	s.eachPartition(func(r partitionRef) {
		p := r.t.parts[r.i]
		i := indexOfNode(p.Replicas, c.Node)
		if i < 0 || err != nil {
			return
		}
		to := pl.replacement(p)
		if to == 0 {
			err = fmt.Errorf("%w: partition %d of topic %d in stream %d has %d replicas, and only %d nodes are not draining",
				ErrNotEnoughNodes, p.Partition, p.Topic, p.Stream, len(p.Replicas), pl.active())
			return
		}
		np := moved(p, i, to)
		pl.remove(p)
		pl.add(np)
		moves = append(moves, move{r, np})
	})
	if err != nil {
		return Result{}, false, err
	}
	for _, m := range moves {
		s.set(m.ref, m.p)
	}
	s.place = pl
	s.revision++
	return Result{Revision: s.revision}, len(moves) > 0, nil
}

func (s *Store) removeNode(c RemoveNode) (Result, bool, error) {
	if err := s.knownNode(c.Node); err != nil {
		return Result{}, false, err
	}
	if !s.place.isDraining(c.Node) {
		return Result{}, false, fmt.Errorf("%w: node %d was not drained (DrainNode)", ErrNodeBusy, c.Node)
	}
	if len(s.place.nodes) == 1 {
		return Result{}, false, fmt.Errorf("%w: node %d is the last one", ErrInvalidNode, c.Node)
	}
	if held := s.place.held[c.Node]; held > 0 {
		// Only the refusal scans, to name a partition.
		var named *PartitionInfo
		s.eachPartition(func(r partitionRef) {
			if p := &r.t.parts[r.i]; named == nil && len(p.Replicas) > 0 && p.Holds(c.Node) {
				named = p
			}
		})
		if p := named; p != nil {
			return Result{}, false, fmt.Errorf("%w: node %d holds a replica of partition %d of topic %d in stream %d (and of %d partitions in all)",
				ErrNodeBusy, c.Node, p.Partition, p.Topic, p.Stream, held)
		}
		return Result{}, false, fmt.Errorf("%w: node %d holds replicas of %d partitions", ErrNodeBusy, c.Node, held)
	}
	pl := s.place.clone()
	pl.nodes = slices.DeleteFunc(slices.Clone(pl.nodes), func(n uint64) bool { return n == c.Node })
	pl.draining = slices.DeleteFunc(slices.Clone(pl.draining), func(n uint64) bool { return n == c.Node })
	delete(pl.load, c.Node)
	delete(pl.leads, c.Node)
	delete(pl.held, c.Node)
	s.place = pl
	s.revision++
	return Result{Revision: s.revision}, false, nil
}

func (s *Store) rebalance(Rebalance) (Result, bool, error) {
	if len(s.place.nodes) == 0 {
		return Result{}, false, fmt.Errorf("%w: a single node's metadata has no nodes to balance", ErrInvalidNode)
	}
	pl := s.place.clone()
	changed := 0
	// Replicas: one pass in namespace order, at most one move per
	// partition, only partitions not moving already.
	s.eachPartition(func(r partitionRef) {
		p := r.t.parts[r.i]
		if len(p.Replicas) == 0 || len(p.Leaving) > 0 {
			return
		}
		for i, x := range p.Replicas {
			to := pl.replacement(p)
			if to == 0 || indexOfNode(p.Leaving, to) >= 0 || pl.load[raftid.Node(x)]-pl.load[to] < 2 {
				continue
			}
			np := moved(p, i, to)
			pl.remove(p)
			pl.add(np)
			s.set(r, np)
			changed++
			return
		}
	})
	// Preferred leaderships: reorder a replica set whose first replica
	// leads two or more groups than another of its replicas.
	s.eachPartition(func(r partitionRef) {
		p := r.t.parts[r.i]
		if len(p.Replicas) < 2 {
			return
		}
		first, j := raftid.Node(p.Replicas[0]), 0
		for k, id := range p.Replicas[1:] {
			if pl.leads[raftid.Node(id)] < pl.leads[raftid.Node(p.Replicas[j])] {
				j = k + 1
			}
		}
		if j == 0 || pl.leads[first]-pl.leads[raftid.Node(p.Replicas[j])] < 2 {
			return
		}
		pl.remove(p)
		reps := slices.Clone(p.Replicas)
		reps[0], reps[j] = reps[j], reps[0]
		p.Replicas = reps
		pl.add(p)
		s.set(r, p)
		changed++
	})
	s.place = pl
	s.revision++
	return Result{Revision: s.revision}, changed > 0, nil
}

func (s *Store) settleReplicas(c SettleReplicas) (Result, bool, error) {
	p, ok := s.partition(c.NS)
	if !ok || p.CreatedRevision != c.CreatedRevision || !slices.Contains(p.Leaving, c.Node) {
		return Result{Revision: s.revision}, false, nil
	}
	st := s.streamByID[p.Stream]
	t := st.topicByID[p.Topic]
	s.place.remove(p)
	p.Leaving = slices.DeleteFunc(slices.Clone(p.Leaving), func(n uint64) bool { return n == c.Node })
	if len(p.Leaving) == 0 {
		p.Leaving = nil
	}
	p.Joined = slices.DeleteFunc(slices.Clone(p.Joined), func(n uint64) bool { return n == c.Node })
	if len(p.Joined) == 0 {
		p.Joined = nil
	}
	s.place.add(p)
	s.set(partitionRef{t, int(p.Partition)}, p)
	s.revision++
	return Result{Revision: s.revision}, true, nil
}

func (s *Store) reseedReplica(c ReseedReplica) (Result, bool, error) {
	p, ok := s.partition(c.NS)
	if !ok || p.CreatedRevision != c.CreatedRevision {
		return Result{Revision: s.revision}, false, nil
	}
	i := slices.Index(p.Replicas, c.Replica)
	if i < 0 {
		return Result{Revision: s.revision}, false, nil
	}
	if p.Generation >= raftid.MaxGen {
		return Result{}, false, fmt.Errorf("%w: partition %d of topic %d in stream %d re-seeded %d times", ErrInvalidNode, p.Partition, p.Topic, p.Stream, p.Generation)
	}
	st := s.streamByID[p.Stream]
	t := st.topicByID[p.Topic]
	np := p
	np.Generation++
	np = movedTo(np, i, raftid.ID(raftid.Node(c.Replica), np.Generation))
	s.place.remove(p)
	s.place.add(np)
	s.set(partitionRef{t, int(p.Partition)}, np)
	s.revision++
	return Result{Revision: s.revision}, true, nil
}

// insertSorted returns a copy of ids with id inserted in order (once).
func insertSorted(ids []uint64, id uint64) []uint64 {
	i, found := slices.BinarySearch(ids, id)
	if found {
		return ids
	}
	return slices.Insert(slices.Clone(ids), i, id)
}

// checkMoves reports leaving or joined replicas a snapshot may not hold:
// leaving replicas on nodes that are not members, listed twice or in the
// replica set too; joined ones that are neither replicas nor leaving. A
// node may have two ids leaving, beside its newest in the replica set: a
// re-seed of a replica that was itself joining by a re-seed leaves both
// earlier ids members of the group until it drops them (ReseedReplica),
// and every state Apply reaches must restore.
func checkMoves(ps PartitionSnapshot, nodes []uint64) error {
	if len(ps.Replicas) == 0 && len(ps.Leaving)+len(ps.Joined) > 0 {
		return errors.New("moves of a partition without replicas")
	}
	for i, id := range ps.Leaving {
		switch n := raftid.Node(id); {
		case !slices.Contains(nodes, n):
			return fmt.Errorf("leaving replica %#x on unknown node %d", id, n)
		case slices.Contains(ps.Leaving[:i], id), slices.Contains(ps.Replicas, id):
			return fmt.Errorf("replica %#x leaving twice, or leaving and a replica", id)
		}
	}
	for _, id := range slices.Concat(ps.Replicas, ps.Leaving) {
		if raftid.Gen(id) > ps.Generation {
			return fmt.Errorf("replica %#x of a generation beyond the partition's %d", id, ps.Generation)
		}
	}
	for i, n := range ps.Joined {
		switch {
		case !slices.Contains(ps.Replicas, n) && !slices.Contains(ps.Leaving, n):
			return fmt.Errorf("joined replica %d is not a replica", n)
		case slices.Contains(ps.Joined[:i], n):
			return fmt.Errorf("node %d joined twice", n)
		}
	}
	return nil
}
