package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/metrics"
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
	peer     int    // index into the group's peers of the replica last asked
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
	// A leader moving replicas asks each joined replica whether its
	// partition log is whole (catchUpAsk, requester u64); one that has no
	// catch-up under way syncs its log and says so (catchUpWhole, node
	// u64). See move.go: an old replica is removed only once every new
	// one has said so.
	catchUpAsk   byte = 3
	catchUpWhole byte = 4
	// catchUpChunk bounds the messages of one data reply.
	catchUpChunk = 1024
	// catchUpRetryTicks is how long a fetch may go unanswered before it
	// is sent again, to the next peer.
	catchUpRetryTicks = 5
)

// startCatchUp begins (or extends) fetching up to target.
func (rg *raftGroups) startCatchUp(o *owned, target uint64) {
	if o.rep.catchup == nil {
		o.rep.catchup = &catchUp{target: target, peer: -1}
	} else if target > o.rep.catchup.target {
		o.rep.catchup.target = target
	}
	rg.sendFetch(o, false)
}

// sendFetch asks a peer for the next chunk. The first fetch of a
// catch-up, and each fetch after progress, goes to the peer that last
// answered or, at first, to the leader when one is known; a fetch sent
// again after a timeout or an empty answer goes to the next peer in turn,
// so one peer that cannot serve never stalls the replica.
//
// The peers need not include this replica: a learner's are the group's
// voters once it applied a configuration (refreshPeers), so a replica
// moving a one-replica partition has a single peer, the old replica.
// Counting them as if this replica were among them left it with no one
// to ask: a learner whose catch-up restarted after its snapshot (its
// partition rebuilt after a failed fsync) never fetched again, never
// said it was whole, and the move's leader asked it forever (simulator
// cluster seed 4794). And peers change under a catch-up (a move), so the
// index of the peer last asked may no longer be in range.
func (rg *raftGroups) sendFetch(o *owned, rotate bool) {
	c, r, peers := o.rep.catchup, rg.cfg, o.rep.peers
	if r.SendCatchUp == nil || !hasOtherPeer(o) {
		return
	}
	c.idle = 0
	var to uint64
	switch lead := o.rep.grp.Leader(); {
	case !rotate && c.peer >= 0 && c.peer < len(peers):
		to = peers[c.peer]
	case !rotate && lead != 0 && lead != o.rep.id:
		to = lead
		c.peer = slices.Index(peers, lead)
	default:
		for range peers {
			c.peer = (c.peer + 1) % len(peers)
			if peers[c.peer] != o.rep.id {
				break
			}
		}
		to = peers[c.peer]
	}
	b := catchUpMsg{kind: catchUpFetch, node: o.rep.id, from: o.p.NextOffset(), to: c.target}.append(nil)
	r.SendCatchUp(raftid.Node(to), o.p.Namespace(), o.p.Epoch(), b)
}

// tickCatchUp re-sends a fetch that went unanswered.
func (rg *raftGroups) tickCatchUp(o *owned) {
	if c := o.rep.catchup; c != nil {
		if c.idle++; c.idle >= catchUpRetryTicks {
			rg.sendFetch(o, true)
		}
	}
}

// catchUpFrame serves a fetch from this replica's log, appends the
// data a peer sent, or answers or records a leader's question whether
// the log is whole.
func (rg *raftGroups) catchUpFrame(o *owned, f Frame) {
	m, ok := decodeCatchUp(f.Req.Payload)
	if !ok {
		return
	}
	if m.kind != catchUpData && f.Req.Peer != 0 && raftid.Node(m.node) != f.Req.Peer {
		// A replica named by its raft id speaks from its own node only
		// (internal/raftid): a whole reported for a replica of another
		// node would let it be promoted on a word that is not its own.
		rg.m.Drop(OpCatchUp.String(), metrics.ReasonInvalidRaft)
		return
	}
	switch m.kind {
	case catchUpFetch:
		if o.failed == nil {
			rg.serveFetch(o, m.node, m.from, m.to)
		}
	case catchUpData:
		msgs, err := partition.DecodeBatch(m.batch)
		if err != nil {
			rg.log.Warn("catch-up data does not decode", "ns", o.p.Namespace(), "error", err)
			return
		}
		rg.caughtUp(o, m.from, m.start, msgs)
	case catchUpAsk:
		rg.answerWhole(o, m.node)
	case catchUpWhole:
		mv := o.rep.move()
		if mv.whole == nil {
			mv.whole = make(map[uint64]bool)
		}
		mv.whole[m.node] = true
	}
}

