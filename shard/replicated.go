package shard

import (
	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
)

// replicated is the replicated half of an owned partition: its raft group
// and this node's bookkeeping of it (proposals, leader reads, elections,
// quiescence, moves), and the partition state the group replicates
// (cursor, dedupe, start, consumer offsets, catch-up). It is the zero
// value on a single node (nil grp).
type replicated struct {
	// reads are the group's leader reads, waiting for raft to confirm
	// leadership or for their index to be applied.
	reads groups.Reads[Frame]

	// Replication (nil grp on a single node): the partition's raft group,
	// the produces this node proposed by proposal id, and whether the
	// group is queued for processReady.
	grp *replica.Group
	// id is this replica's raft id in grp (replicaID): the node id, or
	// a later generation of the node's replica once one was re-seeded.
	id      uint64
	handler groups.Member      // the group's Handler, boxed once (handlerOf)
	peers   []uint64           // the group's members (see peersOf)
	placed  bool               // peers come from the metadata's placement
	pending map[uint64][]Frame // proposal id → the produces it carries; nil until the first, and again once quiesced
	// led: this node leads grp, counted in the partitions-led gauge
	// (setLeader).
	led bool
	// balancing: queued, or under way, for a leadership transfer back
	// to the preferred leader (balance.go); the group keeps ticking.
	balancing bool
	// moving: queued for the move driver (move.go), which steps it at
	// movePace (a step proposed is given groups.ChangeRetryTicks to
	// show); moveIdle counts the ticks in the driver's
	// window since moveMark last changed or a configuration change
	// applied.
	moving bool
	// whole are the joined replicas that reported their partition log
	// whole and synced (catchUpWhole), as this node, leading, heard it.
	whole    map[uint64]bool
	movePace groups.ChangePace
	moveIdle int
	moveMark moveMark
	// proposeBuf holds produces waiting to be proposed together as one
	// raft entry when the pump runs out of queued frames, or, while an
	// entry this node proposed is in flight, until it is applied
	// (groupcommit.go).
	proposeBuf []Frame
	ready      bool
	// elect is the group's place in the shard's elections (converge.go):
	// held, unticked, for an election or a leader.
	elect  groups.Candidacy
	dedupe dedupeTable
	// cursor is the replicated log's next offset: where the next applied
	// produce lands in every replica's partition log. The local log can
	// be ahead of it (re-applying after a restart) or, while catchup is
	// set, behind it.
	cursor uint64
	// start is the replicated start offset (raised by replicated
	// truncations and purges) and consumers the replicated consumer
	// offsets: with cursor and dedupe, the state a snapshot carries.
	start     uint64
	consumers map[string]uint64
	// compact is the compaction trigger: bytes applied since the last
	// snapshot, and a compaction a joining member forces.
	compact groups.Compaction
	catchup *catchUp

	// proposeQueued: o is on the shard's proposing list (groupcommit.go).
	proposeQueued bool
}
