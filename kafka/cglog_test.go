package kafka

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// renderCG is a consumer group's state as the group log keeps it (not
// its sessions' deadlines), one line per part, for comparing a group
// with the group its records rebuild.
func renderCG(g *cgroup) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d target %d\n", g.epoch, g.targetEpoch)
	for _, n := range slices.Sorted(maps.Keys(g.topics)) {
		fmt.Fprintf(&b, "topic %s %x %d\n", n, g.topics[n].id, g.topics[n].parts)
	}
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		fmt.Fprintf(&b, "member %s %s %s %v %d %d %v %v", id, m.clientID, m.clientHost, m.rebalanceTimeout, m.epoch, m.prevEpoch, m.topics, m.target)
		for _, tp := range slices.SortedFunc(maps.Keys(m.assigned), compareTopicPart) {
			fmt.Fprintf(&b, " a%v@%d", tp, m.assigned[tp])
		}
		for _, tp := range slices.SortedFunc(maps.Keys(m.revoking), compareTopicPart) {
			fmt.Fprintf(&b, " r%v@%d", tp, m.revoking[tp])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// replayed is consumer group g as a coordinator that loads recs (a
// restart, a move, a replay of the group log) holds it, with whether it
// serves it; nil if the records hold no consumer group g.
func replayed(recs []loadedRecord, now time.Time) (*cgroup, bool) {
	c := newCoordinator(time.Second, 10*time.Second)
	c.install(0, 1, recs, now)
	o := c.offsets["g"]
	if o == nil || o.consumer == nil {
		return nil, c.cgroups["g"] != nil
	}
	return c.consumerGroupOf("g", 0, o.consumer, now), c.cgroups["g"] != nil
}

// checkReplay fails unless the group log h wrote rebuilds the live group
// (its epochs, topics and every member's persisted state), and a load
// serves it exactly when it has members.
func (h *cgHarness) checkReplay(what string) {
	h.t.Helper()
	live := h.c.cgroups["g"]
	back, served := replayed(h.log, h.now)
	switch {
	case live == nil:
		if served {
			h.t.Fatalf("%s: a load serves a group the coordinator does not hold", what)
		}
	case back == nil:
		h.t.Fatalf("%s: the group log holds no group g; the coordinator holds\n%s", what, renderCG(live))
	case renderCG(back) != renderCG(live):
		h.t.Fatalf("%s: the group log replays to\n%s\nthe coordinator holds\n%s", what, renderCG(back), renderCG(live))
	case served != (len(live.members) > 0):
		h.t.Fatalf("%s: a load serves the group: %v, with %d members", what, served, len(live.members))
	}
}

// compactLog replaces h's log by the coordinator's snapshot of the
// partition, as a compaction truncates the log before it.
func (h *cgHarness) compactLog() {
	h.t.Helper()
	msgs, err := h.c.snapshot(0)
	if err != nil {
		h.t.Fatal(err)
	}
	h.log = nil
	for _, m := range msgs {
		rec, err := decodeLogRecord(m.Payload)
		if err != nil {
			h.t.Fatalf("a snapshot record: %v", err)
		}
		h.at++
		h.log = append(h.log, loadedRecord{group: string(m.Key), at: h.at, rec: rec})
	}
}

// TestConsumerGroupLogV1Replays: a group log written before version 2
// (one whole-group record per change; testdata/kip848-v1.hex holds the
// records the coordinator of that format wrote for three members joining
// two topics, and kip848-v1.state the group it held then) loads as the
// same group, its members heartbeat on, and the log with the version 2
// records written after it replays to the group that wrote them.
func TestConsumerGroupLogV1Replays(t *testing.T) {
	f, err := os.Open("testdata/kip848-v1.hex")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := newCGHarness(t, map[string]int32{"t": 5, "u": 2})
	for sc := bufio.NewScanner(f); sc.Scan(); {
		b, err := hex.DecodeString(strings.TrimSpace(sc.Text()))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := decodeLogRecord(b)
		if err != nil || rec.kind != logConsumer {
			t.Fatalf("a version 1 record: kind %d, %v", rec.kind, err)
		}
		h.at++
		h.log = append(h.log, loadedRecord{group: "g", at: h.at, rec: rec})
	}
	want, err := os.ReadFile("testdata/kip848-v1.state")
	if err != nil {
		t.Fatal(err)
	}
	h.c.install(0, 0, h.log, h.now)
	g := h.c.cgroups["g"]
	if g == nil {
		t.Fatal("the version 1 log loads no consumer group")
	}
	if got := renderCG(g); got != string(want) {
		t.Fatalf("the version 1 log loads\n%s\nthe coordinator that wrote it held\n%s", got, want)
	}
	// a revokes what b and then c took; b and c heartbeat on at their
	// epochs.
	h.hb("a", 1, []string{"t", "u"}, []topicPart{{"t", 3}, {"t", 4}, {"u", 0}, {"u", 1}})
	h.hb("a", 1, []string{"t", "u"}, []topicPart{{"u", 0}, {"u", 1}})
	h.hb("b", 2, []string{"t"}, []topicPart{})
	h.hb("c", 3, []string{"t", "u"}, []topicPart{})
	h.hb("b", 2, []string{"t"}, []topicPart{})
	if len(h.log) <= 4 || h.log[len(h.log)-1].rec.kind < logCGroup {
		t.Fatal("the heartbeats after the load wrote no version 2 records")
	}
	g = h.c.cgroups["g"]
	for id, m := range g.members {
		if m.epoch != 3 || len(m.revoking) > 0 || len(m.assigned) != len(m.target) {
			t.Fatalf("member %s did not reconcile: epoch %d, %d revoking, %d of %d assigned", id, m.epoch, len(m.revoking), len(m.assigned), len(m.target))
		}
	}
	h.checkReplay("the version 1 log and the version 2 records after it")
	h.compactLog()
	h.checkReplay("the compacted log")
}

// TestConsumerGroupJoinWritesWhatChanged pins the bytes a join writes to
// the group log: the records of the joiner, of the group's epochs and of
// the members whose targets moved, not the group. In a wave of 100
// members joining a group subscribed to 32 partitions, each join from
// the 40th on writes no more than the 10th's did, under a bound that does
// not grow with the group; and the wave's whole log (joins and every
// member's reconciliation) grows about linearly in the members.
func TestConsumerGroupJoinWritesWhatChanged(t *testing.T) {
	wave := func(n int) (perJoin []int, total int) {
		// (The harness's topic IDs differ by the names' first letters.)
		h := newCGHarness(t, map[string]int32{"p0": 8, "q0": 8, "r0": 8, "s0": 8})
		sub := []string{"p0", "q0", "r0", "s0"}
		epochs := map[string]int32{}
		owned := map[string][]topicPart{}
		for i := range n {
			id := fmt.Sprintf("m%03d", i)
			r := h.hb(id, 0, sub, nil)
			perJoin = append(perJoin, h.bytes)
			total += h.bytes
			epochs[id], owned[id] = r.MemberEpoch, h.assigned(r)
		}
		for round := 0; ; round++ {
			if round > 50 {
				t.Fatalf("a wave of %d did not settle", n)
			}
			wrote := 0
			for i := range n {
				id := fmt.Sprintf("m%03d", i)
				r := h.hb(id, epochs[id], sub, owned[id])
				wrote += h.bytes
				epochs[id] = r.MemberEpoch
				if r.Assignment != nil {
					owned[id] = h.assigned(r)
				}
			}
			total += wrote
			if wrote == 0 {
				break
			}
		}
		h.checkReplay(fmt.Sprintf("a wave of %d", n))
		return perJoin, total
	}
	joins, total100 := wave(100)
	// The 10th join moves partitions from members to the joiner; a join
	// past the 32nd, in a group with more members than partitions, moves
	// none. Either writes a few hundred bytes.
	const bound = 600
	for i := 9; i < len(joins); i++ {
		if joins[i] > bound || i >= 39 && joins[i] > joins[9] {
			t.Fatalf("join %d wrote %d bytes to the group log (join 10: %d); want at most %d, and from join 40 on no more than join 10", i+1, joins[i], joins[9], bound)
		}
	}
	_, total10 := wave(10)
	if total100 > 15*total10 {
		t.Fatalf("a wave of 100 members wrote %d bytes, of 10 %d: %.1f times, want about 10", total100, total10, float64(total100)/float64(total10))
	}
	t.Logf("join 10: %d B, join 100: %d B; wave of 10: %d B, of 100: %d B", joins[9], joins[99], total10, total100)
}

// TestUniformAssignorJoinMovesFew: a join changes the targets of the
// joiner and of the members it took partitions from only, at most
// ceil(P/N)+1 members, whatever the group's size.
func TestUniformAssignorJoinMovesFew(t *testing.T) {
	const parts = 32
	g := &cgroup{topics: map[string]cgTopic{"t": {parts: parts}}, members: map[string]*cgMember{}}
	for n := 1; n <= 200; n++ {
		before := map[string][]topicPart{}
		for id, m := range g.members {
			before[id] = slices.Clone(m.target)
		}
		id := fmt.Sprintf("m%03d", n)
		g.members[id] = &cgMember{id: id, topics: []string{"t"}}
		g.epoch++
		assignTarget(g)
		checkTarget(t, g)
		changed := 0
		for id, m := range g.members {
			if !slices.Equal(before[id], m.target) {
				changed++
			}
		}
		if bound := (parts+n-1)/n + 1; changed > bound {
			t.Fatalf("the join of member %d changed %d members' targets, want at most %d", n, changed, bound)
		}
	}
}

// TestKIP848GroupLogReplaysOverTheWire: a wave of members joining and
// settling through the listener, one leaving, writes a group log — each
// change one batch of the records of what it changed — that a
// coordinator loading the partition rebuilds into the group the serving
// coordinator holds.
func TestKIP848GroupLogReplaysOverTheWire(t *testing.T) {
	f := serve(t, Config{})
	ctx := ctxFor(t)
	s, err := f.node.Admin().CreateStream(ctx, "kafka")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"r0", "r1"}
	for _, name := range names {
		if _, err := f.node.Admin().CreateTopic(ctx, s, name, 5); err != nil {
			t.Fatal(err)
		}
	}
	r := dialRaw(t, f.addr)
	w := newWave(t, r, "g", names)
	w.join(12)
	w.settle()
	leave := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	leave.Version, leave.Group, leave.MemberID, leave.MemberEpoch = 1, "g", w.members[3].id, -1
	w.send(leave)
	w.members = slices.Delete(w.members, 3, 4)
	w.settle()

	var recs []loadedRecord
	for _, m := range groupLogMessages(t, ctx, f.srv, "g") {
		rec, err := decodeLogRecord(m.Payload)
		if err != nil {
			t.Fatalf("a record at %d: %v", m.Offset, err)
		}
		recs = append(recs, loadedRecord{group: "g", at: m.Offset, rec: rec})
	}
	f.srv.groups.mu.Lock()
	want := renderCG(f.srv.groups.cgroups["g"])
	f.srv.groups.mu.Unlock()
	back, served := replayed(recs, time.Now())
	if back == nil || !served {
		t.Fatalf("the group log (%d records) loads no group g to serve", len(recs))
	}
	if got := renderCG(back); got != want {
		t.Fatalf("the group log (%d records) replays to\n%s\nthe coordinator holds\n%s", len(recs), got, want)
	}
	if strings.Count(want, "member ") != 11 {
		t.Fatalf("the coordinator holds\n%s\nwant 11 members", want)
	}
}
