package parkway

import (
	"context"
	"errors"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// NodeID identifies a node of a cluster (non-zero).
type NodeID = transport.NodeID

// Bus is a node's endpoint on the node-to-node transport.
type Bus = transport.Bus

// Network is the in-memory transport, for tests and for hosts that run
// several nodes in one process: Endpoint(id) gives each node its Bus, and
// Disconnect, Partition, Heal and SetFaults inject network faults.
type Network = transport.Network

// NetworkOptions configures a Network.
type NetworkOptions = transport.NetworkOptions

// NewNetwork returns an in-memory network.
func NewNetwork(opts NetworkOptions) *Network { return transport.NewNetwork(opts) }

// ClusterConfig makes a Node a member of a cluster: each partition is a raft
// group on the nodes its topic's replication factor places it on (see
// WithReplicas), driven by its owner shard, and the metadata is one more
// raft group on every node. Fields: ID (this node) and Peers (the
// founding members, this one included; for a node that joins, the nodes
// it reaches first), Join (join a running cluster: see Cluster.AddNode), Bus
// (this node's endpoint; the Node closes it), ClusterID (the cluster's
// name, recorded in the DataDir: a directory of another cluster is
// refused; default a TLS bus's cluster id), TickInterval (the raft
// tick, default 10 ms: leaders are elected within 10–20 ticks),
// CompactEntries and CompactBytes (each partition's raft log bound; see
// shard.Replication, defaults 4,096 entries and 16 MiB).
type ClusterConfig = host.Cluster

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

// TCPOptions configures a TCP bus: TLS (required unless
// InsecurePlaintext is set), byte budgets, the connection limit and
// deadlines. See package transport for the security model.
type TCPOptions = transport.TCPOptions

// TLSConfig is a TCP bus's mutual TLS 1.3 identity: the cluster id, this
// node's certificate (whose URI name is IdentityURI(cluster, id)) and the
// cluster's certificate authorities.
type TLSConfig = transport.TLSConfig

// IdentityURI is the URI name a node's certificate carries:
// parkway://<cluster>/node/<id>.
func IdentityURI(cluster string, id NodeID) string { return transport.IdentityURI(cluster, id) }

// TCPBus is the TCP transport: length-prefixed frames over mutually
// authenticated TLS 1.3, one connection per peer dialled lazily with
// backoff, bounded send queues, per-connection and total byte budgets.
// Only members of the same cluster, each proving the node id it claims,
// can deliver a frame; RemovePeer takes a removed node's admission back.
type TCPBus = transport.TCPBus

// ListenTCP starts node id's TCP endpoint on addr, with peers' addresses.
// It refuses to start (ErrTLSRequired) without opts.TLS unless
// opts.InsecurePlaintext says so.
func ListenTCP(id NodeID, addr string, peers map[NodeID]string, opts TCPOptions) (*TCPBus, error) {
	return transport.ListenTCP(id, addr, peers, opts)
}
