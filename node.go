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

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/internal/backoff"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/router"
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
	cfg    Config
	eng    *host.Engine
	meta   *metadata.Store
	router *router.Router[shard.Frame]
	shards []*shard.Shard

	admin   Admin
	cluster Cluster

	// producer and seq key this Node's produces for deduplication in a
	// cluster: a retry of a produce whose outcome was unknown applies once.
	producer uint64
	seq      atomic.Uint64

	// origin is what this node's handles name as their origin (originOf).
	origin uint64

	roundRobin atomic.Uint64
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
	n := &Node{cfg: cfg, eng: eng, meta: eng.Meta(), router: eng.Router(), shards: eng.Shards(),
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

// call sends req to the owner of its namespace and waits for the answer,
// retrying "retry here" answers in place until the deadline: the context's,
// or RequestTimeout when it has none. Before every retry the namespace is
// re-resolved, so a request whose partition was deleted meanwhile ends with
// a not-found error instead of waiting out its deadline.
func (n *Node) call(ctx context.Context, req *shard.Request, t Topic, part uint32) (shard.Response, error) {
	reply := make(chan shard.Response, 1)
	f := shard.Frame{Req: req, Reply: reply}
	return n.await(ctx, f, reply, n.first(ctx, f), t, part)
}

// first makes a call's first attempt: a request for a partition this node
// holds no replica of goes straight to a replica (await follows the "not
// leader" answer it stands for), anything else to the local owner shard.
// Retries go through the shard, whose answer for a partition held
// elsewhere points at a live replica.
func (n *Node) first(ctx context.Context, f shard.Frame) error {
	if to := n.eng.ReplicaFor(f.Req.NS); to != 0 {
		n.stampDeadline(ctx, f)
		return &shard.NotLeaderError{Leader: to}
	}
	return n.dispatch(ctx, f)
}

// stampDeadline fixes the call's deadline at its first attempt.
func (n *Node) stampDeadline(ctx context.Context, f shard.Frame) {
	if f.Req.Deadline.IsZero() {
		f.Req.Deadline = n.callDeadline(ctx, n.cfg.Clock.Now())
	}
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
	n.stampDeadline(ctx, f)
	owner, err := n.router.Send(f.Req.NS, f)
	if err == nil {
		return nil
	}
	n.countSendFailure(f.Req, err)
	switch {
	case errors.Is(err, router.ErrFull):
		// Wait for room until the call's deadline, with one timer (a
		// context derived for it cost a context, a timer and their
		// cancellation on every wait: with thousands of producers the
		// inbox is full for most of their sends).
		t := n.cfg.Clock.NewTimer(f.Req.Deadline.Sub(n.cfg.Clock.Now()))
		err = n.shards[owner].SendBefore(ctx, f, t.C())
		t.Stop()
		if errors.Is(err, router.ErrFull) {
			err = fmt.Errorf("%w: inbox full until the deadline", ErrRetry)
		}
	case errors.Is(err, router.ErrDisconnected) && n.closed.Load():
		return ErrClosed
	}
	return err
}

// callDeadline is the deadline of a call started at now: RequestTimeout
// later, or ctx's deadline if that is sooner.
func (n *Node) callDeadline(ctx context.Context, now time.Time) time.Time {
	d := now.Add(n.cfg.RequestTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	return d
}

// await completes a call whose first attempt dispatch made (sent is its
// result): it waits for the answer and retries "retry here" answers in
// place, following "not leader" hints, as call documents.
func (n *Node) await(ctx context.Context, f shard.Frame, reply <-chan shard.Response, sent error, t Topic, part uint32) (shard.Response, error) {
	req, err := f.Req, sent
	var (
		deadline time.Time
		bo       = backoff.New(n.cfg.RetryBackoffMin, n.cfg.RetryBackoffMax)
		timer    clock.Timer
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
			return shard.Response{}, publicError(err)
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
		wait := min(bo.Next(), deadline.Sub(now))
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
		// Re-resolve before every attempt: a handle whose incarnation is
		// gone ends the call with a not-found error, and the request
		// carries the partition's current incarnation of the same topic
		// (partitions deleted and re-added within the topic get new ones).
		ns, epoch, rerr := n.resolve(ctx, t, part)
		if rerr != nil {
			return shard.Response{}, rerr
		}
		req.NS, req.Epoch = ns, epoch
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
