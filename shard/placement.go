package shard

import (
	"slices"

	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
)

// Placement: in a cluster a partition's raft group spans only the nodes
// its metadata places it on (metadata.PartitionInfo.Replicas). A request
// that reaches a node holding no replica is not parked there — the
// partition never materialises on that node — but answered "not leader"
// with a replica to go to, which the node's client follows. On the
// replica the barrier holds as everywhere: the request parks until the
// partition materialises there, and the incarnation fences apply.

// holds reports whether this node holds a replica of info (always on a
// single node).
func (s *Shard) holds(info metadata.PartitionInfo) bool {
	r := s.cfg.Replication
	return r == nil || info.Holds(r.Node)
}

// replicaID is the raft id of this node's replica of info (see
// internal/raftid): generation 0, the node id, until the metadata names
// another.
func (rg *raftGroups) replicaID(info metadata.PartitionInfo) uint64 {
	if id, ok := info.ReplicaOf(rg.cfg.Node); ok {
		return id
	}
	return rg.cfg.Node // a group over every peer, or a partition not placed here
}

// peersOf is the membership of info's raft group: its replicas, or every
// peer for a partition placed before placement existed (or unknown here:
// a build racing a delete, which the reconciler tears down).
func (rg *raftGroups) peersOf(info metadata.PartitionInfo) []uint64 {
	if len(info.Replicas) > 0 {
		return info.Members()
	}
	return rg.cfg.Peers
}

// foundingVoters are the voters a founding replica of a partition that
// replicas have moved into (info.Joined) starts from when it has no raft
// log yet (it builds late: every founding member must start from the
// configuration the partition was created with, which the metadata does
// not keep). The founders still present are the members less the joined
// replicas; while they are as many as the replication factor, no founder
// has left and they are that configuration exactly. Once one has left
// they are fewer — a minority of the group's voters, or this replica
// alone, which would elect itself and take writes beside the real group
// — so the replica starts as a joiner instead (join: no voters, waiting
// for the leader's snapshot), as a replica a move added does. A joiner
// only takes the group's configuration from the leader, and a group one
// of whose founders left has a leader: it drove that move.
func foundingVoters(info metadata.PartitionInfo) (voters []uint64, join bool) {
	for _, n := range info.Members() {
		if !slices.Contains(info.Joined, n) {
			voters = append(voters, n)
		}
	}
	if len(voters) != len(info.Replicas) {
		return info.Members(), true
	}
	return voters, false
}

// preferredLeader is the member of ns's group that campaigns at once when
// the group starts: the placement's first replica, which the metadata
// spreads evenly over the nodes, or — for a group over every peer — the
// peer the namespace picks.
func preferredLeader(ns metadata.Namespace, peers []uint64, placed bool) uint64 {
	if placed {
		return peers[0]
	}
	return peers[int(uint64(ns)%uint64(len(peers)))]
}

// elsewhere answers f for a partition this node holds no replica of.
func (s *Shard) elsewhere(f Frame, info metadata.PartitionInfo) {
	if f.Req.Op == OpRaft || f.Req.Op == OpCatchUp {
		// Traffic of a group this node is not in (it was, or a peer's
		// view is stale): nothing to answer.
		s.m.Drop(f.Req.Op.String(), metrics.ReasonNotReplicated)
		return
	}
	s.answer(f, Response{Err: &NotLeaderError{Leader: raftid.Node(s.rg.replicaHint(info.Replicas))}})
}

// sendElsewhere answers ns's parked frames with elsewhere: the metadata
// committed while they waited places ns on other nodes.
func (s *Shard) sendElsewhere(ns metadata.Namespace) {
	q := s.park.take(ns)
	if q == nil {
		return
	}
	info, known := s.meta.Partition(ns)
	for q.len() > 0 {
		f := q.pop().frame
		if !known {
			// Deleted since the verdict: the frame is retried and
			// finds the topic gone.
			s.drop(f, metrics.ReasonRemoved, errRemoved)
			continue
		}
		s.elsewhere(f, info)
	}
	s.gauges()
}

// replicaHint is the replica a request for a partition held elsewhere is
// sent to: the first live one from the preferred leader on, which a
// follower then points at its leader.
func (rg *raftGroups) replicaHint(replicas []uint64) uint64 {
	for _, n := range replicas {
		if rg.q.down.Live(n) {
			return n
		}
	}
	return replicas[0]
}
