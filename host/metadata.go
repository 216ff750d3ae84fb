package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/internal/dedupe"
	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/internal/testhooks"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/shard"
)

// MetadataResult is the outcome of a metadata command.
type MetadataResult struct {
	Result metadata.Result
	Err    error
}

// metaDedupeWindow bounds how many recent metadata commands are
// remembered for deduplicating re-proposals.
const metaDedupeWindow = 4096

// metaGroup is this node's member of the metadata raft group: it applies
// committed commands to the node's store, in log order, on every node, and
// answers a proposal once it is committed and applied here.
type metaGroup struct {
	c     *clusterNode
	g     *replica.Group
	store *metadata.Store
	// pending are this member's proposals in flight, by proposal id.
	pending map[uint64]chan<- MetadataResult
	// seen deduplicates re-proposed commands: (proposer, sequence) →
	// result. Replicated state, carried by snapshots.
	seen   *dedupe.Window[MetadataResult]
	policy replica.CompactionPolicy
	// lead is the leader as of the last LeaderChanged, for readers off
	// the driver (ClusterStatus).
	lead atomic.Uint64

	// Started engines only: proposals and peers' messages reach the
	// metadata goroutine through these.
	props chan metaOp
	in    chan *raftpb.Message
	// reads are read barriers waiting for the metadata goroutine;
	// barriers those it asked the group for (groups.Reads: the leader's
	// confirmation, then the applied index), by request id. The members'
	// lease renewals ask the same way (metaRead.lease), one read index per
	// batch.
	reads    chan chan MetadataResult
	barriers groups.Reads[metaRead]
	// leaseIn takes members' lease renewals (started engines), lease is
	// the leader's state of them (grouplease.go).
	leaseIn chan leaseOp
	lease   leases

	// failed is closed (after err is set) when the member stopped for
	// good: its raft log cannot be reopened (see reopenGroup), or it has none
	// (a cluster without a data directory).
	failed chan struct{}
	err    error
	// reopen is down (why: an error wrapping shard.ErrRetry) while the
	// member is down after a failed Ready, its group closed: it is
	// reopened from its raft log once reopen is due, and after each failed
	// reopen its delay doubles, within the build backoff's bounds
	// (groups.Reopen, the reconciler's pace of partition rebuilds).
	reopen groups.Reopen

	// followed is the leader a reopened member follows again
	// (replica.Group.Follow) and its term, while its answer may have been
	// lost: the answer is repeated every election timeout, left more
	// times, until a message from that leader arrives (followAgain).
	followed struct {
		lead, term  uint64
		ticks, left int
	}

	// Deduplication keys of this node incarnation's proposals.
	producer uint64
	seq      atomic.Uint64

	served []served // manual engines: forwarded requests awaiting answers

	// compaction is the log's compaction trigger; a node added forces
	// one: a joining member takes only a snapshot whose voters include
	// it, so the one the leader sends it must be taken after the change.
	compaction groups.Compaction

	// awake is the member's quiescence: its one group is in it while it
	// is ticked (groups.Awake; metamember.go).
	awake groups.Awake[uint64, *metaGroup]
	// elect schedules the member's elections, cand is its place in them
	// (groups.Elections, without its bound: one group, campaigning at
	// once; its election timer is the fallback).
	elect groups.Elections[*metaGroup]
	cand  groups.Candidacy

	// conf is the group's configuration as this member last applied it,
	// published for readers off the driver (AddNode waits for its node
	// to be a voter); confChanged marks it stale after a membership
	// change or a snapshot, until the next process publishes it.
	conf        atomic.Pointer[metaConf]
	confChanged bool
	// promotePace is how long the leader gives the configuration change
	// it proposed for a learner to apply before it proposes it again
	// (groups.ChangePace; membership.go).
	promotePace groups.ChangePace
}

type metaOp struct {
	data  []byte
	reply chan MetadataResult
	// change, if not 0, makes the op a membership change of that node
	// (an addition, or a removal if remove is set): data is the encoded
	// AddNode or RemoveNode command it carries.
	change uint64
	remove bool
}

// errResultForgotten answers a duplicate of a command older than the
// last metadata snapshot, which keeps keys but no results.
var errResultForgotten = fmt.Errorf("%w: the command was applied before the last metadata snapshot, which keeps no results", shard.ErrOutcomeUnknown)

var errShortCommand = errors.New("parkway: metadata entry shorter than its header")

