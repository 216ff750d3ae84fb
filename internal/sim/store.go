package sim

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// incKey names one incarnation of a partition.
type incKey struct {
	ns    metadata.Namespace
	epoch uint64
}

func (k incKey) String() string { return fmt.Sprintf("%v@%d", k.ns, k.epoch) }

func (k incKey) compare(o incKey) int {
	if c := cmp.Compare(k.ns, o.ns); c != 0 {
		return c
	}
	return cmp.Compare(k.epoch, o.epoch)
}

// incLog is the oracle's copy of one incarnation's log, as the storage tap
// saw it appended: the message id at each offset, and whether a client was
// told it is acknowledged. In a cluster it is the log as the replicas
// applied it: the first replica to reach an offset defines what the
// offset holds, and every other replica must append the same message
// there.
type incLog struct {
	ids   []uint64
	acked []bool
	// ats are the append times reads returned; raw the append times the
	// shard (in a cluster, the first replica to apply each offset) was
	// handed (BreakAppendTimeOrder).
	ats appendTimes
	raw []int64
	// Cluster mode: lens maps each node holding a copy to its length;
	// ackedEnd is one past the highest acknowledged offset.
	lens     map[uint64]uint64
	ackedEnd uint64
	// reported are the messages past the end of a reopen fenced for
	// journal damage (reported lost, not reused): a later reopen that
	// finds the damage gone (a later lie cut it off) replays them from
	// the journal, and they are checked again in place.
	reported      []uint64
	reportedAcked []bool
}

// appendTimes are the append times reads returned for one log's offsets
// (0: none read yet). An offset reads with the same append time wherever
// and whenever it is read (on every replica), and append times never
// decrease along the log (invariant 3), whatever the clocks of the nodes
// that stamped them did: a leader stamps them before proposing, from its
// own clock, and the partition keeps them non-decreasing.
type appendTimes []int64

// check records that offset off read with append time at, and reports
// what is wrong with it ("" if nothing).
func (a *appendTimes) check(off uint64, at int64) string {
	for uint64(len(*a)) <= off {
		*a = append(*a, 0)
	}
	ats := *a
	if have := ats[off]; have != 0 {
		if have != at {
			return fmt.Sprintf("offset %d read with append time %d, and with %d before", off, at, have)
		}
		return ""
	}
	for p := int(off) - 1; p >= 0; p-- {
		if ats[p] != 0 {
			if ats[p] > at {
				return fmt.Sprintf("append time %d at offset %d is before %d at offset %d: append times went backwards", at, off, ats[p], p)
			}
			break
		}
	}
	for q := int(off) + 1; q < len(ats); q++ {
		if ats[q] != 0 {
			if ats[q] < at {
				return fmt.Sprintf("append time %d at offset %d is after %d at offset %d: append times went backwards", at, off, ats[q], q)
			}
			break
		}
	}
	ats[off] = at
	return ""
}

// truncate forgets the append times of the offsets from next on (lost
// messages, whose offsets new ones take).
func (a *appendTimes) truncate(next uint64) {
	if uint64(len(*a)) > next {
		*a = (*a)[:next]
	}
}

// rawAppendTimes is BreakAppendTimeOrder: msgs, as read, with the append
// times the shard stamped in place of those the partition kept.
func rawAppendTimes(msgs []partition.Message, raw []int64) []partition.Message {
	out := slices.Clone(msgs)
	for i := range out {
		if off := out[i].Offset; off < uint64(len(raw)) && raw[off] != 0 {
			out[i].AppendTime = raw[off]
		}
	}
	return out
}

// msgInfo is what the simulator knows about one produced message.
type msgInfo struct {
	a        *attempt
	appended bool
	key      incKey // where it was appended
	off      uint64
}

// Payloads carry the message id and a filler derived from it, so a read
// can tell which message it got and whether its bytes are intact.
func (b *sim) payload(id uint64) []byte {
	n := b.rng.IntN(41)
	p := make([]byte, 8+n)
	binary.LittleEndian.PutUint64(p, id)
	for j := range n {
		p[8+j] = byte(id*31 + uint64(j))
	}
	return p
}

func decodePayload(b []byte) (uint64, bool) {
	if len(b) < 8 {
		return 0, false
	}
	id := binary.LittleEndian.Uint64(b)
	for j, c := range b[8:] {
		if c != byte(id*31+uint64(j)) {
			return id, false
		}
	}
	return id, true
}

