package metadata

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/parkway-io/parkway/internal/raftid"
)

// Placement: in a cluster every partition is a raft group on Replicas
// nodes, chosen when the partition is created and recorded in the
// metadata, so every node agrees on who holds what without computing it
// again (a formula over the node list would move every partition when a
// node is added).
//
// The choice is deterministic — a function of the store's state only, as
// every replica applies the same commands to the same state — and
// balanced: the preferred leader (Replicas[0]) is the node with the fewest
// preferred leaderships, then the fewest replicas; the other replicas go
// to the nodes holding the fewest replicas. Ties are broken by a rotation
// that starts at the namespace, so equal nodes take turns instead of the
// lowest id taking every tie.

const (
	// DefaultReplicas is the replication factor of a topic that names
	// none, capped at the cluster's node count.
	DefaultReplicas = 3
	// MaxReplicas bounds a topic's replication factor.
	MaxReplicas = 32
	// MaxNodes bounds a cluster's node count (a decoded node list is
	// hostile input: it is checked against this before it is used).
	MaxNodes = 1024
)

// placement counts what each node holds, for the balanced choice, and
// what is moving, for Store.Moving: host RemoveNode and Rebalance ask
// after every metadata commit while they wait, so the answer must not
// cost a scan of every partition. Every write of a partition counts the
// old one out (remove) and the new one in (add) of the placement that
// becomes the store's.
type placement struct {
	nodes []uint64 // ascending
	// draining are the nodes DrainNode emptied, ascending: nothing new
	// is placed on them.
	draining []uint64
	load     map[uint64]int // replicas held, per node
	leads    map[uint64]int // preferred leaderships held, per node
	// moving counts the partitions with replicas leaving; held, per
	// node, the partitions with a replica set holding one on the node,
	// in Replicas or Leaving (partitions without a replica set, on a
	// single node, count on no node).
	moving int
	held   map[uint64]int
}

func newPlacement(nodes []uint64) placement {
	p := placement{nodes: slices.Sorted(slices.Values(nodes))}
	if len(nodes) > 0 {
		p.load = make(map[uint64]int, len(nodes))
		p.leads = make(map[uint64]int, len(nodes))
		p.held = make(map[uint64]int, len(nodes))
	}
	return p
}

// clone copies p (its node lists are never modified in place: AddNode,
// DrainNode and RemoveNode replace them).
func (p placement) clone() placement {
	return placement{nodes: p.nodes, draining: p.draining, load: maps.Clone(p.load), leads: maps.Clone(p.leads),
		moving: p.moving, held: maps.Clone(p.held)}
}

// isDraining reports whether n is being drained.
func (p *placement) isDraining(n uint64) bool {
	_, found := slices.BinarySearch(p.draining, n)
	return found
}

// active is how many nodes take new replicas.
func (p *placement) active() int { return len(p.nodes) - len(p.draining) }

// factor resolves a topic's replication factor against the node count.
func (p *placement) factor(r int) (int, error) {
	n := p.active()
	if len(p.nodes) == 0 {
		if r > 1 {
			return 0, fmt.Errorf("%w: replication factor %d on a single node", ErrInvalidTopicConfig, r)
		}
		return r, nil
	}
	if r == 0 {
		return min(DefaultReplicas, n), nil
	}
	if r > n {
		return 0, fmt.Errorf("%w: replication factor %d, the cluster has %d nodes (not draining)", ErrInvalidTopicConfig, r, n)
	}
	return r, nil
}

// place chooses r replicas for ns (nil on a single node). It does not
// count them: add does, once the command commits.
func (p *placement) place(ns Namespace, r int) []uint64 {
	n := len(p.nodes)
	if n == 0 || r == 0 {
		return nil
	}
	start := int(uint64(ns) % uint64(n))
	out := make([]uint64, 0, r)
	pick := func(better func(a, b uint64) bool) {
		best := uint64(0)
		for i := range n {
			c := p.nodes[(start+i)%n]
			if slices.Contains(out, c) || p.isDraining(c) {
				continue
			}
			if best == 0 || better(c, best) {
				best = c
			}
		}
		out = append(out, best)
	}
	pick(func(a, b uint64) bool {
		if p.leads[a] != p.leads[b] {
			return p.leads[a] < p.leads[b]
		}
		return p.load[a] < p.load[b]
	})
	for len(out) < r {
		pick(func(a, b uint64) bool { return p.load[a] < p.load[b] })
	}
	return out
}

// add counts a partition in.
func (p *placement) add(pi PartitionInfo) { p.count(pi, 1) }

// remove counts a partition out.
func (p *placement) remove(pi PartitionInfo) { p.count(pi, -1) }

func (p *placement) count(pi PartitionInfo, d int) {
	if len(pi.Leaving) > 0 {
		p.moving += d
	}
	if len(pi.Replicas) == 0 || p.load == nil {
		return // a single node's partition, on every node and none
	}
	for i, id := range pi.Replicas {
		n := raftid.Node(id)
		p.load[n] += d
		p.held[n] += d
		if i == 0 {
			p.leads[n] += d
		}
	}
	// A leaving replica's node is a replica's too only when the node's
	// replica was re-seeded (ReseedReplica), and may have two ids leaving
	// (a joiner re-seeded again): counted once.
	for i, id := range pi.Leaving {
		if n := raftid.Node(id); indexOfNode(pi.Replicas, n) < 0 && indexOfNode(pi.Leaving[:i], n) < 0 {
			p.held[n] += d
		}
	}
}

