package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/parkway-io/parkway"
)

// Compaction bounds the group log. A coordinator replays a partition's
// log from its start at every load, and every commit is a record, so the
// log would grow — and loads slow — for as long as the groups commit.
// Past compactAfter records since its load or last compaction, the
// coordinator writes a snapshot of what it holds of the partition — a
// marker, then for each group its last group record (a consumer group's
// epoch record and each member's latest record of each kind) and one
// commit record of all its offsets — fenced to its term like every write, and
// truncates the partition before the marker: every record below it is
// superseded by the snapshot. Writes are held off meanwhile (logMu), so
// the snapshot is exactly the log up to it. A commit whose outcome was
// unknown (not applied here, maybe in the log below the marker) was
// answered with an error, and the partition was let go at once
// (logFailed): a compaction never runs over it.
//
// A coordinator deposed between the snapshot and the truncation truncates
// only records the snapshot supersedes, which the new coordinator's load
// replayed, or replays with the snapshot after them.
const compactAfter = 4096

// compactBatch bounds the records of one snapshot write (the node's
// default batch limits are 10,000 messages and 16 MiB).
const (
	compactBatch      = 512
	compactBatchBytes = 4 << 20
)

// errNotLoaded reports a compaction of a partition not loaded here.
var errNotLoaded = errors.New("kafka: coordinator partition not loaded")

// snapshot is what the coordinator holds of partition p's groups, as
// group log messages: each group's last group record and its offsets.
func (c *coordinator) snapshot(p uint32) ([]parkway.Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.offsets))
	for name, o := range c.offsets {
		if o.part == p {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []parkway.Message
	for _, name := range names {
		o := c.offsets[name]
		var recs []*logRecord
		if o.state != nil {
			recs = append(recs, &logRecord{kind: logGroup, group: *o.state})
		}
		if o.consumer != nil {
			recs = append(recs, o.consumer.records()...)
		}
		if len(o.by) > 0 {
			r := &logRecord{kind: logCommitMeta}
			for tp, co := range o.by {
				r.commits = append(r.commits, logOffset{tp: tp, revision: co.revision, offset: co.offset, metadata: co.metadata})
			}
			slices.SortFunc(r.commits, func(a, b logOffset) int {
				if a.tp.topic != b.tp.topic {
					if a.tp.topic < b.tp.topic {
						return -1
					}
					return 1
				}
				return int(a.tp.part) - int(b.tp.part)
			})
			recs = append(recs, r)
		}
		for _, r := range recs {
			b, err := encodeLogRecord(r)
			if err != nil {
				return nil, fmt.Errorf("group %s: %w", name, err)
			}
			out = append(out, parkway.Message{Key: []byte(name), Payload: b})
		}
	}
	return out, nil
}

// compacted resets p's record count after a compaction in term.
func (c *coordinator) compacted(p uint32, term uint64, records int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cp, ok := c.parts[p]; ok && cp.term == term {
		cp.records = records
	}
}

// compact snapshots coordinator partition p and truncates its log before
// the snapshot (see compactAfter). It returns the offset the partition
// now starts at.
func (s *Server) compact(ctx context.Context, p uint32) (uint64, error) {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.logMu.Lock()
	defer s.logMu.Unlock()
	term, ok := s.groups.termOf(p)
	if !ok {
		return 0, errNotLoaded
	}
	msgs, err := s.groups.snapshot(p)
	if err != nil {
		return 0, err
	}
	marker, err := encodeLogRecord(&logRecord{kind: logMarker})
	if err != nil {
		return 0, err
	}
	msgs = append([]parkway.Message{{Payload: marker}}, msgs...)
	start := uint64(0)
	for i := 0; i < len(msgs); {
		j, size := i, 0
		for j < len(msgs) && j-i < compactBatch && (j == i || size+len(msgs[j].Key)+len(msgs[j].Payload) <= compactBatchBytes) {
			size += len(msgs[j].Key) + len(msgs[j].Payload)
			j++
		}
		at, err := s.produceLog(ctx, p, term, msgs[i:j]...)
		if err != nil {
			s.logFailed(p, term, err)
			return 0, err
		}
		if i == 0 {
			start = at
		}
		i = j
	}
	t, _, err := s.coordTopic(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.node.Admin().TruncatePartition(ctx, t, p, start); err != nil {
		return 0, err
	}
	s.groups.compacted(p, term, len(msgs))
	s.log.Debug("group log compacted", "partition", p, "term", term, "records", len(msgs), "from", start)
	return start, nil
}

// compactDue compacts the loaded partitions past compactAfter records.
func (s *Server) compactDue(ctx context.Context) {
	for p, cp := range s.groups.loadedParts() {
		if cp == nil || cp.records < compactAfter {
			continue
		}
		if _, err := s.compact(ctx, p); err != nil {
			s.log.Debug("group log: compaction", "partition", p, "err", err)
		}
	}
}
