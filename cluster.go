package parkway

import (
	"context"
	"errors"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// ClusterConfig makes a Node a member of a cluster (Config.Cluster): each
// partition is a raft group on the nodes its topic's replication factor
// places it on (see WithReplicas), driven by its owner shard, and the
// metadata is one more raft group on every node. The transport comes
// from package transport: transport.NewNetwork for nodes in one process,
// transport.ListenTCP between processes.
type ClusterConfig struct {
	// ID is this node (non-zero). Peers are the founding members, this one
	// included (the same list on each); for a node that joins, the nodes
	// it can reach first, itself included.
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
	// elect new leaders (default 5 intervals).
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

// awaitMetadata runs f, and in a cluster retries it while it reports a
// partition as missing: this node's metadata may lag the commit that
// created it (CreatePartitions through another node). A stale handle needs
// no wait: resolve first catches up with the handle's revision, past which
// a missing stream or topic is gone for certain. The wait is bounded by the
// request deadline; then the not-found error stands.
func (n *Node) awaitMetadata(ctx context.Context, f func() error) error {
	err := f()
	if !n.eng.Clustered() || !missing(err) {
		return err
	}
	ctx, cancel := n.deadline(ctx)
	defer cancel()
	pause := n.cfg.RetryBackoffMin
	for missing(err) {
		if n.sleep(ctx, pause) != nil {
			return err
		}
		pause = min(pause*2, n.cfg.RetryBackoffMax)
		err = f()
	}
	return err
}

func missing(err error) bool {
	return errors.Is(err, ErrPartitionNotFound)
}

// resolveWait is resolve through awaitMetadata.
func (n *Node) resolveWait(ctx context.Context, t Topic, part uint32) (ns metadata.Namespace, epoch uint64, err error) {
	err = n.awaitMetadata(ctx, func() (err error) {
		ns, epoch, err = n.resolve(ctx, t, part)
		return err
	})
	return ns, epoch, err
}
