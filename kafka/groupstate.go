package kafka

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// Committed offsets are kept in the group log, beside the group's
// membership, rather than in parkway's named consumer offsets of the data
// partitions: a named offset is a write of the data partition's raft
// group, which the coordinator partition's term cannot fence, so a
// deposed coordinator's commit could land after the new coordinator's
// and move a group's offset back. In the group log a commit is one record
// of the partition whose leadership makes the coordinator, fenced to the
// term it loaded in. Offsets committed before the group log existed
// (named consumer offsets of the group id) are still read: a partition
// the log has no offset of answers its named offset, so none is lost on
// migration; OffsetDelete and DeleteGroups remove both.

// loadedAt reports whether coordinator partition p is loaded in term.
func (c *coordinator) loadedAt(p uint32, term uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.parts[p]
	return ok && cp.term == term
}

// termOf is the term coordinator partition p is loaded in, if it is.
func (c *coordinator) termOf(p uint32) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.parts[p]
	if !ok {
		return 0, false
	}
	return cp.term, true
}

// unload lets go of coordinator partition p: its groups (members waiting
// for a join or sync answer are told NOT_COORDINATOR), their offsets, and
// the groups held for it without a load (a join that raced the load).
func (c *coordinator) unload(p uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unloadLocked(p)
}

func (c *coordinator) unloadLocked(p uint32) {
	delete(c.parts, p)
	for _, g := range c.groups {
		if g.part == p {
			c.drop(g)
		}
	}
	for name, o := range c.offsets {
		if o.part == p {
			delete(c.offsets, name)
		}
	}
	for name, g := range c.emptied {
		if g.part == p {
			delete(c.emptied, name)
		}
	}
	for name, g := range c.cgroups {
		if g.part == p {
			delete(c.cgroups, name)
		}
	}
}

// loadedRecord is a group log record with its group id and log offset.
type loadedRecord struct {
	group string
	at    uint64
	rec   *logRecord
}

// install makes p's replayed records the state of its groups, loaded in
// term: each group's last group record becomes its membership (members
// keep their generation and assignment, and their sessions run from now:
// their heartbeats continue here), each commit sets an offset, a forget
// removes one and a delete the group.
func (c *coordinator) install(p uint32, term uint64, recs []loadedRecord, now time.Time) {
	logged := map[string]*groupOffsets{}
	of := func(name string) *groupOffsets {
		o := logged[name]
		if o == nil {
			o = &groupOffsets{part: p, by: map[topicPart]committed{}}
			logged[name] = o
		}
		return o
	}
	for _, r := range recs {
		switch r.rec.kind {
		case logMarker:
		case logDelete:
			delete(logged, r.group)
		default:
			of(r.group).apply(r.rec, r.at)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unloadLocked(p)
	c.parts[p] = &coordPart{term: term, records: len(recs)}
	for name, o := range logged {
		c.offsets[name] = o
		if o.consumer != nil && len(o.consumer.members) > 0 {
			c.cgroups[name] = c.consumerGroupOf(name, p, o.consumer, now)
			continue
		}
		st := o.state
		if st == nil || len(st.members) == 0 || st.protocol == "" {
			continue // empty: nothing to serve but its offsets
		}
		g := &group{name: name, part: p, state: groupStable, generation: st.generation, protocolType: st.protocolType,
			protocol: st.protocol, leader: st.leader, members: map[string]*member{}, pending: map[string]time.Time{}}
		for _, lm := range st.members {
			if _, dup := g.members[lm.id]; dup || lm.id == "" {
				continue
			}
			m := &member{id: lm.id, clientID: lm.clientID, clientHost: lm.clientHost,
				session: time.Duration(lm.sessionMs) * time.Millisecond, rebalanceTimeout: time.Duration(lm.rebalanceMs) * time.Millisecond,
				protocols: []kmsg.JoinGroupRequestProtocol{{Name: st.protocol, Metadata: lm.metadata}}, assignment: lm.assignment}
			m.session = min(max(m.session, minSessionTimeout), maxSessionTimeout)
			m.rebalanceTimeout = min(max(m.rebalanceTimeout, m.session), maxSessionTimeout)
			m.deadline = now.Add(m.session)
			g.members[m.id] = m
			g.order = append(g.order, m.id)
		}
		if len(g.order) == 0 {
			continue
		}
		if _, ok := g.members[g.leader]; !ok {
			g.leader = g.order[0]
		}
		c.groups[name] = g
	}
}

// applyRecord applies a record of group written at log offset at in
// term to what the coordinator holds of the group log, unless p was
// unloaded or loaded again since (the load replayed it).
func (c *coordinator) applyRecord(name string, p uint32, term, at uint64, r *logRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.parts[p]
	if !ok || cp.term != term {
		return
	}
	cp.records++
	switch r.kind {
	case logMarker:
		return
	case logDelete:
		delete(c.offsets, name)
		return
	}
	o := c.offsets[name]
	if o == nil {
		if r.kind == logForget {
			return
		}
		o = &groupOffsets{part: p, by: map[topicPart]committed{}}
		c.offsets[name] = o
	}
	o.apply(r, at)
}

// apply applies record r of the group, written at log offset at, to what
// the group log holds of it (a load's replay and a write both apply
// through here): a commit sets offsets unless a later record set them, a
// forget removes them, a classic group record replaces the group's
// membership and a consumer group record (KIP-848) updates it (cgLog);
// of a classic and a consumer group only the later's is kept.
func (o *groupOffsets) apply(r *logRecord, at uint64) {
	switch r.kind {
	case logCommit, logCommitMeta:
		for _, lo := range r.commits {
			if prev, ok := o.by[lo.tp]; !ok || prev.at < at {
				o.by[lo.tp] = committed{offset: lo.offset, revision: lo.revision, metadata: lo.metadata, at: at}
			}
		}
	case logForget:
		for _, tp := range r.forgets {
			delete(o.by, tp)
		}
	case logGroup:
		st := r.group
		o.state, o.consumer = &st, nil
	case logConsumer, logCGroup, logCSubscribe, logCTarget, logCCurrent, logCGone:
		o.state, o.consumer = nil, o.consumer.apply(r)
	}
}

// committedOffset is the offset group committed for tp of the topic
// incarnation revision, as the group log holds it.
func (c *coordinator) committedOffset(name string, tp topicPart, revision uint64) (int64, bool) {
	co, ok := c.committedAt(name, tp, revision)
	return co.offset, ok
}

// committedAt is group's commit of tp of the topic incarnation revision,
// with its metadata, as the group log holds it.
func (c *coordinator) committedAt(name string, tp topicPart, revision uint64) (committed, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.offsets[name]
	if o == nil {
		return committed{}, false
	}
	co, ok := o.by[tp]
	if !ok || co.revision != revision {
		return committed{}, false
	}
	return co, true
}

// hasLogOffsets reports whether the group log holds an offset of group.
func (c *coordinator) hasLogOffsets(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.offsets[name]
	return o != nil && len(o.by) > 0
}

// hasOffset reports whether the group log holds an offset of group's tp.
func (c *coordinator) hasOffset(name string, tp topicPart) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.offsets[name]
	if o == nil {
		return false
	}
	_, ok := o.by[tp]
	return ok
}

// takeEmptied returns the groups emptied since the last call, each with
// the record of its emptiness, its partition and that partition's term.
func (c *coordinator) takeEmptied() []emptiedGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []emptiedGroup
	for name, g := range c.emptied {
		delete(c.emptied, name)
		cp, ok := c.parts[g.part]
		if !ok || len(g.members) > 0 {
			continue // unloaded, or members joined again meanwhile
		}
		out = append(out, emptiedGroup{name: name, part: g.part, term: cp.term, rec: &logRecord{kind: logGroup, group: groupRecord(g)}})
	}
	return out
}