// openMetaGroup opens the group on disk (nil: in memory) and builds the
// store: the snapshot in its log, then every command the log holds as
// committed, applied before anything else runs — so the orphan sweep and
// the reconcilers of a restarted node start from at least what it had
// applied before.
func openMetaGroup(c *clusterNode, disk *replica.Disk, mcfg metadata.Config) (*metaGroup, error) {
	every := uint64(c.e.cfg.MetadataSnapshotEvery)
	g, err := replica.New(c.metaGroupConfig(disk, 0))
	if err != nil {
		return nil, fmt.Errorf("metadata group: %w", err)
	}
	m := &metaGroup{c: c, g: g, pending: make(map[uint64]chan<- MetadataResult),
		seen: dedupe.New[MetadataResult](metaDedupeWindow), policy: replica.CompactionPolicy{Entries: every},
		props: make(chan metaOp), in: make(chan *raftpb.Message, 1024), failed: make(chan struct{}),
		reads: make(chan chan MetadataResult), leaseIn: make(chan leaseOp, 4096), producer: newProducerID()}
	m.elect = groups.NewElections(m, false, replica.DefaultElectionTicks)
	m.wake() // a member starts awake
	fail := func(err error) (*metaGroup, error) {
		_ = g.Close()
		return nil, err
	}
	store, err := metadata.NewStore(mcfg)
	snapIndex, data := g.Snapshot()
	// Peers' directory records are dated by the applied index (identity.go).
	c.appliedIndex.Store(snapIndex)
	if len(data) > 0 && err == nil {
		var snap metadata.StoreSnapshot
		if snap, err = m.decodeSnapshot(data); err == nil {
			store, err = metadata.Restore(mcfg, snap)
		}
	}
	if err != nil {
		return fail(fmt.Errorf("metadata snapshot: %w", err))
	}
	m.store = store
	if ev := c.e.cfg.Events.MetadataOpened; ev != nil {
		ev(store)
	}
	if _, err := groups.Process(g, m, &m.barriers); err != nil {
		return fail(fmt.Errorf("replaying the metadata log: %w", err))
	}
	m.confChanged = true
	m.publishConf()
	m.publishApplied()
	return m, nil
}

// metaGroupConfig configures the metadata group member on disk (nil: in
// memory), whose store has applied its log up to applied (0: a store
// restored from the log's snapshot).
func (c *clusterNode) metaGroupConfig(disk *replica.Disk, applied uint64) replica.Config {
	every := uint64(c.e.cfg.MetadataSnapshotEvery)
	// The founding members' initial snapshot holds the founding node set:
	// a member that joins later, sent that snapshot, places the partitions
	// of the commands that follow it as the founders did.
	var initial []byte
	if store, err := metadata.NewStore(c.metaStoreConfig); err == nil {
		initial, _ = metadata.EncodeGroupSnapshot(nil, store.Export())
	}
	// The log keeps as many commands behind a snapshot as between two, so
	// a node that lags by less than that catches up without one.
	return replica.Config{Group: uint64(metadata.MetadataNamespace), Node: uint64(c.cfg.ID),
		Peers: c.peers, Logger: c.e.cfg.Logger, ForwardProposals: true, Disk: disk, CatchUpEntries: every,
		Applied: applied, Dynamic: true, Join: c.cfg.Join, InitialData: initial,
		Metrics: c.e.metrics.RaftGroup(metrics.GroupMetadata), Clock: c.e.cfg.Clock,
		Fsync: c.e.metrics.Fsync(metrics.LogMetadata),
		// A snapshot a peer sends is refused before raft sees it unless
		// it decodes as a metadata group snapshot.
		CheckSnapshot: func(data []byte) error {
			_, _, err := metadata.DecodeGroupSnapshot(data)
			return err
		}}
}

func (m *metaGroup) close() error {
	m.answerAll(ErrClosed)
	if m.reopen.Down() != nil || (m.err != nil && m.c.metaLog != "") {
		return nil // closed when it went down
	}
	return m.g.Close()
}

func (m *metaGroup) answerAll(err error) {
	for id, ch := range m.pending {
		ch <- MetadataResult{Err: err}
		delete(m.pending, id)
	}
}

// recv takes a peer's metadata raft message: a started engine hands it
// to the metadata goroutine (dropped when that is busy: raft re-sends), a
// manual one steps it at once.
func (m *metaGroup) recv(msg *raftpb.Message) error {
	if m.c.e.cfg.Manual {
		if m.err != nil {
			return m.err
		}
		if m.reopen.Down() != nil {
			return nil // dropped while the member is down: raft re-sends
		}
		m.step(msg)
		if err := m.process(); m.err != nil {
			return err
		}
		return nil
	}
	select {
	case m.in <- msg:
	default:
	}
	return nil
}

