package sim

import (
	"errors"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// verifyReplicaReopen checks a copy rebuilt on a node that held it before
// (a partition evicted after a failed fsync): what it holds is a prefix
// of the log, at most what the replica had appended.
func (c *sim) verifyReplicaReopen(n *node, key incKey, rl *incLog, have uint64, p partition.Partition) {
	next := p.NextOffset()
	// A file the liar's disk rolled back to an earlier copy may hold
	// more than the replica had appended since (a tail recovery cut off,
	// which the copy still had): harmless if every message is the log's
	// at its offset, which the reads below check.
	if next > have && (!c.liedTo(n, key) || next > uint64(len(rl.ids))) {
		c.fail(3, "%v reopened on n%d with %d messages, the replica had appended %d", key, n.id, next, have)
		return
	}
	n.inj.quiet++
	defer func() { n.inj.quiet-- }()
	for from := p.StartOffset(); from < next; {
		msgs, err := p.Read(from, 1024)
		if err != nil && isDamageError(err) && c.liedTo(n, key) {
			// The liar's copy reports the damage a lie did: the offset
			// is skipped, what follows must still be the log's.
			c.faults.Detected++
			c.event("n%d reopen %v: damage reported at offset %d: %v", n.id, key, from, err)
			from++
			continue
		}
		if err != nil {
			c.fail(3, "%v reopened on n%d but unreadable: %v", key, n.id, err)
			return
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			id, ok := decodePayload(m.Payload)
			if !ok || m.Offset >= uint64(len(rl.ids)) || rl.ids[m.Offset] != id {
				c.fail(3, "%v reopened on n%d: offset %d holds message %d (intact %v), not the log's", key, n.id, m.Offset, id, ok)
				return
			}
		}
		from = msgs[len(msgs)-1].Offset + 1
	}
	if next < have {
		c.event("n%d reopen %v: %d appended messages not durable", n.id, key, have-next)
	}
}

// storeKey is one consumer offset write to one incarnation.
type storeKey struct {
	key      incKey
	consumer string
	offset   uint64
}

// Outcomes of applying a consumer offset write, as a bit set over every
// replica and every application.
const (
	storedOK         = 1
	storedOutOfRange = 2
	storedFailed     = 4
)

func storeOutcome(err error) uint8 {
	switch {
	case err == nil:
		return storedOK
	case errors.Is(err, partition.ErrOffsetOutOfRange):
		return storedOutOfRange
	}
	return storedFailed
}

// storeRecord is a consumer offset a node stored in a partition.
type storeRecord struct {
	ns       metadata.Namespace
	consumer string
	offset   uint64
	epoch    uint64
	err      error
}

// onReplicaAppend checks one replica's append against the log (invariants
// 2, 3 and 5): dense on the replica, the same message at each offset on
// every replica, each message in the log once, and into the incarnation
// its frame was stamped with.
func (c *sim) onReplicaAppend(n *node, key incKey, first uint64, msgs []partition.Message) {
	rl := c.oracle[key]
	if rl == nil {
		c.fail(0, "append to %v on n%d, which the simulator never saw built", key, n.id)
		return
	}
	if have := rl.lens[n.id]; first != have {
		c.fail(3, "n%d appended to %v at offset %d, but its copy holds %d messages: offsets not dense", n.id, key, first, have)
		return
	}
	var aid uint64
	for i, m := range msgs {
		off := first + uint64(i)
		id, ok := decodePayload(m.Payload)
		info := c.msgs[id]
		if !ok || info == nil {
			c.fail(3, "n%d appended to %v a message that is not one the clients sent intact (offset %d)", n.id, key, off)
			return
		}
		a := info.a
		aid = a.id
		if off < uint64(len(rl.ids)) {
			if rl.ids[off] != id {
				// A lie that cut the liar's raft log below its mark, and
				// another that rolled the mark back to a copy that does
				// not reach the cut before any build refused the log on
				// disk, let the liar lead, or vote, without entries it
				// acknowledged: a leader may then write an offset anew
				// that an honest replica holds (knownRaftLogMarkRollback).
				known := ""
				if c.lies != nil && c.lies.raftHidden[key] {
					known = knownRaftLogMarkRollback
				}
				c.failKnown(known, 3, "replicas disagree on %v at offset %d: n%d appended message %d, another replica holds %d",
					key, off, n.id, id, rl.ids[off])
				return
			}
			continue
		}
		if !c.tapAppend(info, id, key, off) {
			return
		}
		rl.ids = append(rl.ids, id)
		rl.acked = append(rl.acked, false)
		rl.raw = append(rl.raw, m.AppendTime)
	}
	rl.lens[n.id] = first + uint64(len(msgs))
	c.event("n%d append %v first=%d n=%d a=%d", n.id, key, first, len(msgs), aid)
}

// onReplicaRead checks that a replica's read returns what its copy holds
// at each offset (invariants 2 and 3) and counts reads that miss an
// acknowledged message (a follower's stale copy).
func (c *sim) onReplicaRead(n *node, key incKey, from uint64, msgs []partition.Message, client bool) {
	rl := c.oracle[key]
	if rl == nil {
		c.fail(0, "read of %v on n%d, which the simulator never saw built", key, n.id)
		return
	}
	have := rl.lens[n.id]
	if len(msgs) == 0 && from < have {
		// A partition's read below its end returns a message or an
		// error: nothing at all is a silent loss.
		c.fail(3, "read of %v on n%d from %d returned nothing without an error, below the %d messages its copy holds", key, n.id, from, have)
		return
	}
	for i, m := range msgs {
		want := from + uint64(i)
		if m.Offset != want {
			c.fail(3, "read of %v on n%d from %d returned offset %d at position %d: offsets not dense", key, n.id, from, m.Offset, i)
			return
		}
		id, ok := decodePayload(m.Payload)
		if !ok {
			c.fail(3, "read of %v on n%d returned a corrupt message at offset %d", key, n.id, m.Offset)
			return
		}
		if m.Offset >= have || rl.ids[m.Offset] != id {
			c.fail(2, "read of %v on n%d returned message %d at offset %d, which is not what its copy holds there", key, n.id, id, m.Offset)
			return
		}
		if bad := rl.ats.check(m.Offset, m.AppendTime); bad != "" {
			c.fail(3, "read of %v on n%d: %s", key, n.id, bad)
			return
		}
	}
	if client && have < rl.ackedEnd && !c.quiescing {
		c.ops.StaleReads++
	}
}