// checkNodes reports a node list that is not a set of non-zero ids.
func checkNodes(nodes []uint64) error {
	if len(nodes) > MaxNodes {
		return fmt.Errorf("%d nodes, at most %d", len(nodes), MaxNodes)
	}
	for i, n := range nodes {
		if err := raftid.CheckNode(n); err != nil {
			return err // a node id is the low bits of its replicas' raft ids
		}
		if slices.Contains(nodes[:i], n) {
			return fmt.Errorf("node %d listed twice", n)
		}
	}
	return nil
}

// checkReplicas reports a replica set a snapshot may not hold: empty
// where the store has nodes, too large, or naming a node twice or one
// the store does not have.
func checkReplicas(replicas, nodes []uint64) error {
	switch {
	case len(nodes) == 0 && len(replicas) > 0:
		return errors.New("replicas on a single node")
	case len(replicas) > MaxReplicas:
		return fmt.Errorf("%d replicas, at most %d", len(replicas), MaxReplicas)
	}
	for i, id := range replicas {
		n := raftid.Node(id)
		if !slices.Contains(nodes, n) {
			return fmt.Errorf("replica %#x on unknown node %d", id, n)
		}
		if indexOfNode(replicas[:i], n) >= 0 {
			return fmt.Errorf("node %d holds two replicas", n)
		}
	}
	return nil
}

// Nodes returns the cluster's nodes, ascending (nil on a single node).
func (s *Store) Nodes() []uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.place.nodes)
}

// Holds reports whether node holds a replica of p — in its replica set,
// or leaving it (see moves.go) — : every node does when p has no replica
// set (a single node, or a partition created before placement existed).
func (p PartitionInfo) Holds(node uint64) bool {
	_, ok := p.ReplicaOf(node)
	return len(p.Replicas) == 0 || ok
}

// ReplicaOf is the raft id of node's replica of p: the one in its replica
// set, else the newest generation of those leaving it. A node holds one
// copy of a partition, so a node whose replica was re-seeded
// (ReseedReplica: a new id in Replicas, the old one in Leaving until the
// group drops it) holds the new one. A replica re-seeded twice before the
// first settled leaves two ids of its node in Leaving once the node
// leaves the replica set too (a drain): the node holds the later one —
// the earlier copy was set aside when it was re-seeded — so that is the
// one a node builds, and the earlier one is a replaced member its group
// removes (shard's replacedMember).
func (p PartitionInfo) ReplicaOf(node uint64) (id uint64, ok bool) {
	if i := indexOfNode(p.Replicas, node); i >= 0 {
		return p.Replicas[i], true
	}
	for _, l := range p.Leaving {
		if raftid.Node(l) == node && (!ok || raftid.Gen(l) > raftid.Gen(id)) {
			id, ok = l, true
		}
	}
	return id, ok
}

// NodeOf is the node holding the replica of raft id id (see
// PartitionInfo.Replicas).
func NodeOf(id uint64) uint64 { return raftid.Node(id) }

// NodesOf is the nodes holding the replicas of raft ids ids, in order.
func NodesOf(ids []uint64) []uint64 {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = raftid.Node(id)
	}
	return out
}

// indexOfNode is the index in ids of a raft id of node's, or -1.
func indexOfNode(ids []uint64, node uint64) int {
	return slices.IndexFunc(ids, func(id uint64) bool { return raftid.Node(id) == node })
}

// AddNode adds a node to the cluster: partitions created from now on are
// placed over it too. Partitions that exist stay where they are. In a
// replicated metadata group the command travels inside the raft
// configuration change that makes the node a member of the group, so the
// store's nodes and the group's voters change at the same log index.
type AddNode struct {
	Node uint64
}

func (AddNode) isCommand() {}

// ErrNodeExists reports an AddNode of a node the cluster has, and
// ErrInvalidNode a node id AddNode refuses (0, or a store without nodes:
// a single node does not grow).
var (
	ErrNodeExists  = errors.New("parkway: node is already a member")
	ErrInvalidNode = errors.New("parkway: invalid node")
)

func (s *Store) addNode(c AddNode) (Result, bool, error) {
	switch {
	case raftid.CheckNode(c.Node) != nil:
		return Result{}, false, fmt.Errorf("%w: %w", ErrInvalidNode, raftid.CheckNode(c.Node))
	case len(s.place.nodes) == 0:
		return Result{}, false, fmt.Errorf("%w: node %d: a single node's metadata has no nodes to add to", ErrInvalidNode, c.Node)
	case slices.Contains(s.place.nodes, c.Node):
		return Result{}, false, fmt.Errorf("%w: %d", ErrNodeExists, c.Node)
	case len(s.place.nodes) >= MaxNodes:
		return Result{}, false, fmt.Errorf("%w: node %d: the cluster has %d nodes already", ErrInvalidNode, c.Node, MaxNodes)
	}
	nodes := append(slices.Clone(s.place.nodes), c.Node)
	slices.Sort(nodes)
	s.place.nodes = nodes
	s.revision++
	return Result{Revision: s.revision}, false, nil
}