// process handles everything the group has ready, then compacts its log
// when due. A Ready that fails half way cannot be handled again (raft
// panics on a second Ready without Advance), and a member whose raft log
// refuses writes must not vote or acknowledge: the member goes down (see
// down) until tick reopens it, and the others go on without it.
func (m *metaGroup) process() error {
	if err := m.unavailable(); err != nil {
		return err
	}
	// groups.Process reports a panic contained in Tick, Step or Propose,
	// which failed the group as a failed Ready does. Read barriers asked
	// again of new voters are new work, handled at once.
	for again := true; again; {
		var err error
		if again, err = groups.Process(m.g, m, &m.barriers); err != nil {
			return m.down(err)
		}
	}
	m.publishConf()
	m.publishApplied()
	m.compact()
	m.serveReads()
	return nil
}

// publishApplied publishes the member's raft applied index for readers
// off the driver (clusterNode.raftApplied) and wakes the callers waiting
// on the metadata when it moved: an entry without a command moves it
// though it changes nothing in the store, and a caller may be waiting
// for exactly that index (RenewLease: the leader's read index after an
// election is its empty entry).
func (m *metaGroup) publishApplied() {
	if a := m.g.Applied(); a != m.c.raftApplied.Load() {
		m.c.raftApplied.Store(a)
		m.c.applied.fire()
	}
}

// unavailable is why the member takes no work now (nil: it runs): it is
// down and waits to be reopened (an error wrapping shard.ErrRetry), or
// stopped for good (ErrMetadataFailed).
func (m *metaGroup) unavailable() error {
	if m.err != nil {
		return m.err
	}
	return m.reopen.Down()
}

// down takes the member down after its group failed. The group is closed
// and, after the build backoff, reopened from its raft log by tick — a
// restart of just this group, the store kept. Proposals and read indexes
// in flight die with its raft state, as with a leader change: their
// callers propose or ask again, and deduplication absorbs a proposal that
// commits after all. Without a raft log on disk there is nothing to reopen
// from (the member's votes would be forgotten), so it stops for good.
func (m *metaGroup) down(cause error) error {
	if m.c.metaLog == "" {
		return m.stop(cause)
	}
	_ = m.g.Close()
	m.LeaderChanged(0)
	cfg := m.c.e.cfg
	m.reopen.Reopened() // a fresh wait: the member ran since its last failure
	delay := m.goDown(fmt.Errorf("%w: the metadata member is down after a raft log failure, to be reopened: %w", shard.ErrRetry, cause))
	cfg.Logger.Error("metadata raft ready failed; reopening the member from its raft log", "error", cause, "retry_in", delay)
	return m.reopen.Down()
}

// goDown records why the member is down (or that a reopen failed) and
// returns the wait before the next reopen: the build backoff's bounds,
// as the reconciler's rebuilds of a failed partition group.
func (m *metaGroup) goDown(why error) time.Duration {
	cfg := m.c.e.cfg
	return m.reopen.Fail(cfg.Clock.Now(), cfg.BuildBackoffMin, cfg.BuildBackoffMax, why)
}

// stop stops the member for good: its metadata calls fail with
// ErrMetadataFailed until the node restarts.
func (m *metaGroup) stop(cause error) error {
	m.c.e.cfg.Logger.Error("metadata member stopped; this node leaves the metadata group until restarted", "error", cause)
	m.reopen.Reopened()
	m.err = fmt.Errorf("%w: %w", ErrMetadataFailed, cause)
	close(m.failed)
	m.answerAll(m.err)
	return m.err
}

