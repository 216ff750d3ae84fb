package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/backoff"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Membership: nodes join (AddNode), leave (RemoveNode) and share the load
// (Rebalance) while the cluster serves. The metadata group's voters change
// with raft configuration changes that carry the metadata command
// recording the change, so the store's nodes and the group's voters
// change at the same log index; partition replicas move with the
// metadata's move commands, which each partition group's leader carries
// out with configuration changes of its own (see the shard package's
// move.go and the metadata package's moves.go).

// appliedSignal wakes the callers waiting for the metadata to reach a
// state: every entry or snapshot the node applies closes the current
// channel and installs a fresh one. A waiter takes the channel before it
// checks the state, so no application between the check and the wait is
// missed.
type appliedSignal struct{ ch atomic.Pointer[chan struct{}] }

func newAppliedSignal() *appliedSignal {
	s := new(appliedSignal)
	ch := make(chan struct{})
	s.ch.Store(&ch)
	return s
}

func (s *appliedSignal) next() <-chan struct{} { return *s.ch.Load() }

func (s *appliedSignal) fire() {
	ch := make(chan struct{})
	close(*s.ch.Swap(&ch))
}

// waitApplied waits until done reports true, re-checking after every
// metadata application here.
func (c *clusterNode) waitApplied(ctx context.Context, done func() bool) error {
	for {
		ch := c.applied.next()
		if done() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// membershipCall checks what every membership call needs: a started
// clustered engine, and a node id.
func (e *Engine) membershipCall(node uint64, needNode bool) error {
	switch {
	case e.cl == nil:
		return errNotClustered
	case e.cfg.Manual:
		return ErrManual
	case e.closed.Load():
		return ErrClosed
	case needNode && node == 0:
		return fmt.Errorf("%w: node id 0", metadata.ErrInvalidNode)
	}
	return nil
}

// AddNode adds node to the cluster: the metadata group takes it as a
// voter, and the AddNode command the change carries records it in the
// metadata, so partitions created from then on are placed over it too.
// Partitions that exist stay on their nodes until Rebalance moves some
// onto it. The node must be running with Cluster.Join, and this node's
// bus must reach it (a TCP bus: TCPBus.AddPeer on every member first).
// AddNode returns once this node has applied the change; adding a member
// is a no-op.
func (e *Engine) AddNode(ctx context.Context, node uint64) error {
	if err := e.membershipCall(node, true); err != nil {
		return err
	}
	return e.cl.changeVoters(ctx, true, node, metadata.AddNode{Node: node}, func() bool {
		return slices.Contains(e.meta.Nodes(), node)
	})
}

// RemoveNode removes node from the cluster while it serves: first every
// replica the node holds moves to the other nodes (metadata.DrainNode;
// each partition's group adds its new replica, which is sent a snapshot
// and fetches the partition log, before it removes the old one), then the
// node leaves the metadata group. It returns once this node has applied
// the removal; the removed node serves nothing more and can be closed.
// Removing a node that is not a member is a no-op (judged after a read
// barrier, so a node added through another member is one). It fails with
// metadata.ErrNotEnoughNodes when some topic's replication factor needs
// the node. The moves take as long as the data takes to copy: bound the
// call with ctx, and call it again after an interruption — it carries on
// where the cluster stands.
func (e *Engine) RemoveNode(ctx context.Context, node uint64) error {
	if err := e.membershipCall(node, true); err != nil {
		return err
	}
	c := e.cl
	if node == uint64(c.cfg.ID) {
		// The node removed may never learn its removal committed (the
		// leader stops replicating to it), so it cannot wait for it.
		return fmt.Errorf("%w: node %d cannot remove itself: remove it through another member", metadata.ErrInvalidNode, node)
	}
	// This node's metadata may lag behind the node's addition (it was cut
	// off while another member added it): judged from that view, the
	// node is "not a member" and the call would return at once, with the
	// node still a voter and a holder of replicas. So the view is
	// brought up to what the cluster had committed first.
	if err := e.ReadBarrier(ctx); err != nil {
		return fmt.Errorf("parkway: removing node %d: %w", node, err)
	}
	if !slices.Contains(e.meta.Nodes(), node) {
		return nil
	}
	if !slices.Contains(e.meta.Draining(), node) {
		if _, err := e.ApplyMetadata(ctx, metadata.DrainNode{Node: node}); err != nil {
			return err
		}
	}
	if err := c.waitApplied(ctx, func() bool { _, held := e.meta.Moving(node); return held == 0 }); err != nil {
		return fmt.Errorf("parkway: removing node %d: waiting for its replicas to move: %w", node, err)
	}
	return c.changeVoters(ctx, false, node, metadata.RemoveNode{Node: node}, func() bool {
		return !slices.Contains(e.meta.Nodes(), node)
	})
}

// Rebalance spreads the partitions' replicas, and their preferred
// leaders, evenly over the nodes (metadata.Rebalance), for example after
// AddNode; leadership follows the preferred leaders. It returns once
// every move has settled; the cluster serves throughout.
func (e *Engine) Rebalance(ctx context.Context) error {
	if err := e.membershipCall(0, false); err != nil {
		return err
	}
	if _, err := e.ApplyMetadata(ctx, metadata.Rebalance{}); err != nil {
		return err
	}
	return e.cl.waitApplied(ctx, func() bool { moving, _ := e.meta.Moving(0); return moving == 0 })
}

// changeVoters proposes the metadata group's membership change of node,
// carrying cmd, until done reports it applied here. raft takes one change
// at a time: a proposal made while another is in flight is dropped, and
// one lost with a leader never applies; either is proposed again after a
// bounded wait (the command's deduplication key makes a second commit a
// no-op).
func (c *clusterNode) changeVoters(ctx context.Context, add bool, node uint64, cmd metadata.Command, done func() bool) error {
	e, m := c.e, c.meta
	data, err := encodeMetaCommand(e.NewMetadataKey(), cmd)
	if err != nil {
		return err
	}
	ctx, cancel := e.Deadline(ctx)
	defer cancel()
	bo := backoff.New(e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax)
	for {
		if done() {
			return nil
		}
		reply := make(chan MetadataResult, 1)
		select {
		case m.props <- metaOp{change: node, remove: !add, data: data, reply: reply}:
		case <-m.failed:
			return m.err
		case <-ctx.Done():
			return ctx.Err()
		}
		var r MetadataResult
		select {
		case r = <-reply:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.Err != nil && !errors.Is(r.Err, shard.ErrRetry) {
			return r.Err
		}
		if r.Err == nil {
			// Proposed: wait for it to apply here, for a bounded time (a
			// proposal lost to a leader change is proposed again).
			wctx, wcancel := clock.WithTimeout(ctx, e.cfg.Clock, e.ForwardTimeout())
			err := c.waitApplied(wctx, done)
			wcancel()
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%w: changing the membership of node %d: %w", shard.ErrOutcomeUnknown, node, ctx.Err())
			}
			continue
		}
		if err := e.Sleep(ctx, bo.Next()); err != nil {
			return err
		}
	}
}

// settle proposes metadata.SettleReplicas for a partition group's leader
// (shard.Replication.Settle). It never blocks the shard's pump: when the
// metadata driver is busy the settle is dropped, and the leader proposes
// it again.
func (c *clusterNode) settle(ns metadata.Namespace, epoch, node uint64) {
	cmd := metadata.SettleReplicas{NS: ns, CreatedRevision: epoch, Node: node}
	if c.e.cfg.Manual {
		// A manual engine's driver steps the shards and the metadata
		// member from one goroutine.
		if _, err := c.e.ProposeMetadata(c.e.NewMetadataKey(), cmd); err != nil {
			c.e.cfg.Logger.Debug("proposing a settle", "ns", ns, "node", node, "error", err)
		}
		return
	}
	data, err := encodeMetaCommand(c.e.NewMetadataKey(), cmd)
	if err != nil {
		return
	}
	select {
	case c.meta.props <- metaOp{data: data, reply: make(chan MetadataResult, 1)}:
	default:
	}
}
