package parkway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Consumer groups
//
// A consumer group shares a topic's partitions among its members: each
// partition is held by one member at a time, members join, leave and
// heartbeat, a member whose session lapses is expired, and every change
// of membership (or of the topic's partition count) starts a new
// generation with a balanced, sticky assignment that moves as few
// partitions as it can. The group, its members, the assignment and the
// group's committed offsets are committed metadata: replicated with the
// metadata raft group in a cluster, durable with a data directory.
//
// The fence (DESIGN behaviour 23): a member polls and commits a
// partition only while it holds it, with a generation at or after the one
// in which it got it; a commit from anyone else, or below the offset
// already committed, is refused with a typed error. So two members never
// commit one partition in one generation and a group's committed offset
// never goes backwards, through any rebalance, leader change or restart.
//
// Most services use a Consumer, which does all of this; Member is the
// layer below it, for hosts that want to drive a group themselves.

// Session timeouts of a group member: MemberConfig.SessionTimeout 0 means
// DefaultSessionTimeout; otherwise it must be within [MinSessionTimeout,
// MaxSessionTimeout].
const (
	DefaultSessionTimeout = metadata.DefaultSessionTimeout
	MinSessionTimeout     = metadata.MinSessionTimeout
	MaxSessionTimeout     = metadata.MaxSessionTimeout
)

