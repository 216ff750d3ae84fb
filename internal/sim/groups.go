package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/parkway-io/parkway/metadata"
)

// Consumer groups in the workload: both modes commit group commands
// through the engine's metadata path (the durable log on one node, the
// metadata raft group in a cluster), picked by groupCommand from the
// store the proposing node holds, and check every node's committed group
// state with a groupCheck (invariant 6).

// groupNames are the groups the workload uses on each topic.
var groupNames = []string{"g0", "g1"}

// groupCommand picks a consumer group command on one of topics: mostly
// joins, heartbeats and commits of real members with their current
// generation, sometimes stale members, stale generations, offsets below
// the committed one, leaves and deletes. now is the proposer's clock.
func groupCommand(rng *rand.Rand, meta *metadata.Store, topics []metadata.TopicInfo, now time.Time) (string, metadata.Command) {
	if len(topics) == 0 {
		return "", nil
	}
	t := topics[rng.IntN(len(topics))]
	name := groupNames[rng.IntN(len(groupNames))]
	g, ok := meta.Group(t.Stream, t.ID, name)
	desc := func(what string) string { return fmt.Sprintf("group %s %d/%s %s", what, t.Stream, t.Name, name) }
	if !ok {
		return desc("create"), metadata.CreateGroup{Stream: t.Stream, Topic: t.ID, Name: name, Revision: t.CreatedRevision}
	}
	// A member id: a live one mostly, sometimes one that left or never was.
	member := g.NextMember
	if len(g.Members) > 0 && rng.IntN(6) != 0 {
		member = g.Members[rng.IntN(len(g.Members))].ID
	} else if g.NextMember > 1 {
		member = 1 + rng.Uint64N(g.NextMember)
	}
	ns := now.UnixNano()
	timeout := time.Duration(1+rng.IntN(4)) * time.Second
	switch w := rng.IntN(24); {
	case w < 3 || len(g.Members) == 0:
		return desc("join"), metadata.JoinGroup{Stream: t.Stream, Topic: t.ID, Group: name,
			Member: fmt.Sprintf("m%d", g.NextMember), SessionTimeout: timeout, Now: ns, Revision: t.CreatedRevision}
	case w < 8:
		return desc(fmt.Sprintf("heartbeat m%d", member)), metadata.Heartbeat{Stream: t.Stream, Topic: t.ID, Group: name,
			Member: member, Now: ns, Revision: t.CreatedRevision}
	case w < 9:
		return desc(fmt.Sprintf("leave m%d", member)), metadata.LeaveGroup{Stream: t.Stream, Topic: t.ID, Group: name,
			Member: member, Now: ns, Revision: t.CreatedRevision}
	case w < 10 && rng.IntN(3) == 0:
		return desc("delete"), metadata.DeleteGroup{Stream: t.Stream, Topic: t.ID, Name: name, Revision: t.CreatedRevision}
	default:
		// A commit: the partitions the member holds (sometimes one it
		// does not), with its generation (sometimes an older one), at or
		// past the committed offset (sometimes below it).
		gen := g.Generation
		if rng.IntN(5) == 0 && gen > 0 {
			gen = rng.Uint64N(gen)
		}
		c := metadata.CommitGroupOffsets{Stream: t.Stream, Topic: t.ID, Group: name, Member: member,
			Generation: gen, Now: ns, Revision: t.CreatedRevision}
		parts := g.Assigned(member)
		if len(g.Partitions) > 0 && (len(parts) == 0 || rng.IntN(6) == 0) {
			parts = append(parts, uint32(rng.IntN(len(g.Partitions))))
		}
		seen := map[uint32]bool{}
		for _, p := range parts {
			if seen[p] || rng.IntN(3) == 0 {
				continue
			}
			seen[p] = true
			off := g.Partitions[p].Offset + uint64(rng.IntN(4))
			if rng.IntN(8) == 0 && off > 0 {
				off -= 1 + uint64(rng.IntN(int(min(off, 3))))
			}
			c.Offsets = append(c.Offsets, metadata.GroupOffset{Partition: p, Offset: off})
		}
		return desc(fmt.Sprintf("commit m%d gen %d %v", member, gen, c.Offsets)), c
	}
}

