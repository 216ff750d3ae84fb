package kafka

import (
	"maps"
	"slices"
	"time"
)

// cgLog is what the group log holds of a consumer group (KIP-848): its
// epochs, its topics and its members, each as its last records left it
// (grouplog.go, version 2). A coordinator keeps it beside the live
// group (cgroup), which runs ahead of it between a change and the write
// of that change: a change writes the difference between the two
// (consumerDelta), a load rebuilds the group from it (consumerGroupOf),
// and a compaction writes it again (records).
type cgLog struct {
	epoch, targetEpoch int32
	topics             []logCTopic // sorted by name
	members            map[string]*logCMember
}

// cgLogOf is the consumer group a whole-group record (version 1) holds.
func cgLogOf(st *logConsumerState) *cgLog {
	v := &cgLog{epoch: st.epoch, targetEpoch: st.targetEpoch, topics: st.topics, members: make(map[string]*logCMember, len(st.members))}
	for i := range st.members {
		m := st.members[i]
		if m.id != "" && v.members[m.id] == nil {
			v.members[m.id] = &m
		}
	}
	return v
}

// apply applies a consumer group record to v: a whole group's record
// replaces it, the epoch record its epochs and topics, a member's record
// that part of the member (a member is made by the first), and a gone
// record ends the member. It returns v, or the group a whole record
// made.
func (v *cgLog) apply(r *logRecord) *cgLog {
	if r.kind == logConsumer {
		return cgLogOf(&r.consumer)
	}
	if v == nil {
		v = &cgLog{members: map[string]*logCMember{}}
	}
	if r.kind == logCGroup {
		v.epoch, v.targetEpoch, v.topics = r.consumer.epoch, r.consumer.targetEpoch, r.consumer.topics
		return v
	}
	id := r.member.id
	if id == "" {
		return v // never written: nothing to key it by
	}
	if r.kind == logCGone {
		delete(v.members, id)
		return v
	}
	m := v.members[id]
	if m == nil {
		m = &logCMember{id: id}
		v.members[id] = m
	}
	switch r.kind {
	case logCSubscribe:
		m.clientID, m.clientHost, m.rebalanceMs, m.topics = r.member.clientID, r.member.clientHost, r.member.rebalanceMs, r.member.topics
	case logCTarget:
		m.target = r.member.target
	case logCCurrent:
		m.epoch, m.prevEpoch, m.assigned, m.revoking = r.member.epoch, r.member.prevEpoch, r.member.assigned, r.member.revoking
	}
	return v
}

// records are the records that write v afresh (a compaction's snapshot):
// its epoch record, then each member's three.
func (v *cgLog) records() []*logRecord {
	out := []*logRecord{{kind: logCGroup, consumer: logConsumerState{epoch: v.epoch, targetEpoch: v.targetEpoch, topics: v.topics}}}
	for _, id := range slices.Sorted(maps.Keys(v.members)) {
		m := v.members[id]
		out = append(out,
			&logRecord{kind: logCSubscribe, member: logCMember{id: id, clientID: m.clientID, clientHost: m.clientHost, rebalanceMs: m.rebalanceMs, topics: m.topics}},
			&logRecord{kind: logCTarget, member: logCMember{id: id, target: m.target}},
			&logRecord{kind: logCCurrent, member: logCMember{id: id, epoch: m.epoch, prevEpoch: m.prevEpoch, assigned: m.assigned, revoking: m.revoking}})
	}
	return out
}

