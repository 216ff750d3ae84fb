package shard

import (
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
)

// A new group whose preferred leader never campaigns (its node lags
// behind the metadata, or is down without liveness saying so yet) is
// held everywhere, each member waiting for that leader. When a move
// makes another replica the preferred leader, that replica campaigns at
// once (campaignIfPreferred); without it the members wait out the hold,
// 100 election timeouts (simulator cluster seed 27 with node removal: a
// drain moved the preferred leader's replica away and no member led the
// group for the two minutes of quiescence, so the move never completed).
// A founding replica built only after the move (a late founder) starts
// from the placement's members, which hold every voter the group has:
// never from fewer (the founders less the replicas moves added can be a
// minority of the group, or the late founder alone, which would then
// elect itself).
func TestMoveMakesAHeldGroupsNewPreferredLeaderCampaign(t *testing.T) {
	n := newMoveNetWith(t, func(r *Replication) { r.Quiesce = true })
	n.apply(metadata.CreateStream{Name: "s"})
	res := n.apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 1, Config: metadata.TopicConfig{Replicas: 3}})
	info := res.Created[0]
	ns := info.NS
	founders := slices.Clone(info.Replicas)
	first, second, third := founders[0], founders[1], founders[2]
	// Only the second founder builds before the move: the preferred
	// leader (the first) never does.
	h := n.nodes[second]
	p := h.build(ns, info.CreatedRevision)
	h.insert(h.shards[0], p)
	n.parts[replicaKey{second, ns}] = p
	n.settle()
	if o := n.shard(second).rg.replicated[ns]; o == nil || !o.rep.elect.Held() {
		t.Fatalf("the second founder's group is not held for its preferred leader (%+v)", o)
	}
	n.apply(metadata.DrainNode{Node: first})
	moved, _ := n.nodes[second].meta.Partition(ns)
	if moved.Replicas[0] != second || !slices.Equal(moved.Leaving, []uint64{first}) {
		t.Fatalf("after draining n%d the placement is %+v, want n%d preferred", first, moved, second)
	}
	n.shard(second).rg.updatePlacement(ns)
	// The third founder builds now, after the move.
	h = n.nodes[third]
	p = h.build(ns, info.CreatedRevision)
	h.insert(h.shards[0], p)
	n.parts[replicaKey{third, ns}] = p
	n.settle()
	for _, f := range founders {
		if got := n.shard(third).rg.replicated[ns].rep.grp.Voters(); !slices.Contains(got, f) {
			t.Fatalf("the late founder n%d starts with voters %v, without the founder n%d", third, got, f)
		}
	}
	// Well within one hold (100 election timeouts of 10 ticks).
	for range 50 {
		if n.leader(ns) != 0 {
			break
		}
		n.tickAll()
	}
	if lead := n.leader(ns); lead != second {
		t.Fatalf("after the move the group is led by n%d, want its new preferred leader n%d", lead, second)
	}
}

// A leader read asked while the group still has two voters, whose other
// voter the move then removes, is answered: the confirmation raft waits
// for counted the removed voter's heartbeat answer, which never comes,
// so on the configuration change the read is asked again of the voters
// as they are now (groups.Process). Without that it waits for ever
// (simulator cluster seed 559 with node removal: a consumer-offset read
// on the new leader of a one-replica partition moved off a drained node
// was never answered). The moved partition has one replica: the new
// replica is added, leadership handed to it, and the old one removed;
// a read is asked of every new leader the moment it leads, and from then
// on the heartbeats to the old replica, which carry the read's
// confirmation request, are lost (its appends, which carry the
// removal, are not).
func TestMoveReadAskedBeforeAVoterLeavesIsAnswered(t *testing.T) {
	n := newMoveNet(t)
	info, lead := n.ledPartition(1)
	ns := info.NS
	n.produceAcked(lead, ns, 1)
	n.apply(metadata.DrainNode{Node: lead})
	n.materialise(ns)
	var reads []call
	asked := map[uint64]bool{lead: true}
	for range 3000 {
		if l := n.leader(ns); l != 0 && !asked[l] {
			asked[l] = true
			r := request(ns, &Request{Op: OpPoll, Count: 1, FromLeader: true})
			n.shard(l).handle(r.f)
			reads = append(reads, r)
			old := lead
			n.drop = func(m queued) bool { return m.m != nil && m.to == old && m.m.GetType() == raftpb.MsgHeartbeat }
		}
		n.tickAll()
		if info, _ := n.nodes[1].meta.Partition(ns); len(info.Leaving) == 0 && len(reads) > 0 {
			break
		}
	}
	if len(reads) == 0 {
		t.Fatal("leadership never moved to the new replica")
	}
	n.drop = nil
	for range 50 {
		n.tickAll()
	}
	for i, r := range reads {
		select {
		case resp := <-r.reply:
			if resp.Err == nil && len(resp.Messages) != 1 {
				t.Fatalf("read %d served %d messages, want the one acknowledged", i, len(resp.Messages))
			}
		default:
			t.Fatalf("read %d, asked of a new leader before the old voter left, was never answered", i)
		}
	}
}

