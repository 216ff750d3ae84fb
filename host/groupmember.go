package host

import (
	"time"

	"github.com/parkway-io/parkway/metadata"
)

// A consumer group member's cycle — join, heartbeat, poll through the
// fence, commit after delivery — is decided from the member's own state
// (its generation, the start of its lease) and its node's committed
// metadata, with no clock and no goroutine: GroupMember holds that
// state and makes those decisions, each told the time. The root
// package's Member carries them out blocking (its node's apply, lease
// renewal and poll); the simulator's group members step the same
// decisions over its faulty bus, so the fence, the heartbeat's choice
// and the commit it simulates are the code that ships.

// GroupMember is one member of a consumer group of a topic incarnation,
// as its own node sees it. Its zero ID is a member not joined yet. It is
// not safe for concurrent use.
type GroupMember struct {
	Stream, Topic uint32
	TopicRevision uint64
	Group         string
	ID            uint64
	Session       time.Duration // the session timeout, resolved
	// Gen is the generation the member acts in; Confirmed the Now of its
	// last join, heartbeat, commit or kept renewal that was applied: the
	// start of its lease (metadata.LeaseEnd).
	Gen       uint64
	Confirmed int64
}

// Lease is the member's lease, as its node renews it.
func (g *GroupMember) Lease() MemberLease {
	return MemberLease{Stream: g.Stream, Topic: g.Topic, TopicRevision: g.TopicRevision, Group: g.Group, Member: g.ID, Session: g.Session}
}

// Renewed starts the member's lease anew at now, the Now of a join,
// heartbeat or commit of the member that was applied (or a renewal
// confirmed).
func (g *GroupMember) Renewed(now int64) { g.Confirmed = max(g.Confirmed, now) }

// Adopt makes the generation of v, the member's part of the group read
// from its node's committed metadata after its join, heartbeat or
// commit, the member's, unless it is older; it reports whether it did.
func (g *GroupMember) Adopt(v metadata.MemberView) bool {
	if v.Generation < g.Gen {
		return false
	}
	g.Gen = v.Generation
	return true
}

// Heartbeat decides a heartbeat at now acknowledging generation gen,
// from what meta (the member's node's committed metadata) says of the
// member: a heartbeat that releases nothing changes nothing the group
// has committed, so it is a lease renewal at the metadata leader (renew
// set: Engine.RenewLease of Lease, no log entry); one that releases
// partitions moving away from the member is a commit of nothing
// acknowledging gen (cmd), logged like any commit. A move the member has
// seen (at or before gen) is in meta if it is anywhere.
func (g *GroupMember) Heartbeat(meta *metadata.Store, gen uint64, now int64) (renew bool, cmd metadata.CommitGroupOffsets) {
	if v, err := meta.MemberOf(g.Stream, g.Topic, g.Group, g.ID, gen); err == nil && !v.Releases {
		return true, metadata.CommitGroupOffsets{}
	}
	return false, g.Commit(gen, nil, now)
}

// Commit is the command committing offsets (each the next offset to
// read of its partition, in partition order) in generation gen at now;
// with none it is a heartbeat acknowledging gen.
func (g *GroupMember) Commit(gen uint64, offsets []metadata.GroupOffset, now int64) metadata.CommitGroupOffsets {
	return metadata.CommitGroupOffsets{Stream: g.Stream, Topic: g.Topic, Revision: g.TopicRevision,
		Group: g.Group, Member: g.ID, Generation: gen, Offsets: offsets, Now: now}
}

// Fence is the check of a poll when it is made and of its answer before
// any of it is handed out (behaviours 23 and 33), at now: the member's
// lease holds (metadata.LeaseEnd: no renewal confirmed for most of its
// session, and it may have been expired and its partitions committed
// past by others, though its node has not heard), and it holds part in
// its generation without part moving away (meta, its node's committed
// metadata: metadata.Store.CheckDelivery). A local read, no round trip.
func (g *GroupMember) Fence(meta *metadata.Store, part uint32, now int64) error {
	return meta.CheckDelivery(g.Stream, g.Topic, g.Group, g.ID, g.Gen, part, g.Confirmed, g.Session, now)
}

// PollFrom is where a poll of part starts by the group's committed
// offset as meta has it (ok false: none committed, the reset policy
// decides).
func (g *GroupMember) PollFrom(meta *metadata.Store, part uint32) (offset uint64, ok bool) {
	p, found := meta.GroupPartitionState(g.Stream, g.Topic, g.Group, part)
	if !found {
		return 0, false
	}
	return p.Offset, p.Committed
}
