package kafka

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cgHarness drives a coordinator's consumer groups on a manual clock.
type cgHarness struct {
	t    *testing.T
	c    *coordinator
	now  time.Time
	meta map[string]cgTopic
	at   uint64 // the log offset of the last record written
	// log is every record written, as a load reads it back, and bytes
	// the payload bytes of the last heartbeat's records.
	log   []loadedRecord
	bytes int
}

func newCGHarness(t *testing.T, topics map[string]int32) *cgHarness {
	h := &cgHarness{t: t, c: newCoordinator(time.Second, 10*time.Second), now: time.Unix(1000, 0), meta: map[string]cgTopic{}}
	h.c.parts[0] = &coordPart{}
	for name, n := range topics {
		h.meta[name] = cgTopic{id: [16]byte{byte(len(name)), name[0], 1}, parts: n}
	}
	return h
}

// hb sends a heartbeat of member at epoch; owned nil is a keepalive
// (the member reports nothing), otherwise a full heartbeat.
func (h *cgHarness) hb(member string, epoch int32, topics []string, owned []topicPart) *kmsg.ConsumerGroupHeartbeatResponse {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Version, r.Group, r.MemberID, r.MemberEpoch = 1, "g", member, epoch
	if owned != nil || epoch == 0 {
		r.RebalanceTimeoutMillis = 5000
		r.SubscribedTopicNames = slices.Clone(topics)
		if r.SubscribedTopicNames == nil {
			r.SubscribedTopicNames = []string{}
		}
		assignor := uniformAssignor
		r.ServerAssignor = &assignor
		r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		by := map[string][]int32{}
		for _, tp := range owned {
			by[tp.topic] = append(by[tp.topic], tp.part)
		}
		for name, ps := range by {
			r.Topics = append(r.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: h.meta[name].id, Partitions: ps})
		}
	}
	a := h.c.consumerHeartbeat(r, 0, 0, h.meta, "client", "/127.0.0.1", h.now)
	h.write(a.persist)
	return a.resp
}

// write writes recs as writeGroupLog does: each must read back as it was
// written, and is applied to what the coordinator holds.
func (h *cgHarness) write(recs []*logRecord) {
	h.t.Helper()
	h.bytes = 0
	for _, rec := range recs {
		b, err := encodeLogRecord(rec)
		if err != nil {
			h.t.Fatalf("encode a group record: %v", err)
		}
		back, err := decodeLogRecord(b)
		if err != nil {
			h.t.Fatalf("decode a group record: %v", err)
		}
		h.bytes += len(b)
		h.at++
		h.log = append(h.log, loadedRecord{group: "g", at: h.at, rec: back})
		h.c.applyRecord("g", 0, 0, h.at, rec)
	}
}

// assigned reads a heartbeat answer's assignment as partitions.
func (h *cgHarness) assigned(resp *kmsg.ConsumerGroupHeartbeatResponse) []topicPart {
	if resp.Assignment == nil {
		return nil
	}
	byID := map[[16]byte]string{}
	for name, t := range h.meta {
		byID[t.id] = name
	}
	out := []topicPart{}
	for _, t := range resp.Assignment.Topics {
		for _, p := range t.Partitions {
			out = append(out, topicPart{byID[t.TopicID], p})
		}
	}
	slices.SortFunc(out, compareTopicPart)
	return out
}

func (h *cgHarness) commit(member string, epoch int32, version int16, tp topicPart) int16 {
	handled, code, part := h.c.consumerCommitCheck("g", member, epoch, version)
	if !handled {
		h.t.Fatalf("a commit to a consumer group with members was not fenced as one")
	}
	if code != 0 {
		return code
	}
	return part(tp)
}

func tps(topic string, parts ...int32) []topicPart {
	out := []topicPart{}
	for _, p := range parts {
		out = append(out, topicPart{topic, p})
	}
	return out
}

