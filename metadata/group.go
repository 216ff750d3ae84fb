package metadata

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/parkway-io/parkway/internal/testhooks"
)

// Consumer groups live in the metadata, beside the topic they consume:
// membership, the assignment of partitions to members, its generation and
// the group's committed offsets are one state machine, changed only by
// commands of the metadata log. That makes the fence of DESIGN behaviour
// 23 a single atomic check at apply time: a commit is accepted only from
// the member that holds the partition, for a generation at or after the
// one in which it got it, and never below the offset already committed —
// so two members never commit one partition in one generation and a
// group's offset never goes backwards, on every replica alike.
//
// (The reference server keeps group offsets in each partition's
// directory, offsets/groups/. Here they deviate on purpose: a partition
// could only fence a commit against an assignment it does not know, which
// needs a second, per-partition round of fencing on every rebalance. The
// metadata log carries one entry per commit call, whatever the number of
// partitions it names.)
//
// Time: session expiry needs a clock, and a state machine must not read
// one. Sessions are leases the metadata leader keeps in memory (lease.go):
// a heartbeat renews one there without a log entry, and when one lapses
// the leader proposes ExpireMembers, which carries its clock as Now.
// Every command that changes membership carries Now, the proposing node's
// clock; the store keeps the largest it has seen (the group clock, which
// never goes back). Nodes' clocks must agree to well within a session
// timeout, as with any lease.

const (
	// MaxGroupsPerTopic bounds the consumer groups of one topic.
	MaxGroupsPerTopic = 1000
	// MaxMembersPerGroup bounds the members of one group.
	MaxMembersPerGroup = 1000
	// MinSessionTimeout and MaxSessionTimeout bound JoinGroup's
	// SessionTimeout (Kafka's group.min/max.session.timeout.ms are 6 s and
	// 30 min; these are wider so tests on a virtual clock stay fast).
	MinSessionTimeout = 100 * time.Millisecond
	MaxSessionTimeout = time.Hour
	// DefaultSessionTimeout is used when JoinGroup's SessionTimeout is 0.
	DefaultSessionTimeout = 10 * time.Second
)

