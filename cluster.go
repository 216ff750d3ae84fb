package parkway

import (
	"context"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// ClusterConfig makes a Node a member of a cluster (Config.Cluster): each
// partition is a raft group on the nodes its topic's replication factor
// places it on (see WithReplicas), driven by its owner shard, and the
// metadata is one more raft group on every node. The transport comes
// from package transport: transport.NewNetwork for nodes in one process,
// transport.ListenTCP between processes.
type ClusterConfig struct {
	// ID is this node (non-zero, at most 2^32−1: a replica's raft id is
	// its node id and a generation in the high bits). Peers are the
	// founding members, this one included (the same list on each); for a
	// node that joins, the nodes it can reach first, itself included.
	ID    transport.NodeID
	Peers []transport.NodeID
	// Join makes this node join a running cluster instead of founding
	// one: it waits until a member adds it (Cluster.AddNode), then
	// receives the cluster's metadata. A node restarted on a data
	// directory rejoins as the member it became, Join or not.
	Join bool
	// Bus is this node's endpoint on the transport; the Node closes it.
	Bus transport.Bus
	// ClusterID names the cluster. A data directory records the cluster
	// and node it was first used by, and a node refuses a directory of
	// another cluster or node (ErrWrongDataDir). Empty: the bus's cluster
	// id when it has one (a TLS TCP bus: its TLSConfig.ClusterID), else
	// none. At most 253 bytes.
	ClusterID string
	// TickInterval is the raft tick (default 10 ms): leaders are elected
	// within 10–20 ticks.
	TickInterval time.Duration
	// CompactEntries and CompactBytes bound each partition's raft log
	// (defaults 4,096 entries and 16 MiB).
	CompactEntries uint64
	CompactBytes   int64
	// LivenessInterval is how often this node sends each peer a
	// heartbeat (default 10 ticks); LivenessTimeout is how long a peer
	// may send nothing before it is declared dead and the groups it led
	// elect new leaders (default 5 intervals). The silence is counted on
	// this node's own clock, the ticks its driver ran when it planned
	// to: a wake late by a pause of the process or a CPU it waited for
	// counts as the wake it planned, so a node starved or paused itself
	// does not declare its peers dead for the gap it missed. Any message
	// from a peer counts as hearing it, not only its heartbeats; and a
	// node's heartbeats go out from a goroutine that does nothing else,
	// so a node whose metadata work runs late (a slow fsync, a CPU it
	// waits for) is still heard, up to 4 timeouts with that work stuck
	// in one step, after which it falls silent as a crashed node does.
	// The heartbeats go out at the multiples of the interval on the
	// node's clock, the instants an idle node's other timer fires too,
	// so an idle node wakes once per interval.
	LivenessInterval time.Duration
	LivenessTimeout  time.Duration
	// MaxForwardedBytes bounds the bytes of the requests other nodes
	// forward to this one that it holds while serving them (default 256
	// MiB); MaxForwardedPeerBytes bounds those of one sending node
	// (default 64 MiB). A request past either is answered with a retry,
	// which the forwarding node makes in place.
	MaxForwardedBytes     int64
	MaxForwardedPeerBytes int64
}

// engine is c as the engine's cluster config. The conversion is Go's
// between structs of identical fields: a field added to one and not the
// other stops the build here.
func (c *ClusterConfig) engine() *host.Cluster {
	if c == nil {
		return nil
	}
	hc := host.Cluster(*c)
	return &hc
}

// Validate reports every problem with c, joined.
func (c *ClusterConfig) Validate() error { return c.engine().Validate() }

// Cluster is a node's cluster API: membership (AddNode, RemoveNode),
// placement (Rebalance) and what the node knows of the cluster (Leader,
// State). Reach it with Node.Cluster; it is safe for concurrent use and
// valid as long as its Node. On a node opened without Config.Cluster
// every call answers ErrInvalidArgument.
type Cluster struct{ n *Node }

// Cluster returns the node's cluster API.
func (n *Node) Cluster() *Cluster { return &n.cluster }

// begin is the common guard of the cluster calls: the Node's, then a
// node that is not part of a cluster.
func (c *Cluster) begin(ctx context.Context) error {
	if err := c.n.begin(ctx); err != nil {
		return err
	}
	if !c.n.eng.Clustered() {
		return fmt.Errorf("%w: not a cluster node", ErrInvalidArgument)
	}
	return nil
}

// AddNode adds a node to the cluster at runtime. The node must be running
// (Open with ClusterConfig.Join, its own ID, and Peers naming it and nodes it
// can reach) and reachable through this node's bus. It joins the
// metadata raft group as a learner — one membership change at a time —
// that receives the cluster's metadata but votes in nothing, and the
// metadata leader promotes it to voter once it has caught up, so a
// cluster that is growing keeps its fault tolerance meanwhile; topics and
// partitions created from its addition on are placed over it too.
// Existing partitions keep their replicas until Rebalance moves some of
// them onto it. AddNode returns once this node applied the promotion;
// adding a member again is a no-op. It waits until ctx ends (or
// Config.RequestTimeout, if ctx has no deadline): a node not caught up by
// then stays a learner and AddNode fails with ErrNotPromoted; calling it
// again waits for the promotion, and RemoveNode removes the learner.
func (c *Cluster) AddNode(ctx context.Context, id transport.NodeID) error {
	n := c.n
	if err := c.begin(ctx); err != nil {
		return err
	}
	return publicError(n.eng.AddNode(ctx, uint64(id)))
}

// RemoveNode removes a node from the cluster while the cluster serves.
// Every replica the node holds first moves to the other nodes: each
// partition's raft group adds its new replica — which receives a
// snapshot of the partition's state and fetches its log — and only then
// removes the old one, so the group never has fewer replicas than its
// replication factor and no acknowledged write is lost. Then the node
// leaves the metadata group. RemoveNode returns once this node applied
// the removal; the removed node serves nothing more and can be closed
// (it may be down already: its replicas are rebuilt from the others — as
// long as each of its groups keeps a quorum without it; a single-replica
// partition on a dead node cannot move, and RemoveNode waits for it until
// ctx ends).
// Removing a node that is not a member is a no-op. It fails with
// ErrNotEnoughNodes when a topic's replication factor needs the node, and
// with ErrInvalidNode when id is this node (remove a node through another
// member: the node removed may never learn that its removal committed).
// Moving the data takes as long as it takes: bound the call with ctx,
// and call it again after an interruption — it carries on from where the
// cluster stands.
//
// The bus is not told: on a TCP bus, once RemoveNode has returned, call
// TCPBus.RemovePeer(id) on each remaining member's bus, which closes the
// removed node's connections and refuses its frames from then on (as
// AddPeer on every member admitted it before AddNode).
func (c *Cluster) RemoveNode(ctx context.Context, id transport.NodeID) error {
	n := c.n
	if err := c.begin(ctx); err != nil {
		return err
	}
	return publicError(n.eng.RemoveNode(ctx, uint64(id)))
}

// Rebalance spreads the partitions' replicas and their preferred leaders
// evenly over the cluster's nodes, moving replicas as RemoveNode does
// (add the new one, then remove the old one), for example onto nodes
// added with AddNode. Leadership follows the preferred leaders. It
// returns once every move has settled; the cluster serves throughout.
func (c *Cluster) Rebalance(ctx context.Context) error {
	n := c.n
	if err := c.begin(ctx); err != nil {
		return err
	}
	return publicError(n.eng.Rebalance(ctx))
}

// Leader returns the node that leads a partition's raft group, as this
// node sees it (0 while no leader is known). A node that holds no replica
// of the partition asks a replica (the answer is kept for about a second
// of raft ticks, and dropped when the node it names is declared dead), so
// the call may wait for a round trip. It is ErrInvalidArgument on a node
// that is not part of a cluster.
func (c *Cluster) Leader(ctx context.Context, t Topic, part uint32) (transport.NodeID, error) {
	n := c.n
	if err := c.begin(ctx); err != nil {
		return 0, err
	}
	ns, _, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return 0, err
	}
	lead, err := n.eng.Leader(ctx, ns)
	return transport.NodeID(lead), err
}

