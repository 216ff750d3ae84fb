//go:build unix

package main

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The nemesis' history and its checker. Every event the clients see is
// stamped, under one lock, with the next number of a sequence: an
// operation's invocation and its completion are two stamps, so "A
// completed before B was invoked" is A.done < B.invoked — the real-time
// order linearizability is judged against — without reading a clock.

// history is what the nemesis' clients saw.
type history struct {
	mu  sync.Mutex
	seq int64
	// produces are the producers' records: invoked when handed to the
	// client, done when its outcome arrived.
	produces []produceOp
	// commits are the group's offset commits the coordinator
	// acknowledged: every record below next in partition was processed.
	commits []commitOp
	// deliveries are the records the group's consumers handed to their
	// application, each with the stamp at which its consumer was last
	// assigned the partition.
	deliveries []deliveryOp
	// observed are the group's committed offsets as read back (OffsetFetch)
	// while the nemesis ran, in the order the reads were made.
	observed []observation
}

type produceOp struct {
	value         string
	partition     int32
	offset        int64
	err           error
	invoked, done int64
}

type commitOp struct {
	member    int
	partition int32
	next      int64
	done      int64
}

type deliveryOp struct {
	member    int
	partition int32
	offset    int64
	value     string
	assigned  int64
}

type observation struct {
	invoked int64
	offsets map[int32]int64
}

// stamp returns the next stamp; h.mu must be held.
func (h *history) stamp() int64 {
	h.seq++
	return h.seq
}

// now returns the next stamp.
func (h *history) now() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stamp()
}

// checkHistory checks h against the log read back after the faults
// (logAt: partition → offset → value; ends: each partition's end offset)
// and the group's committed offsets read then (final), and returns the
// anomalies:
//
//   - the log: offsets dense from 0 to the end, no value at two offsets;
//   - produces, per partition (linearizable against an append-only log):
//     every acknowledged value is in the log at its acknowledged offset,
//     no offset acknowledged twice, and a produce acknowledged before
//     another was invoked has the lower offset;
//   - the consumer group: every record delivered holds what the log holds
//     at its offset; the committed offsets read while the nemesis ran
//     never go backwards, and each read, and the final one, is at least
//     every commit acknowledged before the read began; and no record
//     below an offset committed (acknowledged) before its consumer was
//     assigned the partition is delivered: after a rebalance a committed
//     message is not delivered to the group again.
func checkHistory(h *history, logAt map[int32]map[int64]string, ends map[int32]int64, final map[int32]int64) (anomalies []string) {
	add := func(format string, args ...any) { anomalies = append(anomalies, fmt.Sprintf(format, args...)) }

	where := map[string][]string{}
	for p, m := range logAt {
		for o := int64(0); o < ends[p]; o++ {
			if _, ok := m[o]; !ok {
				add("partition %d: offset %d below the end %d was not read: offsets not dense", p, o, ends[p])
			}
		}
		for o, v := range m {
			where[v] = append(where[v], fmt.Sprintf("%d/%d", p, o))
		}
	}
	for v, at := range where {
		if len(at) > 1 {
			sort.Strings(at)
			add("%s appears %d times: %v", v, len(at), at)
		}
	}

	ackedAt := map[string]string{}
	byPart := map[int32][]produceOp{}
	for _, op := range h.produces {
		if op.err != nil {
			continue
		}
		at := fmt.Sprintf("%d/%d", op.partition, op.offset)
		if prev, dup := ackedAt[at]; dup {
			add("offset %s acknowledged for both %s and %s", at, prev, op.value)
		}
		ackedAt[at] = op.value
		switch got, ok := logAt[op.partition][op.offset]; {
		case len(where[op.value]) == 0:
			add("acknowledged %s at %s is lost", op.value, at)
		case !ok || got != op.value:
			add("acknowledged %s at %s, the log holds %q there", op.value, at, got)
		}
		byPart[op.partition] = append(byPart[op.partition], op)
	}
	// Real-time order: going down the offsets, the earliest completion
	// among the higher offsets must not precede this one's invocation.
	for p, ops := range byPart {
		slices.SortFunc(ops, func(a, b produceOp) int { return cmp.Compare(b.offset, a.offset) })
		var minDone int64 = -1
		var minOp produceOp
		for _, op := range ops {
			if minDone >= 0 && minDone < op.invoked {
				add("partition %d: %s was acknowledged at offset %d before %s was produced, which got the lower offset %d: not linearizable",
					p, minOp.value, minOp.offset, op.value, op.offset)
			}
			if minDone < 0 || op.done < minDone {
				minDone, minOp = op.done, op
			}
		}
	}

	for _, d := range h.deliveries {
		if got, ok := logAt[d.partition][d.offset]; !ok || got != d.value {
			add("consumer %d was delivered %q at %d/%d, the log holds %q there", d.member, d.value, d.partition, d.offset, got)
		}
	}
	// committedBefore(p, s) is the highest offset of p committed (and
	// acknowledged) before stamp s.
	commits := slices.Clone(h.commits)
	slices.SortFunc(commits, func(a, b commitOp) int { return cmp.Compare(a.done, b.done) })
	committedBefore := func(p int32, s int64) (int64, commitOp) {
		best, which := int64(-1), commitOp{}
		for _, c := range commits {
			if c.done >= s {
				break
			}
			if c.partition == p && c.next > best {
				best, which = c.next, c
			}
		}
		return best, which
	}
	for _, d := range h.deliveries {
		if c, which := committedBefore(d.partition, d.assigned); d.offset < c {
			add("consumer %d was delivered %d/%d after a rebalance, below the offset %d consumer %d had committed before it was assigned the partition",
				d.member, d.partition, d.offset, c, which.member)
		}
	}
	last := map[int32]int64{}
	for i, ob := range h.observed {
		for p, o := range ob.offsets {
			if prev, ok := last[p]; ok && o < prev {
				add("read %d of the group's committed offsets: partition %d went back from %d to %d", i, p, prev, o)
			}
			last[p] = o
			if c, which := committedBefore(p, ob.invoked); o < c {
				add("read %d of the group's committed offsets: partition %d at %d, below the commit of %d consumer %d had acknowledged before the read",
					i, p, o, c, which.member)
			}
		}
	}
	for p := range ends {
		if c, which := committedBefore(p, h.seq+1); c >= 0 && final[p] < c {
			add("partition %d: the group's committed offset reads %d at the end, below the commit of %d acknowledged to consumer %d", p, final[p], c, which.member)
		}
	}
	sort.Strings(anomalies)
	return anomalies
}