// TestConsumerGroupRevokesBeforeAssigning drives two members through a
// join, a revocation and a leave: a partition moves to the joiner only
// once its holder reported it revoked; commits are fenced per partition
// (the holder commits what it holds, also while revoking; nobody commits
// a partition it does not hold or with an epoch older than the one it was
// given the partition at); heartbeats are fenced by member epoch.
func TestConsumerGroupRevokesBeforeAssigning(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"t": 4})
	sub := []string{"t"}
	ra := h.hb("a", 0, sub, nil)
	if ra.ErrorCode != 0 || ra.MemberEpoch != 1 || !slices.Equal(h.assigned(ra), tps("t", 0, 1, 2, 3)) {
		t.Fatalf("a's join: code %d epoch %d assignment %v", ra.ErrorCode, ra.MemberEpoch, h.assigned(ra))
	}
	if ra.HeartbeatIntervalMillis != 1000 {
		t.Fatalf("heartbeat interval %d ms, want 1000", ra.HeartbeatIntervalMillis)
	}
	if code := h.commit("a", 1, 9, topicPart{"t", 2}); code != 0 {
		t.Fatalf("a commits a partition it holds: code %d", code)
	}
	if code := h.commit("a", 1, 8, topicPart{"t", 2}); code != kerr.UnsupportedVersion.Code {
		t.Fatalf("a member commits with OffsetCommit v8: code %d, want UNSUPPORTED_VERSION", code)
	}
	if code := h.commit("", -1, 9, topicPart{"t", 2}); code != kerr.UnknownMemberID.Code {
		t.Fatalf("an admin commit while the group has members: code %d", code)
	}

	rb := h.hb("b", 0, sub, nil)
	if rb.ErrorCode != 0 || rb.MemberEpoch != 2 || len(h.assigned(rb)) != 0 {
		t.Fatalf("b's join: code %d epoch %d assignment %v (a still holds everything)", rb.ErrorCode, rb.MemberEpoch, h.assigned(rb))
	}
	// a is told to revoke two partitions; its epoch stays until it did.
	ra = h.hb("a", 1, nil, nil)
	kept := h.assigned(ra)
	if ra.ErrorCode != 0 || ra.MemberEpoch != 1 || len(kept) != 2 {
		t.Fatalf("a's heartbeat after b joined: code %d epoch %d assignment %v", ra.ErrorCode, ra.MemberEpoch, kept)
	}
	var revoked []topicPart
	for _, tp := range tps("t", 0, 1, 2, 3) {
		if !slices.Contains(kept, tp) {
			revoked = append(revoked, tp)
		}
	}
	if code := h.commit("a", 1, 9, revoked[0]); code != 0 {
		t.Fatalf("a commits a partition it is revoking: code %d", code)
	}
	if code := h.commit("a", 0, 9, revoked[0]); code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("a commits a partition it is revoking with an epoch before it was given it: code %d", code)
	}
	// b gets nothing of what a still holds.
	if rb = h.hb("b", 2, sub, []topicPart{}); len(h.assigned(rb)) != 0 {
		t.Fatalf("b was given %v while a had not revoked them", h.assigned(rb))
	}
	if code := h.commit("b", 2, 9, revoked[0]); code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("b commits a partition a holds: code %d", code)
	}
	// a revokes: moves to the group's epoch.
	if ra = h.hb("a", 1, sub, kept); ra.ErrorCode != 0 || ra.MemberEpoch != 2 || !slices.Equal(h.assigned(ra), kept) {
		t.Fatalf("a's heartbeat after revoking: code %d epoch %d assignment %v", ra.ErrorCode, ra.MemberEpoch, h.assigned(ra))
	}
	if code := h.commit("a", 2, 9, revoked[0]); code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("a commits a partition it revoked: code %d", code)
	}
	if code := h.commit("a", 1, 9, kept[0]); code != 0 {
		t.Fatalf("a commits a partition it kept, at the epoch before: code %d", code)
	}
	rb = h.hb("b", 2, sub, []topicPart{})
	if !slices.Equal(h.assigned(rb), revoked) {
		t.Fatalf("b's assignment %v once a revoked %v", h.assigned(rb), revoked)
	}
	if code := h.commit("b", 2, 9, revoked[0]); code != 0 {
		t.Fatalf("b commits a partition it was given: code %d", code)
	}

	// Heartbeat fences.
	if r := h.hb("a", 7, sub, kept); r.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("a heartbeat at an epoch never given: code %d", r.ErrorCode)
	}
	if r := h.hb("a", 1, nil, nil); r.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("a keepalive at the previous epoch: code %d", r.ErrorCode)
	}
	if r := h.hb("a", 1, sub, kept); r.ErrorCode != 0 || r.MemberEpoch != 2 {
		t.Fatalf("a full heartbeat at the previous epoch owning what it holds (its answer lost): code %d epoch %d", r.ErrorCode, r.MemberEpoch)
	}
	if r := h.hb("ghost", 3, sub, nil); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("an unknown member: code %d", r.ErrorCode)
	}

	// a leaves: b is given everything at a new epoch.
	if r := h.hb("a", -1, nil, nil); r.ErrorCode != 0 || r.MemberEpoch != -1 {
		t.Fatalf("a's leave: code %d epoch %d", r.ErrorCode, r.MemberEpoch)
	}
	if r := h.hb("a", -1, nil, nil); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("a second leave: code %d", r.ErrorCode)
	}
	rb = h.hb("b", 2, sub, revoked)
	if rb.MemberEpoch != 3 || !slices.Equal(h.assigned(rb), tps("t", 0, 1, 2, 3)) {
		t.Fatalf("b after a left: epoch %d assignment %v", rb.MemberEpoch, h.assigned(rb))
	}
	if code := h.commit("b", 2, 9, kept[0]); code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("b commits a partition given at epoch 3 with epoch 2: code %d", code)
	}

	// b's session lapses: the group empties.
	h.now = h.now.Add(11 * time.Second)
	if names := h.c.expireConsumers(h.now); !slices.Equal(names, []string{"g"}) {
		t.Fatalf("groups with lapsed members: %v", names)
	}
	recs, _, _ := h.c.expireConsumer("g", h.now)
	if len(recs) == 0 || recs[len(recs)-1].kind != logCGone || recs[len(recs)-1].member.id != "b" {
		t.Fatalf("the expiry's records: %+v", recs)
	}
	h.write(recs)
	if v := h.c.offsets["g"].consumer; len(v.members) != 0 || v.epoch != 4 {
		t.Fatalf("the group log holds %d members at epoch %d after the expiry, want none at 4", len(v.members), v.epoch)
	}
	if handled, _, _ := h.c.consumerCommitCheck("g", "", -1, 9); handled {
		t.Fatal("an admin commit to the emptied group is fenced as a member's")
	}
}

