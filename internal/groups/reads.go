package groups

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/parkway-io/parkway/internal/replica"
)

// Reads is a group's leader reads (raft's ReadIndex): each read first
// waits for this member to confirm, with a heartbeat round, that it
// still leads (asked), then for its confirmed index to be applied here
// (waiting), and is served after that. T is what the owner answers a
// read with (a client frame, a reply channel). The zero value is ready
// to use.
//
// Each read is named by an id unique among the group's reads (Ask hands
// them out); the id is the ReadIndex request's context, so a confirmation
// finds its read and one for a read already gone is ignored.
type Reads[T any] struct {
	seq     uint64 // the last id handed out
	asked   map[uint64]T
	waiting []waitingRead[T]
	// reask: the group's voters changed since the reads in asked were
	// asked (VotersChanged).
	reask bool
}

// waitingRead is a read whose leadership was confirmed at index.
type waitingRead[T any] struct {
	index uint64
	item  T
}

// Ask asks g for the leadership confirmation of a new read and keeps
// item until it comes. On an error the read stays asked: the owner fails
// the group, which drops it.
func (r *Reads[T]) Ask(g *replica.Group, item T) error {
	if r.asked == nil {
		r.asked = make(map[uint64]T)
	}
	r.seq++
	r.asked[r.seq] = item
	return g.ReadIndex(binary.LittleEndian.AppendUint64(nil, r.seq))
}

// VotersChanged records that the group's voters changed: Reask is then
// due once the change is handled.
func (r *Reads[T]) VotersChanged() { r.reask = true }

// ReaskDue reports whether the voters changed since the last Reask.
func (r *Reads[T]) ReaskDue() bool { return r.reask }

// Reask asks again, in id order, for the confirmation of every read
// still waiting for one, and reports whether it asked any (the owner
// then handles the group's Ready). raft counts a read's confirmation from
// the heartbeat answers of the voters as they were when it was asked: a
// read asked of a group of two whose other voter is then removed waits
// for an answer that never comes, so after a configuration change every
// such read is asked of the new voters (a lone voter confirms at once).
// An old confirmation arriving after all finds its read gone. A member
// that no longer leads asks nothing: its reads were dropped with the
// leadership.
func (r *Reads[T]) Reask(g *replica.Group) (bool, error) {
	r.reask = false
	if len(r.asked) == 0 || !g.IsLeader() {
		return false, nil
	}
	for _, id := range slices.Sorted(maps.Keys(r.asked)) {
		if err := g.ReadIndex(binary.LittleEndian.AppendUint64(nil, id)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// Confirm moves the reads g confirmed since the last call from asked to
// waiting for their index to be applied.
func (r *Reads[T]) Confirm(g *replica.Group) {
	for _, rs := range g.TakeReadStates() {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		id := binary.LittleEndian.Uint64(rs.RequestCtx)
		if item, ok := r.asked[id]; ok {
			delete(r.asked, id)
			r.waiting = append(r.waiting, waitingRead[T]{index: rs.Index, item: item})
		}
	}
}

// Serve hands serve, in confirmation order, every confirmed read whose
// index applied has reached, and forgets them.
func (r *Reads[T]) Serve(applied uint64, serve func(T)) {
	kept := r.waiting[:0]
	for _, w := range r.waiting {
		if w.index > applied {
			kept = append(kept, w)
			continue
		}
		serve(w.item)
	}
	clear(r.waiting[len(kept):])
	r.waiting = kept
}

// Asked is how many reads wait for a leadership confirmation.
func (r *Reads[T]) Asked() int { return len(r.asked) }

// Waiting is how many confirmed reads wait for their index to be applied.
func (r *Reads[T]) Waiting() int { return len(r.waiting) }

// DropAsked hands drop every read still waiting for a leadership
// confirmation, and forgets them: raft drops their requests with the
// leadership. Confirmed reads stay valid.
func (r *Reads[T]) DropAsked(drop func(T)) {
	for id, item := range r.asked {
		drop(item)
		delete(r.asked, id)
	}
}

// Drop hands drop every read, asked or confirmed, and forgets them: the
// group is gone, or this member no longer serves its reads.
func (r *Reads[T]) Drop(drop func(T)) {
	r.DropAsked(drop)
	for _, w := range r.waiting {
		drop(w.item)
	}
	clear(r.waiting)
	r.waiting = r.waiting[:0]
}
