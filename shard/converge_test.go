package shard

import (
	"fmt"
	"testing"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/metadata"
)

// inFlight bounds the elections a shard has under way.
const inFlight = groups.CampaignsInFlight

// newQuiescedReplNet is newReplNet with Replication.Quiesce set, and
// count single-partition topics committed on every node.
func newQuiescedReplNet(t *testing.T, count int) (*replNet, []metadata.Namespace, []uint64) {
	n := newReplNet(t)
	for id := uint64(1); id <= 3; id++ {
		s := n.shard(id)
		s.cfg.Replication.Quiesce = true
		s.rg.elect = groups.NewElections[*owned](&s.rg, true, s.rg.electionTicks())
	}
	var nss []metadata.Namespace
	var epochs []uint64
	for i := range count {
		ns, rev := n.create(fmt.Sprintf("t%d", i), 1, 2, 3)
		nss, epochs = append(nss, ns), append(epochs, rev)
	}
	return n, nss, epochs
}

// newLedReplNet is newQuiescedReplNet with every group materialised on
// all three nodes, quiet, and led by its preferred leader.
func newLedReplNet(t *testing.T, count int) (*replNet, []metadata.Namespace, []uint64) {
	t.Helper()
	n, nss, epochs := newQuiescedReplNet(t, count)
	for i, ns := range nss {
		for id := uint64(1); id <= 3; id++ {
			n.materialise(id, ns, epochs[i])
		}
	}
	n.quiet()
	if pref, none := n.led(nss); pref != count || none != 0 {
		t.Fatalf("before the death: %d of %d groups led by their preferred leader, %d leaderless", pref, count, none)
	}
	return n, nss, epochs
}

// tickOnly runs one raft tick on every node without delivering anything.
func (n *replNet) tickOnly() {
	for id := uint64(1); id <= 3; id++ {
		n.shard(id).rg.tickRaft()
	}
}

// awake counts the groups a node's shard ticks.
func (n *replNet) awake(id uint64) int { return n.shard(id).rg.q.awake.Len() }

// led counts the groups of nss whose leader is their preferred one, as
// that leader sees it, and the groups with no leader anywhere.
func (n *replNet) led(nss []metadata.Namespace) (preferred, none int) {
	for _, ns := range nss {
		lead := n.leader(ns)
		switch o := n.shard(1).owned[ns]; {
		case lead == 0:
			none++
		case lead == preferredLeader(ns, o.rep.peers, o.rep.placed):
			preferred++
		}
	}
	return preferred, none
}

// tickUntilLed ticks, for at most 400 ticks, until every group of nss
// has a leader, and fails unless each is led by its preferred leader.
func (n *replNet) tickUntilLed(t *testing.T, nss []metadata.Namespace) {
	t.Helper()
	for range 400 {
		if _, none := n.led(nss); none == 0 {
			break
		}
		n.tick(1)
	}
	if pref, none := n.led(nss); pref != len(nss) || none != 0 {
		t.Fatalf("%d of %d groups led by their preferred leader, %d leaderless", pref, len(nss), none)
	}
}

// Many partitions created at once: each node starts a bounded number of
// elections, in the groups it should lead, and ticks no group it only
// follows until a leader contacts it. Every group still gets its
// preferred leader, a batch at a time.
func TestManyNewGroupsElectInBoundedBatches(t *testing.T) {
	const count = 6 * inFlight
	n, nss, epochs := newQuiescedReplNet(t, count)
	for i, ns := range nss {
		for id := uint64(1); id <= 3; id++ {
			n.materialise(id, ns, epochs[i])
		}
	}
	n.tickOnly()
	for id := uint64(1); id <= 3; id++ {
		s := n.shard(id)
		if got := s.rg.elect.InFlight(); got > inFlight {
			t.Fatalf("node %d: %d elections under way, want at most %d", id, got, inFlight)
		}
		if got := n.awake(id); got > inFlight {
			t.Fatalf("node %d ticks %d of its %d new groups, want at most %d (the elections it started)", id, got, count, inFlight)
		}
	}
	n.settle()
	if pref, _ := n.led(nss); pref > 3*inFlight {
		t.Fatalf("%d groups led before a tick, want at most %d (one batch per node)", pref, 3*inFlight)
	}
	n.tickUntilLed(t, nss)
}