// tick ticks the member once and handles what that made ready; ticks is
// how many ticks passed since the last call (more than one when a
// started engine's driver slept through them: sleepTicks), which a
// follower waiting to hibernate counts (groups.Awake.Hibernate). While the
// member is down it reopens it instead, once its backoff has passed: the
// metadata tick drives the recovery of a started engine and of a manual
// one alike.
func (m *metaGroup) tick(ticks int64) error {
	if m.err != nil {
		return m.err
	}
	if m.reopen.Down() != nil {
		if !m.reopen.Due(m.c.e.cfg.Clock.Now()) {
			return m.reopen.Down()
		}
		if err := m.reopenGroup(); err != nil {
			return err
		}
		m.awake.Remove(metaKey)
		m.wake() // a reopened member starts awake, its clock from zero
		m.cand.Reset()
	}
	m.awake.Hibernate(ticks, m.hibernate)
	m.leaseTick()
	m.elect.Tick()
	if m.quiesced() {
		return nil
	}
	// An awake leader with nothing to do quiesces instead of ticking,
	// sending its followers the quiesce heartbeat. A learner waiting for
	// its promotion needs the leader's ticks; a read barrier of the
	// leader's own waits for a heartbeat round's answers, which a
	// quiesced leader would not resend if one was lost.
	promoting := m.promoteLearners()
	if m.awake.Quiesce(metaKey, m.g, !promoting && m.barriers.Asked() == 0, m.c.live.alive, m.Send) {
		return nil
	}
	m.followAgain()
	_ = m.g.Tick() // a panic fails the group, which process reports
	return m.process()
}

// followRepeats is how many times a reopened member repeats its answer
// to the leader it follows again, one election timeout apart, before it
// hears from it: a lost answer, the only message a quiesced leader would
// get from it, is sent again, and a few losses in a row are survived.
const followRepeats = 5

// followAgain repeats a reopened member's answer to the leader it
// follows again (replica.Group.Follow) every election timeout while that
// leader has not been heard (m.step ends it), followRepeats times at
// most. A learner never campaigns, so nothing else of its own would wake
// a leader that quiesced while it was down; a voter's election timer
// would, an election later. Follow does nothing once the member follows
// another leader or another term. A failure fails the group, which
// process reports.
func (m *metaGroup) followAgain() {
	f := &m.followed
	if f.left == 0 {
		return
	}
	if f.ticks++; f.ticks < replica.DefaultElectionTicks {
		return
	}
	f.ticks, f.left = 0, f.left-1
	_ = m.g.Follow(f.lead, f.term)
}

// reopen reopens the down member from its raft log, as a restart of just
// this group would, but keeps the store: the new member applies from the
// index after the one the store holds. Everything the store applied was
// committed, and the log syncs a commit index before the entries it
// commits are applied (openMetaDisk), so nothing acknowledged is lost and
// nothing is applied twice. A snapshot the log holds beyond that index
// (a leader's, saved by the failed Ready before it was installed) is
// installed first, as when it arrives. A failed reopen is retried after
// twice the delay, clamped at the build backoff's maximum; a log that is
// corrupt, or commits less than the store applied, cannot be run from,
// and the member stops for good.
func (m *metaGroup) reopenGroup() error {
	c, cfg := m.c, m.c.e.cfg
	applied := m.g.Applied()
	disk, err := c.openMetaDisk()
	var g *replica.Group
	if err == nil {
		if g, err = replica.New(c.metaGroupConfig(disk, applied)); err != nil {
			_ = disk.Close()
		}
	}
	if err == nil {
		if index, data := g.Snapshot(); index > applied {
			if err = m.ApplySnapshot(index, data); err != nil {
				_ = g.Close()
			}
		}
	}
	if err == nil {
		// The reopened member follows the leader the failed one followed,
		// if it is still in that term: the leader may be quiesced, every
		// peer at its match, and only this member's answer wakes it to
		// send what the member missed while down (replica.Group.Follow).
		// A leader node liveness holds dead is not followed: its death,
		// reported while the member was down, was not heard (peerLive).
		if lead, term := m.g.Followed(); m.c.live.alive(lead) {
			if err = g.Follow(lead, term); err != nil {
				_ = g.Close()
			}
			m.followed.lead, m.followed.term, m.followed.ticks, m.followed.left = lead, term, 0, followRepeats
		}
	}
	if errors.Is(err, replica.ErrCorruptLog) {
		return m.stop(err)
	}
	if err != nil {
		delay := m.goDown(fmt.Errorf("%w: the metadata member is down after a raft log failure, reopening failed: %w", shard.ErrRetry, err))
		cfg.Logger.Error("reopening the metadata member failed", "error", err, "retry_in", delay)
		return m.reopen.Down()
	}
	m.g = g
	m.reopen.Reopened()
	m.confChanged = true
	m.publishConf()
	m.publishApplied()
	cfg.Logger.Info("metadata member reopened from its raft log", "applied", g.Applied())
	if ev := cfg.Events.MetadataReopened; ev != nil {
		ev(g.Applied())
	}
	return nil
}