// TestNemesisChecker feeds the checker histories with one anomaly each
// (and one without): it must report exactly the anomaly.
func TestNemesisChecker(t *testing.T) {
	logAt := map[int32]map[int64]string{0: {0: "a", 1: "b", 2: "c"}}
	ends := map[int32]int64{0: 3}
	good := func() *history {
		return &history{
			produces: []produceOp{
				{value: "a", offset: 0, invoked: 1, done: 2},
				{value: "b", offset: 1, invoked: 3, done: 5},
				{value: "c", offset: 2, invoked: 4, done: 6},
			},
			commits:    []commitOp{{member: 1, next: 2, done: 9}},
			deliveries: []deliveryOp{{member: 1, offset: 0, value: "a", assigned: 7}, {member: 1, offset: 1, value: "b", assigned: 7}, {member: 2, offset: 2, value: "c", assigned: 10}},
			observed:   []observation{{invoked: 8, offsets: map[int32]int64{}}, {invoked: 11, offsets: map[int32]int64{0: 2}}},
			seq:        12,
		}
	}
	final := map[int32]int64{0: 2}
	if got := checkHistory(good(), logAt, ends, final); len(got) != 0 {
		t.Fatalf("a good history: %q", got)
	}
	for _, c := range []struct {
		name   string
		change func(h *history, logAt map[int32]map[int64]string, final map[int32]int64)
		want   string
	}{
		{"lost", func(h *history, _ map[int32]map[int64]string, _ map[int32]int64) {
			h.produces = append(h.produces, produceOp{value: "d", offset: 3, invoked: 1, done: 2})
		}, "is lost"},
		{"twice", func(_ *history, l map[int32]map[int64]string, _ map[int32]int64) { l[0][2] = "a" }, "appears 2 times"},
		{"gap", func(_ *history, l map[int32]map[int64]string, _ map[int32]int64) { delete(l[0], 1) }, "not dense"},
		{"order", func(h *history, _ map[int32]map[int64]string, _ map[int32]int64) {
			h.produces[2].invoked, h.produces[2].done = 0, 1
		}, "not linearizable"},
		{"delivery", func(h *history, _ map[int32]map[int64]string, _ map[int32]int64) { h.deliveries[0].value = "x" }, "the log holds"},
		{"redelivered", func(h *history, _ map[int32]map[int64]string, _ map[int32]int64) {
			h.deliveries = append(h.deliveries, deliveryOp{member: 2, offset: 1, value: "b", assigned: 10})
		}, "after a rebalance"},
		{"backwards", func(h *history, _ map[int32]map[int64]string, _ map[int32]int64) {
			h.observed = append(h.observed, observation{invoked: 12, offsets: map[int32]int64{0: 1}})
		}, "went back"},
		{"final", func(_ *history, _ map[int32]map[int64]string, f map[int32]int64) { f[0] = 1 }, "at the end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := good()
			l := map[int32]map[int64]string{0: {0: "a", 1: "b", 2: "c"}}
			f := map[int32]int64{0: 2}
			c.change(h, l, f)
			got := checkHistory(h, l, ends, f)
			if len(got) == 0 || !slices.ContainsFunc(got, func(a string) bool { return strings.Contains(a, c.want) }) {
				t.Fatalf("got %q, want an anomaly with %q", got, c.want)
			}
		})
	}
}