// When a leader dies, the survivors agree on which of them campaigns
// even if their metadata stand either side of a move: the campaigner is
// chosen among the group's voters in ascending order, not in the
// metadata's order of the replicas, which the move changed on one
// survivor only. With the metadata's order each survivor held its group
// for the other to campaign, and the group stayed leaderless until the
// hold expired (simulator cluster seed 661 with node removal).
func TestLeaderDeathSurvivorsAgreeOnTheCampaignerAcrossAMove(t *testing.T) {
	n := newMoveNetWith(t, func(r *Replication) { r.Quiesce = true })
	n.apply(metadata.CreateStream{Name: "s"})
	res := n.apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 4, Config: metadata.TopicConfig{Replicas: 3}})
	// A partition whose two survivors, ordered as each one's metadata
	// orders them, would pick each other (the namespace picks the second
	// of two).
	var info metadata.PartitionInfo
	for _, p := range res.Created {
		if uint64(p.NS)%2 == 1 {
			info = p
			break
		}
	}
	if info.Replicas == nil {
		t.Fatal("no partition with an odd namespace")
	}
	ns := info.NS
	a, b, c := info.Replicas[0], info.Replicas[1], info.Replicas[2]
	n.materialise(ns)
	for range 500 {
		if n.leader(ns) != 0 {
			break
		}
		n.tickAll()
	}
	if lead := n.leader(ns); lead != a {
		t.Fatalf("led by n%d, want its preferred leader n%d", lead, a)
	}
	for range 30 {
		n.tickAll()
	}
	// Only c's metadata applies the drain of b (the others lag), so the
	// group itself does not change: its leader has not seen the move.
	n.nodes[c].apply(metadata.DrainNode{Node: b})
	n.shard(c).rg.updatePlacement(ns)
	n.cut[a] = true
	for _, s := range []uint64{b, c} {
		if l := n.shard(s).rg.replicated[ns].rep.grp.Leader(); l != a {
			t.Fatalf("n%d sees leader n%d before the death, want n%d", s, l, a)
		}
		n.shard(s).rg.setPeerLive(a, false)
	}
	n.settle()
	// A few election timeouts, far inside one hold (100 of them).
	for range 50 {
		if l := n.leader(ns); l == b || l == c {
			return
		}
		n.tickAll()
	}
	t.Fatalf("no survivor of n%d leads %v 50 ticks after its death", a, ns)
}

