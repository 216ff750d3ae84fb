package metadata

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
)

const sec = int64(time.Second)

// groupStore returns a store with stream 0, topic 0 of parts partitions
// and a group "g" on it.
func groupStore(t testing.TB, parts int) *Store {
	t.Helper()
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s"})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: parts})
	mustApply(t, s, CreateGroup{Stream: 0, Topic: 0, Name: "g"})
	return s
}

func join(t *testing.T, s *Store, name string, timeout time.Duration, now int64) uint64 {
	t.Helper()
	res := mustApply(t, s, JoinGroup{Stream: 0, Topic: 0, Group: "g", Member: name, SessionTimeout: timeout, Now: now})
	return res.Member
}

func groupOf(t *testing.T, s *Store) GroupInfo {
	t.Helper()
	g, ok := s.Group(0, 0, "g")
	if !ok {
		t.Fatal("group g not found")
	}
	checkGroup(t, g)
	return g
}

// checkGroup checks the assignment invariants: every partition held by a
// live member or none only when there are no members, moving only from
// a member to another one, shares — counted where partitions are going —
// differ by at most one, no holder or move from the future.
func checkGroup(t *testing.T, g GroupInfo) {
	t.Helper()
	count := map[uint64]int{}
	for i, p := range g.Partitions {
		if len(g.Members) > 0 {
			if _, ok := g.Member(p.Holder); !ok {
				t.Errorf("partition %d held by %d, not a member (%+v)", i, p.Holder, g.Members)
			}
		} else if p.Holder != 0 {
			t.Errorf("partition %d held by %d in an empty group", i, p.Holder)
		}
		if p.Since > g.Generation {
			t.Errorf("partition %d held since %d, group at %d", i, p.Since, g.Generation)
		}
		owner := p.Holder
		if p.Next != 0 {
			owner = p.Next
			if _, ok := g.Member(p.Next); !ok || p.Next == p.Holder || p.NextSince > g.Generation || p.NextSince < p.Since {
				t.Errorf("partition %d held by %d since %d moves to %d since %d (group at %d, members %+v)", i, p.Holder, p.Since, p.Next, p.NextSince, g.Generation, g.Members)
			}
		} else if p.NextSince != 0 {
			t.Errorf("partition %d moves nowhere since %d", i, p.NextSince)
		}
		count[owner]++
	}
	lo, hi := len(g.Partitions), 0
	for _, m := range g.Members {
		lo, hi = min(lo, count[m.ID]), max(hi, count[m.ID])
	}
	if len(g.Members) > 0 && hi-lo > 1 {
		t.Errorf("unbalanced assignment: %v", count)
	}
}

func TestGroupAssignmentIsBalancedAndSticky(t *testing.T) {
	s := groupStore(t, 12)
	a := join(t, s, "a", 0, 1)
	if g := groupOf(t, s); g.Generation != 1 || len(g.Assigned(a)) != 12 {
		t.Fatalf("after one join: %+v", g)
	}
	b := join(t, s, "b", 0, 2)
	c := join(t, s, "c", 0, 3)
	g := groupOf(t, s)
	if g.Generation != 3 {
		t.Fatalf("generation %d after three joins, want 3", g.Generation)
	}
	// The partitions moving from a wait for it to release them.
	if len(g.Assigned(a)) != 12 || len(g.Revoking(a)) != 8 {
		t.Fatalf("before a released: a holds %v, revoking %v", g.Assigned(a), g.Revoking(a))
	}
	settle(t, s, 3)
	g = groupOf(t, s)
	if g.Generation != 4 {
		t.Fatalf("generation %d after a released, want 4", g.Generation)
	}
	for _, m := range []uint64{a, b, c} {
		if n := len(g.Assigned(m)); n != 4 {
			t.Errorf("member %d holds %d partitions, want 4", m, n)
		}
	}
	// A fourth member takes 3 partitions, one from each: nothing else moves.
	before := g
	d := join(t, s, "d", 0, 4)
	settle(t, s, 4)
	g = groupOf(t, s)
	moved := 0
	for i, p := range g.Partitions {
		if p.Holder != before.Partitions[i].Holder {
			moved++
			if p.Holder != d || p.Since <= before.Generation+1 {
				t.Errorf("partition %d moved to %d since %d, want the new member since a release after generation %d", i, p.Holder, p.Since, before.Generation+1)
			}
		} else if p.Since != before.Partitions[i].Since {
			t.Errorf("partition %d kept by %d but its since changed %d → %d", i, p.Holder, before.Partitions[i].Since, p.Since)
		}
	}
	if moved != 3 {
		t.Errorf("a join moved %d partitions, want 3", moved)
	}
	// A leave moves only the leaver's partitions.
	before = g
	mustApply(t, s, LeaveGroup{Stream: 0, Topic: 0, Group: "g", Member: b, Now: 5})
	g = groupOf(t, s)
	for i, p := range g.Partitions {
		if was := before.Partitions[i].Holder; was != b && p.Holder != was {
			t.Errorf("partition %d moved from %d to %d though %d left", i, was, p.Holder, b)
		}
	}
}

