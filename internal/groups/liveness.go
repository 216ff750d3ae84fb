package groups

import (
	"slices"

	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/internal/replica"
)

// Peer liveness and campaigns after a death. Failure detection is per
// node, not per group (node liveness, one heartbeat per node pair): its
// verdicts reach every group a node hosts, which then react alike. A
// group whose leader's node died forgets its leader (PeerLive), and one
// surviving member stands for election at once (Campaigner), so the group
// does not wait out an election timeout it may not even be ticking
// (quiescence). When and how many such elections start is the owner's
// business: a shard spreads thousands over its ticks, the metadata group
// starts its one at once.

// Down is the set of peers node liveness reports dead, as one owner of
// groups last heard it. The zero value holds every peer alive.
type Down struct{ dead map[uint64]bool }

// Live reports whether peer is not held dead. peer is a node id or the
// raft id of a replica on it (internal/raftid): liveness is the node's.
func (d *Down) Live(peer uint64) bool { return !d.dead[raftid.Node(peer)] }

// Set records liveness's verdict on peer and reports whether it changed
// what Down held.
func (d *Down) Set(peer uint64, live bool) bool {
	if d.dead[peer] == !live {
		return false
	}
	if live {
		delete(d.dead, peer)
		return true
	}
	if d.dead == nil {
		d.dead = make(map[uint64]bool)
	}
	d.dead[peer] = true
	return true
}

// Campaigner is the member that stands for election in a group whose
// leader died: among members, in the order given, those live reports
// alive, the spread-th of them modulo their count (0 when none is
// alive). Every node that passes the same members in the same order with
// the same liveness agrees, so exactly one campaigns; spread (the
// partition's namespace, say) lets the elections of many groups spread
// over the survivors.
func Campaigner(members []uint64, live func(peer uint64) bool, spread uint64) uint64 {
	n := 0
	for _, p := range members {
		if live(p) {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	k := int(spread % uint64(n))
	for _, p := range members {
		if !live(p) {
			continue
		}
		if k == 0 {
			return p
		}
		k--
	}
	return 0
}

// CampaignerOf is the Campaigner of group g, among its voters in
// ascending order. The host's own list of members is no common order: a
// partition's follows the metadata's order of its replicas, which a move
// changes, and two members whose metadata stand either side of a move
// would each wait for the other to campaign (simulator cluster seed 661
// with node removal); the voters, once the change is applied, are the
// same on every member. A member that has no voters yet (a joiner before
// its snapshot) goes by members, and never campaigns anyway: it votes in
// nothing.
func CampaignerOf(g *replica.Group, members []uint64, live func(peer uint64) bool, spread uint64) uint64 {
	if g != nil {
		if v := g.Voters(); len(v) > 0 {
			slices.Sort(v)
			members = v
		}
	}
	return Campaigner(members, live, spread)
}

// PeerVerdict is what node liveness's report on a peer means for one
// group (PeerLive).
type PeerVerdict int

// Peer verdicts.
const (
	// PeerUnmoved: the report changes nothing for the group.
	PeerUnmoved PeerVerdict = iota
	// PeerBack: the peer is alive again and this member leads the group:
	// the group wakes, so its leader brings the peer up to date.
	PeerBack
	// LeaderLost: the peer, which led the group as this member knows it,
	// died: the group forgot its leader (so a campaign of its own, or a
	// peer's, can win at once) and wakes; its campaigner (Campaigner)
	// stands for election.
	LeaderLost
)

// PeerLive is node liveness's verdict that peer died (live false) or is
// alive again, for group g. An error, with LeaderLost, fails the group
// (replica.ErrGroupFailed).
func PeerLive(g *replica.Group, peer uint64, live bool) (PeerVerdict, error) {
	if live {
		if g.IsLeader() {
			return PeerBack, nil
		}
		return PeerUnmoved, nil
	}
	if raftid.Node(g.Leader()) != peer {
		return PeerUnmoved, nil // peer is a node; the leader a raft id
	}
	return LeaderLost, g.ForgetLeader()
}