// catchUpMsg is a catch-up frame: its kind and the fields the kind has
// (see the wire format above).
type catchUpMsg struct {
	kind byte
	// node is the raft id of the requester of a fetch or an ask, of the
	// replica of a whole (internal/raftid: it names the node too).
	node uint64
	// from and to bound a fetch; from and start head a data reply,
	// whose messages are batch (partition.EncodeBatch).
	from, to, start uint64
	batch           []byte
}

// append appends m's encoding to b.
func (m catchUpMsg) append(b []byte) []byte {
	b = append(b, m.kind)
	switch m.kind {
	case catchUpFetch:
		b = binary.LittleEndian.AppendUint64(b, m.node)
		b = binary.LittleEndian.AppendUint64(b, m.from)
		b = binary.LittleEndian.AppendUint64(b, m.to)
	case catchUpData:
		b = binary.LittleEndian.AppendUint64(b, m.from)
		b = binary.LittleEndian.AppendUint64(b, m.start)
		b = append(b, m.batch...)
	case catchUpAsk, catchUpWhole:
		b = binary.LittleEndian.AppendUint64(b, m.node)
	}
	return b
}

// decodeCatchUp decodes a catch-up frame a peer sent: hostile bytes,
// each kind of an exact length (a data reply's batch is decoded, against
// its own budget, by partition.DecodeBatch). ok is false for anything
// else.
func decodeCatchUp(b []byte) (m catchUpMsg, ok bool) {
	if len(b) < 1 {
		return m, false
	}
	m.kind = b[0]
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[1+8*i:]) }
	switch m.kind {
	case catchUpFetch:
		if len(b) != 25 {
			return m, false
		}
		m.node, m.from, m.to = u(0), u(1), u(2)
	case catchUpData:
		if len(b) < 17 {
			return m, false
		}
		m.from, m.start, m.batch = u(0), u(1), b[17:]
	case catchUpAsk, catchUpWhole:
		if len(b) != 9 {
			return m, false
		}
		m.node = u(0)
	default:
		return m, false
	}
	return m, true
}

// askWhole asks replica to, a new one, whether its log is whole.
func (rg *raftGroups) askWhole(o *owned, to uint64) {
	r := rg.cfg
	if r.SendCatchUp == nil {
		return
	}
	r.SendCatchUp(raftid.Node(to), o.p.Namespace(), o.p.Epoch(), catchUpMsg{kind: catchUpAsk, node: o.rep.id}.append(nil))
}

// answerWhole answers a leader's catchUpAsk: a replica with no catch-up
// under way holds everything its raft state says it does; it syncs the
// partition log first, so that what it reports survives a power loss —
// the old replica, once removed, can no longer be fetched from.
func (rg *raftGroups) answerWhole(o *owned, requester uint64) {
	r := rg.cfg
	if r.SendCatchUp == nil || requester == o.rep.id || o.rep.catchup != nil || o.failed != nil {
		return
	}
	if err := o.p.Sync(); err != nil {
		rg.owner.fence(o, err)
		rg.log.Error("fsync of a caught-up replica failed; partition fenced", "ns", o.p.Namespace(), "error", err)
		return
	}
	r.SendCatchUp(raftid.Node(requester), o.p.Namespace(), o.p.Epoch(), catchUpMsg{kind: catchUpWhole, node: o.rep.id}.append(nil))
}