// Sessions are leases the leader's store keeps in memory (lease.go): a
// heartbeat renews one without a command; the leader proposes the expiry
// of a lapsed one, which applies everywhere.
func TestGroupSessionExpiry(t *testing.T) {
	s := groupStore(t, 6)
	a := join(t, s, "a", time.Second, 0)
	b := join(t, s, "b", time.Second, 0)
	if err := s.RenewLease(0, 0, 0, "g", a, 0); !errors.Is(err, ErrNotLeasing) {
		t.Fatalf("renewal at a store that keeps no leases: %v", err)
	}
	if due := s.DueExpiries(10*sec, time.Second); due != nil {
		t.Fatalf("a store that keeps no leases expires %+v", due)
	}
	s.StartLeases(0)
	// a heartbeats; b goes silent. Within the timeout nothing is due, and
	// a renewal is no command: the revision stays.
	rev := s.Revision()
	if err := s.RenewLease(0, 0, 0, "g", a, sec/2); err != nil {
		t.Fatal(err)
	}
	if s.Revision() != rev {
		t.Fatal("a renewal changed the revision")
	}
	if due := s.DueExpiries(sec, time.Second); due != nil {
		t.Fatalf("due at the timeout (a session lapses strictly after it): %+v", due)
	}
	if at, ok := s.NextLeaseDue(); !ok || at != sec {
		t.Fatalf("next lease due %d %v, want b's at %d", at, ok, sec)
	}
	// Past b's session the leader proposes its expiry; b's heartbeats are
	// refused from then on.
	due := s.DueExpiries(sec+sec/4, time.Second)
	if len(due) != 1 || !slices.Equal(due[0].Members, []uint64{b}) || due[0].Now != sec+sec/4 {
		t.Fatalf("due %+v, want b expired", due)
	}
	if err := s.RenewLease(0, 0, 0, "g", b, sec+sec/4); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("renewal of an expiring member: %v", err)
	}
	if s.DueExpiries(sec+sec/2, time.Second) != nil {
		t.Fatal("an expiring member proposed again before its retry")
	}
	// Not applied (say the proposal was dropped): proposed again.
	if err := s.RenewLease(0, 0, 0, "g", a, 2*sec); err != nil {
		t.Fatal(err)
	}
	if again := s.DueExpiries(2*sec+sec/2, time.Second); len(again) != 1 || !slices.Equal(again[0].Members, []uint64{b}) {
		t.Fatalf("retry: %+v", again)
	}
	res := mustApply(t, s, due[0])
	g := groupOf(t, s)
	if len(g.Members) != 1 || len(g.Assigned(a)) != 6 || res.Generation != g.Generation {
		t.Fatalf("after b lapsed: %+v (result %+v)", g, res)
	}
	// Applied twice (a re-proposal): a no-op, the revision stays.
	rev = s.Revision()
	if _, err := s.Apply(due[0]); err != nil || s.Revision() != rev {
		t.Fatalf("a second expiry: %v, revision %d→%d", err, rev, s.Revision())
	}
	if err := s.RenewLease(0, 0, 0, "g", b, 2*sec); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("renewal of an expired member: %v", err)
	}
	if _, err := s.Apply(Heartbeat{Stream: 0, Topic: 0, Group: "g", Member: b, Now: sec * 2}); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("heartbeat of an expired member: %v", err)
	}

	// A member whose logged command (a commit, an acknowledgement) came
	// after the leader decided is not expired: it stays, no longer
	// expiring.
	c := join(t, s, "c", time.Second, 3*sec)
	d := s.DueExpiries(5*sec, time.Second)
	if len(d) != 1 || !slices.Contains(d[0].Members, c) {
		t.Fatalf("due %+v, want c among them", d)
	}
	g = groupOf(t, s)
	if err := commit(s, c, g.Generation, 5*sec); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, d[0])
	if g := groupOf(t, s); !slices.ContainsFunc(g.Members, func(m MemberInfo) bool { return m.ID == c }) {
		t.Fatalf("c expired though it committed after the decision: %+v", g.Members)
	}
	if err := s.RenewLease(0, 0, 0, "g", c, 5*sec+1); err != nil {
		t.Fatalf("c's renewal after it was kept: %v", err)
	}
}