// TestGroupIsClassicOrConsumer: while a group has members it speaks one
// protocol; the other is refused as Kafka refuses it.
func TestGroupIsClassicOrConsumer(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"t": 2})
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.ProtocolType = 3, "g", "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 10_000, 10_000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	if resp, wait := h.c.join(join, 0, "client", "/127.0.0.1", h.now); wait == nil {
		t.Fatalf("a classic join: %+v", resp)
	}
	if r := h.hb("a", 0, []string{"t"}, nil); r.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("a consumer group heartbeat to a classic group with members: code %d", r.ErrorCode)
	}

	h2 := newCGHarness(t, map[string]int32{"t": 2})
	if r := h2.hb("a", 0, []string{"t"}, nil); r.ErrorCode != 0 {
		t.Fatalf("a consumer group join: code %d", r.ErrorCode)
	}
	if resp, wait := h2.c.join(join, 0, "client", "/127.0.0.1", h2.now); wait != nil || resp.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("a classic join to a consumer group with members: %+v", resp)
	}
	dg := kmsg.NewDescribeGroupsResponseGroup()
	h2.c.describe("g", &dg)
	if dg.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("DescribeGroups of a consumer group: code %d", dg.ErrorCode)
	}
	if l := h2.c.list(); len(l) != 1 || l[0].GroupType != "consumer" || l[0].GroupState != "Stable" {
		t.Fatalf("ListGroups: %+v", l)
	}
	// Once it has no members, the classic protocol may take it.
	if r := h2.hb("a", -1, nil, nil); r.ErrorCode != 0 {
		t.Fatalf("leave: code %d", r.ErrorCode)
	}
	if _, wait := h2.c.join(join, 0, "client", "/127.0.0.1", h2.now); wait == nil {
		t.Fatal("a classic join to an emptied consumer group was refused")
	}
}

// checkTarget fails unless the target assignment gives every partition
// of the group's topics to exactly one member subscribing to its topic,
// with shares differing by at most one (the members subscribe alike).
func checkTarget(t *testing.T, g *cgroup) { checkTargetOf(t, g, true) }

