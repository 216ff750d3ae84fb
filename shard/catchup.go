package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/parkway-io/parkway/partition"
)

// A replica whose raft log falls behind its leader's compacted log is sent
// a snapshot. A partition snapshot carries only the replicated state —
// the log's next offset and the deduplication table — never the messages:
// shipping a whole partition log inside one raft message would not scale.
// Instead the replica installs the snapshot and fetches the messages its
// partition log lacks from a peer's log, in chunks, over the same
// transport (OpCatchUp frames). Committed entries that arrive meanwhile
// wait, in order, and are applied once the log is whole.
//
// Any replica can serve a fetch from its partition log: everything in it
// was committed. The leader is asked first; an unanswered or empty fetch
// moves on to the next peer after catchUpRetryTicks.

// catchUp is a replica's fetch in progress.
type catchUp struct {
	target   uint64 // the partition log must reach this offset
	peer     int    // index into Peers of the replica last asked
	idle     int    // raft ticks since the last progress
	deferred []deferredEntry
}

// deferredEntry is a committed entry waiting for the catch-up.
type deferredEntry struct {
	index, id uint64
	payload   []byte
}

// Catch-up wire format.
const (
	catchUpFetch byte = 1 // requester u64, from u64, to u64
	catchUpData  byte = 2 // from u64, start u64, encoded batch
	// catchUpChunk bounds the messages of one data reply.
	catchUpChunk = 1024
	// catchUpRetryTicks is how long a fetch may go unanswered before it
	// is sent again, to the next peer.
	catchUpRetryTicks = 5
)

// errReplicaGap fences a replica whose peers no longer hold the messages
// it lacks (retention removed them everywhere before it caught up).
var errReplicaGap = errors.New("parkway: replica fell behind its peers' retention; its log cannot be completed")

// startCatchUp begins (or extends) fetching up to target.
func (s *Shard) startCatchUp(o *owned, target uint64) {
	if o.catchup == nil {
		o.catchup = &catchUp{target: target, peer: -1}
	} else if target > o.catchup.target {
		o.catchup.target = target
	}
	s.sendFetch(o, false)
}

// sendFetch asks a peer for the next chunk. The first fetch of a
// catch-up, and each fetch after progress, goes to the peer that last
// answered or, at first, to the leader when one is known; a fetch sent
// again after a timeout or an empty answer goes to the next peer in turn,
// so one peer that cannot serve never stalls the replica.
func (s *Shard) sendFetch(o *owned, rotate bool) {
	c, r := o.catchup, s.cfg.Replication
	if r.SendCatchUp == nil || len(r.Peers) < 2 {
		return
	}
	c.idle = 0
	var to uint64
	switch lead := o.grp.Leader(); {
	case !rotate && c.peer >= 0:
		to = r.Peers[c.peer]
	case !rotate && lead != 0 && lead != r.Node:
		to = lead
		c.peer = slices.Index(r.Peers, lead)
	default:
		for range r.Peers {
			c.peer = (c.peer + 1) % len(r.Peers)
			if r.Peers[c.peer] != r.Node {
				break
			}
		}
		to = r.Peers[c.peer]
	}
	b := make([]byte, 0, 25)
	b = append(b, catchUpFetch)
	b = binary.LittleEndian.AppendUint64(b, r.Node)
	b = binary.LittleEndian.AppendUint64(b, o.p.NextOffset())
	b = binary.LittleEndian.AppendUint64(b, c.target)
	r.SendCatchUp(to, o.p.Namespace(), o.p.Epoch(), b)
}

// tickCatchUp re-sends a fetch that went unanswered.
func (s *Shard) tickCatchUp(o *owned) {
	if c := o.catchup; c != nil {
		if c.idle++; c.idle >= catchUpRetryTicks {
			s.sendFetch(o, true)
		}
	}
}

// catchUpFrame serves a fetch from this replica's log, or appends the
// data a peer sent.
func (s *Shard) catchUpFrame(o *owned, f Frame) {
	b := f.Req.Payload
	if len(b) < 1 {
		return
	}
	switch b[0] {
	case catchUpFetch:
		if len(b) != 25 || o.failed != nil {
			return
		}
		requester := binary.LittleEndian.Uint64(b[1:])
		from := binary.LittleEndian.Uint64(b[9:])
		to := binary.LittleEndian.Uint64(b[17:])
		s.serveFetch(o, requester, from, to)
	case catchUpData:
		if len(b) < 17 {
			return
		}
		from := binary.LittleEndian.Uint64(b[1:])
		start := binary.LittleEndian.Uint64(b[9:])
		msgs, err := partition.DecodeBatch(b[17:])
		if err != nil {
			s.log.Warn("catch-up data does not decode", "ns", o.p.Namespace(), "error", err)
			return
		}
		s.caughtUp(o, from, start, msgs)
	}
}