// consumerDelta is the records that bring v (what the log holds of g,
// nil if nothing) to g: the epoch record if g's epochs or topics moved,
// and for each member only the parts that changed — its subscription
// and client, its target, its epochs and held partitions — or its gone
// record. So a change writes what it changed: a join its member and the
// targets the assignor moved (assignTarget is sticky), a reconcile step
// one member's current record, not the whole group. Comparing costs a
// pass over the members, allocating only for what changed.
func consumerDelta(g *cgroup, v *cgLog) []*logRecord {
	var out []*logRecord
	if v == nil || v.epoch != g.epoch || v.targetEpoch != g.targetEpoch || !sameTopics(v.topics, g.topics) {
		head := logConsumerState{epoch: g.epoch, targetEpoch: g.targetEpoch}
		for _, name := range slices.Sorted(maps.Keys(g.topics)) {
			t := g.topics[name]
			head.topics = append(head.topics, logCTopic{name: name, id: t.id, parts: t.parts})
		}
		out = append(out, &logRecord{kind: logCGroup, consumer: head})
	}
	var changed []string
	for id, m := range g.members {
		var lm *logCMember
		if v != nil {
			lm = v.members[id]
		}
		if lm == nil || !sameMeta(lm, m) || !slices.Equal(lm.target, m.target) || !sameCurrent(lm, m) {
			changed = append(changed, id)
		}
	}
	slices.Sort(changed)
	for _, id := range changed {
		m := g.members[id]
		var lm *logCMember
		if v != nil {
			lm = v.members[id]
		}
		if lm == nil || !sameMeta(lm, m) {
			out = append(out, &logRecord{kind: logCSubscribe, member: logCMember{id: id, clientID: m.clientID, clientHost: m.clientHost,
				rebalanceMs: rebalanceMs(m), topics: slices.Clone(m.topics)}})
		}
		if lm == nil || !slices.Equal(lm.target, m.target) {
			out = append(out, &logRecord{kind: logCTarget, member: logCMember{id: id, target: slices.Clone(m.target)}})
		}
		if lm == nil || !sameCurrent(lm, m) {
			out = append(out, &logRecord{kind: logCCurrent, member: logCMember{id: id, epoch: m.epoch, prevEpoch: m.prevEpoch,
				assigned: heldList(m.assigned), revoking: heldList(m.revoking)}})
		}
	}
	if v != nil {
		var gone []string
		for id := range v.members {
			if g.members[id] == nil {
				gone = append(gone, id)
			}
		}
		slices.Sort(gone)
		for _, id := range gone {
			out = append(out, &logRecord{kind: logCGone, member: logCMember{id: id}})
		}
	}
	return out
}

func rebalanceMs(m *cgMember) uint32 { return uint32(m.rebalanceTimeout / time.Millisecond) }

func sameTopics(logged []logCTopic, topics map[string]cgTopic) bool {
	if len(logged) != len(topics) {
		return false
	}
	for i, t := range logged {
		// In order, so a name listed twice (a hostile record) is no match.
		if i > 0 && logged[i-1].name >= t.name {
			return false
		}
		if ct, ok := topics[t.name]; !ok || ct.id != t.id || ct.parts != t.parts {
			return false
		}
	}
	return true
}

func sameMeta(lm *logCMember, m *cgMember) bool {
	return lm.clientID == m.clientID && lm.clientHost == m.clientHost && lm.rebalanceMs == rebalanceMs(m) && slices.Equal(lm.topics, m.topics)
}

func sameCurrent(lm *logCMember, m *cgMember) bool {
	return lm.epoch == m.epoch && lm.prevEpoch == m.prevEpoch && sameHeld(lm.assigned, m.assigned) && sameHeld(lm.revoking, m.revoking)
}

func sameHeld(logged []logAssigned, held map[topicPart]int32) bool {
	if len(logged) != len(held) {
		return false
	}
	for i, a := range logged {
		if i > 0 && compareTopicPart(logged[i-1].tp, a.tp) >= 0 {
			return false // out of order or listed twice (a hostile record)
		}
		if e, ok := held[a.tp]; !ok || e != a.epoch {
			return false
		}
	}
	return true
}

// heldList is held as a record lists it, sorted.
func heldList(held map[topicPart]int32) []logAssigned {
	var out []logAssigned
	for _, tp := range slices.SortedFunc(maps.Keys(held), compareTopicPart) {
		out = append(out, logAssigned{tp: tp, epoch: held[tp]})
	}
	return out
}