// checkTargetOf is checkTarget, the shares' balance checked only when
// even (members subscribing to different topics have uneven shares).
func checkTargetOf(t *testing.T, g *cgroup, even bool) {
	t.Helper()
	owner := map[topicPart]string{}
	lo, hi := -1, 0
	for id, m := range g.members {
		for _, tp := range m.target {
			if other, dup := owner[tp]; dup {
				t.Fatalf("the target gives %s/%d to %s and %s", tp.topic, tp.part, other, id)
			}
			if !slices.Contains(m.topics, tp.topic) {
				t.Fatalf("the target gives %s/%d to %s, which does not subscribe to it", tp.topic, tp.part, id)
			}
			owner[tp] = id
		}
		if lo < 0 || len(m.target) < lo {
			lo = len(m.target)
		}
		hi = max(hi, len(m.target))
	}
	total, subscribed := 0, map[string]bool{}
	for _, m := range g.members {
		for _, topic := range m.topics {
			subscribed[topic] = true
		}
	}
	for name, tm := range g.topics {
		if subscribed[name] { // a topic its last subscriber left is let go at the next heartbeat
			total += int(tm.parts)
		}
	}
	if len(g.members) > 0 && (len(owner) != total || even && hi-lo > 1) {
		t.Fatalf("the target gives %d of %d partitions, shares from %d to %d", len(owner), total, lo, hi)
	}
}

// TestConsumerGroupNeverTwoHolders runs random joins, leaves, lapses,
// lost answers, keepalives, compactions and a topic's growth against
// simulated clients that revoke at once what an answer no longer gives
// them. After every step no partition is owned by two clients, nor held
// by two members in the coordinator, nor given twice by the target
// assignment, and the group log replays to the group; once the clients
// settle, every partition is owned, evenly.
func TestConsumerGroupNeverTwoHolders(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runNeverTwoHolders(t, seed, false) })
	}
}

// TestConsumerGroupReplayEqualsLive: the walk of
// TestConsumerGroupNeverTwoHolders with members subscribing to different
// topics and changing their subscriptions. After every step the group
// log — with the compactions among the steps — rebuilds exactly the
// group the coordinator holds (a restart, a move or a replay loses
// nothing and invents nothing).
func TestConsumerGroupReplayEqualsLive(t *testing.T) {
	for seed := range uint64(25) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runNeverTwoHolders(t, seed, true) })
	}
}

type simClient struct {
	epoch int32
	sub   []string
	owned map[topicPart]bool
}

