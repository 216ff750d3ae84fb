package replica_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/vfs"
)

// cluster wires members on the test goroutine: messages queue and are
// delivered by settle, so every run is deterministic.
type cluster struct {
	t       testing.TB
	members map[uint64]*replica.Group
	applied map[uint64][]string
	leaders map[uint64]uint64
	queue   []*raftpb.Message
	cut     map[uint64]bool // members whose traffic is dropped
	snaps   map[uint64]int  // snapshots installed per member
	disks   map[uint64]*replica.Disk
	fs      vfs.FS
	// boom makes a member's Apply panic on this payload; failed holds
	// the error of each member whose group stopped on it.
	boom   map[uint64]string
	failed map[uint64]error
	sent   []*raftpb.Message // every message sent, for fuzz seeds
	// dynamic starts members with Config.Dynamic (membership changes).
	dynamic bool
	// observe gives each member started these observers, timed on clock.
	observe map[uint64]metrics.RaftGroup
	clock   clock.Clock
	// onSend and onApply, if set, see each message a member sends and
	// each entry it applies, when it does.
	onSend  func(from uint64, msg *raftpb.Message)
	onApply func(id, index uint64)
}

type member struct {
	c  *cluster
	id uint64
}

func (m member) Send(msg *raftpb.Message) {
	if m.c.onSend != nil {
		m.c.onSend(m.id, msg)
	}
	m.c.queue = append(m.c.queue, msg)
	m.c.sent = append(m.c.sent, msg)
}
func (m member) Apply(index, id uint64, payload []byte) error {
	if b, ok := m.c.boom[m.id]; ok && b == string(payload) {
		panic("the state machine cannot apply " + b)
	}
	if m.c.onApply != nil {
		m.c.onApply(m.id, index)
	}
	m.c.applied[m.id] = append(m.c.applied[m.id], string(payload))
	return nil
}
func (m member) LeaderChanged(lead uint64) { m.c.leaders[m.id] = lead }
func (m member) ApplySnapshot(index uint64, data []byte) error {
	// The test state machine is the list of applied payloads; a snapshot
	// carries it whole.
	m.c.applied[m.id] = decodeState(data)
	m.c.snaps[m.id]++
	return nil
}

func newCluster(t testing.TB, n int) *cluster {
	return newClusterOn(t, n, nil)
}

// newClusterOn is newCluster with every member's raft log on fsys (nil:
// in memory).
func newClusterOn(t testing.TB, n int, fsys vfs.FS) *cluster {
	c := &cluster{t: t, members: map[uint64]*replica.Group{}, applied: map[uint64][]string{},
		leaders: map[uint64]uint64{}, cut: map[uint64]bool{}, snaps: map[uint64]int{},
		disks: map[uint64]*replica.Disk{}, fs: fsys, boom: map[uint64]string{}, failed: map[uint64]error{}}
	for i := 1; i <= n; i++ {
		c.start(uint64(i), n)
	}
	return c
}

// start (re)starts member id from its raft log, restoring its state
// machine from the log's snapshot as an owner must.
func (c *cluster) start(id uint64, n int) {
	var peers []uint64
	for i := 1; i <= n; i++ {
		peers = append(peers, uint64(i))
	}
	cfg := replica.Config{Group: 7, Node: id, Peers: peers, CatchUpEntries: 4, Dynamic: c.dynamic,
		CheckSnapshot: func(b []byte) error { // what decodeState can take
			if !utf8.Valid(b) {
				return errors.New("state is not UTF-8")
			}
			return nil
		}}
	if o, ok := c.observe[id]; ok {
		cfg.Metrics, cfg.Clock = o, c.clock
	}
	if c.fs != nil {
		d, err := replica.OpenDisk(c.fs, fmt.Sprintf("/raft/%d/log", id), true)
		if err != nil {
			c.t.Fatal(err)
		}
		c.disks[id] = d
		cfg.Disk = d
	}
	g, err := replica.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	_, data := g.Snapshot()
	c.applied[id] = decodeState(data)
	c.members[id] = g
}

func encodeState(s []string) []byte { return []byte(strings.Join(s, ",")) }

func decodeState(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), ",")
}

