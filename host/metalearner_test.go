package host_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// learnerCluster is three founding manual engines (nodes 1..3) and a
// fourth that joins (Cluster.Join), each on its own disk, over a manually
// delivered network whose links the test cuts, and whose metadata raft
// log writes it can fail once (inj).
type learnerCluster struct {
	t       *testing.T
	clk     *clock.Manual
	net     *transport.Network
	disks   map[uint64]*vfs.MemFS
	inj     map[uint64]*failOnce
	engines map[uint64]*host.Engine
	// dropMeta[{from, to}] is how many of from's next metadata raft
	// messages to to are lost.
	dropMeta map[[2]uint64]int
}

func newLearnerCluster(t *testing.T) *learnerCluster {
	c := &learnerCluster{t: t, clk: clock.NewManual(t0), disks: map[uint64]*vfs.MemFS{},
		inj: map[uint64]*failOnce{}, engines: map[uint64]*host.Engine{}, dropMeta: map[[2]uint64]int{}}
	c.net = transport.NewNetwork(transport.NetworkOptions{Clock: c.clk, ManualDelivery: true})
	t.Cleanup(func() { _ = c.net.Close() })
	for id := uint64(1); id <= 4; id++ {
		c.disks[id], c.inj[id] = vfs.NewMem(), &failOnce{}
		c.open(id)
	}
	return c
}

// open (re)opens node id's engine on its disk.
func (c *learnerCluster) open(id uint64) {
	peers, join := []transport.NodeID{1, 2, 3}, false
	if id == 4 {
		peers, join = []transport.NodeID{1, 2, 3, 4}, true
	}
	e, err := host.New(host.Config{Shards: 1, Manual: true, Clock: c.clk, DataDir: "/data", FS: errorfs.New(c.disks[id], c.inj[id]),
		Cluster: &host.Cluster{ID: transport.NodeID(id), Peers: peers, Join: join, Bus: c.net.Endpoint(transport.NodeID(id))}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = e.Close() })
	c.engines[id] = e
}

// step runs rounds: every engine handles its metadata member, takes what
// was delivered to it and ticks once, and the clock moves one raft tick.
// A member whose raft log write the test failed (inj) is down, retriably,
// until its reopen: that error is expected of it.
func (c *learnerCluster) step(rounds int) {
	c.t.Helper()
	check := func(id uint64, err error) {
		c.t.Helper()
		if err != nil && (!c.inj[id].fired.Load() || !errors.Is(err, shard.ErrRetry)) {
			c.t.Fatalf("node %d: %v", id, err)
		}
	}
	for range rounds {
		for id := uint64(1); id <= 4; id++ {
			e := c.engines[id]
			check(id, e.HandleMetadata())
			ep := c.net.Endpoint(transport.NodeID(id))
			for len(ep.Recv()) > 0 {
				m := <-ep.Recv()
				if k := [2]uint64{uint64(m.From), id}; m.Kind == host.KindMetaRaft && c.dropMeta[k] > 0 {
					c.dropMeta[k]--
					continue
				}
				if err := e.Deliver(m); err != nil {
					c.t.Fatal(err)
				}
			}
			check(id, e.TickMetadata())
		}
		c.clk.Advance(10 * time.Millisecond)
	}
}

// cut cuts (or, with linked, restores) both directions between a and
// each of others.
func (c *learnerCluster) cut(a uint64, linked bool, others ...uint64) {
	for _, b := range others {
		if linked {
			c.net.Connect(transport.NodeID(a), transport.NodeID(b))
			c.net.Connect(transport.NodeID(b), transport.NodeID(a))
		} else {
			c.net.Disconnect(transport.NodeID(a), transport.NodeID(b))
			c.net.Disconnect(transport.NodeID(b), transport.NodeID(a))
		}
	}
}

// leader is the founder among among that leads the metadata group by its
// own account (0: none).
func (c *learnerCluster) leader(among ...uint64) uint64 {
	for _, id := range among {
		if c.engines[id].MetadataStatus().Leader == id {
			return id
		}
	}
	return 0
}