// Many partitions built at once: the groups a node does not campaign in
// yet (held for their preferred leader, or queued behind the elections
// under way) take no place in the awake set before any tick, so the
// groups that need ticks (the elections under way) are not diluted in
// the ticks' turns by them; a held group that a message gives its leader
// is ticked from then on.
func TestHeldGroupsTakeNoTickTurn(t *testing.T) {
	const count = 4 * ticksPerRound
	n, nss, epochs := newQuiescedReplNet(t, count)
	for i, ns := range nss {
		for id := uint64(1); id <= 3; id++ {
			n.materialise(id, ns, epochs[i])
		}
	}
	for id := uint64(1); id <= 3; id++ {
		s := n.shard(id)
		if got, started := n.awake(id), s.rg.elect.InFlight(); got != started {
			t.Fatalf("node %d: %d of its %d new groups awake before a tick, want %d (the elections it started)", id, got, count, started)
		}
	}
	// Deliver the first elections' votes and answers: their followers
	// learn a leader and wake; the groups still waiting stay out.
	n.settle()
	for id := uint64(1); id <= 3; id++ {
		awake, held := 0, 0
		for _, o := range n.shard(id).rg.replicated {
			if n.shard(id).rg.q.awake.Has(o.p.Namespace(), o) {
				awake++
				if o.rep.grp.Leader() == 0 {
					t.Fatalf("node %d: group %v awake without a leader or an election", id, o.p.Namespace())
				}
			}
			if o.rep.elect.Held() {
				held++
			}
		}
		if awake > 3*inFlight || held < count-3*inFlight {
			t.Fatalf("node %d: %d groups awake, %d held after the first elections, want at most %d awake and at least %d held",
				id, awake, held, 3*inFlight, count-3*inFlight)
		}
	}
	n.tickUntilLed(t, nss)
}

// The quiesced groups a dead node led elect new leaders a bounded number
// at a time: on each survivor only the elections it stands in are
// ticked, the groups it merely follows wait unticked for the campaigner's
// votes, and every group ends up led by its campaigner.
func TestDeadLeadersGroupsElectInBoundedBatches(t *testing.T) {
	const count = 9 * inFlight
	n, nss, _ := newLedReplNet(t, count)
	var ledBy3 []metadata.Namespace
	for _, ns := range nss {
		if n.leader(ns) == 3 {
			ledBy3 = append(ledBy3, ns)
		}
	}
	if len(ledBy3) <= 2*inFlight {
		t.Fatalf("node 3 leads %d groups, too few for the test", len(ledBy3))
	}

	n.cut[3] = true
	for id := uint64(1); id <= 2; id++ {
		n.shard(id).rg.setPeerLive(3, false)
	}
	n.tickOnly()
	for id := uint64(1); id <= 2; id++ {
		if got := n.awake(id); got > inFlight {
			t.Fatalf("node %d ticks %d of node 3's %d groups after its death, want at most %d", id, got, len(ledBy3), inFlight)
		}
	}
	for range 400 {
		if n.leaderless(ledBy3) == 0 {
			break
		}
		n.tick(1)
	}
	if left := n.leaderless(ledBy3); left != 0 {
		t.Fatalf("%d of node 3's %d groups without a leader after 400 ticks", left, len(ledBy3))
	}
	for _, ns := range ledBy3 {
		o := n.shard(1).owned[ns]
		if want := n.shard(1).rg.campaigner(o); n.leaderAmong(ns, 3) != want {
			t.Fatalf("group %v led by node %d, want its campaigner %d", ns, n.leaderAmong(ns, 3), want)
		}
	}
}

// leaderless counts the groups of nss no live node leads.
func (n *replNet) leaderless(nss []metadata.Namespace) int {
	c := 0
	for _, ns := range nss {
		if lead := n.leaderAmong(ns, 0); lead == 0 || n.cut[lead] {
			c++
		}
	}
	return c
}

// A shard with more awake groups than a tick handles ticks them in turn,
// ticksPerRound a tick, so each group's raft clock slows by the ratio
// instead of the shard falling behind.
func TestTicksTakeTurnsPastTheBudget(t *testing.T) {
	rg := &raftGroups{cfg: &Replication{Quiesce: true}}
	const awake = ticksPerRound + ticksPerRound/2
	for i := range awake {
		rg.q.awake.Add(metadata.Namespace(i), &owned{})
	}
	seen := make(map[*owned]int)
	for range 2 {
		list := rg.tickList()
		if len(list) != ticksPerRound {
			t.Fatalf("a tick ticks %d of %d awake groups, want %d", len(list), awake, ticksPerRound)
		}
		for _, o := range list {
			seen[o]++
		}
	}
	// Two ticks cover every group: 2·ticksPerRound turns over 1.5·ticksPerRound groups.
	if len(seen) != awake {
		t.Fatalf("two ticks ticked %d distinct groups of %d", len(seen), awake)
	}
	for _, c := range seen {
		if c > 2 {
			t.Fatalf("a group ticked %d times in two ticks", c)
		}
	}
}