// CreateGroup creates a consumer group named Name on a topic. Its
// generation is 0 and it has no members until the first JoinGroup.
type CreateGroup struct {
	Stream, Topic uint32
	Name          string
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// DeleteGroup deletes a consumer group with its members and offsets.
type DeleteGroup struct {
	Stream, Topic uint32
	Name          string
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// JoinGroup adds a member to a group and rebalances it. The member gets
// the group's next member id (Result.Member) and the new generation
// (Result.Generation). Member is a name for humans (empty is allowed); two
// members may share one.
type JoinGroup struct {
	Stream, Topic uint32
	Group         string
	Member        string
	// SessionTimeout is how long the member stays in the group without a
	// heartbeat: 0 means DefaultSessionTimeout, otherwise it must be in
	// [MinSessionTimeout, MaxSessionTimeout].
	SessionTimeout time.Duration
	// Now is the proposer's clock, Unix nanoseconds (see the package's
	// notes on time).
	Now      int64
	Revision uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// Validate checks what a join asks for on its own, before any group is
// looked up: the group name, the member name (if any) and the session
// timeout. A host checks it before it creates a group for the join, so a
// refused join creates nothing; applying the join checks it again.
func (c JoinGroup) Validate() error {
	if err := validateName("group", c.Group); err != nil {
		return err
	}
	if c.Member != "" {
		if err := validateName("member", c.Member); err != nil {
			return err
		}
	}
	if c.SessionTimeout != 0 && (c.SessionTimeout < MinSessionTimeout || c.SessionTimeout > MaxSessionTimeout) {
		return fmt.Errorf("%w: session timeout %v outside [%v, %v]", ErrInvalidGroupRequest, c.SessionTimeout, MinSessionTimeout, MaxSessionTimeout)
	}
	return nil
}

// LeaveGroup removes a member from its group and rebalances it.
type LeaveGroup struct {
	Stream, Topic uint32
	Group         string
	Member        uint64
	Now           int64
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// Heartbeat keeps a member's session alive. It fails with
// ErrUnknownMember if the member left, was expired, or its session has
// lapsed: it must join again. Result.Generation is the group's generation
// after the command (lapsed members of the group are expired by it).
type Heartbeat struct {
	Stream, Topic uint32
	Group         string
	Member        uint64
	Now           int64
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// CommitGroupOffsets records the group's offsets (the next offset to
// read) for some partitions, all or none. It is accepted only if Member
// is alive and, for every partition named, holds it in the current
// generation and has held it since Generation or earlier (ErrNotAssigned,
// ErrStaleGeneration), and the offset is not below the one committed
// (ErrOffsetRegression). It also counts as the member's heartbeat. A
// commit of no offsets is a heartbeat that acknowledges Generation: it
// releases the partitions the member holds that are moving away since
// Generation or earlier (GroupPartition.Next), so the member sends it
// once it hands none of their messages out any more.
type CommitGroupOffsets struct {
	Stream, Topic uint32
	Group         string
	Member        uint64
	Generation    uint64
	Offsets       []GroupOffset
	Now           int64
	Revision      uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

// GroupOffset is one partition's offset in a CommitGroupOffsets.
type GroupOffset struct {
	Partition uint32
	Offset    uint64
}

func (CreateGroup) isCommand()        {}
func (DeleteGroup) isCommand()        {}
func (JoinGroup) isCommand()          {}
func (LeaveGroup) isCommand()         {}
func (Heartbeat) isCommand()          {}
func (CommitGroupOffsets) isCommand() {}

// GroupInfo describes a committed consumer group.
type GroupInfo struct {
	Stream, Topic   uint32
	Name            string
	CreatedRevision uint64
	// Generation counts the group's rebalances; GenerationRevision is the
	// store revision of the command that started it.
	Generation         uint64
	GenerationRevision uint64
	// NextMember is the id the next JoinGroup gets.
	NextMember uint64
	// Members are the live members, by id.
	Members []MemberInfo
	// Partitions[i] is partition i's assignment and committed offset.
	Partitions []GroupPartition
}

// MemberInfo describes a member of a group.
type MemberInfo struct {
	ID             uint64
	Name           string
	SessionTimeout time.Duration
	// LastSeen is the group clock (Unix nanoseconds) at its last logged
	// join or commit (a heartbeat that changes nothing is not logged: the
	// metadata leader keeps the lease in memory, see lease.go).
	LastSeen int64
}

// GroupPartition is one partition of a group: who holds it since which
// generation, and the group's committed offset.
type GroupPartition struct {
	// Holder is the member holding the partition, 0 when none does.
	Holder uint64
	// Since is the generation from which Holder has held it.
	Since uint64
	// Offset is the committed offset (the next to read), when Committed.
	Offset    uint64
	Committed bool
	// Next, when not 0, is the member the partition is moving to: the
	// rebalance of generation NextSince gave it to Next while Holder was
	// still in the group, and Holder may still be handing its messages to
	// its application. A partition moves from a live member in two steps
	// (revoke, then assign, as Kafka's cooperative protocol does), so that
	// no message the new holder commits can reach the old holder's
	// application (behaviour 33): Holder keeps the partition — it may
	// commit it, its chance to commit what it handled, but a poll of it is
	// refused with ErrRebalanceInProgress — until it releases it with a
	// commit of no offsets (a heartbeat that acknowledges a generation) at
	// a generation at or past NextSince, which shows it acts on a state
	// that has the move; then a new generation gives the partition to Next. A
	// holder that leaves or is expired needs no release: its lease lapsed
	// before it could be expired, and a Consumer stops before it leaves.
	Next, NextSince uint64
}

// Assigned returns the partitions member holds, ascending.
func (g GroupInfo) Assigned(member uint64) []uint32 {
	var out []uint32
	for i, p := range g.Partitions {
		if member != 0 && p.Holder == member {
			out = append(out, uint32(i))
		}
	}
	return out
}

// Member returns the member with the given id.
func (g GroupInfo) Member(id uint64) (MemberInfo, bool) {
	i, ok := slices.BinarySearchFunc(g.Members, id, func(m MemberInfo, id uint64) int { return cmp.Compare(m.ID, id) })
	if !ok {
		return MemberInfo{}, false
	}
	return g.Members[i], true
}

// CheckHolder reports whether member may poll partition part with
// generation gen under this state of the group: it must be a live
// member, hold the partition, and have held it since gen or earlier, with
// gen not past the group's generation (the errors of CommitGroupOffsets),
// and the partition must not be moving away from it
// (ErrRebalanceInProgress: see GroupPartition.Next).
func (g GroupInfo) CheckHolder(member, gen uint64, part uint32) error {
	if _, ok := g.Member(member); !ok {
		return fmt.Errorf("%w: member %d of group %q", ErrUnknownMember, member, g.Name)
	}
	return checkRead(g.Name, g.Generation, g.Partitions, member, gen, part)
}

// Revoking returns the partitions member holds that are moving to
// another member (GroupPartition.Next), ascending: it must stop handing
// them out, commit them if it will, and release them.
func (g GroupInfo) Revoking(member uint64) []uint32 {
	var out []uint32
	for i, p := range g.Partitions {
		if member != 0 && p.Holder == member && p.Next != 0 {
			out = append(out, uint32(i))
		}
	}
	return out
}

// CheckHolder is GroupInfo.CheckHolder against the store's committed
// state of a group, without copying the group: the check a member makes
// before each message it hands its application (behaviour 33), so it
// must stay cheap whatever the group's size. It fails with
// ErrGroupNotFound when the group (or its topic) is gone.
func (s *Store) CheckHolder(stream, topic uint32, group string, member, gen uint64, part uint32) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, t, err := s.lookupTopic(stream, topic)
	if err != nil {
		return err
	}
	g, ok := t.groups[group]
	if !ok {
		return fmt.Errorf("%w: %q on topic %d/%d", ErrGroupNotFound, group, stream, topic)
	}
	if _, ok := g.members[member]; !ok {
		return fmt.Errorf("%w: member %d of group %q", ErrUnknownMember, member, g.name)
	}
	return checkRead(g.name, g.generation, g.parts, member, gen, part)
}

// CheckDelivery is the fence of behaviour 33, the one a member applies
// before it hands its application messages of partition part (a poll's
// answer, each message of a batch): its lease — from confirmed, the Now
// of its last applied join, heartbeat or commit, and its session
// timeout — must hold at now (LeaseEnd; else ErrUnknownMember: it may
// have been expired), and this store's committed state must give it the
// partition (CheckHolder). Both are reads of local state.
func (s *Store) CheckDelivery(stream, topic uint32, group string, member, gen uint64, part uint32, confirmed int64, timeout time.Duration, now int64) error {
	if now >= LeaseEnd(confirmed, timeout) {
		return fmt.Errorf("%w: member %d of group %q: no heartbeat applied for %v of its %v session; it may have been expired",
			ErrUnknownMember, member, group, time.Duration(now-confirmed), timeout)
	}
	return s.CheckHolder(stream, topic, group, member, gen, part)
}

// LeaseEnd is the instant (Unix nanoseconds, on the member's own clock)
// up to which a member may hand its application messages of the
// partitions it holds, given confirmed, the Now of its last join,
// heartbeat or commit that was applied, and its session timeout: until
// then no command can have expired it, so no other member can hold its
// partitions (behaviour 33).
//
// The session lapses on the group clock, which is the largest Now any
// proposer sent; a proposer whose clock runs ahead of the member's by d
// could expire it d early. LeaseEnd keeps a fifth of the timeout as the
// margin for that, which is what "nodes' clocks must agree to well
// within a session timeout" means in numbers: up to 2 s for the default
// 10 s. A member heartbeating at a third of its timeout renews the lease
// long before it ends, and rides out one lost heartbeat.
func LeaseEnd(confirmed int64, timeout time.Duration) int64 {
	return confirmed + int64(timeout) - int64(timeout/5)
}

// checkHold is the fence of behaviour 23 for a live member, the one check
// behind both CheckHolder (a poll, against a node's committed view) and
// CommitGroupOffsets (at apply): member must hold part in the group's
// current generation, since gen or earlier, and gen may not be past the
// group's generation.
func checkHold(name string, generation uint64, parts []GroupPartition, member, gen uint64, part uint32) error {
	if int64(part) >= int64(len(parts)) {
		return fmt.Errorf("%w: partition %d of group %q's topic (%d partitions)", ErrPartitionNotFound, part, name, len(parts))
	}
	p := parts[part]
	if p.Holder != member {
		return fmt.Errorf("%w: partition %d is held by member %d, not %d (group %q, generation %d)", ErrNotAssigned, part, p.Holder, member, name, generation)
	}
	if gen < p.Since || gen > generation {
		return fmt.Errorf("%w: generation %d, partition %d held since %d, group at %d (group %q)", ErrStaleGeneration, gen, part, p.Since, generation, name)
	}
	return nil
}

// checkRead is checkHold for a poll or a delivery: the partition must
// also not be moving away from member.
func checkRead(name string, generation uint64, parts []GroupPartition, member, gen uint64, part uint32) error {
	if err := checkHold(name, generation, parts, member, gen, part); err != nil {
		return err
	}
	if p := parts[part]; p.Next != 0 {
		return fmt.Errorf("%w: partition %d is moving from member %d to %d since generation %d (group %q): commit it and heartbeat to release it",
			ErrRebalanceInProgress, part, member, p.Next, p.NextSince, name)
	}
	return nil
}

// release hands member's partitions that are moving, and whose move it
// has seen (its command carried generation gen, at or past the move's),
// to their next holders, in a new generation started at revision rev. It
// reports whether any moved.
func (g *group) release(member, gen, rev uint64) bool {
	ready := func(p GroupPartition) bool { return p.Holder == member && p.Next != 0 && gen >= p.NextSince }
	if !slices.ContainsFunc(g.parts, ready) {
		return false
	}
	g.generation++
	g.genRev = rev
	for i, p := range g.parts {
		if ready(p) {
			g.parts[i].Holder, g.parts[i].Since, g.parts[i].Next, g.parts[i].NextSince = p.Next, g.generation, 0, 0
		}
	}
	g.reindex()
	return true
}

// reindex rebuilds held from parts: after every change of a partition's
// holder (a rebalance, a release, a restore), never on a heartbeat.
func (g *group) reindex() {
	clear(g.held)
	if g.held == nil {
		g.held = make(map[uint64][]uint32)
	}
	for i, p := range g.parts {
		if p.Holder != 0 {
			g.held[p.Holder] = append(g.held[p.Holder], uint32(i))
		}
	}
}

type group struct {
	name string
	// stream, topic and topicRev name the group's topic incarnation
	// (for the leases, which outlive nothing they name: lease.go).
	stream, topic uint32
	topicRev      uint64
	createdRev    uint64
	generation    uint64
	genRev        uint64
	nextMember    uint64
	members       map[uint64]*member
	// order is the members' ids ascending, kept as they join (ids only
	// grow) and leave: nothing sorts the members.
	order []uint64
	parts []GroupPartition // dense, as the topic's partitions
	// held lists each member's partitions, ascending (reindex), so that
	// what one member needs of the group (Store.MemberOf) costs what it
	// holds, not the group's size.
	held map[uint64][]uint32
	// expiries and commits count members expired and commits applied
	// since this store loaded the group, for metrics only (GroupCounts).
	expiries, commits uint64
}

type member struct {
	g        *group
	id       uint64
	name     string
	timeout  time.Duration
	lastSeen int64 // replicated: the Now of its last logged join or commit
	// The lease, kept only by the leader's store (lease.go): it starts at
	// lease and is due (lapses, or, expiring, is proposed again) at due;
	// hidx is its place in the store's lease heap plus one (0: none).
	lease, due int64
	expiring   bool
	hidx       int
}

// addMember adds a member with the next id (the largest yet).
func (g *group) addMember(name string, timeout time.Duration, now int64) *member {
	id := g.nextMember
	g.nextMember++
	m := &member{g: g, id: id, name: name, timeout: timeout, lastSeen: now}
	g.members[id] = m
	g.order = append(g.order, id)
	return m
}

// removeMember removes member id: O(log members) to find it, a copy to
// close the gap.
func (g *group) removeMember(id uint64) {
	delete(g.members, id)
	if i, ok := slices.BinarySearch(g.order, id); ok {
		g.order = slices.Delete(g.order, i, i+1)
	}
}

func (g *group) info(streamID, topicID uint32) GroupInfo {
	gi := GroupInfo{
		Stream: streamID, Topic: topicID, Name: g.name, CreatedRevision: g.createdRev,
		Generation: g.generation, GenerationRevision: g.genRev, NextMember: g.nextMember,
	}
	if len(g.parts) > 0 { // empty lists are nil, as in Export
		gi.Partitions = slices.Clone(g.parts)
	}
	if len(g.order) > 0 {
		gi.Members = make([]MemberInfo, 0, len(g.order))
	}
	for _, id := range g.order {
		m := g.members[id]
		gi.Members = append(gi.Members, MemberInfo{ID: id, Name: m.name, SessionTimeout: m.timeout, LastSeen: m.lastSeen})
	}
	return gi
}

// lapsed reports whether m's session has lapsed at now.
func (m *member) lapsed(now int64) bool { return now-m.lastSeen > int64(m.timeout) }

// rebalance starts a new generation at revision rev and assigns the
// partitions to the live members: balanced (counts differ by at most
// one) and sticky (a member keeps what it holds up to its share; the
// members holding the most keep the extra partitions when the count does
// not divide evenly), so a join, leave or expiry moves as few partitions
// as it can. A partition whose holder is gone goes to its new member at
// once; one whose holder is still in the group starts moving
// (GroupPartition.Next) and goes when the holder releases it. What
// counts as held is where a partition is going (Next) or, when it is not
// moving, its holder. Deterministic: it depends only on the state.
func (g *group) rebalance(rev uint64) {
	g.rebalanceParts(rev)
	g.reindex()
}

// rebalanceParts is rebalance without the index of what each member
// holds.
func (g *group) rebalanceParts(rev uint64) {
	g.generation++
	g.genRev = rev
	ids := g.order
	if len(ids) == 0 {
		for i := range g.parts {
			g.parts[i] = GroupPartition{Since: g.generation, Offset: g.parts[i].Offset, Committed: g.parts[i].Committed}
		}
		return
	}
	owner := func(p GroupPartition) uint64 {
		if p.Next != 0 {
			return p.Next
		}
		return p.Holder
	}
	held := make(map[uint64]int, len(ids))
	for _, p := range g.parts {
		if _, ok := g.members[owner(p)]; ok {
			held[owner(p)]++
		}
	}
	// Shares: everyone gets base; the extra ones go to the members that
	// hold the most now (ties by id), so fewer partitions move. The
	// members are ranked by a counting pass over what they hold (at most
	// the partition count), not sorted.
	base, extra := len(g.parts)/len(ids), len(g.parts)%len(ids)
	share := make(map[uint64]int, len(ids))
	for _, id := range ids {
		share[id] = base
	}
	if extra > 0 {
		// byCount[k] counts the members holding k; from the largest k
		// down, the first extra members (by id within a count) get one
		// more.
		byCount := make([]int, len(g.parts)+1)
		for _, id := range ids {
			byCount[held[id]]++
		}
		// cut is the smallest count whose members all get an extra one;
		// at cut-1 only the first left of them (by id) do.
		left, cut := extra, len(byCount)
		for cut > 0 && left >= byCount[cut-1] {
			cut--
			left -= byCount[cut]
		}
		for _, id := range ids {
			switch h := held[id]; {
			case h >= cut:
				share[id]++
			case h == cut-1 && left > 0:
				share[id]++
				left--
			}
		}
	}
	count := make(map[uint64]int, len(ids))
	target := make([]uint64, len(g.parts))
	var free []int
	for i, p := range g.parts {
		o := owner(p)
		if _, ok := g.members[o]; ok && count[o] < share[o] {
			count[o]++
			target[i] = o
			continue
		}
		free = append(free, i)
	}
	next := 0
	for _, i := range free {
		for count[ids[next]] >= share[ids[next]] {
			next++
		}
		target[i] = ids[next]
		count[ids[next]]++
	}
	for i, to := range target {
		p := &g.parts[i]
		_, live := g.members[p.Holder]
		switch {
		case !live:
			// No holder, or one that left or was expired: nothing to
			// release.
			p.Holder, p.Since, p.Next, p.NextSince = to, g.generation, 0, 0
		case to == p.Holder:
			p.Next, p.NextSince = 0, 0 // stays (a move called off)
		case to == p.Next:
			// Still moving there.
		default:
			p.Next, p.NextSince = to, g.generation
		}
	}
}

// resize makes g's partition list match a topic that now has n
// partitions: removed partitions lose their offsets (an id reused later
// is a new partition), new ones start uncommitted and unheld.
func (g *group) resize(n int) {
	if n < len(g.parts) {
		g.parts = slices.Clip(g.parts[:n])
		return
	}
	g.parts = append(g.parts, make([]GroupPartition, n-len(g.parts))...)
}

// topicGroupsResized rebalances t's groups after its partition count
// changed at revision rev.
func (t *topic) topicGroupsResized(rev uint64) {
	for _, name := range slices.Sorted(maps.Keys(t.groups)) {
		g := t.groups[name]
		g.resize(len(t.parts))
		g.rebalance(rev)
	}
}

// groupNow advances the group clock to now (it never goes back) and
// returns it.
func (s *Store) groupNow(now int64) int64 {
	return max(s.groupClock, now)
}

func (s *Store) lookupGroup(streamID, topicID uint32, rev uint64, name string) (*stream, *topic, *group, error) {
	st, t, err := s.lookupTopicAt(streamID, topicID, rev)
	if err != nil {
		return nil, nil, nil, err
	}
	g, ok := t.groups[name]
	if !ok {
		return nil, nil, nil, fmt.Errorf("%w: %q on topic %d/%d", ErrGroupNotFound, name, streamID, topicID)
	}
	return st, t, g, nil
}

func (s *Store) createGroup(c CreateGroup) (Result, bool, error) {
	st, t, err := s.lookupTopicAt(c.Stream, c.Topic, c.Revision)
	if err != nil {
		return Result{}, false, err
	}
	if err := validateName("group", c.Name); err != nil {
		return Result{}, false, err
	}
	if _, ok := t.groups[c.Name]; ok {
		return Result{}, false, fmt.Errorf("%w: %q on topic %d/%d", ErrGroupExists, c.Name, st.id, t.id)
	}
	if len(t.groups) >= MaxGroupsPerTopic {
		return Result{}, false, fmt.Errorf("%w: topic %d/%d has %d", ErrTooManyGroups, st.id, t.id, len(t.groups))
	}
	s.revision++
	if t.groups == nil {
		t.groups = make(map[string]*group)
	}
	t.groups[c.Name] = &group{
		name: c.Name, stream: st.id, topic: t.id, topicRev: t.createdRev,
		createdRev: s.revision, genRev: s.revision, nextMember: 1,
		members: make(map[uint64]*member), parts: make([]GroupPartition, len(t.parts)),
	}
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id}, false, nil
}

func (s *Store) deleteGroup(c DeleteGroup) (Result, bool, error) {
	st, t, _, err := s.lookupGroup(c.Stream, c.Topic, c.Revision, c.Name)
	if err != nil {
		return Result{}, false, err
	}
	delete(t.groups, c.Name)
	s.revision++
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id}, false, nil
}

func (s *Store) joinGroup(c JoinGroup) (Result, bool, error) {
	st, t, g, err := s.lookupGroup(c.Stream, c.Topic, c.Revision, c.Group)
	if err != nil {
		return Result{}, false, err
	}
	if err := c.Validate(); err != nil {
		return Result{}, false, err
	}
	timeout := c.SessionTimeout
	if timeout == 0 {
		timeout = DefaultSessionTimeout
	}
	now := s.groupNow(c.Now)
	if len(g.members) >= MaxMembersPerGroup {
		return Result{}, false, fmt.Errorf("%w: group %q has %d", ErrTooManyMembers, g.name, len(g.members))
	}
	// Committed from here on.
	s.groupClock = now
	s.revision++
	m := g.addMember(c.Member, timeout, now)
	s.renew(m, c.Now)
	g.rebalance(s.revision)
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id, Member: m.id, Generation: g.generation}, false, nil
}

// liveMember returns g's member id, failing with ErrUnknownMember if it
// is gone. A member is in its group until it leaves or ExpireMembers
// removes it: its session is judged at the metadata leader (lease.go).
func liveMember(g *group, id uint64) (*member, error) {
	m, ok := g.members[id]
	if !ok {
		return nil, fmt.Errorf("%w: member %d of group %q", ErrUnknownMember, id, g.name)
	}
	return m, nil
}

func (s *Store) leaveGroup(c LeaveGroup) (Result, bool, error) {
	st, t, g, err := s.lookupGroup(c.Stream, c.Topic, c.Revision, c.Group)
	if err != nil {
		return Result{}, false, err
	}
	m, ok := g.members[c.Member]
	if !ok {
		return Result{}, false, fmt.Errorf("%w: member %d of group %q", ErrUnknownMember, c.Member, g.name)
	}
	now := s.groupNow(c.Now)
	s.groupClock = now
	s.revision++
	g.removeMember(c.Member)
	s.dropLease(m)
	g.rebalance(s.revision)
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id, Member: c.Member, Generation: g.generation}, false, nil
}

func (s *Store) heartbeat(c Heartbeat) (Result, bool, error) {
	st, t, g, err := s.lookupGroup(c.Stream, c.Topic, c.Revision, c.Group)
	if err != nil {
		return Result{}, false, err
	}
	now := s.groupNow(c.Now)
	m, err := liveMember(g, c.Member)
	if err != nil {
		return Result{}, false, err
	}
	s.groupClock = now
	s.revision++
	m.lastSeen = now
	s.renew(m, c.Now)
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id, Member: c.Member, Generation: g.generation}, false, nil
}