// compact compacts the log behind a snapshot of the store once the
// policy says so. Only the group's driver applies commands, so the store
// is exactly the state at the applied index.
func (m *metaGroup) compact() {
	g := m.g
	if !m.compaction.Due(g, m.policy) {
		return
	}
	m.compaction.Compacted()
	data, err := metadata.EncodeGroupSnapshot(m.keys(), m.store.Export())
	if err == nil {
		err = g.Compact(g.Applied(), data)
	}
	if err != nil {
		m.c.e.cfg.Logger.Error("metadata raft log compaction failed", "error", err)
	}
	if ev := m.c.e.cfg.Events.MetadataCompacted; ev != nil {
		ev(g.Applied(), err)
	}
}

// propose proposes data (header + command) and registers reply.
func (m *metaGroup) propose(data []byte, reply chan MetadataResult) error {
	if err := m.unavailable(); err != nil {
		return err
	}
	m.wake()
	id, err := m.g.Propose(data)
	if err != nil {
		return fmt.Errorf("%w: %w", shard.ErrRetry, err)
	}
	m.pending[id] = reply
	return nil
}

// runMetadata drives the metadata group of a started engine. Its timer
// fires every tick while the member is ticked, and only once per
// liveness interval while it is quiesced (see sleepTicks): the ticks it
// slept through are counted when it fires. Its ticks fall on the grid of
// the liveness interval on the clock, so its heartbeat rounds fall on the
// instants the beater's timer fires at (untilGrid) and an idle node wakes
// once per round, not twice.
func (c *clusterNode) runMetadata(ctx context.Context) {
	m := c.meta
	clk, every := c.e.cfg.Clock, c.cfg.TickInterval
	// The ticks are counted on the grid of the heartbeat rounds
	// (untilGrid): the ticks of the current round that passed before
	// the start pace its rounds (liveness.now) but count toward no peer's
	// silence (liveness.own), so the first fire counts one tick and the
	// rounds fall on the instants the beater fires at.
	now := clk.Now()
	round := time.Duration(c.live.every) * every
	grid := now.Add(untilGrid(now, round) - round)
	c.live.now.Add(int64(now.Sub(grid) / every))
	// last is when the ticks counted so far end; due is how many ticks
	// after last the timer is armed for (liveness counts a late fire as
	// the ticks planned, see liveness.advance); long is set while the
	// timer is armed past the next tick.
	last := grid.Add(now.Sub(grid) / every * every)
	tick := clk.NewTimer(every - now.Sub(last))
	defer tick.Stop()
	due, long := int64(1), false
	for {
		if m.process() != nil && m.err != nil {
			m.answerReads(m.err)
			return
		}
		m.serveReads()
		if long && !m.quiesced() {
			// Woken while the driver slept: back to one fire per tick,
			// from the next tick on.
			since := clk.Now().Sub(last)
			tick.Reset(every - since%every)
			due, long = int64(since/every)+1, false
		}
		c.live.driverWaits()
		select {
		case <-ctx.Done():
			m.answerAll(ErrClosed)
			m.answerReads(ErrClosed)
			return
		case reply := <-m.reads:
			c.live.driverWorks()
			m.askRead(reply)
		case op := <-m.leaseIn:
			c.live.driverWorks()
			m.serveLease(op)
		case op := <-m.props:
			c.live.driverWorks()
			m.take(op)
		case msg := <-m.in:
			c.live.driverWorks()
			m.step(msg)
		case <-tick.C():
			c.live.driverWorks()
			k := max(int64(clk.Now().Sub(last)/every), 1)
			last = last.Add(time.Duration(k) * every)
			_ = m.tick(k) // process, at the top, reports a failure
			c.live.advance(ctx, k, due)
			n := m.sleepTicks()
			due, long = n, n > 1
			tick.Reset(time.Duration(n)*every - clk.Now().Sub(last))
		}
	}
}

// sleepTicks is how many ticks a started engine's driver sleeps before
// it next fires: one while the member is ticked (or down, waiting for its
// reopen), until node liveness's next heartbeat round while it is
// quiesced.
func (m *metaGroup) sleepTicks() int64 {
	if !m.quiesced() || m.unavailable() != nil {
		return 1
	}
	n := m.c.live.untilBeat()
	if due, ok := m.leaseDueTicks(); ok {
		n = min(n, due) // a lease lapses first: expire it in time
	}
	return n
}

// serveReads answers the read barriers whose read index is applied
// (groups.Process confirmed them, and asked those still unconfirmed
// again after the group's voters changed).
func (m *metaGroup) serveReads() {
	m.barriers.Serve(m.g.Applied(), func(r metaRead) {
		switch {
		case r.reply != nil:
			r.reply <- MetadataResult{}
		case r.lease == m.lease.seq:
			// The batch in flight is confirmed and its index applied.
			m.leaseConfirmed(m.g.Applied())
		}
		// A lease batch asked again after a timeout (a new seq) leaves
		// its old confirmation with nothing to answer.
	})
	m.answerLeases()
}

