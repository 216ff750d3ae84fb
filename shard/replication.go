package shard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/metrics"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// Replication makes every partition this shard owns a member of a raft
// group spanning the nodes (multi-raft: one group per partition, all driven
// from this pump). Nil Config.Replication means a single node.
type Replication struct {
	// Node is this node's id; Peers every node's id (this one included):
	// every node holds a replica of every partition.
	Node  uint64
	Peers []uint64
	// Send hands a raft message of the partition (ns, epoch) to the
	// transport. It must not block; a message it loses is re-sent by raft.
	Send func(to uint64, ns metadata.Namespace, epoch uint64, m *raftpb.Message)
	// TickInterval is the raft tick (default 10 ms); a leader is elected
	// within ElectionTicks..2·ElectionTicks ticks of losing the last one
	// (default 10).
	TickInterval  time.Duration
	ElectionTicks int
}

// DefaultTickInterval is the raft tick of replicated partitions.
const DefaultTickInterval = 10 * time.Millisecond

var (
	// ErrNotLeader means "go elsewhere": this node does not lead the
	// partition. The error is a *NotLeaderError carrying the leader's id
	// when one is known. It never matches ErrRetry.
	ErrNotLeader = errors.New("parkway: not the leader")
	// ErrOutcomeUnknown answers a produce whose leader lost leadership
	// before the batch committed: the batch may still commit under the new
	// leader, or may be gone. It is deliberately not retriable — a blind
	// retry could apply the batch twice.
	ErrOutcomeUnknown = errors.New("parkway: leadership changed before the write committed; it may or may not have been applied")

	errNoLeader = fmt.Errorf("%w: partition has no leader yet", ErrRetry)
)

// NotLeaderError is ErrNotLeader with the leader's node id (0: unknown).
type NotLeaderError struct{ Leader uint64 }

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("parkway: not the leader (leader is node %d)", e.Leader)
}

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// replicate makes o a raft group member. The preferred leader — a pure
// function of the namespace, so leadership spreads across nodes — campaigns
// at once instead of waiting out an election timeout; its votes may reach
// nodes that have not materialised the partition yet, where they park and
// are stepped once it lands.
func (s *Shard) replicate(o *owned) error {
	r := s.cfg.Replication
	ns := o.p.Namespace()
	g, err := replica.New(replica.Config{
		Group: uint64(ns), Node: r.Node, Peers: r.Peers,
		ElectionTicks: r.ElectionTicks, Logger: s.log,
	})
	if err != nil {
		return err
	}
	o.grp = g
	o.pending = make(map[uint64][]Frame)
	if r.Peers[int(uint64(ns)%uint64(len(r.Peers)))] == r.Node {
		if err := g.Campaign(); err != nil {
			return err
		}
	}
	s.replicated[ns] = o
	s.markReady(o)
	s.armTick()
	return nil
}

// unreplicate drops o's group; its waiting produces are answered.
func (s *Shard) unreplicate(o *owned, err error) {
	if o.grp == nil {
		return
	}
	delete(s.replicated, o.p.Namespace())
	for id, fs := range o.pending {
		for _, f := range fs {
			s.answer(f, Response{Err: err})
		}
		delete(o.pending, id)
	}
	for _, f := range o.proposeBuf {
		s.answer(f, Response{Err: err})
	}
	o.proposeBuf = nil
	o.grp = nil
}

// proposeProduce serves a produce on a replicated partition: only the
// leader proposes; the ack comes when the batch is committed by a quorum
// and applied here.
func (s *Shard) proposeProduce(o *owned, f Frame) {
	if !o.grp.IsLeader() {
		if lead := o.grp.Leader(); lead != 0 {
			s.answer(f, Response{Err: &NotLeaderError{Leader: lead}})
		} else {
			s.deny(f, metrics.DenyNoLeader, errNoLeader)
		}
		return
	}
	if len(o.proposeBuf) == 0 {
		s.proposing = append(s.proposing, o)
	}
	o.proposeBuf = append(o.proposeBuf, f)
	s.proposed++
}