func (s *Store) commitGroupOffsets(c CommitGroupOffsets) (Result, bool, error) {
	st, t, g, err := s.lookupGroup(c.Stream, c.Topic, c.Revision, c.Group)
	if err != nil {
		return Result{}, false, err
	}
	now := s.groupNow(c.Now)
	m, err := liveMember(g, c.Member)
	if err != nil {
		return Result{}, false, err
	}
	if len(c.Offsets) > len(g.parts) {
		return Result{}, false, fmt.Errorf("%w: %d offsets for %d partitions", ErrInvalidGroupRequest, len(c.Offsets), len(g.parts))
	}
	seen := make(map[uint32]bool, len(c.Offsets))
	for _, o := range c.Offsets {
		if seen[o.Partition] {
			return Result{}, false, fmt.Errorf("%w: partition %d named twice", ErrInvalidGroupRequest, o.Partition)
		}
		seen[o.Partition] = true
		if err := checkHold(g.name, g.generation, g.parts, c.Member, c.Generation, o.Partition); err != nil {
			return Result{}, false, err
		}
		if p := g.parts[o.Partition]; p.Committed && o.Offset < p.Offset {
			return Result{}, false, fmt.Errorf("%w: partition %d: %d below the committed %d (group %q)", ErrOffsetRegression, o.Partition, o.Offset, p.Offset, g.name)
		}
	}
	// Committed from here on.
	s.groupClock = now
	s.revision++
	m.lastSeen = now
	s.renew(m, c.Now)
	for _, o := range c.Offsets {
		if testhooks.CommitSkipsOffset.Load() {
			o.Offset++ // broken: one offset past the one committed
		}
		g.parts[o.Partition].Offset, g.parts[o.Partition].Committed = o.Offset, true
	}
	if len(c.Offsets) > 0 {
		g.commits++ // a commit of nothing is a heartbeat
	}
	if len(c.Offsets) == 0 && c.Generation <= g.generation {
		g.release(c.Member, c.Generation, s.revision)
	}
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id, Member: c.Member, Generation: g.generation}, false, nil
}