// A new replica whose raft log caught up while its partition log is
// still being fetched does not let the old replica go: the leader removes
// the old one only once every new one said its partition log is whole
// and synced (catchUpAsk / catchUpWhole), since the old replica may be
// the last copy of what the new one lacks.
func TestMoveKeepsTheOldReplicaUntilTheNewOneIsWhole(t *testing.T) {
	n := newMoveNet(t)
	info, lead := n.ledPartition(3)
	ns := info.NS
	n.produceAcked(lead, ns, 5)
	var from uint64
	for _, r := range info.Replicas {
		if r != lead {
			from = r
			break
		}
	}
	n.apply(metadata.DrainNode{Node: from})
	info, _ = n.nodes[1].meta.Partition(ns)
	joiner := info.Replicas[len(info.Replicas)-1]
	// The joiner's partition fetches go unanswered: it takes the
	// leader's snapshot (its raft log catches up) but never holds the
	// messages.
	n.drop = func(m queued) bool { return m.catchUp != nil && m.to == joiner && m.catchUp[0] == catchUpData }
	n.materialise(ns)
	caught := false
	for range 400 {
		n.tickAll()
		g := n.shard(lead).rg.replicated[ns].rep.grp
		caught = caught || g.Caught(joiner)
		if !slices.Contains(g.Voters(), from) {
			t.Fatalf("old replica n%d removed while the new one n%d had %d of 5 messages", from, joiner, n.parts[replicaKey{joiner, ns}].NextOffset())
		}
	}
	if !caught {
		t.Fatal("the joiner's raft log never caught up: the test proves nothing")
	}
	n.drop = nil
	if info, ok := n.settleMove(ns); !ok {
		t.Fatalf("the move never settled once the joiner could fetch: %+v", info)
	}
	if got := n.parts[replicaKey{joiner, ns}].NextOffset(); got != 5 {
		t.Fatalf("the joiner holds %d messages, want 5", got)
	}
}

// A late founding replica's first configuration: the founders while all
// of them are still members (a move in flight included: a one-replica
// partition moving away starts from its one founder, so it can elect
// the leader that drives the move); once one of them left, none — it
// joins, waiting for the leader's snapshot — since the founders still
// present may be a minority of the group, or the late founder alone
// (simulator cluster seeds 461, 659, 1385, 1705 and 2135: a one-replica
// partition's founder built after the drain started from the founder
// and the newcomer, and no leader was ever elected; and the founders
// less the joined replicas can be one node of three, which would elect
// itself).
func TestFoundingVoters(t *testing.T) {
	for _, c := range []struct {
		name   string
		info   metadata.PartitionInfo
		voters []uint64
		join   bool
	}{
		{"a one-replica move in flight", metadata.PartitionInfo{Replicas: []uint64{4}, Leaving: []uint64{2}, Joined: []uint64{4}},
			[]uint64{2}, false},
		{"a move in flight", metadata.PartitionInfo{Replicas: []uint64{1, 2, 4}, Leaving: []uint64{3}, Joined: []uint64{4}},
			[]uint64{1, 2, 3}, false},
		{"a founder left", metadata.PartitionInfo{Replicas: []uint64{1, 2, 4}, Joined: []uint64{4}},
			[]uint64{1, 2, 4}, true},
		{"all but one founder left", metadata.PartitionInfo{Replicas: []uint64{5, 1, 3}, Joined: []uint64{1, 3}},
			[]uint64{5, 1, 3}, true},
	} {
		voters, join := foundingVoters(c.info)
		if !slices.Equal(voters, c.voters) || join != c.join {
			t.Errorf("%s: voters %v join %v, want %v join %v", c.name, voters, join, c.voters, c.join)
		}
	}
}