// settle handles and delivers until nothing moves. Messages between a cut
// member and any other are dropped.
func (c *cluster) settle() {
	for range 10000 {
		moved := false
		for id := uint64(1); id <= uint64(len(c.members)); id++ {
			g := c.members[id]
			if !g.HasReady() {
				continue
			}
			if err := g.Handle(member{c, id}); err != nil {
				if _, ok := c.boom[id]; !ok {
					c.t.Fatal(err)
				}
				c.failed[id] = err
			}
			moved = true
		}
		q := c.queue
		c.queue = nil
		for _, m := range q {
			if c.cut[m.GetTo()] || c.cut[m.GetFrom()] || c.failed[m.GetTo()] != nil {
				continue
			}
			// Raft may refuse a stale message; validation must never
			// refuse what a correct member sent.
			if err := c.members[m.GetTo()].Step(m); errors.Is(err, replica.ErrInvalidMessage) || errors.Is(err, replica.ErrGroupFailed) {
				c.t.Fatalf("member %d refused %v from %d: %v", m.GetTo(), m.GetType(), m.GetFrom(), err)
			}
			moved = true
		}
		if !moved {
			return
		}
	}
	c.t.Fatal("cluster did not settle")
}

func (c *cluster) tick(n int) {
	for range n {
		for id, g := range c.members {
			if err := g.Tick(); err != nil && c.failed[id] == nil {
				c.t.Fatal(err)
			}
		}
		c.settle()
	}
}

// elect ticks at least n times, then on until one of ids leads (at most
// 1,000 ticks more), and returns it (0: none). Two members may time out
// in the same tick (their randomised timeouts, drawn by etcd raft from
// its own source, collide about one time in ten) and split the vote, so
// raft promises a leader only with a probability that grows with each
// round: a fixed number of ticks failed about one run in a hundred.
func (c *cluster) elect(n int, ids ...uint64) uint64 {
	c.tick(n)
	lead := c.leaderAmong(ids...)
	for i := 0; lead == 0 && i < 1000; i++ {
		c.tick(1)
		lead = c.leaderAmong(ids...)
	}
	return lead
}

func (c *cluster) leaderAmong(ids ...uint64) uint64 {
	for _, id := range ids {
		if c.members[id].IsLeader() {
			return id
		}
	}
	return 0
}

