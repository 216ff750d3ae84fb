package replica_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/replica"
)

// cluster wires members on the test goroutine: messages queue and are
// delivered by settle, so every run is deterministic.
type cluster struct {
	t       *testing.T
	members map[uint64]*replica.Group
	applied map[uint64][]string
	leaders map[uint64]uint64
	queue   []*raftpb.Message
	cut     map[uint64]bool // members whose traffic is dropped
}

type member struct {
	c  *cluster
	id uint64
}

func (m member) Send(msg *raftpb.Message) { m.c.queue = append(m.c.queue, msg) }
func (m member) Apply(index, id uint64, payload []byte) error {
	m.c.applied[m.id] = append(m.c.applied[m.id], string(payload))
	return nil
}
func (m member) LeaderChanged(lead uint64) { m.c.leaders[m.id] = lead }

func newCluster(t *testing.T, n int) *cluster {
	c := &cluster{t: t, members: map[uint64]*replica.Group{}, applied: map[uint64][]string{},
		leaders: map[uint64]uint64{}, cut: map[uint64]bool{}}
	var peers []uint64
	for i := 1; i <= n; i++ {
		peers = append(peers, uint64(i))
	}
	for _, id := range peers {
		g, err := replica.New(replica.Config{Group: 7, Node: id, Peers: peers})
		if err != nil {
			t.Fatal(err)
		}
		c.members[id] = g
	}
	return c
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
				c.t.Fatal(err)
			}
			moved = true
		}
		q := c.queue
		c.queue = nil
		for _, m := range q {
			if c.cut[m.GetTo()] || c.cut[m.GetFrom()] {
				continue
			}
			_ = c.members[m.GetTo()].Step(m)
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
		for _, g := range c.members {
			g.Tick()
		}
		c.settle()
	}
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
	for i := range 5 {
		if _, err := c.members[1].Propose(fmt.Appendf(nil, "m%d", i)); err != nil {
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
	c.tick(40)
	lead := c.leaderAmong(2, 3)
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
