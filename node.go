package parkway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

// Message is one message of a partition log. Producers set ID, Headers
// and Payload; Offset and Timestamp are assigned when it is appended.
type Message = partition.Message

// Header is a message's user header.
type Header = partition.Header

// StreamInfo, TopicInfo and PartitionInfo describe committed metadata.
type (
	StreamInfo    = metadata.StreamInfo
	TopicInfo     = metadata.TopicInfo
	PartitionInfo = metadata.PartitionInfo
)

// Node is one parkway node: the client API over a node engine (package
// host), which holds its metadata, its shards, the router in front of them
// and a reconciler per shard. All methods are safe for concurrent use.
type Node struct {
	cfg    Config
	eng    *host.Engine
	meta   *metadata.Store
	router *router.Router[shard.Frame]
	shards []*shard.Shard

	// producer and seq key this Node's produces for deduplication in a
	// cluster: a retry of a produce whose outcome was unknown applies once.
	producer uint64
	seq      atomic.Uint64

	roundRobin atomic.Uint64
	closed     atomic.Bool
	closeOnce  sync.Once
	closeErr   error
}

// Open validates cfg, applies its defaults, builds the node engine and
// starts its drivers.
func Open(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	eng, err := host.New(cfg.engineConfig())
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
	return &Node{cfg: cfg, eng: eng, meta: eng.Meta(), router: eng.Router(), shards: eng.Shards(),
		producer: rand.Uint64() | 1}, nil
}

