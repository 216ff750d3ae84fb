package host

import (
	"slices"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
)

// exposeGroups makes the engine's metrics report the consumer groups of
// the committed metadata at every scrape. It runs once e.meta is set.
func (e *Engine) exposeGroups() {
	meta := e.meta
	e.metrics.SetGroups(func() []metrics.GroupStats {
		counts := meta.GroupCounts()
		out := make([]metrics.GroupStats, len(counts))
		for i, g := range counts {
			out[i] = metrics.GroupStats{
				Stream: g.Stream, Topic: g.Topic, Group: g.Group,
				Members: uint64(g.Members), Generation: g.Generation,
				// Each rebalance starts the next generation, from 0 at
				// the group's creation.
				Rebalances: g.Generation, Expiries: g.Expiries, Commits: g.Commits,
			}
		}
		return out
	})
}

// ClusterStatus is the cluster as one node sees it.
type ClusterStatus struct {
	// Node is this node's id (0 on a single node).
	Node uint64
	// MetadataLeader is the metadata group's leader as this node last
	// learned it (0: none known, or a single node).
	MetadataLeader uint64
	// Members are the cluster's nodes as the committed metadata lists
	// them, ascending, each with Live as this node's liveness judges it.
	Members []MemberStatus
	// Leaders maps each replicated partition this node holds to its
	// group's leader as this node knows it; a partition whose leader is
	// not known here (an election under way) is absent.
	Leaders map[metadata.Namespace]uint64
}

// MemberStatus is one member of the cluster and its liveness. Learner is
// set while it is a learner of the metadata group, as this node last
// applied the group's configuration: added, not yet caught up and
// promoted to voter (AddNode).
type MemberStatus struct {
	ID      uint64
	Live    bool
	Learner bool
}

// ClusterStatus reports the cluster as this node sees it. It reads what
// the driver and the shards recorded (atomics and a lock per shard), so
// it never waits for a pump and is safe from any goroutine.
func (e *Engine) ClusterStatus() ClusterStatus {
	st := ClusterStatus{Leaders: make(map[metadata.Namespace]uint64)}
	for _, s := range e.shards {
		s.Leaders(st.Leaders)
	}
	c := e.cl
	if c == nil {
		return st
	}
	self := uint64(c.cfg.ID)
	st.Node = self
	st.MetadataLeader = c.meta.lead.Load()
	nodes := e.meta.Nodes()
	if len(nodes) == 0 { // a metadata store that never listed its nodes
		nodes = slices.Clone(c.peers)
	}
	slices.Sort(nodes)
	var learners []uint64
	if conf := c.meta.conf.Load(); conf != nil {
		learners = conf.learners
	}
	for _, id := range nodes {
		st.Members = append(st.Members, MemberStatus{ID: id, Live: id == self || c.live.judgedLive(id),
			Learner: slices.Contains(learners, id)})
	}
	return st
}