// metaRead is what the metadata group's leader reads answer: a read
// barrier's reply, or (lease != 0) the batch of lease renewals asked under
// that id (grouplease.go).
type metaRead struct {
	reply chan MetadataResult
	lease uint64
}

// answerReads answers every waiting read barrier with err.
func (m *metaGroup) answerReads(err error) {
	m.barriers.Drop(func(r metaRead) {
		if r.reply != nil {
			r.reply <- MetadataResult{Err: err}
		}
	})
}

// TickMetadata ticks a manual engine's metadata group member once (unless
// it is quiesced, see metamember.go) and handles what it made ready. Tick it every Cluster.TickInterval: the
// ticks also reopen a member that went down after its raft log refused a
// write, once its backoff has passed (until then, and when the reopen
// fails, it returns an error wrapping shard.ErrRetry). Node liveness
// counts these ticks: it sends the peers their heartbeats and reports
// dead ones to the shards from here.
func (e *Engine) TickMetadata() error {
	if e.cl == nil {
		return errNotClustered
	}
	e.cl.live.tick(e.group.Context())
	return e.cl.meta.tick(1)
}

// HandleMetadata handles what a manual engine's metadata group member has
// ready, and compacts its log when due.
func (e *Engine) HandleMetadata() error {
	if e.cl == nil {
		return errNotClustered
	}
	return e.cl.meta.process()
}

// MetadataGroupStatus is a metadata member's raft position, and the
// group's voters and learners (nodes added, not yet promoted: see
// AddNode) in the configuration it has applied (a node joining has none
// until it installs a snapshot).
type MetadataGroupStatus struct {
	Leader, Applied, SnapshotIndex uint64
	Voters, Learners               []uint64
}

// MetadataApplied is the index of the metadata command or snapshot this
// node applied last (0 on a single node). Entries without a command (a
// new leader's empty entry, a configuration change without one) do not
// move it, so it is no measure of how far two members applied: that is
// MetadataStatus's Applied, raft's applied index. Safe from any
// goroutine, unlike MetadataStatus.
func (e *Engine) MetadataApplied() uint64 {
	if e.cl == nil {
		return 0
	}
	return e.cl.appliedIndex.Load()
}

// MetadataStatus reports this node's metadata group member's position.
func (e *Engine) MetadataStatus() MetadataGroupStatus {
	if e.cl == nil {
		return MetadataGroupStatus{}
	}
	g := e.cl.meta.g
	return MetadataGroupStatus{Leader: g.Leader(), Applied: g.Applied(), SnapshotIndex: g.SnapshotIndex(),
		Voters: g.AppliedVoters(), Learners: g.AppliedLearners()}
}

// MetadataQuiesced reports whether this node's metadata member is
// quiesced (not ticked). Call it from the goroutine that drives a manual
// engine.
func (e *Engine) MetadataQuiesced() bool {
	return e.cl != nil && e.cl.meta.quiesced()
}

// MetadataHibernating reports whether this node's metadata member is a
// follower that hibernates: quiesced long enough to hold no raft node
// until something needs one. Call it from the goroutine that drives a
// manual engine.
func (e *Engine) MetadataHibernating() bool {
	return e.cl != nil && e.cl.meta.g.Hibernating()
}

// MetadataKey is the deduplication key of one metadata command: a command
// proposed again under the same key applies at most once. It is a type of
// its own, not an alias of the internal table's key, so that a host can
// name it and its documentation shows its fields.
type MetadataKey struct{ Producer, Seq uint64 }

// NewMetadataKey returns a fresh key for a command this node proposes.
func (e *Engine) NewMetadataKey() MetadataKey {
	if e.cl == nil {
		return MetadataKey{}
	}
	m := e.cl.meta
	return MetadataKey{Producer: m.producer, Seq: m.seq.Add(1)}
}

