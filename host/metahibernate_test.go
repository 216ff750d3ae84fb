package host_test

import (
	"testing"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/metadata"
)

// hibernating lists the nodes whose metadata member hibernates.
func (c *quietCluster) hibernating() (ids []int) {
	for i, e := range c.engines {
		if e.MetadataHibernating() {
			ids = append(ids, i+1)
		}
	}
	return ids
}

// The metadata group's followers hibernate once quiesced long enough, as
// the partition groups' do (the leader, node 1, does not), sending
// nothing; a proposal through a follower wakes it and commits; and when
// the leader dies, the hibernated survivors elect a new one as quickly
// as quiesced ones do (TestMetadataLeaderDeathElectsAfterQuiescence).
func TestMetadataFollowersHibernateAndWake(t *testing.T) {
	c := newQuietCluster(t)
	c.settle(20)
	clear(c.sent)
	c.tick(groups.HibernateAfterTicks)
	if h := c.hibernating(); len(h) != 2 || h[0] != 2 || h[1] != 3 {
		t.Fatalf("nodes %v hibernate, want the followers 2 and 3", h)
	}
	if n := c.sent[host.KindMetaRaft]; n != 0 {
		t.Fatalf("%d metadata raft messages while the followers went to hibernate", n)
	}
	for i, e := range c.engines {
		if lead := e.MetadataStatus().Leader; lead != 1 {
			t.Fatalf("node %d: leader %d while hibernating, want 1", i+1, lead)
		}
	}
	c.propose(2, metadata.CreateStream{Name: "a"}) // forwarded by a hibernated follower
	if h := c.hibernating(); len(h) != 0 {
		t.Fatalf("nodes %v still hibernate after a commit", h)
	}
	c.settle(20)
	c.tick(groups.HibernateAfterTicks)
	if h := c.hibernating(); len(h) != 2 {
		t.Fatalf("nodes %v hibernate again, want 2 and 3", h)
	}

	c.paused[0] = true // the leader stops
	c.electAfterLeaderStops(50 + 5)
	c.propose(1, metadata.CreateStream{Name: "b"})
	for i, e := range c.engines[1:] {
		if got := streamNames(e); got != "[a b]" {
			t.Errorf("node %d holds streams %s, want [a b]", i+2, got)
		}
	}
}