// engineConfig is the node engine's share of c (defaults applied).
func (c Config) engineConfig() host.Config {
	m := c.Metrics
	if m == nil && c.MetricsLabels != nil {
		m = metrics.NewLabeled(c.MetricsLabels)
	}
	return host.Config{
		Shards: c.Shards, InboxSize: c.InboxSize, Park: c.Park, PinShards: c.PinShards,
		DataDir: c.DataDir, FS: c.FS, SegmentSize: c.SegmentSize, Preallocate: c.Preallocate,
		VerifyOnOpen: c.VerifyOnOpen, MetadataSnapshotEvery: c.MetadataSnapshotEvery,
		Defaults: TopicConfig{
			Fsync: c.Fsync, FsyncInterval: c.FsyncInterval,
			RetentionAge: c.RetentionAge, RetentionBytes: c.RetentionBytes,
		},
		ReconcileInterval: c.ReconcileInterval, BuildBackoffMin: c.BuildBackoffMin, BuildBackoffMax: c.BuildBackoffMax,
		RetentionInterval: c.RetentionInterval, NewReconciler: c.NewReconciler,
		RequestTimeout: c.RequestTimeout, RetryBackoffMin: c.RetryBackoffMin, RetryBackoffMax: c.RetryBackoffMax,
		Cluster: c.Cluster, Logger: c.Logger, Clock: c.Clock, Metrics: m,
	}
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

// Shards returns the number of shards.
func (n *Node) Shards() int { return len(n.shards) }

// begin is the common guard of every call.
func (n *Node) begin(ctx context.Context) error {
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

// CreateStream creates a stream and returns its id (the lowest free one).
func (n *Node) CreateStream(ctx context.Context, name string) (uint32, error) {
	res, err := n.apply(ctx, metadata.CreateStream{Name: name})
	return res.Stream, err
}

// DeleteStream deletes a stream with all its topics and partitions.
func (n *Node) DeleteStream(ctx context.Context, stream uint32) error {
	_, err := n.apply(ctx, metadata.DeleteStream{Stream: stream})
	return err
}

// CreateTopic creates a topic with partitions partitions and returns its
// id. The call returns once the topic is committed; its partitions
// materialise asynchronously, and requests that arrive first are parked
// until they do.
func (n *Node) CreateTopic(ctx context.Context, stream uint32, name string, partitions int, opts ...TopicOption) (uint32, error) {
	var cfg TopicConfig
	for _, o := range opts {
		o(&cfg)
	}
	res, err := n.apply(ctx, metadata.CreateTopic{Stream: stream, Name: name, Partitions: partitions, Config: cfg})
	return res.Topic, err
}

// DeleteTopic deletes a topic and its partitions.
func (n *Node) DeleteTopic(ctx context.Context, stream, topic uint32) error {
	_, err := n.apply(ctx, metadata.DeleteTopic{Stream: stream, Topic: topic})
	return err
}

// CreatePartitions adds count partitions to a topic (ids continue densely).
func (n *Node) CreatePartitions(ctx context.Context, stream, topic uint32, count int) error {
	_, err := n.apply(ctx, metadata.CreatePartitions{Stream: stream, Topic: topic, Count: count})
	return err
}

// DeletePartitions removes count partitions from the tail of a topic.
func (n *Node) DeletePartitions(ctx context.Context, stream, topic uint32, count int) error {
	_, err := n.apply(ctx, metadata.DeletePartitions{Stream: stream, Topic: topic, Count: count})
	return err
}

// Stream returns a committed stream by name.
func (n *Node) Stream(name string) (StreamInfo, bool) { return n.meta.StreamByName(name) }

// Streams lists the committed streams in id order.
func (n *Node) Streams() []StreamInfo { return n.meta.Streams() }

// Topics lists a stream's committed topics in id order.
func (n *Node) Topics(stream uint32) []TopicInfo { return n.meta.Topics(stream) }

// Topic returns a committed topic by name.
func (n *Node) Topic(stream uint32, name string) (TopicInfo, bool) {
	return n.meta.TopicByName(stream, name)
}

// Partitions lists the committed partitions of a topic in id order.
func (n *Node) Partitions(stream, topic uint32) ([]PartitionInfo, error) {
	if n.closed.Load() {
		return nil, ErrClosed
	}
	t, ok := n.meta.Topic(stream, topic)
	if !ok {
		return nil, n.missing(stream, topic)
	}
	out := make([]PartitionInfo, 0, t.Partitions)
	for p := range uint32(t.Partitions) {
		ns, _ := metadata.NewNamespace(stream, topic, p)
		if info, ok := n.meta.Partition(ns); ok {
			out = append(out, info)
		}
	}
	return out, nil
}

// missing builds the not-found error of a stream/topic pair.
func (n *Node) missing(stream, topic uint32) error {
	if _, ok := n.meta.Stream(stream); !ok {
		return fmt.Errorf("%w: stream %d", ErrStreamNotFound, stream)
	}
	return fmt.Errorf("%w: topic %d in stream %d", ErrTopicNotFound, topic, stream)
}

// resolve turns ids into a committed namespace, or a typed not-found error.
func (n *Node) resolve(stream, topic, part uint32) (metadata.Namespace, error) {
	ns, err := metadata.NewNamespace(stream, topic, part)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if _, ok := n.meta.Partition(ns); ok {
		return ns, nil
	}
	if _, ok := n.meta.Topic(stream, topic); ok {
		return 0, fmt.Errorf("%w: %v", ErrPartitionNotFound, ns)
	}
	return 0, n.missing(stream, topic)
}

// call sends req to the owner of its namespace and waits for the answer,
// retrying "retry here" answers in place until the deadline: the context's,
// or RequestTimeout when it has none. Before every retry the namespace is
// re-resolved, so a request whose partition was deleted meanwhile ends with
// a not-found error instead of waiting out its deadline.
func (n *Node) call(ctx context.Context, req *shard.Request, stream, topic, part uint32) (shard.Response, error) {
	reply := make(chan shard.Response, 1)
	f := shard.Frame{Req: req, Reply: reply}
	return n.await(ctx, f, reply, n.dispatch(ctx, f), stream, topic, part)
}

// dispatch hands f to the owner shard of its namespace. A full inbox is
// backpressure: it waits for room (bounded by the request deadline) rather
// than retrying on a timer.
func (n *Node) dispatch(ctx context.Context, f shard.Frame) error {
	if n.closed.Load() {
		return ErrClosed
	}
	// The call's deadline, fixed at its first attempt, travels with every
	// attempt, so a frame parked behind a build that does not finish is
	// answered by then (behaviour 17).
	if f.Req.Deadline.IsZero() {
		d := n.cfg.Clock.Now().Add(n.cfg.RequestTimeout)
		if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
			d = cd
		}
		f.Req.Deadline = d
	}
	owner, err := n.router.Send(f.Req.NS, f)
	if err == nil {
		return nil
	}
	n.countSendFailure(f.Req, err)
	switch {
	case errors.Is(err, router.ErrFull):
		wctx, cancel := n.deadline(ctx)
		err = n.shards[owner].Send(wctx, f)
		cancel()
		if err != nil && ctx.Err() == nil && wctx.Err() != nil {
			err = fmt.Errorf("%w: inbox full until the deadline", ErrRetry)
		}
	case errors.Is(err, router.ErrDisconnected) && n.closed.Load():
		return ErrClosed
	}
	return err
}

// await completes a call whose first attempt dispatch made (sent is its
// result): it waits for the answer and retries "retry here" answers in
// place, following "not leader" hints, as call documents.
func (n *Node) await(ctx context.Context, f shard.Frame, reply <-chan shard.Response, sent error, stream, topic, part uint32) (shard.Response, error) {
	req, err := f.Req, sent
	var (
		deadline time.Time
		pause    = n.cfg.RetryBackoffMin
		timer    Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if errors.Is(err, ErrClosed) {
			return shard.Response{}, ErrClosed
		}
		if err == nil {
			select {
			case r := <-reply:
				if r.Err == nil {
					return r, nil
				}
				err = r.Err
			case <-ctx.Done():
				// The shard will still answer into the buffered reply
				// channel; the request may or may not have been applied.
				return shard.Response{}, ctx.Err()
			}
		}
		if ctx.Err() != nil {
			return shard.Response{}, ctx.Err()
		}
		// "Not leader" is never retried here: the request follows the
		// hint to the leader, and only a "retry here" from there brings it
		// back into this loop.
		var nl *shard.NotLeaderError
		for n.eng.Clustered() && errors.As(err, &nl) && nl.Leader != 0 {
			var r shard.Response
			r, err = n.eng.Forward(ctx, nl.Leader, req)
			if err == nil {
				err = r.Err
			}
			if err == nil {
				return r, nil
			}
			if errors.As(err, &nl) && nl.Leader == n.eng.NodeID() {
				// Leadership is moving to this node: retry here.
				err = fmt.Errorf("%w: leadership moving here", ErrRetry)
				break
			}
		}
		if errors.Is(err, shard.ErrClosed) {
			return shard.Response{}, fmt.Errorf("%w: %w", ErrClosed, err)
		}
		// In a cluster an unknown outcome is retried too: a produce
		// carries its (producer, sequence) pair, which the partition
		// deduplicates, and every other operation is idempotent.
		if !retryInPlace(err) && !(n.eng.Clustered() && errors.Is(err, ErrOutcomeUnknown) && ctx.Err() == nil) {
			return shard.Response{}, partition.ClassifyNoSpace(err)
		}
		// Retry in place. The deadline is computed only now: the first
		// attempt of almost every call succeeds and pays for no timer.
		now := n.cfg.Clock.Now()
		if deadline.IsZero() {
			deadline = req.Deadline // the call's, set by its first dispatch
		}
		if deadline.IsZero() {
			deadline = now.Add(n.cfg.RequestTimeout)
			if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
				deadline = d
			}
		}
		if !now.Before(deadline) {
			return shard.Response{}, fmt.Errorf("parkway: deadline passed while retrying: %w", err)
		}
		wait := min(pause, deadline.Sub(now))
		pause = min(pause*2, n.cfg.RetryBackoffMax)
		if timer == nil {
			timer = n.cfg.Clock.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C():
		case <-ctx.Done():
			return shard.Response{}, ctx.Err()
		}
		ns, rerr := n.resolve(stream, topic, part)
		if rerr != nil {
			return shard.Response{}, rerr
		}
		req.NS = ns
		err = n.dispatch(ctx, f)
	}
}

// deadline bounds ctx by RequestTimeout when it has no earlier deadline.
func (n *Node) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return n.eng.Deadline(ctx)
}

// sleep waits d on the node's clock, or until ctx ends.
func (n *Node) sleep(ctx context.Context, d time.Duration) error { return n.eng.Sleep(ctx, d) }

// countSendFailure counts a frame the router could not hand to a shard.
func (n *Node) countSendFailure(req *shard.Request, err error) { n.eng.CountSendFailure(req, err) }