// Group returns a committed consumer group of a topic.
func (s *Store) Group(stream, topic uint32, name string) (GroupInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, t, err := s.lookupTopic(stream, topic)
	if err != nil {
		return GroupInfo{}, false
	}
	g, ok := t.groups[name]
	if !ok {
		return GroupInfo{}, false
	}
	return g.info(stream, topic), true
}

// GroupSummary is what identifies a group and its state, read without
// copying its members or partitions (Store.GroupSummary).
type GroupSummary struct {
	CreatedRevision, Generation uint64
	Members, Partitions         int
}

// GroupSummary returns a committed group's summary in O(1), where Group
// copies the whole group.
func (s *Store) GroupSummary(stream, topic uint32, name string) (GroupSummary, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, t, err := s.lookupTopic(stream, topic)
	if err != nil {
		return GroupSummary{}, false
	}
	g, ok := t.groups[name]
	if !ok {
		return GroupSummary{}, false
	}
	return GroupSummary{CreatedRevision: g.createdRev, Generation: g.generation, Members: len(g.members), Partitions: len(g.parts)}, true
}

// GroupPartitionState returns one partition's assignment and committed
// offset in a committed group, in O(1): what a member's poll needs of the
// group, where Group copies every member and partition (a poll of each
// of a thousand members cost a thousand copies of the group).
func (s *Store) GroupPartitionState(stream, topic uint32, name string, part uint32) (GroupPartition, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, t, err := s.lookupTopic(stream, topic)
	if err != nil {
		return GroupPartition{}, false
	}
	g, ok := t.groups[name]
	if !ok || int64(part) >= int64(len(g.parts)) {
		return GroupPartition{}, false
	}
	return g.parts[part], true
}