type emptiedGroup struct {
	name string
	part uint32
	term uint64
	rec  *logRecord
}

// groupLogBatch is how many records a load reads at a time.
const groupLogBatch = 512

// writeGroupLog writes rs for group to coordinator partition p, in one
// produce (one batch: all of a change or none), fenced to term
// (Cluster.ProduceInTerm; on a single node, term 0, a plain produce),
// applies them to what the coordinator holds (applyRecord) and returns
// the first one's log offset. Writes share logMu, which a compaction
// takes alone: it snapshots what every write before it applied.
func (s *Server) writeGroupLog(ctx context.Context, p uint32, term uint64, group string, rs ...*logRecord) (uint64, error) {
	msgs := make([]parkway.Message, len(rs))
	for i, r := range rs {
		payload, err := encodeLogRecord(r)
		if err != nil {
			return 0, err
		}
		msgs[i] = parkway.Message{Key: []byte(group), Payload: payload}
	}
	s.logMu.RLock()
	defer s.logMu.RUnlock()
	at, err := s.produceLog(ctx, p, term, msgs...)
	if err != nil {
		return 0, err
	}
	for i, r := range rs {
		s.groups.applyRecord(group, p, term, at+uint64(i), r)
	}
	return at, nil
}

// produceLog appends msgs to coordinator partition p, fenced to term
// (not on a single node), and returns the first one's offset.
func (s *Server) produceLog(ctx context.Context, p uint32, term uint64, msgs ...parkway.Message) (uint64, error) {
	t, _, err := s.coordTopic(ctx)
	if err != nil {
		return 0, err
	}
	var ack parkway.Ack
	if term != 0 {
		ack, err = s.node.Cluster().ProduceInTerm(ctx, t, p, term, msgs...)
	} else {
		ack, err = s.node.Produce(ctx, t, parkway.PartitionID(p), msgs...)
	}
	if err != nil {
		s.forgetCoordTopic(t, err)
		return 0, err
	}
	return ack.FirstOffset, nil
}