// With node liveness as the failure detector, a leader whose followers
// are alive but whose answers do not arrive (their shards are busy)
// keeps leading through any number of CheckQuorum windows; once
// liveness declares them dead, it steps down.
func TestLeaderWithLateFollowersKeepsLeadingUntilLivenessSaysDead(t *testing.T) {
	n, nss, epochs := newQuiescedReplNet(t, 1)
	ns := nss[0]
	for id := uint64(1); id <= 3; id++ {
		n.materialise(id, ns, epochs[0])
	}
	n.settle()
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	var others []uint64
	for id := uint64(1); id <= 3; id++ {
		if id != lead {
			others = append(others, id)
			n.cut[id] = true
		}
	}
	// A produce keeps the group awake (it cannot commit): ticked.
	s := n.shard(lead)
	c := produce(ns, "late")
	s.handle(c.f)
	s.rg.flushProposals()
	n.tick(20 * int(s.rg.electionTicks()))
	if !s.owned[ns].rep.grp.IsLeader() {
		t.Fatalf("node %d stepped down while its followers were alive, merely silent", lead)
	}
	for _, id := range others {
		s.rg.setPeerLive(id, false)
	}
	n.tick(3 * int(s.rg.electionTicks()))
	if s.owned[ns].rep.grp.IsLeader() {
		t.Fatalf("node %d still leads after liveness declared both followers dead", lead)
	}
	c.answered(t) // told its outcome is unknown
}

// A dead leader's chosen campaigner whose log is behind cannot win: the
// other survivor, held for the campaigner's votes, refuses it. That
// survivor stands itself as soon as it refuses, instead of waiting out
// groups.HoldTimeouts (simulator cluster seeds 388 and 509: a member rebuilt
// empty was the campaigner, and the group had no leader 1 s after the
// crash).
func TestHeldMemberStandsAgainstCampaignerThatIsBehind(t *testing.T) {
	n, nss, epochs := newQuiescedReplNet(t, 1)
	ns := nss[0]
	for id := uint64(1); id <= 3; id++ {
		n.materialise(id, ns, epochs[0])
	}
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	n.tick(40) // until the group quiesces everywhere
	if n.awake(1)+n.awake(2)+n.awake(3) != 0 {
		t.Fatal("the group did not quiesce")
	}
	// Which survivor campaigns once the leader dies.
	s := n.shard(lead%3 + 1)
	s.rg.q.down.Set(lead, false)
	camp := s.rg.campaigner(s.owned[ns])
	s.rg.q.down.Set(lead, true)
	other := 6 - lead - camp

	// The campaigner misses a write the other two commit.
	n.cut[camp] = true
	c := produce(ns, "missed by the campaigner")
	n.shard(lead).handle(c.f)
	n.settle()
	if r := c.answered(t); r.Err != nil {
		t.Fatalf("produce with the campaigner cut off: %v", r.Err)
	}
	n.tick(40)
	// The leader dies; the campaigner returns; both survivors learn it.
	n.cut[camp], n.cut[lead] = false, true
	for _, id := range []uint64{camp, other} {
		n.shard(id).rg.setPeerLive(lead, false)
	}
	if o := n.shard(other).owned[ns]; !o.rep.elect.Held() || o.rep.elect.Queued() {
		t.Fatalf("node %d (not the campaigner): held %v, queued %v; want held for the campaigner", other, o.rep.elect.Held(), o.rep.elect.Queued())
	}
	hold := int(groups.HoldTimeouts * n.shard(other).rg.electionTicks())
	for i := range hold / 2 {
		if l := n.leaderAmong(ns, lead); l != 0 {
			if l != other {
				t.Fatalf("led by node %d, want node %d, whose log has the committed write", l, other)
			}
			t.Logf("led by node %d after %d ticks", l, i)
			return
		}
		n.tick(1)
	}
	t.Fatalf("no survivor leads after %d ticks (the hold lasts %d)", hold/2, hold)
}