// flushProposals proposes every buffered produce of each partition as one
// raft entry: concurrent producers share the entry's round of consensus,
// as they share an fsync in a commit group. It runs when the inbox is
// momentarily empty or enough produces are buffered.
func (s *Shard) flushProposals() {
	list := s.proposing
	s.proposing = nil
	s.proposed = 0
	for _, o := range list {
		frames := o.proposeBuf
		o.proposeBuf = nil
		if o.grp == nil || len(frames) == 0 {
			continue
		}
		if !o.grp.IsLeader() {
			for _, f := range frames {
				s.proposeProduce(o, f) // answers "not leader" / "no leader"
			}
			continue
		}
		data := binary.LittleEndian.AppendUint32(nil, uint32(len(frames)))
		var err error
		for _, f := range frames {
			data = binary.LittleEndian.AppendUint64(data, f.Req.Producer)
			data = binary.LittleEndian.AppendUint64(data, f.Req.Seq)
			lenAt := len(data)
			data = append(data, 0, 0, 0, 0)
			if data, err = partition.EncodeBatch(data, f.Req.Messages); err != nil {
				break
			}
			binary.LittleEndian.PutUint32(data[lenAt:], uint32(len(data)-lenAt-4))
		}
		var id uint64
		if err == nil {
			id, err = o.grp.Propose(data)
		}
		if err != nil {
			for _, f := range frames {
				s.answer(f, Response{Err: fmt.Errorf("%w: %w", ErrRetry, err)})
			}
			continue
		}
		o.pending[id] = frames
		s.markReady(o)
	}
}

// stepRaft feeds a peer's message to the partition's group.
func (s *Shard) stepRaft(o *owned, f Frame) {
	if o.grp == nil {
		s.m.Drop(f.Req.Op.String(), metrics.ReasonNotReplicated)
		return
	}
	if err := o.grp.Step(f.Req.Raft); err != nil {
		s.log.Debug("raft step refused", "ns", f.Req.NS, "error", err)
	}
	s.markReady(o)
}

func (s *Shard) markReady(o *owned) {
	if !o.ready {
		o.ready = true
		s.readyList = append(s.readyList, o)
	}
}

// processReady handles every group with pending work: persist, send,
// apply. It runs after each pump step, so a Step or Propose is followed by
// its messages without waiting for a tick.
func (s *Shard) processReady() {
	for len(s.readyList) > 0 {
		list := s.readyList
		s.readyList = nil
		for _, o := range list {
			o.ready = false
			if o.grp == nil {
				continue
			}
			h := groupHandler{s: s, o: o}
			for o.grp != nil && o.grp.HasReady() {
				if err := o.grp.Handle(h); err != nil {
					s.log.Error("raft ready failed", "ns", o.p.Namespace(), "error", err)
					break
				}
			}
		}
	}
}

// tickRaft ticks every replicated group.
func (s *Shard) tickRaft() {
	for _, o := range s.replicated {
		o.grp.Tick()
		s.markReady(o)
	}
	s.armTick()
}

func (s *Shard) armTick() {
	if len(s.replicated) == 0 || s.tickArmed {
		return
	}
	d := s.cfg.Replication.TickInterval
	if s.raftTimer == nil {
		s.raftTimer = s.clock.NewTimer(d)
	} else {
		s.raftTimer.Reset(d)
	}
	s.tickArmed = true
}

// tickC is the raft tick channel, nil (never ready) while no group exists,
// so a shard with nothing replicated has no timer.
func (s *Shard) tickC() <-chan time.Time {
	if !s.tickArmed {
		return nil
	}
	return s.raftTimer.C()
}

// groupHandler applies one partition group's Ready.
type groupHandler struct {
	s *Shard
	o *owned
}

func (h groupHandler) Send(m *raftpb.Message) {
	h.s.cfg.Replication.Send(m.GetTo(), h.o.p.Namespace(), h.o.p.Epoch(), m)
}