// A new leader grants every member a whole session from when it took
// over, whatever the log says of them, and no lease it sets while it
// applies starts earlier.
func TestGroupLeaseFloor(t *testing.T) {
	s := groupStore(t, 2)
	a := join(t, s, "a", time.Second, 0)
	s.StartLeases(10 * sec) // a took the lead at 10 s
	if due := s.DueExpiries(11*sec, time.Second); due != nil {
		t.Fatalf("due a second after the takeover: %+v", due)
	}
	// A join from before the takeover applied late: its lease starts at
	// the floor.
	b := join(t, s, "b", time.Second, sec)
	if due := s.DueExpiries(11*sec+1, time.Second); len(due) != 1 || !slices.Equal(due[0].Members, []uint64{a, b}) {
		t.Fatalf("due just past a session after the takeover: %+v, want a and b", due)
	}
	s.StopLeases()
	if _, ok := s.NextLeaseDue(); ok {
		t.Fatal("a store that stopped leasing keeps leases")
	}
}

// settle has every member holding partitions that are moving away
// release them (a commit of nothing with the group's generation, as a
// Member's heartbeat), until none moves.
func settle(t *testing.T, s *Store, now int64) {
	t.Helper()
	for range 10 {
		g := groupOf(t, s)
		moving := false
		for _, m := range g.Members {
			if len(g.Revoking(m.ID)) > 0 {
				moving = true
				if err := commit(s, m.ID, g.Generation, now); err != nil {
					t.Fatalf("release by %d: %v", m.ID, err)
				}
			}
		}
		if !moving {
			return
		}
	}
	t.Fatal("partitions still moving after 10 rounds of releases")
}

func commit(s *Store, m, gen uint64, now int64, offs ...GroupOffset) error {
	_, err := s.Apply(CommitGroupOffsets{Stream: 0, Topic: 0, Group: "g", Member: m, Generation: gen, Now: now, Offsets: offs})
	return err
}

// Behaviour 23: one committer per partition per generation, a stale
// member refused, offsets never go backwards.
func TestBehaviour23GroupCommitFence(t *testing.T) {
	s := groupStore(t, 2)
	a := join(t, s, "a", time.Minute, 1)
	genA := groupOf(t, s).Generation
	if err := commit(s, a, genA, 2, GroupOffset{0, 10}, GroupOffset{1, 5}); err != nil {
		t.Fatal(err)
	}
	b := join(t, s, "b", time.Minute, 3)
	settle(t, s, 3)
	g := groupOf(t, s)
	moved := g.Assigned(b)[0]
	kept := g.Assigned(a)[0]
	// a still commits the partition it kept with its old generation...
	if err := commit(s, a, genA, 4, GroupOffset{kept, 11}); err != nil && kept == 0 || err != nil && kept == 1 {
		t.Fatalf("commit of a kept partition with the old generation: %v", err)
	}
	// ...but not the one that moved, with any generation.
	rev := s.Revision()
	for _, gen := range []uint64{genA, g.Generation} {
		if err := commit(s, a, gen, 5, GroupOffset{moved, 100}); !errors.Is(err, ErrNotAssigned) {
			t.Fatalf("stale member's commit (generation %d): %v", gen, err)
		}
	}
	// All or nothing: a valid offset beside a refused one is not stored.
	if err := commit(s, a, genA, 5, GroupOffset{kept, 50}, GroupOffset{moved, 100}); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("mixed commit: %v", err)
	}
	if s.Revision() != rev || groupOf(t, s).Partitions[kept].Offset == 50 {
		t.Fatal("a refused commit changed the state")
	}
	// b commits the moved partition; backwards is refused.
	if err := commit(s, b, g.Generation, 6, GroupOffset{moved, g.Partitions[moved].Offset + 1}); err != nil {
		t.Fatal(err)
	}
	if err := commit(s, b, g.Generation, 6, GroupOffset{moved, 1}); !errors.Is(err, ErrOffsetRegression) {
		t.Fatalf("backwards commit: %v", err)
	}
	// The partition goes back to a (b leaves); a's old generation predates
	// its new hold: refused until a refreshes.
	mustApply(t, s, LeaveGroup{Stream: 0, Topic: 0, Group: "g", Member: b, Now: 7})
	g = groupOf(t, s)
	if err := commit(s, a, genA, 8, GroupOffset{moved, 200}); !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("commit with a generation older than the hold: %v", err)
	}
	if err := commit(s, a, g.Generation+1, 8, GroupOffset{moved, 200}); !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("commit with a future generation: %v", err)
	}
	if err := commit(s, a, g.Generation, 8, GroupOffset{moved, 200}); err != nil {
		t.Fatal(err)
	}
	if err := commit(s, a, g.Generation, 8, GroupOffset{0, 300}, GroupOffset{0, 301}); !errors.Is(err, ErrInvalidGroupRequest) {
		t.Fatalf("partition named twice: %v", err)
	}
	if err := commit(s, a, g.Generation, 8, GroupOffset{7, 1}); !errors.Is(err, ErrPartitionNotFound) {
		t.Fatalf("unknown partition: %v", err)
	}
}

