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
	id uint64
	// handler is the group's Handler (handlerOf), kept here so that
	// handing it to the group as a groups.Member boxes a pointer into the
	// owned, not a copy: a heap object fewer per replica for every
	// collection to mark (issue 33).
	handler groupHandler
	peers   []uint64           // the group's members (see peersOf)
	pending map[uint64][]Frame // proposal id → the produces it carries; nil until the first, and again once quiesced

	// The flags side by side, so they share one word (issue 33: an
	// idle replica's memory).
	placed bool // peers come from the metadata's placement
	// led: this node leads grp, counted in the partitions-led gauge
	// (setLeader).
	led bool
	// balancing: queued, or under way, for a leadership transfer back
	// to the preferred leader (balance.go); the group keeps ticking.
	balancing bool
	// moving: queued for the move driver (move.go), which steps it with
	// the state in mv.
	moving bool
	ready  bool
	// proposeQueued: o is on the shard's proposing list (groupcommit.go).
	proposeQueued bool

	// mv is the move driver's state (moveState), made the first time a
	// move needs it: most groups never move.
	mv *moveState
	// proposeBuf holds produces waiting to be proposed together as one
	// raft entry when the pump runs out of queued frames, or, while an
	// entry this node proposed is in flight, until it is applied
	// (groupcommit.go).
	proposeBuf []Frame
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
}

// moveState is a group's state in the move driver (move.go).
type moveState struct {
	// whole are the joined replicas that reported their partition log
	// whole and synced (catchUpWhole), as this node, leading, heard it.
	whole map[uint64]bool
	// pace spaces the steps: a step proposed is given
	// groups.ChangeRetryTicks to show. idle counts the ticks in the
	// driver's window since mark last changed or a configuration change
	// applied.
	pace groups.ChangePace
	idle int
	mark moveMark
}

// move returns r's move state, making it the first time.
func (r *replicated) move() *moveState {
	if r.mv == nil {
		r.mv = &moveState{}
	}
	return r.mv
}

// isWhole reports whether replica n reported its partition log whole
// and synced to this node (catchUpWhole).
func (r *replicated) isWhole(n uint64) bool { return r.mv != nil && r.mv.whole[n] }