// A new group whose preferred leader dies before the group elected anyone
// is elected by the survivors' campaigner ahead of the re-elections of
// the groups the dead node led (groups.Elections.First), as a new group's
// first election is ahead of any queued: a client that created the
// partition may be waiting for its leader (issue 33: case R6 on disk
// failed with "partition has no leader yet" after a liveness verdict).
func TestNewGroupOfADeadPreferredLeaderElectsFirst(t *testing.T) {
	const count = 9 * inFlight
	n, nss, _ := newLedReplNet(t, count)
	// A new group that node 3 should lead, built on nodes 1 and 2 only:
	// they hold it for node 3's first campaign, which never comes.
	var fresh metadata.Namespace
	for i := 0; fresh == 0; i++ {
		if i == 30 {
			t.Fatal("no new group preferring node 3 in 30 tries")
		}
		ns, rev := n.create(fmt.Sprintf("new%d", i), 1, 2, 3)
		n.materialise(1, ns, rev)
		n.materialise(2, ns, rev)
		if n.shard(1).rg.preferred(n.shard(1).owned[ns]) == 3 {
			fresh = ns
			break
		}
		n.materialise(3, ns, rev)
		n.quiet()
	}
	n.cut[3] = true
	o := n.shard(1).owned[fresh]
	var ledBy3 []metadata.Namespace
	for _, ns := range nss {
		if n.leader(ns) == 3 {
			ledBy3 = append(ledBy3, ns)
		}
	}
	for id := uint64(1); id <= 2; id++ {
		n.shard(id).rg.setPeerLive(3, false)
	}
	var ahead int // node 3's groups the new one's campaigner re-elects
	for _, ns := range ledBy3 {
		if n.shard(1).rg.campaigner(n.shard(1).owned[ns]) == n.shard(1).rg.campaigner(o) {
			ahead++
		}
	}
	c := raftid.Node(n.shard(1).rg.campaigner(o))
	if ahead <= inFlight {
		t.Fatalf("node %d re-elects %d of node 3's groups, too few to fill the %d places", c, ahead, inFlight)
	}
	n.tickOnly()
	s := n.shard(uint64(c))
	if !s.rg.q.awake.Has(fresh, s.owned[fresh]) {
		t.Fatalf("node %d, the new group's campaigner, did not start its election among the first %d (%d of node 3's groups queued with it)",
			c, inFlight, ahead)
	}
	for range 100 {
		if n.leaderAmong(fresh, 3) != 0 {
			break
		}
		n.tick(1)
	}
	if got, want := n.leaderAmong(fresh, 3), n.shard(1).rg.campaigner(o); got != want {
		t.Fatalf("the new group is led by %d, want its campaigner %d", got, want)
	}
}

// quiet ticks until no group is awake and no election is pending on any
// node, for at most 400 ticks (then the caller's check of the leaders
// says what did not settle).
func (n *replNet) quiet() {
	for range 400 {
		if n.awake(1)+n.awake(2)+n.awake(3) == 0 && !n.shard(1).rg.elect.Pending() &&
			!n.shard(2).rg.elect.Pending() && !n.shard(3).rg.elect.Pending() {
			return
		}
		n.tick(1)
	}
}

// A liveness verdict visits the groups it concerns, not the shard's
// every group (issue 33: at 100,000 partitions the walk was 17.7 % of a
// creation's CPU): a death, the groups the dead node led and those with
// no leader (a new group held for its first campaign); a return, the
// groups this node leads. Counted: the groups visited, against the
// groups whose leader this node knows.
func TestPeerVerdictVisitsWhatItChanges(t *testing.T) {
	const count = 9 * inFlight
	n, nss, _ := newLedReplNet(t, count)
	rg := &n.shard(1).rg
	if len(rg.replicated) != count {
		t.Fatalf("node 1 holds %d groups, want %d", len(rg.replicated), count)
	}
	by := map[uint64]int{}
	for _, ns := range nss {
		by[raftid.Node(rg.replicated[ns].rep.grp.Leader())]++
	}
	if by[3] == 0 || by[3] == count || by[1] == 0 {
		t.Fatalf("leaders on node 1's view: %v, want some groups led by each node", by)
	}
	if got := len(rg.verdictGroups(3, 0)); got != by[3]+by[0] {
		t.Fatalf("node 3's death visits %d of %d groups, want the %d it led and %d leaderless", got, count, by[3], by[0])
	}
	if got := len(rg.verdictGroups(1, 1)); got != by[1] {
		t.Fatalf("a return visits %d of %d groups, want the %d node 1 leads", got, count, by[1])
	}
	// The verdict itself: node 3's groups lose their leader, the others
	// keep theirs.
	n.cut[3] = true
	rg.setPeerLive(3, false)
	for _, ns := range nss {
		g := rg.replicated[ns].rep.grp
		if lead := raftid.Node(g.Leader()); lead == 3 {
			t.Fatalf("group %d still follows dead node 3", ns)
		}
	}
	rg.processReady() // as the pump does after each step
	if got := len(rg.byLeader[3]); got != 0 {
		t.Fatalf("%d groups indexed under dead node 3 after the verdict's Ready", got)
	}
}