func TestGroupInvalidRequests(t *testing.T) {
	s := groupStore(t, 2)
	rev := s.Revision()
	for _, c := range []struct {
		cmd  Command
		want error
	}{
		{CreateGroup{Stream: 0, Topic: 0, Name: "g"}, ErrGroupExists},
		{CreateGroup{Stream: 0, Topic: 0, Name: ""}, ErrInvalidName},
		{CreateGroup{Stream: 0, Topic: 9, Name: "h"}, ErrTopicNotFound},
		{CreateGroup{Stream: 0, Topic: 0, Name: "h", Revision: 1}, ErrStaleRevision},
		{DeleteGroup{Stream: 0, Topic: 0, Name: "h"}, ErrGroupNotFound},
		{JoinGroup{Stream: 0, Topic: 0, Group: "h"}, ErrGroupNotFound},
		{JoinGroup{Stream: 0, Topic: 0, Group: "g", SessionTimeout: -1}, ErrInvalidGroupRequest},
		{JoinGroup{Stream: 0, Topic: 0, Group: "g", SessionTimeout: time.Millisecond}, ErrInvalidGroupRequest},
		{JoinGroup{Stream: 0, Topic: 0, Group: "g", SessionTimeout: 2 * MaxSessionTimeout}, ErrInvalidGroupRequest},
		{JoinGroup{Stream: 0, Topic: 0, Group: "g", Member: "a\x00"}, ErrInvalidName},
		{LeaveGroup{Stream: 0, Topic: 0, Group: "g", Member: 1}, ErrUnknownMember},
		{Heartbeat{Stream: 0, Topic: 0, Group: "g", Member: 1}, ErrUnknownMember},
		{CommitGroupOffsets{Stream: 0, Topic: 0, Group: "g", Member: 1}, ErrUnknownMember},
	} {
		if _, err := s.Apply(c.cmd); !errors.Is(err, c.want) {
			t.Errorf("%#v: %v, want %v", c.cmd, err, c.want)
		}
	}
	if s.Revision() != rev {
		t.Error("refused commands changed the revision")
	}
}

func TestGroupFollowsPartitionCount(t *testing.T) {
	s := groupStore(t, 4)
	a := join(t, s, "a", time.Minute, 1)
	b := join(t, s, "b", time.Minute, 1)
	settle(t, s, 1)
	g := groupOf(t, s)
	if err := commit(s, g.Partitions[3].Holder, g.Generation, 2, GroupOffset{3, 42}); err != nil {
		t.Fatal(err)
	}
	gen := g.Generation
	mustApply(t, s, DeletePartitions{Stream: 0, Topic: 0, Count: 1})
	g = groupOf(t, s)
	if len(g.Partitions) != 3 || g.Generation != gen+1 {
		t.Fatalf("after deleting a partition: %+v", g)
	}
	mustApply(t, s, CreatePartitions{Stream: 0, Topic: 0, Count: 3})
	g = groupOf(t, s)
	if len(g.Partitions) != 6 || g.Partitions[3].Committed || len(g.Assigned(a)) != 3 || len(g.Assigned(b)) != 3 {
		t.Fatalf("after adding partitions (partition 3 is a new one): %+v", g)
	}
	// Deleting the topic deletes its groups; a topic that reuses the id
	// has none.
	mustApply(t, s, DeleteTopic{Stream: 0, Topic: 0})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "t2", Partitions: 1})
	if _, ok := s.Group(0, 0, "g"); ok || len(s.Groups(0, 0)) != 0 {
		t.Fatal("a recreated topic inherited a deleted topic's group")
	}
}