// serveFetch replies with the messages [from, to) this replica holds, up
// to a chunk, and its start offset.
func (rg *raftGroups) serveFetch(o *owned, requester, from, to uint64) {
	r := rg.cfg
	if r.SendCatchUp == nil || requester == o.rep.id {
		return
	}
	var msgs []partition.Message
	start := o.p.StartOffset()
	if from >= start && from < min(to, o.p.NextOffset()) {
		var err error
		if msgs, err = o.p.Read(from, int(min(to-from, catchUpChunk))); err != nil {
			rg.log.Warn("serving a catch-up fetch", "ns", o.p.Namespace(), "error", err)
			rg.replicaDamaged(o, err) // the requester asks the next peer
			return
		}
	}
	b := catchUpMsg{kind: catchUpData, from: from, start: start}.append(make([]byte, 0, 17+64*len(msgs)))
	b, err := partition.EncodeBatch(b, msgs)
	if err != nil {
		return
	}
	r.SendCatchUp(raftid.Node(requester), o.p.Namespace(), o.p.Epoch(), b)
}

// caughtUp appends fetched messages; once the log reaches the target the
// deferred entries are applied.
func (rg *raftGroups) caughtUp(o *owned, from, start uint64, msgs []partition.Message) {
	c := o.rep.catchup
	if c == nil || o.rep.grp == nil || from != o.p.NextOffset() {
		return // a duplicate or a reply to an older fetch
	}
	if start > from {
		// The peer no longer holds what this replica lacks: the messages
		// were truncated, purged or retired there. The offsets are
		// skipped, as on the peer, and the fetch goes on from its start.
		if err := o.p.SkipTo(min(start, c.target)); err != nil {
			rg.owner.fence(o, err)
			rg.log.Error("skipping removed offsets failed; partition fenced", "ns", o.p.Namespace(), "error", err)
			return
		}
		if from, msgs = o.p.NextOffset(), nil; from < c.target {
			rg.sendFetch(o, false)
			return
		}
	}
	if len(msgs) > 0 {
		if n := c.target - from; uint64(len(msgs)) > n {
			msgs = msgs[:n]
		}
		if _, err := o.p.Append(msgs); err != nil {
			rg.owner.fence(o, err)
			rg.log.Error("appending catch-up data failed; partition fenced", "ns", o.p.Namespace(), "error", err)
			return
		}
		rg.m.CaughtUp.Add(float64(len(msgs)))
	} else if from < c.target {
		return // this peer lacks it too: the retry asks the next one
	}
	if o.p.NextOffset() < c.target {
		rg.sendFetch(o, false)
		return
	}
	o.rep.catchup = nil
	// The group counts the deferred entries applied: if settling or
	// applying them fails, the ones left can only come back from the raft
	// log, so the group stops (failGroup) and the partition is rebuilt and
	// its group restored from there. A fenced partition whose group went
	// on would apply the entries after them at their offsets.
	if err := o.settle(); err != nil {
		rg.failGroup(o, fmt.Errorf("settling a caught-up partition: %w", err))
		return
	}
	h := groupHandler{rg: rg, o: o}
	for _, e := range c.deferred {
		if err := h.apply(e.index, e.id, e.payload); err != nil {
			rg.failGroup(o, fmt.Errorf("applying the entries deferred during a catch-up: %w", err))
			return
		}
	}
}

// replicatedState is a partition group's state machine beyond the
// messages themselves: what a raft snapshot carries.
type replicatedState struct {
	next, start uint64
	dedupe      []dedupeEntry
	consumers   map[string]uint64
}

type dedupeEntry struct {
	key   produceKey
	first uint64
}

const stateVersion = 2

// encodeState is r's replicated state: version, next offset, start
// offset, the deduplication table oldest first (so a restore keeps its
// eviction order), then the consumer offsets sorted by name.
func (r *replicated) encodeState() []byte {
	d := &r.dedupe
	b := make([]byte, 0, 21+24*d.Len()+32*len(r.consumers))
	b = append(b, stateVersion)
	b = binary.LittleEndian.AppendUint64(b, r.cursor)
	b = binary.LittleEndian.AppendUint64(b, r.start)
	b = binary.LittleEndian.AppendUint32(b, uint32(d.Len()))
	d.All(func(k produceKey, first uint64) bool {
		b = binary.LittleEndian.AppendUint64(b, k.Producer)
		b = binary.LittleEndian.AppendUint64(b, k.Seq)
		b = binary.LittleEndian.AppendUint64(b, first)
		return true
	})
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.consumers)))
	for _, name := range slices.Sorted(maps.Keys(r.consumers)) {
		b = append(b, byte(len(name)))
		b = append(b, name...)
		b = binary.LittleEndian.AppendUint64(b, r.consumers[name])
	}
	return b
}