// verifyReopen checks a partition reopened at an incarnation the oracle
// knows (after a crash): every acknowledged message is there, the log is
// a prefix of what was appended, and the oracle drops the rest (lost
// unacknowledged appends, whose offsets will be reused).
func (s *sim) verifyReopen(n *node, key incKey, log *incLog, p partition.Partition) {
	next := p.NextOffset()
	if more := next - min(next, uint64(len(log.ids))); more > 0 && len(log.reported) > 0 {
		k := min(more, uint64(len(log.reported)))
		log.ids = append(log.ids, log.reported[:k]...)
		log.acked = append(log.acked, log.reportedAcked[:k]...)
		log.reported, log.reportedAcked = log.reported[k:], log.reportedAcked[k:]
		s.event("%v reopened with %d messages: %d reported lost with a damaged journal are back", key, next, k)
	}
	if next > uint64(len(log.ids)) {
		s.fail(3, "%v reopened with %d messages, only %d were ever appended", key, next, len(log.ids))
		return
	}
	for off := next; off < uint64(len(log.ids)); off++ {
		if !log.acked[off] {
			continue
		}
		if s.lies.all && fencedByJournal(p) {
			// Reported: the journal that held them is damaged, and the
			// partition refuses appends past its end for good.
			s.event("%v reopened with %d messages, fenced for journal damage: acknowledged message %d at offset %d reported lost", key, next, log.ids[off], off)
			s.faults.Detected++
			log.reported = append(slices.Clone(log.ids[next:]), log.reported...)
			log.reportedAcked = append(slices.Clone(log.acked[next:]), log.reportedAcked...)
			break
		}
		s.failKnown(s.lossKnown(key), 3, "%v reopened with %d messages: acknowledged message %d at offset %d lost", key, next, log.ids[off], off)
		return
	}
	if s.lies.damageOK(key) {
		s.verifyDamaged(n, key, log, p)
		return
	}
	msgs, err := s.readAll(n, p)
	if err != nil {
		s.fail(3, "%v reopened but unreadable: %v", key, err)
		return
	}
	for i, m := range msgs {
		id, ok := decodePayload(m.Payload)
		if m.Offset != uint64(i) || !ok || id != log.ids[i] {
			s.fail(3, "%v reopened: offset %d holds message %d (intact %v) at position %d, want message %d",
				key, m.Offset, id, ok, i, log.ids[i])
			return
		}
	}
	if uint64(len(msgs)) != next {
		s.fail(3, "%v reopened: read %d messages, next offset %d", key, len(msgs), next)
		return
	}
	if lost := uint64(len(log.ids)) - next; lost > 0 {
		s.event("reopen %v: %d unacknowledged messages lost", key, lost)
	}
	log.ids, log.acked = log.ids[:next], log.acked[:next]
	log.ats.truncate(next)
	log.raw = log.raw[:min(uint64(len(log.raw)), next)]
}

// onAppend checks an append (invariants 2, 3 and 5) and records it.
func (s *sim) onAppend(key incKey, first uint64, msgs []partition.Message) {
	log := s.oracle[key]
	if log == nil {
		s.fail(0, "append to %v, which the simulator never saw built", key)
		return
	}
	if first != uint64(len(log.ids)) {
		s.fail(3, "append to %v at offset %d, but %d messages precede it: offsets not dense", key, first, len(log.ids))
		return
	}
	var aid uint64
	for i, m := range msgs {
		id, ok := decodePayload(m.Payload)
		info := s.msgs[id]
		if !ok || info == nil {
			s.fail(3, "append to %v: message %d of the batch is not one the clients sent intact", key, i)
			return
		}
		a := info.a
		aid = a.id
		if !s.tapAppend(info, id, key, first+uint64(i)) {
			return
		}
		log.ids = append(log.ids, id)
		log.acked = append(log.acked, false)
		log.raw = append(log.raw, m.AppendTime)
	}
	s.event("append %v first=%d n=%d a=%d", key, first, len(msgs), aid)
}

// onRead checks that a read returns, at each offset, the message appended
// to this incarnation there (invariants 2 and 3).
func (s *sim) onRead(key incKey, from uint64, msgs []partition.Message) {
	log := s.oracle[key]
	if log == nil {
		s.fail(0, "read of %v, which the simulator never saw built", key)
		return
	}
	if len(msgs) == 0 && from < uint64(len(log.ids)) {
		// A partition's read below its end returns a message or an
		// error: nothing at all is a silent loss (as in a cluster,
		// onReplicaRead).
		s.fail(3, "read of %v from %d returned nothing without an error, below the %d messages it holds", key, from, len(log.ids))
		return
	}
	for i, m := range msgs {
		want := from + uint64(i)
		if m.Offset != want {
			s.fail(3, "read of %v from %d returned offset %d at position %d: offsets not dense", key, from, m.Offset, i)
			return
		}
		id, ok := decodePayload(m.Payload)
		if !ok {
			s.fail(3, "read of %v returned a corrupt message at offset %d", key, m.Offset)
			return
		}
		if m.Offset >= uint64(len(log.ids)) || log.ids[m.Offset] != id {
			where := "never appended"
			if info := s.msgs[id]; info != nil && info.appended {
				where = fmt.Sprintf("appended to %v at %d", info.key, info.off)
			}
			s.fail(2, "read of %v returned message %d at offset %d, which is not what was appended there (it was %s)",
				key, id, m.Offset, where)
			return
		}
		if bad := log.ats.check(m.Offset, m.AppendTime); bad != "" {
			s.fail(3, "read of %v: %s", key, bad)
			return
		}
	}
}
