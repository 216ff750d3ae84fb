package metadata

import (
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Member leases: a heartbeat that changes nothing is not a command.
//
// A member's session is a lease the metadata leader keeps in memory: a
// heartbeat renews it there (RenewLease: a map lookup and a heap fix, no
// log entry, nothing replicated), and only what changes the group's state
// is logged — joins, leaves, commits, releases, and the expiry of a
// member whose lease lapsed, which the leader proposes as ExpireMembers
// (DueExpiries). So an idle group costs the metadata log nothing, however
// many members it has.
//
// Only the store of the node that leads (StartLeases) keeps leases; the
// others keep none (StopLeases). A new leader does not know when the
// members last heartbeated, so it grants every member a whole session
// from when it took over (the lease floor): no member expires because
// leadership moved, and a member that is really gone expires one session
// timeout after the takeover. Leases the store sets while it applies —
// a join, a commit — never start before the floor either: entries of an
// earlier term the new leader applies late must not date a lease back.
//
// Why a heartbeat is safe without a log entry (behaviour 33): a member
// hands its application messages only until LeaseEnd of the Now of its
// last acknowledged heartbeat, and the leader acknowledges one only after
// it renewed the lease and then confirmed, by a read index, that it still
// led (the host does that). Any later leader was elected after that
// confirmation, so its floor — and the lease it grants — starts after the
// heartbeat was sent. A leader that decided to expire a member refuses its
// heartbeats from then on (the member is expiring), and ExpireMembers
// removes a member only if no logged command of it since (a commit, with
// its Now) renewed its session; a member it keeps is no longer expiring.

// ExpireMembers removes members of a group whose lease lapsed at the
// metadata leader and rebalances the group. The leader proposes it
// (Store.DueExpiries); it applies identically everywhere: each listed
// member that is still in the group and has no join, heartbeat or commit
// in the log within its session timeout before Now is removed, the others
// stay. A command that removes no one is a no-op that does not bump the
// revision.
type ExpireMembers struct {
	Stream, Topic uint32
	Group         string
	// GroupRevision is the group's created revision: a command meant
	// for a group deleted since is a no-op on one created with its name.
	GroupRevision uint64
	Members       []uint64
	// Now is the leader's clock when it decided, Unix nanoseconds.
	Now      int64
	Revision uint64 // the topic's created revision, if not 0 (see DeleteStream)
}

func (ExpireMembers) isCommand() {}

// ErrNotLeasing reports a lease renewal at a store that keeps no leases:
// its node does not lead the metadata group (or has not taken over yet).
// The caller asks the leader, or asks again.
var ErrNotLeasing = errors.New("parkway: this node keeps no member leases (not the metadata leader)")

// leaseHeap orders the members whose leases the store keeps by when they
// are due (member.due).
type leaseHeap []*member

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i+1, j+1
}
func (h *leaseHeap) Push(x any) {
	m := x.(*member)
	m.hidx = len(*h) + 1
	*h = append(*h, m)
}
func (h *leaseHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	m.hidx = 0
	return m
}

// StartLeases makes this store keep the members' leases, as the metadata
// leader does from now (Unix nanoseconds, the leader's clock): every
// member gets a whole session from now, and no lease the store sets later
// starts before it. Call it when this node takes the lead (and on a
// single node, at open).
func (s *Store) StartLeases(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leasing, s.leaseFloor = true, now
	s.rebuildLeases()
}

// StopLeases makes this store keep no leases: its node no longer leads.
func (s *Store) StopLeases() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leasing = false
	for _, m := range s.leases {
		m.hidx = 0
	}
	s.leases = nil
}

// rebuildLeases gives every member of every group a lease from the floor,
// in a deterministic order (s.mu held, s.leasing set).
func (s *Store) rebuildLeases() {
	for _, m := range s.leases {
		m.hidx = 0
	}
	s.leases = s.leases[:0]
	s.streams.Ascend(func(st *stream) bool {
		st.topics.Ascend(func(t *topic) bool {
			for _, name := range slices.Sorted(maps.Keys(t.groups)) {
				g := t.groups[name]
				for _, id := range g.order {
					m := g.members[id]
					m.lease, m.due, m.expiring = s.leaseFloor, s.leaseFloor+int64(m.timeout), false
					m.hidx = len(s.leases) + 1
					s.leases = append(s.leases, m)
				}
			}
			return true
		})
		return true
	})
	heap.Init(&s.leases)
}

