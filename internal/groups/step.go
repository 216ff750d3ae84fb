package groups

import (
	"errors"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metrics"
)

// Stepping a peer's message into a group and handling what the group
// then has ready, written once for every host of groups (the shards'
// partition groups and host's metadata member each wrote it before).
//
// What a group does with a message is replica.Group's: it refuses one
// no correct member sends before raft sees it (replica.ErrInvalidMessage:
// a malformed message, a snapshot its application would refuse), among
// them one whose term or snapshot index is out of reach of this member's
// (replica.ErrOutOfReach: the bound that keeps one message from spending
// a group's term space), and a Ready is persisted, then sent (a leader
// sends first), then applied, in replica.Group.Handle. What is here is
// the host's side around it, in one order:
//
//   - A quiesce heartbeat that matches the member's state quiesces it
//     when its host has nothing pending on it (Member.AcceptsQuiesce);
//     refused, it is stepped as the ordinary heartbeat it stands for.
//   - Every other message is stepped. A refused one is reported with the
//     reason it is counted under (Member.Refused); one raft itself refuses
//     (stale, or from a member it does not know) is reported with no
//     reason, and counts as nothing. The group has work either way
//     (Member.Stepped): the host wakes it and handles its Ready.
//   - A group that fails (a panic contained in raft) is reported
//     (Member.Failed) and nothing more is done with it.
//   - Process handles the Ready until nothing is left, then asks the
//     waiting leader reads again if the Ready changed the voters, and
//     takes the reads raft confirmed. A group failed by any earlier call
//     (Tick, Propose, Campaign) is reported there too.

// Member is the host's side of one group, as Step and Process drive it:
// the Handler its Ready goes to, and what the host does with a message's
// outcome. The host calls Step and Process on its own goroutine.
type Member interface {
	replica.Handler
	// AcceptsQuiesce reports whether a quiesce heartbeat matching the
	// member's state may stop its ticks: the host has nothing pending on
	// the group that needs them.
	AcceptsQuiesce() bool
	// Quiesced reports that the member took a quiesce heartbeat: the
	// host stops ticking it.
	Quiesced()
	// Refused reports a message the group refused: reason is
	// metrics.ReasonInvalidRaft or metrics.ReasonOutOfReach for one no
	// correct member sends (the host counts it as a drop), "" for one
	// raft refused itself. Stepped follows.
	Refused(reason string, err error)
	// Stepped reports a message stepped (or refused, see Refused): the
	// group may have work, and is awake.
	Stepped()
	// Failed reports the group's failure (an error matching
	// replica.ErrGroupFailed): the host stops driving it.
	Failed(err error)
}

// Step feeds m, a peer's message, to g, the group of member h (see
// above).
func Step(g *replica.Group, m *raftpb.Message, h Member) {
	if StepQuiesce(g, m, h.AcceptsQuiesce()) {
		h.Quiesced()
		return
	}
	switch err := g.Step(m); {
	case err == nil:
	case errors.Is(err, replica.ErrGroupFailed):
		h.Failed(err)
		return
	case errors.Is(err, replica.ErrOutOfReach):
		h.Refused(metrics.ReasonOutOfReach, err)
	case errors.Is(err, replica.ErrInvalidMessage):
		h.Refused(metrics.ReasonInvalidRaft, err)
	default:
		h.Refused("", err)
	}
	h.Stepped()
}

// Process handles everything g has ready through h, in
// replica.Group.Handle's order, then the leader reads: asked again of
// the new voters if the Ready changed them (again: the requests are
// new work, and the host processes g again in its turn), and the reads
// raft confirmed moved to waiting for their index (the host serves
// them once it can, Reads.Serve). An error is the group's failure, in
// this call or an earlier one: the host fails the group.
func Process[T any](g *replica.Group, h replica.Handler, reads *Reads[T]) (again bool, err error) {
	if err := g.Err(); err != nil {
		return false, err
	}
	for g.HasReady() {
		if err := g.Handle(h); err != nil {
			return false, err
		}
	}
	if reads.ReaskDue() {
		if again, err = reads.Reask(g); err != nil {
			return false, err
		}
	}
	reads.Confirm(g)
	return again, nil
}