// LeaderTerm is Leader and the raft term of the partition's group as this
// node sees it: while a leader is known, the term it was elected in.
// Terms only grow, and every change of leader takes a new one, so the
// term serves as Kafka's leader epoch (KIP-320).
func (c *Cluster) LeaderTerm(ctx context.Context, t Topic, part uint32) (transport.NodeID, uint64, error) {
	n := c.n
	if err := c.begin(ctx); err != nil {
		return 0, 0, err
	}
	ns, _, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return 0, 0, err
	}
	lead, term, err := n.eng.LeaderTerm(ctx, ns)
	return transport.NodeID(lead), term, err
}

// ProduceInTerm appends msgs to partition part of t as Produce does, but
// only while this node leads the partition's raft group in term term (the
// term LeaderTerm reports): the write is proposed only by this node's
// replica, only if it leads in that term, and a raft entry proposed in a
// term commits only as part of that term's log. So a writer that read the
// partition's state under one leadership never writes after a later
// leader did — the later leader's log holds every write of the earlier
// term that committed, and no write of it commits after — which makes
// the term a fence, as Kafka's leader epoch fences a deposed group
// coordinator. It is neither forwarded nor retried: it fails with an
// error matching ErrNotLeader when this node does not lead in term (or
// holds no replica of the partition), and with ErrOutcomeUnknown when
// leadership was lost after the entry was proposed (the entry may still
// commit, as part of term's log; a later leader holds it then). A
// "retry here" answer (ErrRetry) is returned, not retried. term 0 is
// ErrInvalidArgument, as is a node that is not part of a cluster.
func (c *Cluster) ProduceInTerm(ctx context.Context, t Topic, part uint32, term uint64, msgs ...Message) (Ack, error) {
	n := c.n
	if err := c.begin(ctx); err != nil {
		return Ack{}, err
	}
	if term == 0 {
		return Ack{}, fmt.Errorf("%w: term 0", ErrInvalidArgument)
	}
	start := n.cfg.Clock.Now()
	req, part, size, err := n.prepareProduce(ctx, start, t, PartitionID(part), msgs, nil, nil)
	if err != nil {
		return Ack{}, err
	}
	// No deduplication: the write is never retried, and a fenced write
	// must not be matched with another's.
	req.Term, req.Producer, req.Seq = term, 0, 0
	r, err := n.eng.CallHere(ctx, req)
	if err != nil {
		return Ack{}, publicError(err)
	}
	n.countProduced(t, len(req.Messages), size, start)
	return Ack{Partition: part, FirstOffset: r.Offset, Count: len(req.Messages)}, nil
}