// runNeverTwoHolders is the walk of TestConsumerGroupNeverTwoHolders; with
// mixed, members subscribe to different topics and change subscriptions.
func runNeverTwoHolders(t *testing.T, seed uint64, mixed bool) {
	rng := rand.New(rand.NewPCG(seed, 848))
	h := newCGHarness(t, map[string]int32{"t": 7, "u": 3})
	subs := [][]string{{"t", "u"}}
	if mixed {
		subs = append(subs, []string{"t"}, []string{"u"})
	}
	clients := map[string]*simClient{}
	next := 0
	step := func(id string, keepalive, lose bool) {
		cl := clients[id]
		var owned []topicPart
		if !keepalive || cl.epoch == 0 {
			owned = append([]topicPart{}, slices.SortedFunc(maps.Keys(cl.owned), compareTopicPart)...)
		}
		r := h.hb(id, cl.epoch, cl.sub, owned)
		if lose {
			return
		}
		switch r.ErrorCode {
		case 0:
		case kerr.FencedMemberEpoch.Code, kerr.UnknownMemberID.Code:
			cl.epoch, cl.owned = 0, map[topicPart]bool{} // abandons, rejoins
			return
		default:
			t.Fatalf("seed %d: heartbeat of %s: code %d", seed, id, r.ErrorCode)
		}
		cl.epoch = r.MemberEpoch
		if r.Assignment != nil {
			cl.owned = map[topicPart]bool{}
			for _, tp := range h.assigned(r) {
				cl.owned[tp] = true
			}
		}
	}
	check := func(what string) {
		owner := map[topicPart]string{}
		for id, cl := range clients {
			for tp := range cl.owned {
				if other, dup := owner[tp]; dup {
					t.Fatalf("seed %d, %s: %s/%d is owned by clients %s and %s", seed, what, tp.topic, tp.part, other, id)
				}
				owner[tp] = id
			}
		}
		g := h.c.cgroups["g"]
		if g == nil {
			return
		}
		held := map[topicPart]string{}
		for id, m := range g.members {
			for tp := range m.assigned {
				if other, dup := held[tp]; dup {
					t.Fatalf("seed %d, %s: %s/%d is held by members %s and %s", seed, what, tp.topic, tp.part, other, id)
				}
				held[tp] = id
			}
			for tp := range m.revoking {
				if other, dup := held[tp]; dup {
					t.Fatalf("seed %d, %s: %s/%d is held by members %s and %s", seed, what, tp.topic, tp.part, other, id)
				}
				held[tp] = id
			}
		}
		checkTargetOf(t, g, !mixed)
		h.checkReplay(fmt.Sprintf("seed %d, %s", seed, what))
	}
	for i := range 300 {
		ids := slices.Sorted(maps.Keys(clients))
		switch x := rng.IntN(100); {
		case x < 12 && len(clients) < 6 || len(clients) == 0:
			id := fmt.Sprint("m", next)
			next++
			clients[id] = &simClient{sub: subs[rng.IntN(len(subs))], owned: map[topicPart]bool{}}
			step(id, false, false)
		case x < 18:
			id := ids[rng.IntN(len(ids))]
			h.hb(id, -1, nil, nil)
			delete(clients, id)
		case x < 21:
			// A member that stops heartbeating: its session lapses; it
			// is gone (a real one learns so at its next request).
			id := ids[rng.IntN(len(ids))]
			delete(clients, id)
			h.now = h.now.Add(5 * time.Second)
			for other := range clients {
				step(other, false, false)
			}
			h.now = h.now.Add(6 * time.Second)
			recs, _, _ := h.c.expireConsumer("g", h.now)
			h.write(recs)
			// A member removed meanwhile (its revocation overdue) is a
			// zombie: its client learns at its next heartbeat; its
			// commits are fenced meanwhile. It owns nothing any more.
			for id, cl := range clients {
				if h.c.cgroups["g"] == nil || h.c.cgroups["g"].members[id] == nil {
					cl.epoch, cl.owned = 0, map[topicPart]bool{}
				}
			}
		case x < 22 && h.meta["t"].parts < 12:
			tm := h.meta["t"]
			tm.parts++
			h.meta["t"] = tm
		case x < 24:
			h.compactLog()
		case x < 28 && mixed:
			id := ids[rng.IntN(len(ids))]
			clients[id].sub = subs[rng.IntN(len(subs))]
			step(id, false, false)
		default:
			id := ids[rng.IntN(len(ids))]
			step(id, rng.IntN(3) == 0, rng.IntN(10) == 0)
		}
		check(fmt.Sprint("step ", i))
	}
	// Settle: full heartbeats until every partition is owned.
	for range 20 {
		for _, id := range slices.Sorted(maps.Keys(clients)) {
			step(id, false, false)
			check("settling")
		}
	}
	total, lo, hi := 0, -1, 0
	want, subscribed := 0, map[string]bool{}
	for _, cl := range clients {
		for _, topic := range cl.sub {
			if !subscribed[topic] {
				subscribed[topic] = true
				want += int(h.meta[topic].parts)
			}
		}
		total += len(cl.owned)
		if lo < 0 || len(cl.owned) < lo {
			lo = len(cl.owned)
		}
		hi = max(hi, len(cl.owned))
	}
	if len(clients) > 0 && (total != want || !mixed && hi-lo > 1) {
		t.Fatalf("seed %d: settled with %d of %d partitions owned by %d clients, shares from %d to %d", seed, total, want, len(clients), lo, hi)
	}
}

// TestUniformAssignorIsSticky: members joining and leaving move only the
// partitions the balance needs moved.
func TestUniformAssignorIsSticky(t *testing.T) {
	g := &cgroup{topics: map[string]cgTopic{"t": {parts: 12}}, members: map[string]*cgMember{}}
	add := func(id string) {
		g.members[id] = &cgMember{id: id, topics: []string{"t"}}
		g.epoch++
		assignTarget(g)
		checkTarget(t, g)
	}
	targets := func() map[topicPart]string {
		out := map[topicPart]string{}
		for id, m := range g.members {
			for _, tp := range m.target {
				out[tp] = id
			}
		}
		return out
	}
	add("a")
	add("b")
	add("c")
	before := targets()
	add("d") // 12 partitions over 4: each of a, b, c gives up one
	moved := 0
	for tp, id := range targets() {
		if before[tp] != id {
			moved++
		}
	}
	if moved != 3 {
		t.Fatalf("%d partitions moved when a fourth member joined, want 3", moved)
	}
	before = targets()
	delete(g.members, "b")
	g.epoch++
	assignTarget(g)
	checkTarget(t, g)
	moved = 0
	for tp, id := range targets() {
		if before[tp] != id {
			moved++
		}
	}
	if moved != 3 { // b's three, and nothing else
		t.Fatalf("%d partitions moved when a member left, want 3", moved)
	}
}