// randomGroupCommand returns a group command over topic 0/0 and groups
// "g" and "h", valid or not.
func randomGroupCommand(rng *rand.Rand, now int64) Command {
	name := []string{"g", "h"}[rng.IntN(2)]
	m := uint64(rng.IntN(6))
	switch rng.IntN(8) {
	case 0:
		return CreateGroup{Stream: 0, Topic: 0, Name: name}
	case 1:
		if rng.IntN(8) == 0 {
			return DeleteGroup{Stream: 0, Topic: 0, Name: name}
		}
		if rng.IntN(2) == 0 {
			return ExpireMembers{Stream: 0, Topic: 0, Group: name, Members: []uint64{m, m + 1}, Now: now}
		}
		return Heartbeat{Stream: 0, Topic: 0, Group: name, Member: m, Now: now}
	case 2:
		return JoinGroup{Stream: 0, Topic: 0, Group: name, Member: "m", SessionTimeout: time.Duration(1+rng.IntN(3)) * time.Second, Now: now}
	case 3:
		return LeaveGroup{Stream: 0, Topic: 0, Group: name, Member: m, Now: now}
	case 4:
		if rng.IntN(4) == 0 {
			return CreatePartitions{Stream: 0, Topic: 0, Count: 1 + rng.IntN(2)}
		}
		return DeletePartitions{Stream: 0, Topic: 0, Count: 1}
	default:
		c := CommitGroupOffsets{Stream: 0, Topic: 0, Group: name, Member: m, Generation: uint64(rng.IntN(12)), Now: now}
		for range 1 + rng.IntN(2) {
			c.Offsets = append(c.Offsets, GroupOffset{Partition: uint32(rng.IntN(6)), Offset: uint64(rng.IntN(100))})
		}
		return c
	}
}

// A random history of group commands keeps the invariants after every
// step: assignments balanced over live members, committed offsets never
// going backwards while a partition exists, every accepted commit from
// the holder; and a store restored from a snapshot at any point applies
// the rest of the history identically. The store keeps leases, as the
// leader's does: members renew them now and then, and the expiries it
// proposes are applied; what each member reads of its group
// (Store.MemberOf, from the group's index) is what the group says.
func TestGroupRandomHistory(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := groupStore(t, 4)
		s.StartLeases(0)
		var replica *Store
		committed := map[string]map[uint32]uint64{}
		now := int64(0)
		var due []ExpireMembers
		for step := range 400 {
			now += int64(rng.IntN(400)) * int64(time.Millisecond)
			if rng.IntN(3) == 0 {
				_ = s.RenewLease(0, 0, 0, []string{"g", "h"}[rng.IntN(2)], uint64(rng.IntN(6)), now)
			}
			if len(due) == 0 {
				due = s.DueExpiries(now, time.Second)
			}
			cmd := randomGroupCommand(rng, now)
			if len(due) > 0 && rng.IntN(2) == 0 {
				cmd, due = due[0], due[1:]
			}
			before := map[string]GroupInfo{}
			for _, g := range s.Groups(0, 0) {
				before[g.Name] = g
			}
			res, err := s.Apply(cmd)
			if replica != nil {
				res2, err2 := replica.Apply(cmd)
				if !reflect.DeepEqual(res, res2) || (err == nil) != (err2 == nil) {
					t.Fatalf("seed %d step %d: %#v: restored store answered %+v %v, original %+v %v", seed, step, cmd, res2, err2, res, err)
				}
			}
			if c, ok := cmd.(CommitGroupOffsets); ok && err == nil {
				g := before[c.Group]
				for _, o := range c.Offsets {
					if g.Partitions[o.Partition].Holder != c.Member {
						t.Fatalf("seed %d step %d: commit by %d accepted for partition %d held by %d", seed, step, c.Member, o.Partition, g.Partitions[o.Partition].Holder)
					}
				}
			}
			if _, ok := cmd.(DeleteGroup); ok && err == nil {
				delete(committed, cmd.(DeleteGroup).Name)
			}
			if _, ok := cmd.(DeletePartitions); ok && err == nil {
				committed = map[string]map[uint32]uint64{} // ids may be reused: start over
			}
			for _, g := range s.Groups(0, 0) {
				checkGroup(t, g)
				for _, m := range g.Members {
					v, err := s.MemberOf(0, 0, g.Name, m.ID, g.Generation)
					if err != nil || v.Generation != g.Generation || !slices.Equal(v.Held, g.Assigned(m.ID)) || !slices.Equal(v.Revoking, g.Revoking(m.ID)) {
						t.Fatalf("seed %d step %d: member %d of %s reads %+v, %v; the group has it hold %v, revoking %v",
							seed, step, m.ID, g.Name, v, err, g.Assigned(m.ID), g.Revoking(m.ID))
					}
				}
				// The O(1) reads agree with the copy of the group.
				want := GroupSummary{CreatedRevision: g.CreatedRevision, Generation: g.Generation, Members: len(g.Members), Partitions: len(g.Partitions)}
				if sum, ok := s.GroupSummary(0, 0, g.Name); !ok || sum != want {
					t.Fatalf("seed %d step %d: GroupSummary of %s = %+v, %v; want %+v", seed, step, g.Name, sum, ok, want)
				}
				for i, p := range g.Partitions {
					if ps, ok := s.GroupPartitionState(0, 0, g.Name, uint32(i)); !ok || ps != p {
						t.Fatalf("seed %d step %d: GroupPartitionState of %s/%d = %+v, %v; want %+v", seed, step, g.Name, i, ps, ok, p)
					}
				}
				if _, ok := s.GroupPartitionState(0, 0, g.Name, uint32(len(g.Partitions))); ok {
					t.Fatalf("seed %d step %d: GroupPartitionState past the partitions of %s answered", seed, step, g.Name)
				}
				if committed[g.Name] == nil {
					committed[g.Name] = map[uint32]uint64{}
				}
				for i, p := range g.Partitions {
					if !p.Committed {
						continue
					}
					if prev, ok := committed[g.Name][uint32(i)]; ok && p.Offset < prev {
						t.Fatalf("seed %d step %d: group %s partition %d went back %d → %d", seed, step, g.Name, i, prev, p.Offset)
					}
					committed[g.Name][uint32(i)] = p.Offset
				}
			}
			if step%50 == 0 {
				b, err := EncodeSnapshot(s.Export())
				if err != nil {
					t.Fatal(err)
				}
				snap, err := DecodeSnapshot(b)
				if err != nil {
					t.Fatal(err)
				}
				if replica, err = Restore(testConfig, snap); err != nil {
					t.Fatalf("seed %d step %d: restore: %v", seed, step, err)
				}
				if !reflect.DeepEqual(replica.Export(), s.Export()) {
					t.Fatalf("seed %d step %d: restored store exports differently:\n%+v\n%+v", seed, step, replica.Export(), s.Export())
				}
			}
		}
	}
}

