package parkway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway/clock"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/shard"
)

// Node is one parkway node and its data API: Produce and ProduceAsync,
// NewConsumer (with Poll and JoinGroup, its lower layers), and the
// lookups by name a producer needs (Stream, Topic). Administration is on
// Admin (Node.Admin), cluster operations on Cluster (Node.Cluster). It is
// the client API over a node engine (package host), which holds its
// metadata, its shards, the router in front of them and a reconciler per
// shard. All methods are safe for concurrent use.
type Node struct {
	cfg  Config
	eng  *host.Engine
	meta *metadata.Store

	admin   Admin
	cluster Cluster

	// producer and seq key this Node's produces for deduplication in a
	// cluster: a retry of a produce whose outcome was unknown applies once.
	producer uint64
	seq      atomic.Uint64

	// origin is what this node's handles name as their origin (originOf).
	origin uint64

	roundRobin atomic.Uint64
	// oneProduces pools Produce's requests (produce_one.go). The pool is
	// the Node's, not the package's: its reply channels belong to the
	// synctest bubble of the caller that made them, the one the Node
	// and its callers share, and must not reach another bubble's Node.
	oneProduces sync.Pool
	// topicMetricsCache holds each topic's *metrics.Topic, by created
	// revision (topicMetrics); topicMetricsCount counts its entries.
	topicMetricsCache sync.Map
	topicMetricsCount atomic.Int64
	closed            atomic.Bool
	closeOnce         sync.Once
	closeErr          error
}

// Open validates cfg, applies its defaults, builds the node engine and
// starts its drivers.
func Open(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Metrics == nil && cfg.MetricsLabels != nil {
		cfg.Metrics = metrics.NewLabeled(cfg.MetricsLabels)
	}
	ec := cfg.engineConfig()
	eng, err := host.New(ec)
	if err != nil {
		if errors.Is(err, host.ErrInvalidConfig) {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		return nil, err
	}
	if err := eng.Start(); err != nil {
		_ = eng.Close()
		return nil, err
	}
	n := &Node{cfg: cfg, eng: eng, meta: eng.Meta(),
		producer: rand.Uint64() | 1, origin: originOf(eng, ec)}
	n.admin.n, n.cluster.n = n, n
	return n, nil
}

// Close stops the reconcilers and the shards. Requests still queued or
// parked are answered with an error; calls made after Close return
// ErrClosed. Close is idempotent and waits for every goroutine it started.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		n.closeErr = n.eng.Close()
	})
	return n.closeErr
}

// Metrics returns the Node's Prometheus collectors; register them on the
// host's registry. Series are labelled by shard; drops the client side of
// the Node counts (an inbox refusing a request) carry shard="-1".
func (n *Node) Metrics() prometheus.Collector { return n.eng.Metrics() }

// Logger returns the Node's logger (Config.Logger, or the silent
// default), so a component the host runs on the Node — a kafka
// listener — logs where the Node does without being handed it again.
func (n *Node) Logger() hclog.Logger { return n.cfg.Logger }