// A learner fetching its partition log asks the old replica of a
// one-replica partition it replaces, though that replica is its only
// peer: once the learner applied the group's configuration its peers are
// the voters, without itself, and a catch-up under way then, or started
// again (its partition rebuilt after a failed fsync), was counted as
// having no one to ask. It never fetched, never said it was whole, and
// the move's leader asked it for ever (simulator cluster seed 4794).
func TestMoveLearnerOfAOneReplicaPartitionFetchesFromItsOnlyPeer(t *testing.T) {
	n := newMoveNet(t)
	info, lead := n.ledPartition(1)
	ns := info.NS
	want := n.produceAcked(lead, ns, 5)
	n.apply(metadata.DrainNode{Node: lead})
	info, _ = n.nodes[1].meta.Partition(ns)
	joiner := info.Replicas[len(info.Replicas)-1]
	if joiner == lead || !info.Joins(joiner) {
		t.Fatalf("after DrainNode(%d): %+v", lead, info)
	}
	// The joiner takes the leader's snapshot, but its fetches go
	// unanswered for now.
	n.drop = func(m queued) bool { return m.catchUp != nil && m.to == joiner && m.catchUp[0] == catchUpData }
	n.materialise(ns)
	var j *owned
	for range 400 {
		n.tickAll()
		if j = n.shard(joiner).rg.replicated[ns]; j != nil && len(j.rep.grp.Voters()) > 0 {
			break
		}
	}
	if j == nil || !slices.Equal(j.rep.grp.Voters(), []uint64{lead}) || j.rep.catchup == nil {
		t.Fatal("the joiner never applied the one-voter configuration with its catch-up under way: the test proves nothing")
	}
	// Its peers are refreshed from the configuration it applied (any
	// placement change does it, as does a rebuild): the voters, which
	// do not include the learner.
	n.shard(joiner).rg.updatePlacement(ns)
	if !slices.Equal(j.rep.peers, []uint64{lead}) {
		t.Fatalf("the joiner's peers are %v, want [%d]: the test proves nothing", j.rep.peers, lead)
	}
	// It has a replica to be repaired from, too (damage found now is
	// repaired, not served around as in a group of one).
	if !repairable(j) {
		t.Fatal("the joiner, whose one peer is the old replica, is judged not repairable")
	}
	n.drop = nil
	settled, ok := n.settleMove(ns)
	if got := n.parts[replicaKey{joiner, ns}].NextOffset(); got != 5 {
		t.Fatalf("the joiner holds %d messages, want 5", got)
	}
	if !ok {
		t.Fatalf("the move never settled: %+v", settled)
	}
	if got := payloads(t, n.parts[replicaKey{joiner, ns}]); !slices.Equal(got, want) {
		t.Fatalf("joiner %d holds %q, want %q", joiner, got, want)
	}
}

// The peer a catch-up last asked is kept as its place in the replica's
// peers, which a configuration applied meanwhile can shorten (a learner's
// peers become the voters): a reply that arrives after that, short of the
// target (more than a chunk lacking), sends the next fetch to the peer
// last asked, and its place must still be in the peers.
func TestCatchUpFetchesOnAfterItsPeersShrank(t *testing.T) {
	n := newMoveNet(t)
	info, lead := n.ledPartition(1)
	ns := info.NS
	const k = catchUpChunk + 10
	n.produceAcked(lead, ns, k)
	n.apply(metadata.DrainNode{Node: lead})
	info, _ = n.nodes[1].meta.Partition(ns)
	joiner := info.Replicas[len(info.Replicas)-1]
	// The joiner's fetches are answered, but the replies held back.
	var held []queued
	n.drop = func(m queued) bool {
		if m.catchUp != nil && m.to == joiner && m.catchUp[0] == catchUpData {
			held = append(held, m)
			return true
		}
		return false
	}
	n.materialise(ns)
	var j *owned
	for range 400 {
		n.tickAll()
		if j = n.shard(joiner).rg.replicated[ns]; j != nil && len(j.rep.grp.Voters()) > 0 && len(held) > 0 {
			break
		}
	}
	if j == nil || j.rep.catchup == nil || len(held) == 0 {
		t.Fatal("the joiner never applied the configuration with a fetch answered: the test proves nothing")
	}
	n.shard(joiner).rg.updatePlacement(ns) // its peers: the one voter
	if c := j.rep.catchup; c.peer < len(j.rep.peers) {
		t.Fatalf("the peer last asked is at %d of peers %v: the test proves nothing", c.peer, j.rep.peers)
	}
	n.drop = nil
	n.queue = append(n.queue, held[len(held)-1])
	n.settle() // the reply, then the next fetch and its reply
	if got := n.parts[replicaKey{joiner, ns}].NextOffset(); got != k {
		t.Fatalf("after the held reply the joiner holds %d messages, want %d", got, k)
	}
	settled, ok := n.settleMove(ns)
	if got := n.parts[replicaKey{joiner, ns}].NextOffset(); got != k {
		t.Fatalf("the joiner holds %d messages, want %d", got, k)
	}
	if !ok {
		t.Fatalf("the move never settled: %+v", settled)
	}
}