// renew extends m's lease to start at now (never before the floor, never
// earlier than it starts already), if the store keeps leases and m is not
// being expired (s.mu held).
func (s *Store) renew(m *member, now int64) {
	if !s.leasing || m.expiring {
		return
	}
	now = max(now, s.leaseFloor)
	if m.hidx == 0 {
		m.lease, m.due = now, now+int64(m.timeout)
		heap.Push(&s.leases, m)
		return
	}
	if now > m.lease {
		m.lease, m.due = now, now+int64(m.timeout)
		heap.Fix(&s.leases, m.hidx-1)
	}
}

// dropLease forgets m's lease: it left the group (s.mu held).
func (s *Store) dropLease(m *member) {
	if m.hidx != 0 {
		heap.Remove(&s.leases, m.hidx-1)
	}
}

// RenewLease renews a member's lease at now (the leader's clock): the
// heartbeat of a member whose state does not change. It fails with
// ErrNotLeasing when the store keeps no leases, ErrUnknownMember when the
// member is not in its group or is being expired, and with the lookup
// errors of a group command (ErrGroupNotFound, ErrTopicNotFound, ...).
// A map lookup and a heap fix: no log entry.
func (s *Store) RenewLease(stream, topic uint32, topicRev uint64, group string, member uint64, now int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.leasedMember(stream, topic, topicRev, group, member)
	if err != nil {
		return err
	}
	s.renew(m, now)
	return nil
}

// HoldsLease reports (nil) whether this store keeps a lease for the member
// that is not being expired: the leader checks it again before it
// acknowledges a renewal whose read index it waited for, since entries it
// applied meanwhile may have removed the member.
func (s *Store) HoldsLease(stream, topic uint32, topicRev uint64, group string, member uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, err := s.leasedMember(stream, topic, topicRev, group, member)
	return err
}

func (s *Store) leasedMember(stream, topic uint32, topicRev uint64, group string, id uint64) (*member, error) {
	if !s.leasing {
		return nil, ErrNotLeasing
	}
	_, _, g, err := s.lookupGroup(stream, topic, topicRev, group)
	if err != nil {
		return nil, err
	}
	m, ok := g.members[id]
	if !ok {
		return nil, fmt.Errorf("%w: member %d of group %q", ErrUnknownMember, id, group)
	}
	if m.expiring {
		return nil, fmt.Errorf("%w: member %d of group %q: its session lapsed at the metadata leader and it is being expired", ErrUnknownMember, id, group)
	}
	return m, nil
}

// DueExpiries returns the ExpireMembers commands the leader proposes at
// now: one per group with members whose lease lapsed (now past its start
// plus the session timeout). Those members are expiring from then on —
// their renewals are refused — and come due again after retry, so the
// command is proposed again if it was lost with a leadership change
// that did not happen (a dropped proposal). Members of groups, topics or
// streams deleted since are forgotten here. O(expired · log members).
func (s *Store) DueExpiries(now int64, retry time.Duration) []ExpireMembers {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leasing {
		return nil
	}
	var out []ExpireMembers
	var at map[*group]int
	for len(s.leases) > 0 && s.leases[0].due < now {
		m := s.leases[0]
		t, live := s.memberTopic(m)
		if !live {
			heap.Pop(&s.leases)
			continue
		}
		m.expiring, m.due = true, now+int64(retry)
		heap.Fix(&s.leases, 0)
		if at == nil {
			at = make(map[*group]int)
		}
		i, ok := at[m.g]
		if !ok {
			i = len(out)
			at[m.g] = i
			out = append(out, ExpireMembers{Stream: m.g.stream, Topic: t.id, Group: m.g.name, GroupRevision: m.g.createdRev,
				Now: now, Revision: t.createdRev})
		}
		out[i].Members = append(out[i].Members, m.id)
	}
	return out
}

