package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/metadata"
)

// Membership: nodes join (AddNode), leave (RemoveNode) and share the load
// (Rebalance) while the cluster serves. The metadata group's members
// change with raft configuration changes that carry the metadata command
// recording the change, so the store's nodes and the group's members
// (voters and learners) change at the same log index; partition replicas
// move with the metadata's move commands, which each partition group's
// leader carries out with configuration changes of its own (see the
// shard package's move.go and the metadata package's moves.go).
//
// A node joins the metadata group as a learner (behaviour 31), in the
// change that carries its AddNode command: it receives the log and the
// metadata snapshot but votes in nothing, so a metadata group of three
// that is growing tolerates one failure while the newcomer catches up,
// however long it takes (it may be cut off for good). The leader promotes
// it to voter on a tick once it has caught up (promoteLearners: the
// order and the judgement are internal/groups' NextChange and CaughtUp,
// as for a partition's move). The promotion carries no command: it is
// the leader's own step, re-run on every tick from the configuration and
// the store, so a new leader carries on where the old one stood, and a
// member restarted mid-catch-up is promoted once it caught up again.

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
	case needNode && raftid.CheckNode(node) != nil:
		return fmt.Errorf("%w: %w", metadata.ErrInvalidNode, raftid.CheckNode(node))
	}
	return nil
}

// AddNode adds node to the cluster: the metadata group takes it as a
// learner, and the AddNode command the change carries records it in the
// metadata, so partitions created from then on are placed over it too;
// the metadata leader promotes it to voter once it has caught up with the
// metadata (it holds the leader's snapshot and every entry up to the
// leader's commit index). Partitions that exist stay on their nodes until
// Rebalance moves some onto it. The node must be running with
// Cluster.Join, and this node's bus must reach it (a TCP bus:
// TCPBus.AddPeer on every member first).
//
// AddNode returns once this node has applied the node's promotion (or, for
// a node that is a voter already, at once). It waits until ctx ends, or
// RequestTimeout when ctx has no deadline: a node that does not catch up
// by then (unreachable, or down) stays a learner, named in the metadata,
// and AddNode fails with an error wrapping ErrNotPromoted and ctx's
// error. The leader still promotes the learner whenever it catches up;
// calling AddNode again waits for that, and RemoveNode removes the
// learner.
func (e *Engine) AddNode(ctx context.Context, node uint64) error {
	if err := e.membershipCall(node, true); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = clock.WithTimeout(ctx, e.cfg.Clock, e.cfg.RequestTimeout)
		defer cancel()
	}
	return e.cl.changeMembership(ctx, true, node)
}

// ErrNotPromoted is AddNode's error when its context ended while the node
// was still a learner of the metadata group: added (the metadata names
// it), but not yet caught up. The leader promotes it once it catches up;
// call AddNode again to wait for that, or RemoveNode to take it out.
var ErrNotPromoted = errors.New("parkway: the node is added as a learner and not promoted to voter yet")

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
	if err := e.cl.notSelf(node); err != nil {
		return err
	}
	return e.cl.changeMembership(ctx, false, node)
}

// notSelf refuses the removal of this node: the node removed may never
// learn that its removal committed (the leader stops replicating to
// it), so it cannot wait for it.
func (c *clusterNode) notSelf(node uint64) error {
	if node == uint64(c.cfg.ID) {
		return fmt.Errorf("%w: node %d cannot remove itself: remove it through another member", metadata.ErrInvalidNode, node)
	}
	return nil
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

// metaConf is a metadata group configuration, as a member applied it.
type metaConf struct{ voters, learners []uint64 }

// voter reports whether node is a voter of the metadata group as this
// member last applied its configuration. Safe from any goroutine.
func (m *metaGroup) voter(node uint64) bool {
	conf := m.conf.Load()
	return conf != nil && slices.Contains(conf.voters, node)
}

// publishConf publishes the member's configuration after it changed (a
// membership change or a snapshot applied: confChanged), and wakes the
// callers waiting on the metadata (waitApplied).
func (m *metaGroup) publishConf() {
	if !m.confChanged {
		return
	}
	m.confChanged = false
	m.conf.Store(&metaConf{voters: m.g.Voters(), learners: m.g.Learners()})
	m.c.applied.fire()
}

// promoteLearners is the metadata leader's part of adding a node, run on
// every tick of an awake leader: it promotes the first learner that has
// caught up (groups.NextChange with groups.CaughtUp as the judgement of
// whole), towards the voters the store names. The learners are the
// nodes the store names that are not voters yet; a learner the store does
// not name (its AddNode command was refused, as one past MaxNodes is) is
// removed. Adding a learner and removing a voter are AddNode's and
// RemoveNode's, which carry the commands: a node the store names is a
// member of the configuration, as both change at the same index. It
// reports whether a learner that node liveness holds alive awaits its
// promotion: the leader then stays awake (it does not quiesce), to
// judge it on every tick.
func (m *metaGroup) promoteLearners() (promoting bool) {
	g := m.g
	if !g.IsLeader() {
		m.promotePace.Reset()
		return false
	}
	learners := g.Learners()
	if len(learners) == 0 {
		m.promotePace.Reset()
		return false
	}
	for _, n := range learners {
		promoting = promoting || m.c.live.alive(n)
	}
	if m.promotePace.Wait() {
		return promoting
	}
	voters := g.Voters()
	target := slices.DeleteFunc(m.store.Nodes(), func(n uint64) bool {
		return !slices.Contains(voters, n) && !slices.Contains(learners, n)
	})
	ch := groups.NextChange(g, target, func(n uint64) bool { return groups.CaughtUp(g, n) })
	if ch.Kind != groups.ChangePromote && (ch.Kind != groups.ChangeRemove || !slices.Contains(learners, ch.Node)) {
		return promoting // waiting for a learner to catch up
	}
	// Given groups.ChangeRetryTicks to apply, then proposed again.
	m.promotePace.Proposed()
	if err := groups.Propose(g, ch, nil); err != nil {
		m.c.e.cfg.Logger.Debug("changing a metadata learner", "change", ch.Kind, "node", ch.Node, "error", err)
	}
	return true
}

// settle proposes metadata.SettleReplicas for a partition group's leader
// (shard.Replication.Settle). It never blocks the shard's pump: when the
// metadata driver is busy the settle is dropped, and the leader proposes
// it again.
func (c *clusterNode) settle(ns metadata.Namespace, epoch, node uint64) {
	c.proposeAsync(metadata.SettleReplicas{NS: ns, CreatedRevision: epoch, Node: node}, ns, node)
}

// reseed proposes metadata.ReseedReplica for this node's replica of a
// partition whose raft log is damaged (reconciler.Config.Reseed). Like
// settle it never blocks: a proposal dropped is made again at the
// build's next retry.
func (c *clusterNode) reseed(ns metadata.Namespace, epoch, replica uint64) {
	c.proposeAsync(metadata.ReseedReplica{NS: ns, CreatedRevision: epoch, Replica: replica}, ns, replica)
}

// proposeAsync proposes cmd, about the replica of raft id node of ns, to
// the metadata without waiting for it.
func (c *clusterNode) proposeAsync(cmd metadata.Command, ns metadata.Namespace, node uint64) {
	if c.e.cfg.Manual {
		// A manual engine's driver steps the shards and the metadata
		// member from one goroutine.
		if _, err := c.e.ProposeMetadata(c.e.NewMetadataKey(), cmd); err != nil {
			c.e.cfg.Logger.Debug("proposing a replica change", "command", fmt.Sprintf("%T", cmd), "ns", ns, "replica", node, "error", err)
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