// ProposeMetadata proposes cmd under key through a manual engine's
// metadata group member. The returned channel receives the outcome once
// the command is committed and applied here — or never, if the proposal
// is lost with a leader (LeaderChanged forgets it): the caller proposes
// again under the same key after its own bounded wait, and
// deduplication turns a second commit into a no-op answering the first's
// result. A started engine's ApplyMetadata does exactly that.
func (e *Engine) ProposeMetadata(key MetadataKey, cmd metadata.Command) (<-chan MetadataResult, error) {
	if e.cl == nil {
		return nil, errNotClustered
	}
	data, err := encodeMetaCommand(key, cmd)
	if err != nil {
		return nil, err
	}
	reply := make(chan MetadataResult, 1)
	if err := (memberPort{e.cl.meta}).propose(metaOp{data: data, reply: reply}); err != nil {
		return nil, err
	}
	return reply, nil
}

func encodeMetaCommand(key MetadataKey, cmd metadata.Command) ([]byte, error) {
	enc, err := metadata.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	data := binary.LittleEndian.AppendUint64(make([]byte, 0, 16+len(enc)), key.Producer)
	data = binary.LittleEndian.AppendUint64(data, key.Seq)
	return append(data, enc...), nil
}

// applyReplicated commits cmd through the metadata group of a started
// engine: the command's apply-and-retry (startCommand), waited on. The
// (proposer, sequence) header makes re-proposing safe: a proposal lost
// with a leader is proposed again after a bounded wait, and if both
// copies commit, the second applies as a no-op returning the first's
// result.
func (c *clusterNode) applyReplicated(ctx context.Context, cmd metadata.Command) (metadata.Result, error) {
	e := c.e
	ctx, cancel := e.deadline(ctx)
	defer cancel()
	a, err := e.startCommand(c.meta.port(ctx), e.NewMetadataKey(), cmd, time.Time{})
	if err != nil {
		return metadata.Result{}, err
	}
	// This node's reconcilers build what the command creates while it is
	// replicated (see metadata.Store.Announce): the forecast is from this
	// node's state, and what the commit does not confirm is removed.
	if e.cfg.PrebuildPartitions {
		withdraw := c.meta.store.Announce(cmd)
		defer withdraw()
	}
	err = runSteps(ctx, e.cfg.Clock, a)
	return a.r.Result, err // the result of the answer that ended it
}

// Send implements replica.Handler.
func (m *metaGroup) Send(msg *raftpb.Message) {
	b, err := proto.Marshal(msg)
	if err != nil {
		return
	}
	_ = m.c.send(msg.GetTo(), KindMetaRaft, uint64(metadata.MetadataNamespace), b)
}

// Apply implements replica.Handler: it applies a committed command. A
// command that fails validation fails identically on every node, so its
// error is only the proposer's answer.
func (m *metaGroup) Apply(index, id uint64, payload []byte) error {
	m.c.appliedIndex.Store(index)
	r, cmd, dup := applyMetaCommand(m.store, m.seen, payload)
	if ev := m.c.e.cfg.Events.MetadataApplied; ev != nil {
		ev(index, cmd, r.Result, r.Err, dup)
	}
	if ch, ok := m.pending[id]; ok {
		delete(m.pending, id)
		ch <- r
	}
	m.c.applied.fire()
	return nil
}

// applyMetaCommand applies a committed metadata entry's payload — its
// deduplication key, then the encoded command — to store, unless seen
// holds the key already (dup: the result is the first copy's). Every
// member applies entries through it, and so does ReadMetadataGroup.
func applyMetaCommand(store *metadata.Store, seen *dedupe.Window[MetadataResult], payload []byte) (r MetadataResult, cmd metadata.Command, dup bool) {
	if len(payload) < 16 {
		r.Err = errShortCommand
		return r, nil, false
	}
	key := dedupe.Key{Producer: binary.LittleEndian.Uint64(payload), Seq: binary.LittleEndian.Uint64(payload[8:])}
	if prev, ok := seen.Get(key); ok {
		return prev, nil, true
	}
	cmd, err := metadata.DecodeCommand(payload[16:])
	if err == nil {
		r.Result, err = store.Apply(cmd)
	}
	r.Err = err
	seen.Put(key, r)
	return r, cmd, false
}

// ConfChanged implements replica.ConfChanger: a membership change of the
// metadata group carries the AddNode or RemoveNode command that records
// the change in the store, applied at the change's index like any
// command.
func (m *metaGroup) ConfChanged(index uint64, add bool, node uint64, ctx []byte) error {
	m.barriers.VotersChanged()
	m.confChanged = true
	if len(ctx) == 0 {
		return nil
	}
	// What node's directory was is no longer evidence: it left, or joins
	// (again) with whatever directory it has now.
	m.c.dirs.forgetPeer(node, index, false)
	if !add && node == uint64(m.c.cfg.ID) {
		m.c.e.cfg.Logger.Info("this node was removed from the cluster; it serves nothing more and can be closed")
	}
	return m.Apply(index, 0, ctx)
}