// NextLeaseDue is when the earliest lease the store keeps lapses (Unix
// nanoseconds): when DueExpiries next has something to do.
func (s *Store) NextLeaseDue() (int64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.leases) == 0 {
		return 0, false
	}
	return s.leases[0].due, true
}

// memberTopic returns m's topic if m is still a member of its group and
// the group still the one of that topic incarnation (s.mu held).
func (s *Store) memberTopic(m *member) (*topic, bool) {
	g := m.g
	_, t, err := s.lookupTopicAt(g.stream, g.topic, g.topicRev)
	if err != nil || t.groups[g.name] != g || g.members[m.id] != m {
		return nil, false
	}
	return t, true
}

func (s *Store) expireMembers(c ExpireMembers) (Result, bool, error) {
	st, t, g, err := s.lookupGroup(c.Stream, c.Topic, c.Revision, c.Group)
	if err != nil {
		return Result{}, false, err
	}
	if len(c.Members) > MaxMembersPerGroup {
		return Result{}, false, fmt.Errorf("%w: %d members to expire, at most %d", ErrInvalidGroupRequest, len(c.Members), MaxMembersPerGroup)
	}
	now := s.groupNow(c.Now)
	removed := false
	if c.GroupRevision != 0 && c.GroupRevision != g.createdRev {
		return Result{Revision: s.revision, Stream: st.id, Topic: t.id, Generation: g.generation}, false, nil
	}
	for _, id := range c.Members {
		m, ok := g.members[id]
		if !ok {
			continue
		}
		if !m.lapsed(now) {
			// A logged command of the member renewed its session after the
			// leader decided: it stays, and its lease runs again.
			m.expiring = false
			s.renew(m, m.lastSeen)
			if m.hidx != 0 {
				m.due = m.lease + int64(m.timeout)
				heap.Fix(&s.leases, m.hidx-1)
			}
			continue
		}
		if !removed {
			s.groupClock = now
			s.revision++
			removed = true
		}
		g.removeMember(id)
		s.dropLease(m)
		g.expiries++
	}
	if !removed {
		return Result{Revision: s.revision, Stream: st.id, Topic: t.id, Generation: g.generation}, false, nil
	}
	g.rebalance(s.revision)
	return Result{Revision: s.revision, Stream: st.id, Topic: t.id, Generation: g.generation}, false, nil
}

// MemberView is what one member of a group needs of it: the generation,
// the partitions it holds (ascending, those moving away included) and
// those moving away from it (Revoking), and whether a heartbeat
// acknowledging its generation would release any of them.
type MemberView struct {
	Generation uint64
	Held       []uint32
	Revoking   []uint32
	// Releases reports whether a commit of no offsets with the
	// generation asked about releases a partition: a move it has seen
	// (GroupPartition.NextSince at or before that generation).
	Releases bool
}

// MemberOf returns member's view of a committed group as of generation
// gen (for Releases), without copying the group: it costs what the
// member holds (the group indexes it), nothing over the other members or
// partitions. It fails with ErrGroupNotFound
// (or the topic lookup's error) and ErrUnknownMember.
func (s *Store) MemberOf(stream, topic uint32, group string, member, gen uint64) (MemberView, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, t, err := s.lookupTopic(stream, topic)
	if err != nil {
		return MemberView{}, err
	}
	g, ok := t.groups[group]
	if !ok {
		return MemberView{}, fmt.Errorf("%w: %q on topic %d/%d", ErrGroupNotFound, group, stream, topic)
	}
	if _, ok := g.members[member]; !ok {
		return MemberView{}, fmt.Errorf("%w: member %d of group %q", ErrUnknownMember, member, g.name)
	}
	v := MemberView{Generation: g.generation, Held: slices.Clone(g.held[member])}
	for _, i := range v.Held {
		if p := g.parts[i]; p.Next != 0 {
			v.Revoking = append(v.Revoking, i)
			if gen >= p.NextSince && gen <= g.generation {
				v.Releases = true
			}
		}
	}
	return v, nil
}