// begin is the common guard of every call.
func (n *Node) begin(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if n.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// apply commits a metadata command through the engine: a local apply on
// one node, a commit of the metadata raft group in a cluster.
func (n *Node) apply(ctx context.Context, cmd metadata.Command) (metadata.Result, error) {
	if err := n.begin(ctx); err != nil {
		return metadata.Result{}, err
	}
	return n.eng.ApplyMetadata(ctx, cmd)
}

// topicCommand commits a command on topic t. The handle is checked here
// and again by the command itself, which carries t's revision: a delete
// and recreate that commits between the check and the command makes the
// command fail, never act on the replacement.
func (n *Node) topicCommand(ctx context.Context, t Topic, cmd metadata.Command) error {
	if err := n.begin(ctx); err != nil {
		return err
	}
	if _, err := n.topicInfo(ctx, t); err != nil {
		return err
	}
	_, err := n.apply(ctx, cmd)
	return n.staleCommand(err, t.String())
}

// staleCommand adds ErrStaleHandle to a command refused because the
// incarnation it named is gone.
func (n *Node) staleCommand(err error, what string) error {
	if errors.Is(err, metadata.ErrStaleRevision) {
		return fmt.Errorf("%w: %s: %w", ErrStaleHandle, what, err)
	}
	return err
}

// Which reads are local: the lookups by name (Stream, Topic) and the
// listings (Streams, Topics, Partitions) are linearizable in a cluster —
// they wait for this node's metadata to catch up with the metadata group's
// commit index (a read barrier through its leader), so a stream created
// through any node is found at once. Calls that take a handle need no
// barrier: they wait until this node has applied the handle's revision,
// past which its committed state is exact for that incarnation. On a
// single node every read is local and current.

// lookup is the common guard of the metadata reads: ErrClosed on a closed
// node, then the read barrier.
func (n *Node) lookup(ctx context.Context) error {
	if err := n.begin(ctx); err != nil {
		return err
	}
	return n.eng.ReadBarrier(ctx)
}

// Stream returns the handle of the committed stream named name, or
// ErrStreamNotFound.
func (n *Node) Stream(ctx context.Context, name string) (Stream, error) {
	if err := n.lookup(ctx); err != nil {
		return Stream{}, err
	}
	info, ok := n.meta.StreamByName(name)
	if !ok {
		return Stream{}, fmt.Errorf("%w: %q", ErrStreamNotFound, name)
	}
	return n.streamHandle(info), nil
}

// Topic returns the handle of stream s's committed topic named name:
// ErrTopicNotFound if it has none, ErrStreamNotFound if s is gone.
func (n *Node) Topic(ctx context.Context, s Stream, name string) (Topic, error) {
	if err := n.lookup(ctx); err != nil {
		return Topic{}, err
	}
	if err := n.liveStream(ctx, s); err != nil {
		return Topic{}, err
	}
	info, ok := n.meta.TopicByName(s.ID, name)
	if !ok {
		return Topic{}, fmt.Errorf("%w: %q in %v", ErrTopicNotFound, name, s)
	}
	if err := n.streamAlive(s); err != nil { // the stream went meanwhile
		return Topic{}, err
	}
	return topicHandle(s, info), nil
}

// call sends req to the owner of its namespace and waits for the answer
// (host's client call: retried in place on "retry here" answers until the
// deadline, the context's or RequestTimeout when it has none, following
// "not leader" answers to the leader). Before every retry the namespace is
// re-resolved, so a request whose partition was deleted meanwhile ends
// with a not-found error instead of waiting out its deadline.
func (n *Node) call(ctx context.Context, req *shard.Request, t Topic, part uint32) (shard.Response, error) {
	r, err := n.eng.Call(ctx, req, n.resolver(t, part))
	return r, publicError(err)
}

// resolver re-resolves partition part of t before a call's retry.
func (n *Node) resolver(t Topic, part uint32) host.Resolve {
	return func(ctx context.Context) (metadata.Namespace, uint64, error) { return n.resolve(ctx, t, part) }
}

// callDeadline is the deadline of a call started at now: RequestTimeout
// later, or ctx's deadline if that is sooner.
func (n *Node) callDeadline(ctx context.Context, now time.Time) time.Time {
	cd, _ := ctx.Deadline()
	return host.CallDeadline(now, cd, n.cfg.RequestTimeout)
}

// deadline bounds ctx by RequestTimeout, on the node's clock, when it has
// no earlier deadline.
func (n *Node) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return clock.WithTimeout(ctx, n.cfg.Clock, n.cfg.RequestTimeout)
}

// sleep waits d on the node's clock, or until ctx ends.
func (n *Node) sleep(ctx context.Context, d time.Duration) error {
	return clock.Sleep(ctx, n.cfg.Clock, d)
}