// conf checks that each of nodes holds voters and learners as the
// metadata group's configuration, and names voters and learners together
// as the cluster's nodes.
func (c *learnerCluster) conf(what string, voters, learners []uint64, nodes ...uint64) {
	c.t.Helper()
	members := slices.Sorted(slices.Values(append(slices.Clone(voters), learners...)))
	for _, id := range nodes {
		e := c.engines[id]
		st := e.MetadataStatus()
		if !slices.Equal(st.Voters, voters) || !slices.Equal(st.Learners, learners) {
			c.t.Fatalf("%s: node %d's metadata group has voters %v and learners %v, want %v and %v", what, id, st.Voters, st.Learners, voters, learners)
		}
		if got := e.Meta().Nodes(); !slices.Equal(got, members) {
			c.t.Fatalf("%s: node %d's metadata names nodes %v, want %v", what, id, got, members)
		}
	}
}

// Behaviour 31 for the metadata group: a node added joins as a learner,
// so a metadata group of three that is growing still commits with one of
// its three voters cut off while the newcomer cannot be reached (with
// the newcomer a voter at once, as before, four voters would need three
// and only two could answer). The leader promotes the learner once it
// has caught up; a leader that loses its place mid-promotion leaves it
// to the next, which completes it.
func TestBehaviour31MetadataJoinerIsLearnerUntilCaughtUp(t *testing.T) {
	c := newLearnerCluster(t)
	c.step(20)
	lead := c.leader(1, 2, 3)
	if lead == 0 {
		t.Fatal("the founders elected no metadata leader")
	}
	// Node 4 cannot be reached: it is added, and catches nothing up.
	c.cut(4, false, 1, 2, 3)
	if err := c.engines[lead].ProposeAddNode(c.engines[lead].NewMetadataKey(), 4); err != nil {
		t.Fatal(err)
	}
	c.step(50)
	c.conf("node 4 added, cut off", []uint64{1, 2, 3}, []uint64{4}, 1, 2, 3)

	// A founder other than the leader is cut off too: the leader and the
	// remaining founder are a quorum of the three voters.
	var other, cut uint64
	for _, id := range []uint64{1, 2, 3} {
		switch {
		case id == lead:
		case cut == 0:
			cut = id
		default:
			other = id
		}
	}
	c.cut(cut, false, 1, 2, 3, 4)
	if _, err := c.engines[lead].ProposeMetadata(c.engines[lead].NewMetadataKey(), metadata.CreateStream{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	c.step(50)
	for _, id := range []uint64{lead, other} {
		if _, ok := c.engines[id].Meta().StreamByName("orders"); !ok {
			t.Fatalf("node %d: a stream created with voter %d and learner 4 cut off never committed (voters %v, learners %v)",
				id, cut, c.engines[id].MetadataStatus().Voters, c.engines[id].MetadataStatus().Learners)
		}
	}

	// The leader is cut off from everyone and the other founders meet
	// again: they elect a new leader, which, once node 4 can be reached,
	// promotes it — the old leader never could.
	c.cut(cut, true, other)
	c.cut(lead, false, 1, 2, 3, 4)
	c.step(100)
	next := c.leader(cut, other)
	if next == 0 {
		t.Fatalf("nodes %d and %d elected no metadata leader", cut, other)
	}
	c.conf("a new leader, node 4 still cut off", []uint64{1, 2, 3}, []uint64{4}, cut, other)
	c.cut(4, true, cut, other)
	c.step(100)
	c.conf("node 4 reachable by the new leader", []uint64{1, 2, 3, 4}, nil, cut, other, 4)
	if _, ok := c.engines[4].Meta().StreamByName("orders"); !ok {
		t.Fatal("the promoted node 4 does not know stream orders")
	}
	// The old leader learns it all when it returns.
	c.cut(lead, true, 1, 2, 3, 4)
	c.step(100)
	c.conf("every link restored", []uint64{1, 2, 3, 4}, nil, 1, 2, 3, 4)
}

// A learner restarted before it caught up, and again once it held the
// metadata snapshot, is promoted all the same: node 4 is added while cut
// off and restarted (a joiner with nothing yet); reachable again, it
// installs the leader's snapshot, naming it a learner, and is restarted
// at once from its disk; then it is promoted, and learns so after its
// restart. A learner's addition proposed again after the promotion (by a
// member whose view lagged) demotes nothing.
func TestMetadataLearnerRestartedMidCatchUp(t *testing.T) {
	c := newLearnerCluster(t)
	c.step(20)
	lead := c.leader(1, 2, 3)
	if lead == 0 {
		t.Fatal("the founders elected no metadata leader")
	}
	c.cut(4, false, 1, 2, 3)
	key := c.engines[lead].NewMetadataKey()
	if err := c.engines[lead].ProposeAddNode(key, 4); err != nil {
		t.Fatal(err)
	}
	c.step(50)
	c.conf("node 4 added, cut off", []uint64{1, 2, 3}, []uint64{4}, 1, 2, 3)
	restart := func() {
		t.Helper()
		if err := c.engines[4].Close(); err != nil {
			t.Fatal(err)
		}
		c.open(4)
	}
	restart()
	c.step(20)
	c.conf("node 4 restarted, cut off", []uint64{1, 2, 3}, []uint64{4}, 1, 2, 3)
	c.cut(4, true, 1, 2, 3)
	for range 100 {
		if len(c.engines[4].MetadataStatus().Learners) > 0 {
			break
		}
		c.step(1)
	}
	if st := c.engines[4].MetadataStatus(); !slices.Equal(st.Learners, []uint64{4}) || !slices.Equal(st.Voters, []uint64{1, 2, 3}) {
		t.Fatalf("reachable, node 4 holds voters %v and learners %v, want [1 2 3] and [4]", st.Voters, st.Learners)
	}
	restart()
	c.step(100)
	c.conf("node 4 restarted once it held the snapshot", []uint64{1, 2, 3, 4}, nil, 1, 2, 3, 4)

	// The same addition again, under its first key and a new one: nothing
	// changes.
	if err := c.engines[lead].ProposeAddNode(key, 4); err != nil {
		t.Fatal(err)
	}
	c.step(50)
	if err := c.engines[lead].ProposeAddNode(c.engines[lead].NewMetadataKey(), 4); err != nil {
		t.Fatal(err)
	}
	c.step(50)
	c.conf("node 4's addition proposed again", []uint64{1, 2, 3, 4}, nil, 1, 2, 3, 4)
}

// RemoveNode's change removes a node that is still a learner: node 4 is
// added while cut off, drained and removed, and the group is its three
// founders again, with no learner left.
func TestMetadataLearnerRemoved(t *testing.T) {
	c := newLearnerCluster(t)
	c.step(20)
	lead := c.leader(1, 2, 3)
	if lead == 0 {
		t.Fatal("the founders elected no metadata leader")
	}
	c.cut(4, false, 1, 2, 3)
	e := c.engines[lead]
	if err := e.ProposeAddNode(e.NewMetadataKey(), 4); err != nil {
		t.Fatal(err)
	}
	c.step(50)
	c.conf("node 4 added, cut off", []uint64{1, 2, 3}, []uint64{4}, 1, 2, 3)
	if _, err := e.ProposeMetadata(e.NewMetadataKey(), metadata.DrainNode{Node: 4}); err != nil {
		t.Fatal(err)
	}
	c.step(20)
	if err := e.ProposeRemoveNode(e.NewMetadataKey(), 4); err != nil {
		t.Fatal(err)
	}
	c.step(50)
	c.conf("learner 4 removed", []uint64{1, 2, 3}, nil, 1, 2, 3)
}

// promotedWhileDown runs a learner (node 4) to the moment its promotion
// committed while its raft log refused the write that would record it:
// the leader, every member at its match, quiesced; node 4 is down, to be
// reopened from its log a learner that knows no leader once its backoff
// passed (1 s, 100 ticks). It returns the leader.
func promotedWhileDown(t *testing.T) (*learnerCluster, uint64) {
	c := newLearnerCluster(t)
	c.step(20)
	lead := c.leader(1, 2, 3)
	if lead == 0 {
		t.Fatal("the founders elected no metadata leader")
	}
	e := c.engines[lead]
	if err := e.ProposeAddNode(e.NewMetadataKey(), 4); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if slices.Equal(e.MetadataStatus().Learners, []uint64{4}) {
			break
		}
		c.step(1)
	}
	c.conf("node 4 added", []uint64{1, 2, 3}, []uint64{4}, lead)

	// The other founders' answers stop reaching the leader (for 10 ticks,
	// not long enough for node liveness to hold them dead): node 4
	// catches up, and
	// the promotion the leader then proposes reaches every member, but
	// only node 4's acknowledgement comes back, and a learner counts for
	// no commit.
	var founders []transport.NodeID
	for _, id := range []uint64{1, 2, 3} {
		if id != lead {
			founders = append(founders, transport.NodeID(id))
		}
	}
	c.net.DisconnectGroups(founders, []transport.NodeID{transport.NodeID(lead)})
	c.step(10)
	if st := e.MetadataStatus(); !slices.Equal(st.Voters, []uint64{1, 2, 3}) {
		t.Fatalf("the promotion committed without the founders' answers: voters %v", st.Voters)
	}
	// Node 4's next raft log write fails: the one that records the commit
	// of its promotion, which the leader sends once the founders answer.
	c.inj[4].armed.Store(true)
	for _, f := range founders {
		c.net.Connect(f, transport.NodeID(lead))
	}
	for range 30 {
		if e.MetadataQuiesced() {
			break
		}
		c.step(1)
	}
	if !c.inj[4].fired.Load() {
		t.Fatal("node 4's raft log write did not fail")
	}
	if !e.MetadataQuiesced() {
		t.Fatal("the leader did not quiesce with node 4 down")
	}
	c.conf("the leader applied the promotion", []uint64{1, 2, 3, 4}, nil, lead)
	if st := c.engines[4].MetadataStatus(); slices.Contains(st.Voters, 4) {
		t.Fatalf("node 4 learned its promotion before its write failed: voters %v", st.Voters)
	}
	return c, lead
}

// A learner whose raft log refuses the write after it acknowledged its
// promotion, before it learned that the promotion committed, is promoted
// all the same once it is reopened (cluster simulator seed 6725). The
// leader, every member at its match, quiesces while the learner is down;
// the learner reopens from its log a learner that knows no leader, and a
// learner never campaigns: without the reopened member following its
// leader again (replica.Group.Follow), whose answer wakes it, nothing
// was ever sent to either of them again.
func TestMetadataLearnerReopenedAfterItsPromotionWakesTheQuiescedLeader(t *testing.T) {
	c, _ := promotedWhileDown(t)
	// Past the reopen's backoff (1 s, 100 ticks) and a few heartbeat
	// rounds, node 4 is a voter, to itself as to everyone.
	c.step(150)
	c.conf("node 4 reopened", []uint64{1, 2, 3, 4}, nil, 1, 2, 3, 4)
}

// The reopened learner's answer to its leader, the one message that
// would wake it, is lost: the learner answers again an election timeout
// later (followAgain), and is promoted. Answered once only, it stayed a
// learner for good (nothing else of its own reaches a quiesced leader).
func TestMetadataLearnerReopenedAnswersAgainWhenItsAnswerIsLost(t *testing.T) {
	c, lead := promotedWhileDown(t)
	c.dropMeta[[2]uint64{4, lead}] = 1
	c.step(150)
	if n := c.dropMeta[[2]uint64{4, lead}]; n != 0 {
		t.Fatalf("node 4 sent its leader no metadata message after its reopen (%d left to drop)", n)
	}
	c.conf("node 4 reopened, its first answer lost", []uint64{1, 2, 3, 4}, nil, 1, 2, 3, 4)
}
