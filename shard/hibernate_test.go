package shard

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/parkway-io/parkway/internal/groups"
)

// A follower whose group stays quiesced groups.HibernateAfterTicks
// hibernates, at that tick and not one sooner; the leader does not; the
// raft tick stops once none waits. A produce wakes the followers, which
// apply it as before, and they hibernate again once the group quiesces
// again.
func TestQuiescedFollowerHibernatesAndWakes(t *testing.T) {
	r := newQuietRig(t)
	n := r.n
	o := func(id uint64) *owned { return n.shard(id).owned[r.ns] }
	hibernating := func() (ids []uint64) {
		for id := uint64(1); id <= 3; id++ {
			if o(id).rep.grp.Hibernating() {
				ids = append(ids, id)
			}
		}
		return ids
	}
	for round := range 2 {
		// Wake the group with a produce, then count from the tick it
		// quiesces again everywhere.
		c := produce(r.ns, "b")
		r.s.handle(c.f)
		n.settle()
		if a := c.answered(t); a.Err != nil {
			t.Fatal(a.Err)
		}
		if h := hibernating(); len(h) != 0 {
			t.Fatalf("round %d: members %v hibernate after a produce", round, h)
		}
		for i := 0; n.awake(1)+n.awake(2)+n.awake(3) != 0; i++ {
			if i == 100 {
				t.Fatal("the group did not quiesce")
			}
			n.tick(1)
		}
		n.tick(groups.HibernateAfterTicks - 1)
		if h := hibernating(); len(h) != 0 {
			t.Fatalf("round %d: members %v hibernate %d ticks after quiescing", round, h, groups.HibernateAfterTicks-1)
		}
		n.tick(1)
		h := hibernating()
		if len(h) != 2 || o(r.lead).rep.grp.Hibernating() {
			t.Fatalf("round %d: members %v hibernate, want the two followers of leader %d", round, h, r.lead)
		}
		for id := uint64(1); id <= 3; id++ {
			s := n.shard(id)
			if s.rg.q.awake.Sleeping() {
				t.Fatalf("round %d: node %d still keeps a follower waiting to hibernate", round, id)
			}
			want := float64(round + 1)
			if id == r.lead {
				want = 0
			}
			if got := testutil.ToFloat64(s.m.RaftHibernates); got != want {
				t.Fatalf("round %d: node %d counted %v hibernations, want %v", round, id, got, want)
			}
			if got, lead := o(id).rep.grp.Applied(), o(r.lead).rep.grp.Applied(); got != lead {
				t.Fatalf("round %d: node %d applied %d, the leader %d", round, id, got, lead)
			}
		}
	}
}