var errBadState = errors.New("partition snapshot state malformed")

// decodeState decodes a snapshot's state; empty data is the initial state.
func decodeState(b []byte) (replicatedState, error) {
	var st replicatedState
	if len(b) == 0 {
		return st, nil
	}
	if len(b) < 21 || b[0] != stateVersion {
		return st, errBadState
	}
	st.next = binary.LittleEndian.Uint64(b[1:])
	st.start = binary.LittleEndian.Uint64(b[9:])
	n := binary.LittleEndian.Uint32(b[17:])
	b = b[21:]
	if uint64(len(b)) < 24*uint64(n)+4 {
		return st, errBadState
	}
	st.dedupe = make([]dedupeEntry, n)
	for i := range st.dedupe {
		st.dedupe[i] = dedupeEntry{
			key:   produceKey{Producer: binary.LittleEndian.Uint64(b), Seq: binary.LittleEndian.Uint64(b[8:])},
			first: binary.LittleEndian.Uint64(b[16:]),
		}
		b = b[24:]
	}
	nc := binary.LittleEndian.Uint32(b)
	b = b[4:]
	// Every consumer takes at least 9 bytes (a name length and an
	// offset): a count beyond what remains is refused before the map is
	// sized from it (a count is never trusted to size an allocation).
	if uint64(nc) > uint64(len(b))/9 {
		return st, errBadState
	}
	st.consumers = make(map[string]uint64, nc)
	for range nc {
		if len(b) < 1 || len(b) < 1+int(b[0])+8 {
			return st, errBadState
		}
		name := string(b[1 : 1+int(b[0])])
		st.consumers[name] = binary.LittleEndian.Uint64(b[1+int(b[0]):])
		b = b[1+int(b[0])+8:]
	}
	if len(b) != 0 {
		return st, errBadState
	}
	return st, nil
}

// restore makes st r's replicated state.
func (r *replicated) restore(st replicatedState) {
	r.cursor, r.start = st.next, st.start
	r.dedupe = dedupeTable{}
	for _, e := range st.dedupe {
		r.dedupe.Put(e.key, e.first)
	}
	r.consumers = st.consumers
}

func (r *replicated) setConsumer(name string, off uint64) {
	if r.consumers == nil {
		r.consumers = make(map[string]uint64)
	}
	r.consumers[name] = off
}

// settle brings the local partition in line with the replicated state a
// snapshot installed, once its log holds every message up to the cursor:
// the replicated truncation and the consumer offsets (one the snapshot
// does not hold was deleted meanwhile).
func (o *owned) settle() error {
	if o.rep.start > o.p.StartOffset() {
		if err := o.p.TruncateBefore(min(o.rep.start, o.p.NextOffset())); err != nil {
			return err
		}
	}
	// What the copy holds is read once, as the copy's own state, not as a
	// consumer's read (ConsumerOffset serves clients: a replica whose
	// incarnation is being deleted may still install a snapshot).
	held := o.p.ConsumerOffsets()
	for _, name := range slices.Sorted(maps.Keys(o.rep.consumers)) {
		want := o.rep.consumers[name]
		if have, ok := held[name]; ok && have == want {
			continue // held already: no write (a rebuild settles every time)
		}
		if err := o.p.StoreConsumerOffset(name, want); err != nil {
			return err
		}
	}
	for name := range held {
		if _, ok := o.rep.consumers[name]; !ok {
			if err := o.p.DeleteConsumerOffset(name); err != nil {
				return err
			}
		}
	}
	return nil
}