// groupCheck holds what invariant 6 has seen of every group incarnation:
// the assignment of each generation (which must read the same on every
// node and after every restart: one holder per partition per generation)
// and, per node incarnation, the highest committed offset of each
// partition incarnation (which must never go back). Offsets are compared
// within one node incarnation, not across: nodes apply the metadata log
// at their own pace (a lagging node shows an older, equally committed
// state), and a restarted one replays it; that every node holds the same
// state after each index is invariant 3's metadata fingerprint.
//
// A node's store is read again only when its revision moved: every
// command that changes a group, a partition or a topic commits a new
// revision, so a store at the revision it was last read at holds what was
// checked then (the checker runs after every scheduler action, and
// copying a thousand members' group at each was most of a join storm's
// CPU). A reopened node has a new store and is read in full.
type groupCheck struct {
	gens map[genKey][]uint64
	offs map[offKey]uint64
	seen map[string]seenStore
}

// seenStore is the store a node was last read from, at what revision.
type seenStore struct {
	meta *metadata.Store
	rev  uint64
}

type groupKey struct {
	stream, topic uint32
	topicRev      uint64
	name          string
	created       uint64
}

type genKey struct {
	groupKey
	gen uint64
}

type offKey struct {
	groupKey
	node    string
	part    uint32
	partRev uint64
}

func newGroupCheck() *groupCheck {
	return &groupCheck{gens: map[genKey][]uint64{}, offs: map[offKey]uint64{}, seen: map[string]seenStore{}}
}

// observe checks one node's committed group state; it returns the first
// violation found.
func (gc *groupCheck) observe(node string, meta *metadata.Store) error {
	rev := meta.Revision()
	if s, ok := gc.seen[node]; ok && s.meta == meta && s.rev == rev {
		return nil // nothing committed since it was checked
	}
	gc.seen[node] = seenStore{meta, rev}
	for _, st := range meta.Streams() {
		for _, t := range meta.Topics(st.ID) {
			for _, g := range meta.Groups(st.ID, t.ID) {
				if err := gc.group(node, meta, t, g); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (gc *groupCheck) group(node string, meta *metadata.Store, t metadata.TopicInfo, g metadata.GroupInfo) error {
	key := groupKey{stream: t.Stream, topic: t.ID, topicRev: t.CreatedRevision, name: g.Name, created: g.CreatedRevision}
	holders := make([]uint64, len(g.Partitions))
	for i, p := range g.Partitions {
		holders[i] = p.Holder
		if _, ok := g.Member(p.Holder); p.Holder != 0 && !ok {
			return fmt.Errorf("%s: group %s of %d/%d: partition %d held by %d, not a member", node, g.Name, t.Stream, t.ID, i, p.Holder)
		}
		if len(g.Members) > 0 && p.Holder == 0 {
			return fmt.Errorf("%s: group %s of %d/%d: partition %d unheld with %d members", node, g.Name, t.Stream, t.ID, i, len(g.Members))
		}
		if _, ok := g.Member(p.Next); p.Next != 0 && (!ok || p.Next == p.Holder || p.NextSince > g.Generation) {
			return fmt.Errorf("%s: group %s of %d/%d: partition %d held by %d moves to %d since generation %d (group at %d, not to another member)",
				node, g.Name, t.Stream, t.ID, i, p.Holder, p.Next, p.NextSince, g.Generation)
		}
	}
	gk := genKey{key, g.Generation}
	if prev, ok := gc.gens[gk]; !ok {
		gc.gens[gk] = holders
	} else if !slices.Equal(prev, holders) {
		return fmt.Errorf("%s: group %s of %d/%d generation %d assigns %v, seen before as %v (two holders of a partition in one generation)",
			node, g.Name, t.Stream, t.ID, g.Generation, holders, prev)
	}
	for i, p := range g.Partitions {
		if !p.Committed {
			continue
		}
		ns, err := metadata.NewNamespace(t.Stream, t.ID, uint32(i))
		if err != nil {
			return err
		}
		pi, ok := meta.Partition(ns)
		if !ok {
			continue
		}
		ok2 := offKey{key, node, uint32(i), pi.CreatedRevision}
		if prev, seen := gc.offs[ok2]; seen && p.Offset < prev {
			return fmt.Errorf("%s: group %s of %d/%d partition %d: committed offset went back %d → %d",
				node, g.Name, t.Stream, t.ID, i, prev, p.Offset)
		} else if !seen || p.Offset > prev {
			gc.offs[ok2] = p.Offset
		}
	}
	return nil
}