// groupError types a group command's failure for the caller: a stale
// handle as for every command, an invalid request as ErrInvalidArgument.
func (n *Node) groupError(err error, t Topic) error {
	if errors.Is(err, metadata.ErrInvalidGroupRequest) {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return n.staleCommand(err, t.String())
}

// MemberConfig configures JoinGroup.
type MemberConfig struct {
	// Name names the member for humans (GroupInfo, logs); it may be
	// empty and need not be unique.
	Name string
	// SessionTimeout is how long the member stays in the group once its
	// node stops renewing its lease (default DefaultSessionTimeout): the
	// node renews it by itself at a third of it while the application
	// shows it is alive (MaxPollInterval). Nodes' clocks must agree to
	// well within it.
	SessionTimeout time.Duration
	// MaxPollInterval is how long the member's node keeps its session
	// alive after the application's last call of Poll (or the end of its
	// last waiting Poll), Commit or Heartbeat (default
	// DefaultMaxPollInterval, 5 min, as Kafka's max.poll.interval.ms):
	// past it the node stops renewing the member's lease, and the group
	// expires the member a session timeout later, so its partitions move
	// away from an application that stopped. A short one (a millisecond)
	// makes the member live by its own Heartbeat calls alone.
	MaxPollInterval time.Duration
}

// Assignment is what a member holds in a generation of its group.
type Assignment struct {
	Generation uint64
	Partitions []uint32 // ascending: the partitions the member may read
	// Revoking are partitions the member still holds that are moving to
	// another member (ascending): it must stop handing their messages
	// out, may commit them, and releases them with its next Heartbeat or
	// Commit; only then does the other member get them (DESIGN behaviour
	// 33: a partition leaves a live member in two steps, as in Kafka's
	// cooperative protocol).
	Revoking []uint32
}

// Member is one member of a consumer group, joined through one node. It
// is safe for concurrent use. Its methods fail with ErrUnknownMember once
// it has left or its session lapsed (join again), and refuse partitions
// it does not hold (ErrNotAssigned, ErrStaleGeneration: call Heartbeat to
// refresh the assignment).
type Member struct {
	n     *Node
	topic Topic
	group string
	id    uint64

	timeout time.Duration // the session timeout, resolved

	mu   sync.Mutex
	view metadata.MemberView // its part of the group as of its last refresh
	// gm is the member's state (its generation, its lease's start) and
	// the decisions of its cycle (host.GroupMember, which the simulator
	// steps too); its Gen and Confirmed change under mu, the rest never.
	gm host.GroupMember

	// The node keeps the member's lease (host.Engine.KeepLease) while
	// live says the application shows it is alive: by default, while
	// Poll, Commit or Heartbeat was called within maxPoll (active, unix
	// nanoseconds) or a Poll is in flight (polling); a Consumer's member
	// while the Consumer has not left for exceeding its own bound.
	live    func(now time.Time) bool
	maxPoll time.Duration
	active  atomic.Int64
	polling atomic.Int32
	kept    atomic.Bool // the node keeps it (unkeep is set)
	keepMu  sync.Mutex
	unkeep  func()        // stops the node keeping it; nil when it does not
	ended   bool          // it left, or the node found it gone: never kept again
	lost    chan struct{} // closed once the node's renewal found it gone
}

// JoinGroup joins consumer group group of topic t, creating the group if
// it does not exist (as NewConsumer does, and as Kafka's JoinGroup does),
// and returns the member with its first assignment. It is the layer below
// a Consumer (which joins, heartbeats, follows rebalances and commits by
// itself), for a host that drives a group's membership itself. Group and
// member names follow the rule of stream and topic names (ErrInvalidName).
//
// The member's node keeps its session alive by itself (as Kafka's client
// heartbeats from a background thread), with one renewal round for all
// of the node's members, while the application calls Poll, Commit or
// Heartbeat within MemberConfig.MaxPollInterval: a host needs no timer
// or goroutine per member. Heartbeat is still what releases partitions
// being revoked (Assignment.Revoking) and refreshes the assignment.
func (n *Node) JoinGroup(ctx context.Context, t Topic, group string, cfg MemberConfig) (*Member, error) {
	if cfg.MaxPollInterval < 0 {
		return nil, fmt.Errorf("%w: negative MaxPollInterval %v", ErrInvalidArgument, cfg.MaxPollInterval)
	}
	return n.joinGroup(ctx, t, group, cfg, true, nil)
}

// joinGroup joins group, creating it first if create is set and it does
// not exist. A Consumer that rejoins after its session lapsed does not
// create: a group deleted meanwhile ends it (ErrGroupNotFound). live,
// if set, replaces the member's own liveness bound (a Consumer's).
func (n *Node) joinGroup(ctx context.Context, t Topic, group string, cfg MemberConfig, create bool, live func(time.Time) bool) (*Member, error) {
	if err := n.begin(ctx); err != nil {
		return nil, err
	}
	if _, err := n.topicInfo(ctx, t); err != nil {
		return nil, err
	}
	cmd := metadata.JoinGroup{
		Stream: t.Stream.ID, Topic: t.ID, Revision: t.Revision, Group: group,
		Member: cfg.Name, SessionTimeout: cfg.SessionTimeout,
	}
	if err := cmd.Validate(); err != nil {
		return nil, n.groupError(err, t) // before a group is created for it
	}
	join := func() (metadata.Result, int64, error) {
		cmd.Now = n.cfg.Clock.Now().UnixNano()
		res, err := n.apply(ctx, cmd)
		return res, cmd.Now, err
	}
	// Join first: the group usually exists, and a join storm then costs
	// one metadata entry a member, not two.
	res, now, err := join()
	if create && errors.Is(err, metadata.ErrGroupNotFound) {
		if cerr := n.Admin().CreateGroup(ctx, t, group); cerr != nil && !errors.Is(cerr, ErrGroupExists) {
			return nil, cerr
		}
		res, now, err = join()
	}
	if err != nil {
		return nil, n.groupError(err, t)
	}
	timeout := cfg.SessionTimeout
	if timeout == 0 {
		timeout = DefaultSessionTimeout
	}
	m := &Member{n: n, topic: t, group: group, id: res.Member, timeout: timeout,
		gm: host.GroupMember{Stream: t.Stream.ID, Topic: t.ID, TopicRevision: t.Revision, Group: group,
			ID: res.Member, Session: timeout, Confirmed: now},
		live: live, maxPoll: cfg.MaxPollInterval, lost: make(chan struct{})}
	if m.maxPoll == 0 {
		m.maxPoll = DefaultMaxPollInterval
	}
	if m.live == nil {
		m.live = m.applicationLive
	}
	m.active.Store(now)
	if err := m.refresh(); err != nil {
		return nil, err
	}
	m.keep()
	return m, nil
}

// keep has the node keep the member's lease, unless it does already or
// the member ended. A node that closed keeps nothing: the member expires.
func (m *Member) keep() {
	m.keepMu.Lock()
	defer m.keepMu.Unlock()
	if m.unkeep != nil || m.ended {
		return
	}
	unkeep, err := m.n.eng.KeepLease(m.gm.Lease(), (*memberLease)(m))
	if err == nil {
		m.unkeep = unkeep
		m.kept.Store(true)
	}
}

// unkept records that the node no longer keeps the member's lease: it
// stopped (ended: it left or is gone for good) or its application
// stopped showing it is alive (a later call keeps it again).
func (m *Member) unkept(ended bool) {
	m.keepMu.Lock()
	defer m.keepMu.Unlock()
	if ended && !m.ended {
		m.ended = true
		if m.unkeep != nil {
			m.unkeep()
		}
	}
	m.unkeep = nil
	m.kept.Store(false)
}

// memberLease is a Member as its node's kept lease (host.LeaseHolder).
type memberLease Member

// Live implements host.LeaseHolder.
func (l *memberLease) Live(now time.Time) bool { return l.live(now) }

// Renewed implements host.LeaseHolder: a confirmed renewal starts the
// member's lease anew; one refused for good (the member was expired or
// its group deleted) marks it lost, which a Consumer acts on at once.
func (l *memberLease) Renewed(at time.Time, err error) {
	m := (*Member)(l)
	switch {
	case err == nil:
		m.renew(at.UnixNano())
	case !errors.Is(err, shard.ErrRetry):
		m.keepMu.Lock()
		gone := !m.ended
		m.keepMu.Unlock()
		m.unkept(true)
		if gone {
			close(m.lost)
		}
	}
}

// Unkept implements host.LeaseHolder: the application stopped showing
// it is alive.
func (l *memberLease) Unkept() { (*Member)(l).unkept(false) }

// applicationLive is a Member's own liveness bound: a Poll in flight, or
// a call of Poll, Commit or Heartbeat within MaxPollInterval.
func (m *Member) applicationLive(now time.Time) bool {
	return m.polling.Load() > 0 || now.UnixNano()-m.active.Load() <= int64(m.maxPoll)
}

// touch records that the application called the member.
func (m *Member) touch() {
	m.active.Store(m.n.cfg.Clock.Now().UnixNano())
	if !m.kept.Load() {
		m.keep()
	}
}

// refresh reads the member's part of the group's committed state on this
// node (after its join, heartbeat or commit: as new as what the leader
// had when it answered) and makes its generation the member's. It reads
// the partitions once and copies none of the other members.
func (m *Member) refresh() error {
	m.mu.Lock()
	gen := m.gm.Gen
	m.mu.Unlock()
	v, err := m.n.meta.MemberOf(m.topic.Stream.ID, m.topic.ID, m.group, m.id, gen)
	if errors.Is(err, metadata.ErrTopicNotFound) || errors.Is(err, metadata.ErrStreamNotFound) {
		return fmt.Errorf("%w: %q on %v", ErrGroupNotFound, m.group, m.topic)
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gm.Adopt(v) {
		m.view = v
	}
	return nil
}

// ID is the member's id in its group.
func (m *Member) ID() uint64 { return m.id }

// Group is the name of the member's group.
func (m *Member) Group() string { return m.group }

// Assignment is the member's assignment as of its last join, heartbeat
// or commit.
func (m *Member) Assignment() Assignment {
	m.mu.Lock()
	defer m.mu.Unlock()
	revoking := slices.Clone(m.view.Revoking)
	held := slices.DeleteFunc(slices.Clone(m.view.Held), func(p uint32) bool { _, moving := slices.BinarySearch(revoking, p); return moving })
	return Assignment{Generation: m.gm.Gen, Partitions: held, Revoking: revoking}
}

// Committed returns the group's committed offset for a partition as
// this node's committed metadata has it.
func (m *Member) Committed(part uint32) (uint64, bool) {
	return m.committedNow(part)
}

// Heartbeat renews the member's session and refreshes its assignment,
// which it returns. A host need not call it to keep the member alive —
// the member's node renews its session by itself while the application
// calls Poll, Commit or Heartbeat within MemberConfig.MaxPollInterval —
// but it is what releases revoked partitions: it acknowledges the
// generation the member acts in,
// which releases the partitions of Assignment.Revoking the member knew
// of: call it once it hands none of their messages out any more (and has
// committed them, if it will). In a cluster, a heartbeat that releases
// nothing is sent to the metadata leader with the node's other members'
// at the end of a lease window (a hundredth of the session timeout, at
// most 100 ms: host.LeaseWindow), so it returns after that and a round
// trip; its lease counts from when it was called.
func (m *Member) Heartbeat(ctx context.Context) (Assignment, error) {
	m.touch()
	m.mu.Lock()
	gen := m.gm.Gen
	m.mu.Unlock()
	return m.heartbeat(ctx, gen)
}

// heartbeat is Heartbeat acknowledging generation gen: a Consumer
// acknowledges the generation whose revoked partitions it is done with.
//
// A heartbeat that releases nothing changes nothing the group has
// committed, so it is no metadata-log entry: the metadata leader renews
// the member's lease in memory (host.Engine.RenewLease). One that
// releases partitions is a commit of nothing acknowledging gen
// (metadata.CommitGroupOffsets), logged like any commit. Which one it is
// shows in this node's committed state: a move the member has seen (at
// or before gen) is there if it is anywhere.
func (m *Member) heartbeat(ctx context.Context, gen uint64) (Assignment, error) {
	if err := m.n.begin(ctx); err != nil {
		return Assignment{}, err
	}
	now := m.n.cfg.Clock.Now().UnixNano()
	// The decision reads only the member's fixed fields (gen is passed).
	var err error
	if renew, cmd := m.gm.Heartbeat(m.n.meta, gen, now); renew {
		err = m.n.eng.RenewLease(ctx, m.gm.Lease())
	} else {
		_, err = m.n.apply(ctx, cmd)
	}
	if err != nil {
		return Assignment{}, m.n.groupError(err, m.topic)
	}
	m.renew(now)
	if err := m.refresh(); err != nil {
		return Assignment{}, err
	}
	return m.Assignment(), nil
}

// renew starts the member's lease anew at now, the Now of a join,
// heartbeat or commit of the member that was applied.
func (m *Member) renew(now int64) {
	m.mu.Lock()
	m.gm.Renewed(now)
	m.mu.Unlock()
}

// check is the fence of a poll and of a delivery (behaviours 23 and 33),
// made when a poll is registered and again when its answer comes back
// with messages, and by a Consumer before each message it hands out:
//   - the member's lease must hold (metadata.LeaseEnd): a member that had
//     no renewal (its node's or its own heartbeat's) confirmed for most
//     of its session timeout — cut off
//     from the metadata leader, say — may have been expired and its
//     partitions given to others, who may have committed past what this
//     answer holds, though its own node has not heard of it;
//   - the member must hold part in the current generation, since its own
//     generation or earlier, as this node's committed metadata says, and
//     part must not be moving away from it (ErrRebalanceInProgress: see
//     Assignment.Revoking).
//
// Both are local reads, no round trip.
func (m *Member) check(part uint32) error {
	m.mu.Lock()
	gm := m.gm
	m.mu.Unlock()
	err := gm.Fence(m.n.meta, part, m.n.cfg.Clock.Now().UnixNano())
	if errors.Is(err, metadata.ErrGroupNotFound) || errors.Is(err, metadata.ErrTopicNotFound) || errors.Is(err, metadata.ErrStreamNotFound) {
		if _, terr := m.n.topicAlive(m.topic); terr != nil {
			return terr
		}
		return fmt.Errorf("%w: %q on %v", ErrGroupNotFound, m.group, m.topic)
	}
	return err
}

// AtCommitted starts a member's poll at its group's committed offset for
// the partition; with none committed, or one outside the partition's
// [start, end], at the reset policy's choice (ResetEarliest unless set
// with OrReset). Only Member.Poll accepts it: Node.Poll, which has no
// group, refuses it with ErrInvalidArgument.
func AtCommitted() Start { return Start{committed: true} }

// Poll reads up to max messages from a partition the member holds (see
// Node.Poll for the options). It is refused with ErrNotAssigned or
// ErrStaleGeneration when the member does not hold the partition in its
// generation, and with ErrUnknownMember when it left, was expired, or had
// no renewal (its node's, a heartbeat's or a commit's) confirmed for four
// fifths of its session timeout (metadata.LeaseEnd). The fence is
// checked when the poll is made and again when its answer arrives: a
// waiting poll answered after the partition moved, or after the member
// lost touch with its group for that long, returns the error and no
// messages (behaviour 33).
func (m *Member) Poll(ctx context.Context, part uint32, from Start, max int, opts ...PollOption) (Batch, error) {
	m.polling.Add(1)
	defer func() {
		m.touch()
		m.polling.Add(-1)
	}()
	if err := m.check(part); err != nil {
		return Batch{}, err
	}
	b, err := m.poll(ctx, part, from, max, opts...)
	if err == nil && len(b.Messages) > 0 {
		if err := m.check(part); err != nil {
			return Batch{}, err
		}
	}
	return b, err
}

// poll is Poll without its fence.
func (m *Member) poll(ctx context.Context, part uint32, from Start, max int, opts ...PollOption) (Batch, error) {
	if !from.committed {
		return m.n.Poll(ctx, m.topic, part, from, max, opts...)
	}
	off, ok := m.committedNow(part)
	if !ok && from.reset == ResetError {
		return Batch{}, fmt.Errorf("%w: group %q has no committed offset for partition %d", ErrOffsetOutOfRange, m.group, part)
	}
	if !ok {
		return m.n.Poll(ctx, m.topic, part, m.resetStart(ctx, from.reset, part), max, opts...)
	}
	b, err := m.n.Poll(ctx, m.topic, part, AtOffset(off), max, opts...)
	if errors.Is(err, ErrOffsetOutOfRange) && from.reset != ResetError {
		// Truncation or retention passed the committed offset.
		return m.n.Poll(ctx, m.topic, part, m.resetStart(ctx, from.reset, part), max, opts...)
	}
	return b, err
}

// committedNow reads the group's committed offset from this node's
// committed metadata (newer than the member's last refresh, if anything).
func (m *Member) committedNow(part uint32) (uint64, bool) {
	// One partition's state, not a copy of the group: every poll of
	// every member asks. It reads only the member's fixed fields.
	return m.gm.PollFrom(m.n.meta, part)
}

// resetStart is where a reset policy starts.
func (m *Member) resetStart(ctx context.Context, r OffsetReset, part uint32) Start {
	if r == ResetLatest {
		if po, err := m.n.Admin().PartitionOffsets(ctx, m.topic, part, ""); err == nil {
			return AtOffset(po.End)
		}
	}
	return AtFirst()
}

// Commit commits the group's offsets (the next offset to read) for
// partitions the member holds (those being revoked included: a commit
// does not release them, Heartbeat does), all or none. It is refused with
// ErrNotAssigned or ErrStaleGeneration for a partition the member does
// not hold in its generation, ErrOffsetRegression for an offset below
// the one committed, and ErrOffsetOutOfRange for one past the
// partition's end (as StoreOffset refuses it: the group would read
// nothing there, and every lower commit after it would be a regression).
// It also counts as a heartbeat.
func (m *Member) Commit(ctx context.Context, offsets map[uint32]uint64) error {
	m.touch()
	if len(offsets) == 0 {
		return nil
	}
	// A partition's end only grows (truncation and retention move its
	// start), so an offset within it now stays within it. One round trip
	// to each partition's leader; a Consumer, whose offsets are those of
	// messages it delivered, commits without it.
	for _, p := range slices.Sorted(maps.Keys(offsets)) {
		po, err := m.n.Admin().PartitionOffsets(ctx, m.topic, p, "")
		if err != nil {
			return err
		}
		if offsets[p] > po.End {
			return fmt.Errorf("%w: group %q partition %d: offset %d past the log's end %d", ErrOffsetOutOfRange, m.group, p, offsets[p], po.End)
		}
	}
	return m.commit(ctx, offsets)
}

// commit is Commit for offsets known to be within their partitions.
func (m *Member) commit(ctx context.Context, offsets map[uint32]uint64) error {
	if len(offsets) == 0 {
		return nil
	}
	m.mu.Lock()
	gen := m.gm.Gen
	m.mu.Unlock()
	now := m.n.cfg.Clock.Now().UnixNano()
	var offs []metadata.GroupOffset
	for _, p := range slices.Sorted(maps.Keys(offsets)) {
		offs = append(offs, metadata.GroupOffset{Partition: p, Offset: offsets[p]})
	}
	if _, err := m.n.apply(ctx, m.gm.Commit(gen, offs, now)); err != nil {
		return m.n.groupError(err, m.topic)
	}
	m.renew(now)
	return m.refresh()
}

// Leave leaves the group: its partitions go to the other members at
// once, without waiting for the session to lapse.
func (m *Member) Leave(ctx context.Context) error {
	m.unkept(true)
	_, err := m.n.apply(ctx, metadata.LeaveGroup{
		Stream: m.topic.Stream.ID, Topic: m.topic.ID, Revision: m.topic.Revision,
		Group: m.group, Member: m.id, Now: m.n.cfg.Clock.Now().UnixNano(),
	})
	return m.n.groupError(err, m.topic)
}
