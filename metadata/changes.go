package metadata

import (
	"cmp"
	"slices"
)

// NamespaceRange is the half-open range of namespaces [Lo, Hi). Because a
// namespace packs its ids high to low, one topic's partitions, and one
// stream's, each form one range.
type NamespaceRange struct {
	Lo, Hi Namespace
}

// Contains reports whether ns is in r.
func (r NamespaceRange) Contains(ns Namespace) bool { return ns >= r.Lo && ns < r.Hi }

// TopicRange is the range of every partition namespace of (stream, topic).
func TopicRange(stream, topic uint32) NamespaceRange {
	lo := Namespace(uint64(stream)<<streamShift | uint64(topic)<<topicShift)
	return NamespaceRange{Lo: lo, Hi: lo + 1<<topicShift}
}

// StreamRange is the range of every partition namespace of stream.
func StreamRange(stream uint32) NamespaceRange {
	lo := Namespace(uint64(stream) << streamShift)
	return NamespaceRange{Lo: lo, Hi: lo + 1<<streamShift}
}

// changeLogSize is how many commits the store remembers the ranges of. A
// reader further behind than that (or behind a Replace) gets no answer
// from Changes and falls back to a full Snapshot.
const changeLogSize = 1024

// change is one commit's entry in the change log: the revision it
// produced and the namespaces whose committed partitions it may have
// changed (empty for commands that shape no partition).
type change struct {
	rev uint64
	r   NamespaceRange
}

// changeLog is a ring of the last changeLogSize commits. known is the
// oldest revision from which on the log is complete: Changes(since)
// answers when since+1 >= known.
type changeLog struct {
	ring  []change
	next  int // where the next entry goes once the ring is full
	known uint64
}

// record appends the entry of the commit that produced rev.
func (l *changeLog) record(rev uint64, r NamespaceRange) {
	c := change{rev: rev, r: r}
	if len(l.ring) < changeLogSize {
		l.ring = append(l.ring, c)
		return
	}
	// The ring is full: the oldest entry goes, and with it the ability to
	// answer for the revision before it.
	l.known = l.ring[l.next].rev + 1
	l.ring[l.next] = c
	l.next = (l.next + 1) % changeLogSize
}

// reset forgets everything before rev+1 (after a Replace, which changes
// the state without commits).
func (l *changeLog) reset(rev uint64) {
	l.ring, l.next, l.known = l.ring[:0], 0, rev+1
}

// rangeOf is the namespaces a successful command may have changed the
// committed partitions (or their configuration) of.
func rangeOf(cmd Command, res Result) NamespaceRange {
	switch c := cmd.(type) {
	case CreateStream, CreateGroup, DeleteGroup, JoinGroup, LeaveGroup, Heartbeat, CommitGroupOffsets, ExpireMembers,
		AddNode, RemoveNode:
		// No partition and no topic configuration changes.
		return NamespaceRange{}
	case DrainNode, Rebalance:
		// Replicas anywhere may have moved.
		return NamespaceRange{Lo: 0, Hi: ^Namespace(0)}
	case SettleReplicas:
		return NamespaceRange{Lo: c.NS, Hi: c.NS + 1}
	case ReseedReplica:
		return NamespaceRange{Lo: c.NS, Hi: c.NS + 1}
	case DeleteStream:
		return StreamRange(res.Stream)
	default:
		return TopicRange(res.Stream, res.Topic)
	}
}

// Changes is what Store.Changes returns: the committed state of the
// namespaces the commits after a revision touched.
type Changes struct {
	// Revision is the store's revision the answer is consistent with.
	Revision uint64
	// Ranges are the namespace ranges touched, sorted and disjoint.
	Ranges []NamespaceRange
	// Partitions are every partition committed at Revision within Ranges,
	// sorted by NS ascending (as in Snapshot).
	Partitions []PartitionInfo
}

// Changes returns the ranges of namespaces that commits after revision
// since may have changed, and the partitions committed in them now, taken
// under one read lock. It reports false when the store cannot answer: the
// commits after since are older than the last changeLogSize, or the state
// was replaced by a snapshot since. A caller that keeps a view of the
// store converges it in O(what changed) from the answer, and from a full
// Snapshot otherwise. A namespace outside Ranges has the same committed
// partition (incarnation and owner) and topic configuration at Revision
// as at since.
func (s *Store) Changes(since uint64) (Changes, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if since > s.revision || since+1 < s.changes.known {
		return Changes{}, false
	}
	out := Changes{Revision: s.revision}
	for _, c := range s.changes.ring {
		if c.rev > since && c.r.Lo < c.r.Hi {
			out.Ranges = append(out.Ranges, c.r)
		}
	}
	out.Ranges = mergeRanges(out.Ranges)
	for _, r := range out.Ranges {
		out.Partitions = s.appendPartitionsIn(out.Partitions, r)
	}
	return out, true
}

// appendPartitionsIn appends the committed partitions in r, in NS order.
// s.mu must be held.
func (s *Store) appendPartitionsIn(dst []PartitionInfo, r NamespaceRange) []PartitionInfo {
	lo, hi := r.Lo.Stream(), (r.Hi - 1).Stream()
	s.streams.AscendRange(&stream{id: lo}, &stream{id: hi + 1}, func(st *stream) bool {
		var first uint32
		if st.id == lo {
			first = r.Lo.Topic()
		}
		st.topics.AscendGreaterOrEqual(&topic{id: first}, func(t *topic) bool {
			if TopicRange(st.id, t.id).Lo >= r.Hi {
				return false
			}
			for _, p := range t.parts {
				if r.Contains(p.NS) {
					dst = append(dst, p)
				}
			}
			return true
		})
		return true
	})
	return dst
}

// mergeRanges sorts rs and merges overlapping or adjacent ranges.
func mergeRanges(rs []NamespaceRange) []NamespaceRange {
	if len(rs) < 2 {
		return rs
	}
	slices.SortFunc(rs, func(a, b NamespaceRange) int { return cmp.Compare(a.Lo, b.Lo) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.Lo <= last.Hi {
			last.Hi = max(last.Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}