// load makes coordinator partition p loaded here in term: a load marker
// is written in term (so the partition's log up to it holds every record
// that committed in an earlier term, and no record of an earlier term
// commits after it), and the log is replayed up to it. Loads are one at
// a time; a request for a partition being loaded waits for it.
func (s *Server) load(ctx context.Context, p uint32, term uint64) error {
	if s.groups.loadedAt(p, term) {
		return nil
	}
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if s.groups.loadedAt(p, term) {
		return nil
	}
	s.groups.unload(p)
	start := time.Now()
	marker, err := s.writeGroupLog(ctx, p, term, "", &logRecord{kind: logMarker})
	if err != nil {
		return err
	}
	t, _, err := s.coordTopic(ctx)
	if err != nil {
		return err
	}
	var recs []loadedRecord
	bad := 0
	from := parkway.AtFirst()
	for {
		b, err := s.node.Poll(ctx, t, p, from, groupLogBatch)
		if err != nil {
			s.forgetCoordTopic(t, err)
			return err
		}
		done := len(b.Messages) == 0
		for _, m := range b.Messages {
			if m.Offset >= marker {
				done = true
				break
			}
			group := string(m.Key)
			if group == "" {
				continue // a load marker
			}
			rec, err := decodeLogRecord(m.Payload)
			if err != nil || !validGroupID(group) {
				bad++
				continue
			}
			recs = append(recs, loadedRecord{group: group, at: m.Offset, rec: rec})
		}
		if done {
			break
		}
		from = parkway.AtOffset(b.Next)
	}
	if bad > 0 {
		s.log.Warn("group log: records skipped as malformed", "partition", p, "skipped", bad)
	}
	s.groups.install(p, term, recs, time.Now())
	s.log.Debug("group log loaded", "partition", p, "term", term, "records", len(recs), "took", time.Since(start))
	return nil
}

// holdGroup is the coordinator gate of a group request: this listener
// coordinates group (else NOT_COORDINATOR, and whatever it held of the
// group is dropped) and its coordinator partition is loaded in the
// current term (else the load's error: NOT_COORDINATOR when leadership
// moved meanwhile, COORDINATOR_LOAD_IN_PROGRESS otherwise, both
// retried by clients). It returns the partition and term the group's
// writes are fenced to.
func (s *Server) holdGroup(ctx context.Context, group string) (uint32, uint64, int16) {
	b, term, ok := s.coordinatorOf(ctx, group)
	if !ok || b.id != s.cfg.BrokerID {
		s.groups.release(group)
		return 0, 0, kerr.NotCoordinator.Code
	}
	_, n, err := s.coordTopic(ctx)
	if err != nil {
		return 0, 0, kerr.CoordinatorNotAvailable.Code
	}
	p := groupPartition(group, n)
	if err := s.load(ctx, p, term); err != nil {
		s.log.Debug("group log: load", "partition", p, "term", term, "err", err)
		return 0, 0, logWriteCode(err)
	}
	return p, term, 0
}

// logWriteCode is the group error code of a failed group log write or
// load: NOT_COORDINATOR when this node does not lead the partition in the
// term (or may no longer: the outcome is unknown), else
// COORDINATOR_LOAD_IN_PROGRESS, retriable.
func logWriteCode(err error) int16 {
	switch {
	case errors.Is(err, parkway.ErrNotLeader), errors.Is(err, parkway.ErrOutcomeUnknown):
		return kerr.NotCoordinator.Code
	case errors.Is(err, errGroupLog), errors.Is(err, parkway.ErrMessageTooLarge), errors.Is(err, parkway.ErrBatchTooLarge):
		return kerr.RecordListTooLarge.Code
	}
	return kerr.CoordinatorLoadInProgress.Code
}

// logFailed lets go of p after a group log write failed because its
// leadership moved: the next request reloads it, or finds the new
// coordinator.
func (s *Server) logFailed(p uint32, term uint64, err error) {
	if logWriteCode(err) != kerr.NotCoordinator.Code {
		return
	}
	if cur, ok := s.groups.termOf(p); ok && cur == term {
		s.groups.unload(p)
	}
}

// persistEmptied writes the groups that lost their last member: a
// coordinator that loads them later does not bring their members back.
// A write that fails is not retried (the members' sessions lapse at the
// next coordinator instead).
func (s *Server) persistEmptied(ctx context.Context) {
	for _, e := range s.groups.takeEmptied() {
		if _, err := s.writeGroupLog(ctx, e.part, e.term, e.name, e.rec); err != nil {
			s.log.Debug("group log: an emptied group", "group", e.name, "err", err)
			s.logFailed(e.part, e.term, err)
		}
	}
}

// loadedParts lists the loaded coordinator partitions with their terms
// and record counts, and the partitions of groups held without a load,
// with nil.
func (c *coordinator) loadedParts() map[uint32]*coordPart {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint32]*coordPart{}
	for p, cp := range c.parts {
		out[p] = &coordPart{term: cp.term, records: cp.records}
	}
	for _, g := range c.groups {
		if _, ok := out[g.part]; !ok {
			out[g.part] = nil
		}
	}
	return out
}

// sortedParts is the keys of parts in order (for a stable sweep).
func sortedParts(parts map[uint32]*coordPart) []uint32 {
	out := make([]uint32, 0, len(parts))
	for p := range parts {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