func TestRestoreRejectsBadGroups(t *testing.T) {
	s := groupStore(t, 2)
	join(t, s, "a", time.Second, 1)
	good := s.Export()
	if _, err := Restore(testConfig, good); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*GroupInfo){
		"bad name":          func(g *GroupInfo) { g.Name = "" },
		"future revision":   func(g *GroupInfo) { g.CreatedRevision = good.Revision + 1 },
		"member id 0":       func(g *GroupInfo) { g.Members[0].ID = 0 },
		"member past next":  func(g *GroupInfo) { g.Members[0].ID = g.NextMember },
		"bad timeout":       func(g *GroupInfo) { g.Members[0].SessionTimeout = 0 },
		"unknown holder":    func(g *GroupInfo) { g.Partitions[0].Holder = 99 },
		"future since":      func(g *GroupInfo) { g.Partitions[0].Since = g.Generation + 1 },
		"partition count":   func(g *GroupInfo) { g.Partitions = g.Partitions[:1] },
		"uncommitted value": func(g *GroupInfo) { g.Partitions[1].Offset = 3 },
		"next member 0":     func(g *GroupInfo) { g.NextMember = 0 },
		"moving to itself": func(g *GroupInfo) {
			g.Partitions[0].Next, g.Partitions[0].NextSince = g.Partitions[0].Holder, g.Generation
		},
		"moving to nobody": func(g *GroupInfo) { g.Partitions[0].Next, g.Partitions[0].NextSince = 99, g.Generation },
		"moving since 0":   func(g *GroupInfo) { g.Partitions[0].NextSince = 1 },
	} {
		t.Run(name, func(t *testing.T) {
			snap := s.Export()
			mutate(&snap.Streams[0].Topics[0].Groups[0])
			if _, err := Restore(testConfig, snap); !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("Restore = %v, want ErrInvalidSnapshot", err)
			}
		})
	}
}