// serveFetch replies with the messages [from, to) this replica holds, up
// to a chunk, and its start offset.
func (s *Shard) serveFetch(o *owned, requester, from, to uint64) {
	r := s.cfg.Replication
	if r.SendCatchUp == nil || requester == r.Node {
		return
	}
	var msgs []partition.Message
	start := o.p.StartOffset()
	if from >= start && from < min(to, o.p.NextOffset()) {
		var err error
		if msgs, err = o.p.Read(from, int(min(to-from, catchUpChunk))); err != nil {
			s.log.Warn("serving a catch-up fetch", "ns", o.p.Namespace(), "error", err)
			return
		}
	}
	b := make([]byte, 0, 17+64*len(msgs))
	b = append(b, catchUpData)
	b = binary.LittleEndian.AppendUint64(b, from)
	b = binary.LittleEndian.AppendUint64(b, start)
	b, err := partition.EncodeBatch(b, msgs)
	if err != nil {
		return
	}
	r.SendCatchUp(requester, o.p.Namespace(), o.p.Epoch(), b)
}

// caughtUp appends fetched messages; once the log reaches the target the
// deferred entries are applied.
func (s *Shard) caughtUp(o *owned, from, start uint64, msgs []partition.Message) {
	c := o.catchup
	if c == nil || o.grp == nil || from != o.p.NextOffset() {
		return // a duplicate or a reply to an older fetch
	}
	if start > from {
		// The peer no longer holds what this replica lacks.
		s.fence(o, fmt.Errorf("%w: needs offset %d, peer starts at %d", errReplicaGap, from, start))
		s.log.Error("replica cannot catch up; partition fenced", "ns", o.p.Namespace(), "from", from, "peer_start", start)
		return
	}
	if len(msgs) == 0 {
		return // this peer lacks it too: the retry asks the next one
	}
	if n := c.target - from; uint64(len(msgs)) > n {
		msgs = msgs[:n]
	}
	if _, err := o.p.Append(msgs); err != nil {
		s.fence(o, err)
		s.log.Error("appending catch-up data failed; partition fenced", "ns", o.p.Namespace(), "error", err)
		return
	}
	s.m.CaughtUp.Add(float64(len(msgs)))
	if o.p.NextOffset() < c.target {
		s.sendFetch(o, false)
		return
	}
	o.catchup = nil
	h := groupHandler{s: s, o: o}
	for _, e := range c.deferred {
		if err := h.apply(e.index, e.id, e.payload); err != nil {
			s.fence(o, err)
			s.log.Error("applying entries after a catch-up failed; partition fenced", "ns", o.p.Namespace(), "error", err)
			return
		}
	}
}

// replicatedState is a partition group's state machine beyond the
// messages themselves: what a raft snapshot carries.
type replicatedState struct {
	next   uint64
	dedupe []dedupeEntry
}

type dedupeEntry struct {
	key   produceKey
	first uint64
}

const stateVersion = 1

// encodeState is o's replicated state: version, next offset, then the
// deduplication table oldest first (so a restore keeps its eviction
// order).
func (o *owned) encodeState() []byte {
	d := &o.dedupe
	b := make([]byte, 0, 13+24*len(d.order))
	b = append(b, stateVersion)
	b = binary.LittleEndian.AppendUint64(b, o.cursor)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(d.order)))
	for i := range d.order {
		k := d.order[(d.next+i)%len(d.order)]
		b = binary.LittleEndian.AppendUint64(b, k.producer)
		b = binary.LittleEndian.AppendUint64(b, k.seq)
		b = binary.LittleEndian.AppendUint64(b, d.seen[k])
	}
	return b
}

// decodeState decodes a snapshot's state; empty data is the initial state.
func decodeState(b []byte) (replicatedState, error) {
	var st replicatedState
	if len(b) == 0 {
		return st, nil
	}
	if len(b) < 13 || b[0] != stateVersion {
		return st, errors.New("partition snapshot header malformed")
	}
	st.next = binary.LittleEndian.Uint64(b[1:])
	n := binary.LittleEndian.Uint32(b[9:])
	b = b[13:]
	if uint64(len(b)) != 24*uint64(n) {
		return st, errors.New("partition snapshot dedupe table truncated")
	}
	st.dedupe = make([]dedupeEntry, n)
	for i := range st.dedupe {
		st.dedupe[i] = dedupeEntry{
			key:   produceKey{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])},
			first: binary.LittleEndian.Uint64(b[16:]),
		}
		b = b[24:]
	}
	return st, nil
}

// restore makes st o's replicated state.
func (o *owned) restore(st replicatedState) {
	o.cursor = st.next
	o.dedupe = dedupeTable{}
	for _, e := range st.dedupe {
		o.dedupe.put(e.key, e.first)
	}
}