// Apply appends a committed batch to the local log. On the proposer the
// waiting produce is answered through the fsync policy, like a local one.
//
// A batch carrying a (producer, sequence) pair that was applied before is
// not appended again: the waiting produce is answered with the first
// application's offset. Every replica applies the same log, so every
// replica's table agrees and a retry through a new leader dedupes too.
func (h groupHandler) Apply(index, id uint64, payload []byte) error {
	frames := h.o.pending[id]
	delete(h.o.pending, id)
	if len(payload) < 4 {
		return fmt.Errorf("apply index %d: entry shorter than its header", index)
	}
	n := int(binary.LittleEndian.Uint32(payload))
	rest := payload[4:]
	for i := range n {
		if len(rest) < 20 {
			return fmt.Errorf("apply index %d: produce %d truncated", index, i)
		}
		key := produceKey{binary.LittleEndian.Uint64(rest), binary.LittleEndian.Uint64(rest[8:])}
		size := int(binary.LittleEndian.Uint32(rest[16:]))
		if len(rest)-20 < size {
			return fmt.Errorf("apply index %d: produce %d truncated", index, i)
		}
		batch := rest[20 : 20+size]
		rest = rest[20+size:]
		var f Frame
		waiting := i < len(frames)
		if waiting {
			f = frames[i]
		}
		if err := h.applyOne(index, key, batch, f, waiting); err != nil {
			return err
		}
	}
	return nil
}

// applyOne applies one produce of a committed entry.
func (h groupHandler) applyOne(index uint64, key produceKey, batch []byte, f Frame, waiting bool) error {
	if key.producer != 0 {
		if first, dup := h.o.dedupe.get(key); dup {
			if waiting {
				h.s.appended(h.o, f, Response{Offset: first})
			}
			return nil
		}
	}
	msgs, err := partition.DecodeBatch(batch)
	if err != nil {
		return err
	}
	first, err := h.o.p.Append(msgs)
	if err == nil && key.producer != 0 {
		h.o.dedupe.put(key, first)
	}
	if err != nil {
		if waiting {
			h.s.answer(f, Response{Err: err})
		}
		// The replica's log now lacks a committed entry: it must not
		// serve reads past this point. Surfacing it loudly is the most a
		// replica without a snapshot path can do.
		return fmt.Errorf("apply index %d: %w", index, err)
	}
	if waiting {
		h.s.appended(h.o, f, Response{Offset: first})
	} else if h.o.dur.Fsync == metadata.FsyncInterval && !h.o.dirty {
		// A follower's copy follows the interval policy; under
		// FsyncAlways the quorum's copies are what the ack promised.
		h.o.dirty = true
		h.o.deadline = h.s.clock.Now().Add(h.o.dur.Interval)
		h.s.armSync(h.o.deadline)
	}
	return nil
}

// LeaderChanged fails the produces this node proposed as leader: their
// outcome is now unknown (behaviour: never silently applied twice).
func (h groupHandler) LeaderChanged(lead uint64) {
	if lead == h.s.cfg.Replication.Node {
		return
	}
	for id, fs := range h.o.pending {
		for _, f := range fs {
			h.s.answer(f, Response{Err: ErrOutcomeUnknown})
		}
		delete(h.o.pending, id)
	}
}

// produceKey identifies one logical produce across retries.
type produceKey struct{ producer, seq uint64 }

// dedupeWindow is how many recent produces a partition remembers for
// deduplication. A retry older than the window could apply twice; the
// Node retries within its request deadline, far inside it.
const dedupeWindow = 1 << 16

// dedupeTable is a FIFO-bounded map from produce key to first offset.
type dedupeTable struct {
	seen  map[produceKey]uint64
	order []produceKey
	next  int
}

func (d *dedupeTable) get(k produceKey) (uint64, bool) {
	off, ok := d.seen[k]
	return off, ok
}

func (d *dedupeTable) put(k produceKey, first uint64) {
	if d.seen == nil {
		d.seen = make(map[produceKey]uint64)
	}
	if len(d.order) < dedupeWindow {
		d.order = append(d.order, k)
	} else {
		delete(d.seen, d.order[d.next])
		d.order[d.next] = k
		d.next = (d.next + 1) % dedupeWindow
	}
	d.seen[k] = first
}

// Leader reports the node this shard believes leads ns's group (0: none
// known, or ns is not replicated here).
func (s *Shard) Leader(ctx context.Context, ns metadata.Namespace) (uint64, error) {
	var lead uint64
	if err := s.do(ctx, newControl(func(s *Shard) error {
		if o := s.owned[ns]; o != nil && o.grp != nil {
			lead = o.grp.Leader()
		}
		return nil
	}, nil)); err != nil {
		return 0, err
	}
	return lead, nil
}