// Replace (a lagging replica installing the leader's snapshot) takes the
// whole group state, group clock included: without the clock the replica
// judged sessions against an older time than its peers, and its
// metadata diverged (found by the cluster simulator, seed 2).
func TestReplaceCarriesGroups(t *testing.T) {
	s := groupStore(t, 3)
	join(t, s, "a", time.Second, 5*sec)
	other := newTestStore(t)
	if err := other.Replace(s.Export()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(other.Export(), s.Export()) || other.GroupClock() != 5*sec {
		t.Fatalf("replaced store exports %+v, want %+v", other.Export(), s.Export())
	}
	// Both judge the next command alike.
	cmd := JoinGroup{Stream: 0, Topic: 0, Group: "g", SessionTimeout: time.Second, Now: 0}
	r1, e1 := s.Apply(cmd)
	r2, e2 := other.Apply(cmd)
	if !reflect.DeepEqual(r1, r2) || (e1 == nil) != (e2 == nil) || !reflect.DeepEqual(other.Export(), s.Export()) {
		t.Fatalf("after Replace the stores diverge: %+v %v vs %+v %v", r1, e1, r2, e2)
	}
}

// The boundaries of group commands, each pinned (found by gremlins over
// group.go): a session lapses only strictly after its timeout; the
// timeout bounds are inclusive; a topic holds MaxGroupsPerTopic groups
// and a group MaxMembersPerGroup members, not one more; re-committing the
// committed offset is accepted; every successful group command bumps the
// revision by one; and when shares do not divide evenly the member
// holding the most keeps the extra partition, so a join moves as few
// partitions as it can.
func TestGroupBoundaries(t *testing.T) {
	t.Run("session lapses strictly after its timeout", func(t *testing.T) {
		s := groupStore(t, 1)
		a := join(t, s, "a", time.Second, 0)
		mustApply(t, s, Heartbeat{Stream: 0, Topic: 0, Group: "g", Member: a, Now: sec})
		expire := ExpireMembers{Stream: 0, Topic: 0, Group: "g", Members: []uint64{a}, Now: 2 * sec}
		if mustApply(t, s, expire); len(groupOf(t, s).Members) != 1 {
			t.Fatal("expired at its timeout")
		}
		expire.Now++
		if mustApply(t, s, expire); len(groupOf(t, s).Members) != 0 {
			t.Fatal("not expired 1 ns past its timeout")
		}
	})
	t.Run("timeout bounds inclusive", func(t *testing.T) {
		s := groupStore(t, 1)
		for _, d := range []time.Duration{MinSessionTimeout, MaxSessionTimeout} {
			if _, err := s.Apply(JoinGroup{Stream: 0, Topic: 0, Group: "g", SessionTimeout: d}); err != nil {
				t.Fatalf("session timeout %v: %v", d, err)
			}
		}
	})
	t.Run("groups per topic", func(t *testing.T) {
		s := groupStore(t, 1) // holds "g"
		for i := 1; i < MaxGroupsPerTopic; i++ {
			mustApply(t, s, CreateGroup{Stream: 0, Topic: 0, Name: "g" + strconv.Itoa(i)})
		}
		if _, err := s.Apply(CreateGroup{Stream: 0, Topic: 0, Name: "one-more"}); !errors.Is(err, ErrTooManyGroups) {
			t.Fatalf("group %d: %v", MaxGroupsPerTopic+1, err)
		}
	})
	t.Run("members per group", func(t *testing.T) {
		s := groupStore(t, 1)
		for range MaxMembersPerGroup {
			join(t, s, "", time.Hour, 1)
		}
		if _, err := s.Apply(JoinGroup{Stream: 0, Topic: 0, Group: "g", SessionTimeout: time.Hour, Now: 1}); !errors.Is(err, ErrTooManyMembers) {
			t.Fatalf("member %d: %v", MaxMembersPerGroup+1, err)
		}
	})
	t.Run("same offset again, revision bumps", func(t *testing.T) {
		s := groupStore(t, 1)
		a := join(t, s, "a", time.Minute, 1)
		gen := groupOf(t, s).Generation
		for range 2 {
			before := s.Revision()
			res, err := s.Apply(CommitGroupOffsets{Stream: 0, Topic: 0, Group: "g", Member: a, Generation: gen, Now: 2,
				Offsets: []GroupOffset{{Partition: 0, Offset: 7}}})
			if err != nil {
				t.Fatalf("committing the committed offset again: %v", err)
			}
			if res.Revision != before+1 || s.Revision() != before+1 {
				t.Fatalf("commit moved the revision %d → %d (result %d)", before, s.Revision(), res.Revision)
			}
		}
	})
	t.Run("uneven shares keep the extra where it is", func(t *testing.T) {
		s := groupStore(t, 5)
		a := join(t, s, "a", time.Minute, 1)
		before := groupOf(t, s)
		b := join(t, s, "b", time.Minute, 1)
		settle(t, s, 1)
		g := groupOf(t, s)
		moved := 0
		for i, p := range g.Partitions {
			if p.Holder != before.Partitions[i].Holder {
				moved++
			}
		}
		if moved != 2 || len(g.Assigned(a)) != 3 || len(g.Assigned(b)) != 2 {
			t.Fatalf("a second member over 5 partitions moved %d (a holds %v, b %v), want 2 moved, a keeping 3",
				moved, g.Assigned(a), g.Assigned(b))
		}
	})
}

// Behaviour 33: a partition moves from a live member in two steps. The
// old holder keeps it — it may commit it, not read it — until a command
// of its own shows it has seen the move; the new holder can neither read
// nor commit it before; a holder that leaves or lapses needs no release,
// and a move is called off when its target goes.
func TestBehaviour33PartitionMovesFromALiveMemberInTwoSteps(t *testing.T) {
	s := groupStore(t, 3)
	a := join(t, s, "a", time.Minute, 1)
	genA := groupOf(t, s).Generation
	if err := commit(s, a, genA, 2, GroupOffset{0, 3}, GroupOffset{1, 3}, GroupOffset{2, 3}); err != nil {
		t.Fatal(err)
	}
	b := join(t, s, "b", time.Second, 3)
	g := groupOf(t, s)
	rv := g.Revoking(a)
	if len(rv) != 1 || len(g.Assigned(b)) != 0 {
		t.Fatalf("after b joined: a revoking %v, b holds %v; want one partition moving, none held yet", rv, g.Assigned(b))
	}
	m := rv[0]
	if p := g.Partitions[m]; p.Holder != a || p.Next != b || p.NextSince != g.Generation {
		t.Fatalf("moving partition %d: %+v", m, p)
	}
	if err := s.CheckHolder(0, 0, "g", a, genA, m); !errors.Is(err, ErrRebalanceInProgress) {
		t.Fatalf("old holder's read of a moving partition: %v, want ErrRebalanceInProgress", err)
	}
	if err := s.CheckHolder(0, 0, "g", a, genA, (m+1)%3); err != nil {
		t.Fatalf("old holder's read of the partition it keeps: %v", err)
	}
	if err := s.CheckHolder(0, 0, "g", b, g.Generation, m); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("new holder's read before the release: %v, want ErrNotAssigned", err)
	}
	if err := commit(s, b, g.Generation, 4, GroupOffset{m, 9}); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("new holder's commit before the release: %v, want ErrNotAssigned", err)
	}
	// a commits what it handled, with the generation it knew: accepted,
	// and not a release (a has not seen the move).
	if err := commit(s, a, genA, 5, GroupOffset{m, 5}); err != nil {
		t.Fatal(err)
	}
	if g = groupOf(t, s); g.Partitions[m].Holder != a || g.Partitions[m].Offset != 5 {
		t.Fatalf("after the old holder's commit with its old generation: %+v", g.Partitions[m])
	}
	// A commit naming offsets does not release, even with the generation
	// of the move: only an acknowledgement (a commit of nothing) does.
	if err := commit(s, a, g.Generation, 5, GroupOffset{m, 5}); err != nil {
		t.Fatal(err)
	}
	if g = groupOf(t, s); g.Partitions[m].Holder != a {
		t.Fatalf("a commit of offsets released the partition: %+v", g.Partitions[m])
	}
	// a's heartbeat (a commit of nothing) with the generation that has
	// the move releases it, in a new generation.
	gen := g.Generation
	if err := commit(s, a, gen, 6); err != nil {
		t.Fatal(err)
	}
	g = groupOf(t, s)
	if p := g.Partitions[m]; p.Holder != b || p.Next != 0 || p.Since != gen+1 || g.Generation != gen+1 {
		t.Fatalf("after the release: %+v, group at %d; want b's since %d", p, g.Generation, gen+1)
	}
	if err := commit(s, a, g.Generation, 7, GroupOffset{m, 6}); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("old holder's commit after the release: %v, want ErrNotAssigned", err)
	}
	if err := s.CheckHolder(0, 0, "g", b, g.Generation, m); err != nil {
		t.Fatalf("new holder's read after the release: %v", err)
	}
	if err := commit(s, b, g.Generation, 7, GroupOffset{m, 6}); err != nil {
		t.Fatal(err)
	}

	// A third member: one partition starts moving from a or b; its
	// target lapses before the release: the move is called off.
	c := join(t, s, "c", time.Second, 8)
	g = groupOf(t, s)
	var from uint64
	for _, id := range []uint64{a, b} {
		if rv := g.Revoking(id); len(rv) > 0 {
			from = id
		}
	}
	if from == 0 {
		t.Fatalf("no partition moving to the third member: %+v", g.Partitions)
	}
	mustApply(t, s, ExpireMembers{Stream: 0, Topic: 0, Group: "g", Members: []uint64{b, c}, Now: 8 + 3*sec})
	g = groupOf(t, s)
	if _, ok := g.Member(c); ok || len(g.Revoking(from)) != 0 {
		t.Fatalf("after the target lapsed: members %+v, %d still revoking %v", g.Members, from, g.Revoking(from))
	}
	// b lapsed too (its timeout is a second): its partitions went to a
	// at once, with nothing to release.
	if len(g.Assigned(a)) != 3 {
		t.Fatalf("a holds %v after b lapsed, want all three", g.Assigned(a))
	}
}