// proposeConfChange proposes the membership change that adds node to the
// metadata group, as a learner (the leader promotes it once it caught up:
// promoteLearners), or removes it, voter or learner, carrying the AddNode
// or RemoveNode command data.
func (m *metaGroup) proposeConfChange(add bool, node uint64, data []byte) error {
	if err := m.unavailable(); err != nil {
		return err
	}
	m.wake()
	if add && testhooks.NoJoinConfChange.Load() {
		// broken: the AddNode command alone, without the change that
		// makes the node a member of the group
		return m.propose(data, make(chan MetadataResult, 1))
	}
	ch := groups.Change{Kind: groups.ChangeAddLearner, Node: node}
	if !add {
		ch.Kind = groups.ChangeRemove
	}
	if err := groups.Propose(m.g, ch, data); err != nil {
		return fmt.Errorf("%w: %w", shard.ErrRetry, err)
	}
	return nil
}

// LeaderChanged implements replica.Handler: it forgets the waiters of
// proposals in flight, which may never commit. Each waiter re-proposes
// after its bounded wait, and if the old copy commits after all,
// deduplication turns the new one into a no-op.
func (m *metaGroup) LeaderChanged(lead uint64) {
	m.lead.Store(lead)
	m.c.e.metrics.MetadataLeader.Set(float64(lead))
	forgot := len(m.pending)
	clear(m.pending)
	// Read indexes in flight are dropped by raft with the leadership;
	// their callers ask again. Those already confirmed stay valid.
	m.barriers.DropAsked(func(r metaRead) {
		if r.reply != nil {
			r.reply <- MetadataResult{Err: fmt.Errorf("%w: metadata leader changed", shard.ErrRetry)}
		}
		// A lease batch's renewals are answered by leaderLeases.
	})
	m.leaderLeases(lead)
	if ev := m.c.e.cfg.Events.MetadataLeaderChanged; ev != nil {
		ev(lead, forgot)
	}
}

// ApplySnapshot implements replica.Handler: this node lagged behind the
// metadata group's compacted log and installs the leader's store in
// place. The shards and reconcilers see the new state through the same
// store and wake as after a commit.
func (m *metaGroup) ApplySnapshot(index uint64, data []byte) error {
	ev := m.c.e.cfg.Events.MetadataSnapshotInstalled
	var before []metadata.PartitionInfo
	if ev != nil {
		before = m.store.Snapshot().Partitions
	}
	m.confChanged = true // the snapshot's configuration, published by process
	snap, err := m.decodeSnapshot(data)
	if err == nil {
		err = m.store.Replace(snap)
	}
	if err == nil {
		// The membership changes the snapshot covers are unknown here:
		// the peers' records from before it are no evidence either.
		m.c.appliedIndex.Store(index)
		m.c.dirs.forgetPeer(0, index, true)
	}
	if ev != nil {
		ev(index, before, m.store.Snapshot().Partitions, err)
	}
	m.c.applied.fire()
	return err
}

// A metadata snapshot is the deduplication table's keys, oldest first,
// then the encoded store. The table is replicated state: a node that
// forgot it would apply a re-proposed command the others skip, and the
// replicas' metadata would diverge. Results are not kept: a duplicate of a
// command older than the snapshot answers errResultForgotten.

func (m *metaGroup) keys() [][2]uint64 {
	out := make([][2]uint64, 0, m.seen.Len())
	m.seen.All(func(k dedupe.Key, _ MetadataResult) bool {
		out = append(out, [2]uint64{k.Producer, k.Seq})
		return true
	})
	return out
}

// decodeSnapshot restores the deduplication table and decodes the store.
func (m *metaGroup) decodeSnapshot(data []byte) (metadata.StoreSnapshot, error) {
	return decodeMetaSnapshot(m.seen, data)
}

// decodeMetaSnapshot decodes a metadata group snapshot into the store's
// snapshot and seen, the deduplication table.
func decodeMetaSnapshot(seen *dedupe.Window[MetadataResult], data []byte) (metadata.StoreSnapshot, error) {
	keys, snap, err := metadata.DecodeGroupSnapshot(data)
	if err != nil {
		return snap, err
	}
	seen.Reset()
	for _, k := range keys {
		seen.Put(dedupe.Key{Producer: k[0], Seq: k[1]}, MetadataResult{Err: errResultForgotten})
	}
	return snap, nil
}