// InSyncReplicas returns the in-sync replicas of a partition (Kafka's
// ISR) and the raft term they were taken in, as the partition's raft
// leader knows them from its replication progress: itself, and each
// voter it heard from within an election timeout that it replicates to
// normally and whose log reaches within a few dozen entries of the
// commit index. A follower cut off drops out once the leader stops
// hearing from it (or the log moves past it) and returns once it answers
// and catches up. Only the leader knows, so every node asks it: the
// answer is a leader read (the leader confirms with a quorum that it
// still leads), forwarded as any read of the partition's leader is, and
// a node that cannot reach a leader fails as such a read does (within
// RequestTimeout or ctx).
func (c *Cluster) InSyncReplicas(ctx context.Context, t Topic, part uint32) ([]transport.NodeID, uint64, error) {
	n := c.n
	if err := c.begin(ctx); err != nil {
		return nil, 0, err
	}
	ns, epoch, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return nil, 0, err
	}
	r, err := n.call(ctx, &shard.Request{Op: shard.OpOffsets, NS: ns, Epoch: epoch, FromLeader: true}, t, part)
	if err != nil {
		return nil, 0, err
	}
	out := make([]transport.NodeID, len(r.InSync))
	for i, id := range r.InSync {
		out[i] = transport.NodeID(id)
	}
	return out, r.Term, nil
}

// State reports the cluster as this node sees it: the members and
// their liveness, the metadata leader and each partition's leader. It is
// read-only and local: it waits for no other node and proposes nothing,
// so it answers during a partition or without a metadata quorum (with
// what this node last learned). It is ErrInvalidArgument on a node that
// is not part of a cluster.
func (c *Cluster) State(ctx context.Context) (ClusterState, error) {
	n := c.n
	if err := c.begin(ctx); err != nil {
		return ClusterState{}, err
	}
	st := n.eng.ClusterStatus()
	out := ClusterState{Node: transport.NodeID(st.Node), MetadataLeader: transport.NodeID(st.MetadataLeader)}
	for _, m := range st.Members {
		out.Members = append(out.Members, MemberState{ID: transport.NodeID(m.ID), Live: m.Live, Learner: m.Learner})
	}
	meta := n.eng.Meta()
	// Handles by (stream, topic) id, for this snapshot's partitions.
	topics := make(map[uint64]Topic)
	for _, si := range meta.Streams() {
		s := n.streamHandle(si)
		for _, ti := range meta.Topics(si.ID) {
			topics[uint64(si.ID)<<32|uint64(ti.ID)] = topicHandle(s, ti)
		}
	}
	for _, p := range meta.Snapshot().Partitions {
		t, ok := topics[uint64(p.Stream)<<32|uint64(p.Topic)]
		if !ok || t.Revision > p.CreatedRevision {
			continue // committed after the walk above, or since replaced
		}
		ps := PartitionState{Topic: t, Partition: p.Partition, Leader: transport.NodeID(st.Leaders[p.NS])}
		for _, r := range p.Replicas {
			ps.Replicas = append(ps.Replicas, transport.NodeID(metadata.NodeOf(r)))
		}
		out.Partitions = append(out.Partitions, ps)
	}
	return out, nil
}
