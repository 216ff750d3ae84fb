package replica_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metrics"
)

// A leader times each entry from its append to its commit on the group's
// clock, and only the leader does; every member counts each election it
// learns of once, the leader included.
func TestObserveCommitLatencyAndElections(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	c := &cluster{t: t, members: map[uint64]*replica.Group{}, applied: map[uint64][]string{},
		leaders: map[uint64]uint64{}, cut: map[uint64]bool{}, snaps: map[uint64]int{},
		disks: map[uint64]*replica.Disk{}, boom: map[uint64]string{}, failed: map[uint64]error{},
		observe: map[uint64]metrics.RaftGroup{}, clock: clk}
	ms := map[uint64]*metrics.Metrics{}
	for id := uint64(1); id <= 3; id++ {
		ms[id] = metrics.NewLabeled(prometheus.Labels{"node": fmt.Sprint(id)})
		c.observe[id] = ms[id].RaftGroup(metrics.GroupPartition)
	}
	for id := uint64(1); id <= 3; id++ {
		c.start(id, 3)
	}
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle()
	elections := func(id uint64) float64 {
		return testutil.ToFloat64(ms[id].Elections.WithLabelValues(metrics.GroupPartition))
	}
	commits := func(id uint64) *dto.Histogram {
		var m dto.Metric
		if err := ms[id].RaftCommitLatency.WithLabelValues(metrics.GroupPartition).(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram()
	}
	for id := uint64(1); id <= 3; id++ {
		if got := elections(id); got != 1 {
			t.Fatalf("member %d counted %v elections, want 1", id, got)
		}
	}
	// The new leader's empty entry committed at once on the clock.
	base := commits(1).GetSampleCount()
	if base != 1 || commits(1).GetSampleSum() != 0 {
		t.Fatalf("leader: %d commits summing %v s after its election, want its empty entry at 0 s", base, commits(1).GetSampleSum())
	}
	if _, err := c.members[1].Propose([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := c.members[1].Handle(member{c, 1}); err != nil { // appended and sent
		t.Fatal(err)
	}
	clk.Advance(3 * time.Millisecond)
	c.settle()
	if h := commits(1); h.GetSampleCount() != base+1 || h.GetSampleSum() != 0.003 {
		t.Fatalf("leader: %d commits summing %v s, want %d summing 0.003", h.GetSampleCount(), h.GetSampleSum(), base+1)
	}
	// A leader that quiesces drops its commit marks; its next append is
	// timed all the same.
	if !c.members[1].CanQuiesce(func(uint64) bool { return true }) {
		t.Fatal("the caught-up leader cannot quiesce")
	}
	c.members[1].QuiesceMessages()
	if _, err := c.members[1].Propose([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if err := c.members[1].Handle(member{c, 1}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Millisecond)
	c.settle()
	if h := commits(1); h.GetSampleCount() != base+2 || h.GetSampleSum() != 0.008 {
		t.Fatalf("leader after quiescing: %d commits summing %v s, want %d summing 0.008", h.GetSampleCount(), h.GetSampleSum(), base+2)
	}
	for _, id := range []uint64{2, 3} {
		if n := commits(id).GetSampleCount(); n != 0 {
			t.Fatalf("follower %d observed %d commits", id, n)
		}
	}
	c.cut[1] = true
	lead := c.elect(40, 2, 3)
	if lead == 0 {
		t.Fatal("no new leader")
	}
	for _, id := range []uint64{2, 3} {
		if got := elections(id); got != 2 {
			t.Fatalf("member %d counted %v elections after the leader was cut off, want 2", id, got)
		}
	}
}