// TestConsumerGroupRecordRoundTrip: a group rebuilt from what its
// records hold is the group that wrote them, and so is a group loaded
// from a compaction's snapshot of the partition.
func TestConsumerGroupRecordRoundTrip(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"t": 5})
	h.hb("a", 0, []string{"t"}, nil)
	h.hb("b", 0, []string{"t"}, nil)
	h.hb("a", 1, nil, nil) // revoking
	g := h.c.cgroups["g"]
	want := renderCG(g)
	back := h.c.consumerGroupOf("g", 0, h.c.offsets["g"].consumer, h.now)
	if got := renderCG(back); got != want {
		t.Fatalf("the group rebuilt from its records:\n%s\nwant\n%s", got, want)
	}
	if len(back.members["a"].revoking) == 0 {
		t.Fatal("a's revocations were not kept")
	}

	// A compaction's snapshot of the partition, loaded by another
	// coordinator (a move, a restart), serves the same group.
	msgs, err := h.c.snapshot(0)
	if err != nil {
		t.Fatal(err)
	}
	var recs []loadedRecord
	for i, m := range msgs {
		rec, err := decodeLogRecord(m.Payload)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, loadedRecord{group: string(m.Key), at: uint64(i), rec: rec})
	}
	moved := newCoordinator(time.Second, 10*time.Second)
	moved.install(0, 1, recs, h.now)
	loaded := moved.cgroups["g"]
	if loaded == nil {
		t.Fatal("the loaded partition holds no consumer group g")
	}
	if got := renderCG(loaded); got != want {
		t.Fatalf("the group loaded from a snapshot:\n%s\nwant\n%s", got, want)
	}
	// Its members heartbeat on there at their epochs.
	m := loaded.members["b"]
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Version, r.Group, r.MemberID, r.MemberEpoch = 1, "g", "b", m.epoch
	if a := moved.consumerHeartbeat(r, 0, 1, h.meta, "c", "/127.0.0.1", h.now); a.resp.ErrorCode != 0 || a.resp.MemberEpoch != m.epoch {
		t.Fatalf("b's heartbeat at the new coordinator: code %d epoch %d, want 0 and %d", a.resp.ErrorCode, a.resp.MemberEpoch, m.epoch)
	}
}

// TestConsumerGroupHeartbeatRefusals: what is not served is refused with
// the code Kafka answers, and a heartbeat applied in a term the
// partition is not loaded in changes nothing.
func TestConsumerGroupHeartbeatRefusals(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"t": 2})
	req := func() *kmsg.ConsumerGroupHeartbeatRequest {
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Version, r.Group, r.MemberID, r.RebalanceTimeoutMillis = 1, "g", "a", 5000
		r.SubscribedTopicNames, r.Topics = []string{"t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		return r
	}
	regex, rangeAssignor := ".*", "range"
	for _, c := range []struct {
		what string
		edit func(*kmsg.ConsumerGroupHeartbeatRequest)
		code int16
	}{
		{"a regular expression subscription", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicRegex = &regex }, kerr.UnsupportedVersion.Code},
		{"the range assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = &rangeAssignor }, kerr.UnsupportedAssignor.Code},
		{"no member id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }, kerr.InvalidRequest.Code},
		{"a join owning partitions", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: h.meta["t"].id, Partitions: []int32{0}}}
		}, kerr.InvalidRequest.Code},
		{"a join without a subscription", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil }, kerr.InvalidRequest.Code},
		{"an epoch below -2", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 }, kerr.InvalidRequest.Code},
		{"an invalid group id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Group = "" }, kerr.InvalidGroupID.Code},
	} {
		r := req()
		c.edit(r)
		if a := h.c.consumerHeartbeat(r, 0, 0, h.meta, "c", "/127.0.0.1", h.now); a.resp.ErrorCode != c.code || a.persist != nil {
			t.Errorf("%s: code %d (a record: %v), want %d", c.what, a.resp.ErrorCode, a.persist != nil, c.code)
		}
	}
	if a := h.c.consumerHeartbeat(req(), 0, 7, h.meta, "c", "/127.0.0.1", h.now); a.resp.ErrorCode != kerr.NotCoordinator.Code || a.persist != nil {
		t.Fatalf("a join applied in a term the partition is not loaded in: code %d", a.resp.ErrorCode)
	}
	if len(h.c.cgroups) != 0 {
		t.Fatal("a refused heartbeat created a group")
	}
}