// Groups returns a topic's consumer groups, by name.
func (s *Store) Groups(stream, topic uint32) []GroupInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, t, err := s.lookupTopic(stream, topic)
	if err != nil {
		return nil
	}
	var out []GroupInfo
	for _, name := range slices.Sorted(maps.Keys(t.groups)) {
		out = append(out, t.groups[name].info(stream, topic))
	}
	return out
}

// SubscribeGroups is Subscribe for consumer groups: the channel receives
// a value (coalescing, never blocking the sender) after every join,
// leave, heartbeat or commit that started a new generation of its group
// — a rebalance, or a release of partitions moving in two steps — so a
// member on this node can follow its assignment without waiting for its
// next heartbeat. Heartbeats and commits that change no assignment wake
// no one. (A partition count change rebalances through Subscribe's
// commits.)
func (s *Store) SubscribeGroups() (wake <-chan struct{}, cancel func()) {
	return subscribe(&s.mu, &s.groupSubs)
}

// memberGroupGeneration is the generation, before cmd applies, of the
// group a join, leave, heartbeat or commit names (isGroup false for
// other commands; 0 for a group that does not exist). s.mu is held.
func (s *Store) memberGroupGeneration(cmd Command) (gen uint64, isGroup bool) {
	var streamID, topicID uint32
	var name string
	switch c := cmd.(type) {
	case JoinGroup:
		streamID, topicID, name = c.Stream, c.Topic, c.Group
	case LeaveGroup:
		streamID, topicID, name = c.Stream, c.Topic, c.Group
	case Heartbeat:
		streamID, topicID, name = c.Stream, c.Topic, c.Group
	case CommitGroupOffsets:
		streamID, topicID, name = c.Stream, c.Topic, c.Group
	case ExpireMembers:
		streamID, topicID, name = c.Stream, c.Topic, c.Group
	default:
		return 0, false
	}
	if _, t, err := s.lookupTopic(streamID, topicID); err == nil {
		if g, ok := t.groups[name]; ok {
			return g.generation, true
		}
	}
	return 0, true
}

// GroupClock is the group clock: the largest Now of any applied group
// command (Unix nanoseconds).
func (s *Store) GroupClock() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.groupClock
}