func TestReplicateAndFailOver(t *testing.T) {
	c := newCluster(t, 3)
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if !c.members[1].IsLeader() {
		t.Fatal("member 1 did not win its campaign")
	}
	if _, err := c.members[2].Propose([]byte("x")); !errors.Is(err, replica.ErrNotLeader) {
		t.Fatalf("follower proposal: %v", err)
	}
	// One buffer for every proposal: Propose copies its payload, so the
	// caller may reuse it at once (a shard encodes each entry there).
	buf := make([]byte, 0, 8)
	for i := range 5 {
		buf = fmt.Appendf(buf[:0], "m%d", i)
		if _, err := c.members[1].Propose(buf); err != nil {
			t.Fatal(err)
		}
	}
	c.settle()
	want := []string{"m0", "m1", "m2", "m3", "m4"}
	for id := uint64(1); id <= 3; id++ {
		if !slices.Equal(c.applied[id], want) {
			t.Fatalf("member %d applied %q", id, c.applied[id])
		}
	}
	// The leader is cut off; the others elect a new one and keep the log,
	// and the old leader steps down (CheckQuorum): a minority takes no
	// writes.
	c.cut[1] = true
	lead := c.elect(40, 2, 3)
	if lead == 0 {
		t.Fatal("no new leader among the majority")
	}
	if c.members[1].IsLeader() {
		t.Fatal("cut-off leader still leads")
	}
	if _, err := c.members[1].Propose([]byte("lost")); !errors.Is(err, replica.ErrNotLeader) {
		t.Fatalf("minority accepted a write: %v", err)
	}
	if _, err := c.members[lead].Propose([]byte("m5")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	for _, id := range []uint64{2, 3} {
		if got := c.applied[id]; !slices.Equal(got, append(want, "m5")) {
			t.Fatalf("member %d applied %q after failover", id, got)
		}
		if c.leaders[id] != lead {
			t.Fatalf("member %d saw leader %d, want %d", id, c.leaders[id], lead)
		}
	}
	// Healed, the old leader catches up.
	c.cut[1] = false
	c.tick(20)
	if got := c.applied[1]; !slices.Equal(got, append(want, "m5")) {
		t.Fatalf("healed member applied %q", got)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := replica.New(replica.Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
}

// TestRestartFromDisk: a member restarted from its raft log comes back
// with its term, vote and entries, re-applies the committed ones from its
// snapshot, and keeps replicating — and a member stopped while entries
// committed catches up when it returns.
func TestRestartFromDisk(t *testing.T) {
	c := newClusterOn(t, 3, vfs.NewMem())
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	var want []string
	propose := func(lead uint64, from, to int) {
		for i := from; i < to; i++ {
			v := fmt.Sprintf("m%d", i)
			if _, err := c.members[lead].Propose([]byte(v)); err != nil {
				t.Fatal(err)
			}
			want = append(want, v)
		}
		c.settle()
	}
	propose(1, 0, 5)
	// Member 2 stops and restarts: nothing applied survives in memory.
	if err := c.members[2].Close(); err != nil {
		t.Fatal(err)
	}
	c.cut[2] = true
	propose(1, 5, 8)
	c.start(2, 3)
	if got := c.applied[2]; len(got) != 0 {
		t.Fatalf("restarted member starts from %q, want the initial state", got)
	}
	c.cut[2] = false
	c.tick(5)
	if got := c.applied[2]; !slices.Equal(got, want) {
		t.Fatalf("restarted member applied %q, want %q", got, want)
	}
	// The leader restarts too; the group elects again and goes on.
	if err := c.members[1].Close(); err != nil {
		t.Fatal(err)
	}
	c.start(1, 3)
	lead := c.elect(40, 1, 2, 3)
	if lead == 0 {
		t.Fatal("no leader after the leader restarted")
	}
	propose(lead, 8, 10)
	for id := uint64(1); id <= 3; id++ {
		if got := c.applied[id]; !slices.Equal(got, want) {
			t.Fatalf("member %d applied %q, want %q", id, got, want)
		}
	}
}

// TestCompactAndSnapshot: compaction bounds the log, a restart restores
// from the snapshot and re-applies only what follows it, and a member that
// lags behind the leader's compacted log is sent the snapshot.
func TestCompactAndSnapshot(t *testing.T) {
	fsys := vfs.NewMem()
	c := newClusterOn(t, 3, fsys)
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	c.cut[3] = true
	var want []string
	for i := range 40 {
		v := fmt.Sprintf("m%d", i)
		if _, err := c.members[1].Propose([]byte(v)); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
		c.settle()
	}
	for _, id := range []uint64{1, 2} {
		g := c.members[id]
		sizeBefore := c.disks[id].Size()
		if err := g.Compact(g.Applied(), encodeState(c.applied[id])); err != nil {
			t.Fatal(err)
		}
		if g.SnapshotIndex() != g.Applied() {
			t.Fatalf("member %d snapshot at %d, applied %d", id, g.SnapshotIndex(), g.Applied())
		}
		if after := c.disks[id].Size(); after >= sizeBefore {
			t.Fatalf("member %d log %d bytes after compaction, %d before", id, after, sizeBefore)
		}
		if err := g.Compact(g.Applied(), nil); err == nil {
			t.Fatal("compacting twice at one index accepted")
		}
	}
	// Member 2 restarts from its snapshot: its state comes back whole
	// without replaying the compacted entries.
	if err := c.members[2].Close(); err != nil {
		t.Fatal(err)
	}
	c.start(2, 3)
	if got := c.applied[2]; !slices.Equal(got, want) {
		t.Fatalf("member 2 restored %q from its snapshot", got)
	}
	// Member 3 lags by more than the log kept: it gets the snapshot.
	c.cut[3] = false
	c.tick(10)
	if c.snaps[3] == 0 {
		t.Fatal("lagging member was not sent a snapshot")
	}
	if _, err := c.members[1].Propose([]byte("after")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	want = append(want, "after")
	for id := uint64(1); id <= 3; id++ {
		if got := c.applied[id]; !slices.Equal(got, want) {
			t.Fatalf("member %d applied %q, want %q", id, got, want)
		}
	}
	// And member 3 restarts from the snapshot it was sent.
	if err := c.members[3].Close(); err != nil {
		t.Fatal(err)
	}
	c.start(3, 3)
	c.tick(3)
	if got := c.applied[3]; !slices.Equal(got, want) {
		t.Fatalf("member 3 after restart %q, want %q", got, want)
	}
}

// A member reopened from its Disk with Config.Applied — its owner's state
// machine survived, only the group is reopened — applies nothing up to
// that index again and goes on applying after it; an Applied beyond the
// commit index the Disk holds is a log that lost what was applied, and is
// refused.
func TestReopenKeepsWhatTheOwnerApplied(t *testing.T) {
	c := newClusterOn(t, 3, vfs.NewMem())
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	var want []string
	for i := range 5 {
		v := fmt.Sprintf("m%d", i)
		if _, err := c.members[1].Propose([]byte(v)); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	c.settle()
	old := c.members[2]
	applied := old.Applied()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	open := func(applied uint64) (*replica.Group, error) {
		d, err := replica.OpenDisk(c.fs, "/raft/2/log", true)
		if err != nil {
			t.Fatal(err)
		}
		g, err := replica.New(replica.Config{Group: 7, Node: 2, Peers: []uint64{1, 2, 3}, Disk: d, Applied: applied})
		if err != nil {
			d.Close()
		}
		return g, err
	}
	if _, err := open(applied + 1); !errors.Is(err, replica.ErrCorruptLog) {
		t.Fatalf("reopen with an applied index past the commit: %v, want ErrCorruptLog", err)
	}
	g, err := open(applied)
	if err != nil {
		t.Fatal(err)
	}
	if g.Applied() != applied {
		t.Fatalf("reopened member at applied %d, want %d", g.Applied(), applied)
	}
	c.members[2] = g
	if _, err := c.members[1].Propose([]byte("m5")); err != nil {
		t.Fatal(err)
	}
	want = append(want, "m5")
	c.tick(5)
	if got := c.applied[2]; !slices.Equal(got, want) {
		t.Fatalf("reopened member applied %q, want %q (each once)", got, want)
	}
}

// A member reopened with Config.Applied past a configuration change that
// its log's snapshot predates holds the configuration after that change:
// raft delivers nothing up to Applied again, so it would otherwise never
// apply the change, and count a removed member in its quorums (the
// metadata group's member reopened after a raft log failure named a
// removed node as a voter: simulator cluster seed 83).
func TestReopenPastAConfChangeKeepsTheChange(t *testing.T) {
	c := &cluster{t: t, members: map[uint64]*replica.Group{}, applied: map[uint64][]string{},
		leaders: map[uint64]uint64{}, cut: map[uint64]bool{}, snaps: map[uint64]int{},
		disks: map[uint64]*replica.Disk{}, fs: vfs.NewMem(), boom: map[uint64]string{}, failed: map[uint64]error{},
		dynamic: true}
	for id := uint64(1); id <= 3; id++ {
		c.start(id, 3)
	}
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if err := c.members[1].ProposeConfChange(false, 3, nil); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if _, err := c.members[1].Propose([]byte("after")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	old := c.members[2]
	if got := old.AppliedVoters(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("before the reopen member 2 holds voters %v, want [1 2]", got)
	}
	if s := old.SnapshotIndex(); s >= old.Applied() {
		t.Fatalf("the log's snapshot (index %d) does not predate the change (applied %d)", s, old.Applied())
	}
	applied := old.Applied()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := replica.OpenDisk(c.fs, "/raft/2/log", true)
	if err != nil {
		t.Fatal(err)
	}
	g, err := replica.New(replica.Config{Group: 7, Node: 2, Peers: []uint64{1, 2, 3}, Dynamic: true, Disk: d, Applied: applied})
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	c.members[2] = g
	if got := g.AppliedVoters(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("reopened at applied %d, member 2 holds voters %v, want [1 2]", applied, got)
	}
	if got := g.Voters(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("reopened member 2 checks messages against voters %v, want [1 2]", got)
	}
	// And the two remaining members commit alone.
	if _, err := c.members[1].Propose([]byte("two")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if got := c.applied[2]; len(got) == 0 || got[len(got)-1] != "two" {
		t.Fatalf("reopened member 2 applied %q, want it to end with \"two\"", got)
	}
}

// A joining member saves its term and vote on hearing from the leader,
// before the leader's snapshot arrives (or before the write of it fails):
// restarted from that log, it is the joiner it was — empty, not a voter,
// its term kept — not a log without a snapshot to refuse as corrupt.
func TestJoinerRestartsBeforeItsFirstSnapshot(t *testing.T) {
	fs := vfs.NewMem()
	d, err := replica.OpenDisk(fs, "/raft/4/log", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Save(nil, nil, &raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(0)), Commit: new(uint64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d, err = replica.OpenDisk(fs, "/raft/4/log", true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	g, err := replica.New(replica.Config{Group: 7, Node: 4, Peers: []uint64{1, 2, 3, 4}, Dynamic: true, Join: true, Disk: d})
	if err != nil {
		t.Fatalf("a joiner with a term and no snapshot did not reopen: %v", err)
	}
	if v := g.Voters(); len(v) != 0 {
		t.Fatalf("the reopened joiner has voters %v, want none until its snapshot", v)
	}
	if term := g.Term(); term != 3 {
		t.Fatalf("the reopened joiner is at term %d, want the 3 it saved", term)
	}
}

// A member restarted with a configuration change at its log's end that
// never committed — a leader cut off as it proposed it — must not count
// it among its voters: a new leader overwrites it. Counted, it stayed
// counted: a snapshot the member compacted to named it, and a member
// restored from that held voters the group never had (the simulator found
// a metadata member whose voters named a node its metadata did not,
// cluster seed 30), and a partition's move driver took a replica for
// added whose addition had been overwritten and waited for it for ever
// (cluster seed 223).
func TestRestartPastAnUncommittedConfChangeKeepsTheAppliedVoters(t *testing.T) {
	c := &cluster{t: t, members: map[uint64]*replica.Group{}, applied: map[uint64][]string{},
		leaders: map[uint64]uint64{}, cut: map[uint64]bool{}, snaps: map[uint64]int{},
		disks: map[uint64]*replica.Disk{}, fs: vfs.NewMem(), boom: map[uint64]string{}, failed: map[uint64]error{},
		dynamic: true}
	for id := uint64(1); id <= 3; id++ {
		c.start(id, 3)
	}
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if _, err := c.members[1].Propose([]byte("one")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	// Cut off, the leader appends the removal of member 3 alone.
	c.cut[1] = true
	if err := c.members[1].ProposeConfChange(false, 3, nil); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if err := c.members[1].Close(); err != nil {
		t.Fatal(err)
	}
	c.start(1, 3)
	if got := c.members[1].Voters(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("restarted past an uncommitted removal of member 3, member 1 counts voters %v, want [1 2 3]", got)
	}
	// Members 2 and 3 elect a leader, whose entries replace the change.
	var lead uint64
	for range 100 {
		if lead = c.leaderAmong(2, 3); lead != 0 {
			break
		}
		c.tick(1)
	}
	if lead == 0 {
		t.Fatal("members 2 and 3 elected no leader")
	}
	if _, err := c.members[lead].Propose([]byte("two")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	c.cut[1] = false
	c.tick(3)
	g := c.members[1]
	if got := c.applied[1]; len(got) == 0 || got[len(got)-1] != "two" {
		t.Fatalf("member 1 applied %q, want it to end with \"two\"", got)
	}
	if err := g.Compact(g.Applied(), encodeState(c.applied[1])); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	c.start(1, 3)
	if got := c.members[1].Voters(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("restored from its snapshot, member 1 counts voters %v, want [1 2 3]: the change never committed", got)
	}
	if got := c.members[1].AppliedVoters(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("restored from its snapshot, member 1 holds voters %v, want [1 2 3]: the change never committed", got)
	}
}

// A member added as a learner receives the log but counts in no quorum:
// with it and one voter cut off, the other two voters still commit. A
// learner's progress is reported like a voter's (Caught, Match), it is
// kept across a restart that replays the change (before any snapshot
// names it), and adding it again as a voter promotes it.
// joinCluster is a group of three members that may change, on disks,
// led by member 1, which committed one entry, and member 4 started as a
// joiner (an empty member waiting to be added and sent a snapshot).
func joinCluster(t *testing.T) (c *cluster, joiner *replica.Group) {
	t.Helper()
	fs := vfs.NewMem()
	c = &cluster{t: t, members: map[uint64]*replica.Group{}, applied: map[uint64][]string{},
		leaders: map[uint64]uint64{}, cut: map[uint64]bool{}, snaps: map[uint64]int{},
		disks: map[uint64]*replica.Disk{}, fs: fs, boom: map[uint64]string{}, failed: map[uint64]error{},
		dynamic: true}
	for id := uint64(1); id <= 3; id++ {
		c.start(id, 3)
	}
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if _, err := c.members[1].Propose([]byte("one")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	d, err := replica.OpenDisk(fs, "/raft/4/log", true)
	if err != nil {
		t.Fatal(err)
	}
	j, err := replica.New(replica.Config{Group: 7, Node: 4, Peers: []uint64{1, 2, 3, 4}, Dynamic: true, Join: true, Disk: d})
	if err != nil {
		t.Fatal(err)
	}
	c.members[4], c.disks[4] = j, d
	return c, j
}

func TestLearnerJoinsThenIsPromoted(t *testing.T) {
	c, j := joinCluster(t)
	lead := c.members[1]
	// Until the leader's snapshot names it, the joiner can take nothing
	// (as a partition's leader compacts once a member joined).
	c.cut[4] = true
	if err := lead.ProposeLearner(4, nil); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if !slices.Equal(lead.Learners(), []uint64{4}) || !slices.Equal(slices.Sorted(slices.Values(lead.Voters())), []uint64{1, 2, 3}) || !lead.IsLearner(4) {
		t.Fatalf("after adding learner 4: voters %v, learners %v", lead.Voters(), lead.Learners())
	}
	// Restarted before a snapshot names the learner, a member replays the
	// change from its log.
	if err := c.members[2].Close(); err != nil {
		t.Fatal(err)
	}
	c.start(2, 3)
	c.settle()
	if got := c.members[2].Learners(); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("member 2 restarted holds learners %v, want [4]", got)
	}
	// The learner takes a snapshot naming it.
	if err := lead.Compact(lead.Applied(), encodeState(c.applied[1])); err != nil {
		t.Fatal(err)
	}
	c.cut[4] = false
	c.tick(3)
	if !lead.Caught(4) || lead.Match(4) < lead.SnapshotIndex() {
		t.Fatalf("learner 4 not caught up: caught %v, match %d, snapshot %d", lead.Caught(4), lead.Match(4), lead.SnapshotIndex())
	}
	if got := j.Learners(); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("the learner holds learners %v after its snapshot, want [4]", got)
	}
	// A learner counts in no quorum: voters 1 and 2 commit without 3 and 4.
	c.cut[3], c.cut[4] = true, true
	if _, err := lead.Propose([]byte("two")); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if got := c.applied[1]; len(got) == 0 || got[len(got)-1] != "two" {
		t.Fatalf("voters 1 and 2 did not commit with a voter and the learner cut off: applied %q", got)
	}
	c.cut[3], c.cut[4] = false, false
	// Promoted, it is a voter and no longer a learner, everywhere.
	if err := lead.ProposeConfChange(true, 4, nil); err != nil {
		t.Fatal(err)
	}
	c.tick(3)
	for id := uint64(1); id <= 4; id++ {
		g := c.members[id]
		if v := slices.Sorted(slices.Values(g.Voters())); !slices.Equal(v, []uint64{1, 2, 3, 4}) || len(g.Learners()) != 0 {
			t.Fatalf("member %d after the promotion: voters %v, learners %v", id, v, g.Learners())
		}
	}
	if got := c.applied[4]; len(got) == 0 || got[len(got)-1] != "two" {
		t.Fatalf("the promoted member applied %q, want it to end with \"two\"", got)
	}
	// A learner's addition proposed again after the promotion (by a
	// member whose view lagged) demotes nothing: raft would, the group
	// applies it as no change, and a member that replays it from its log
	// agrees.
	if err := lead.ProposeLearner(4, nil); err != nil {
		t.Fatal(err)
	}
	c.tick(3)
	if err := c.members[2].Close(); err != nil {
		t.Fatal(err)
	}
	c.start(2, 3)
	c.tick(3)
	for id := uint64(1); id <= 4; id++ {
		g := c.members[id]
		v, av := slices.Sorted(slices.Values(g.Voters())), g.AppliedVoters()
		if !slices.Equal(v, []uint64{1, 2, 3, 4}) || !slices.Equal(av, v) || len(g.Learners()) != 0 || len(g.AppliedLearners()) != 0 {
			t.Fatalf("member %d after a learner's addition of voter 4: voters %v (raft's %v), learners %v (raft's %v)",
				id, v, av, g.Learners(), g.AppliedLearners())
		}
	}
}
