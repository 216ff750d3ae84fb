package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/parkway-io/parkway/metrics"
)

// The observations on the hot paths (a produce's latency, a commit
// group's, an fsync's, a raft commit's) allocate nothing: they go to
// handles resolved once.
func TestHealthObservationsDoNotAllocate(t *testing.T) {
	m := metrics.NewLabeled(prometheus.Labels{"node": "1"})
	sh, topic, fsync := m.Shard(0), m.Topic("s", "t"), m.Fsync(metrics.LogJournal)
	start := time.Now()
	allocs := testing.AllocsPerRun(1000, func() {
		d := time.Since(start).Seconds()
		topic.Latency.Observe(d)
		sh.CommitLatency.Observe(d)
		sh.SegmentSyncs.Observe(d)
		sh.RaftSyncs.Observe(d)
		fsync.Observe(d)
		sh.Raft.Commit.Observe(d)
		sh.Raft.Elections.Inc()
		sh.Led.Inc()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round of observations, want 0", allocs)
	}
}

// Every new family is described and gathered under a pedantic registry
// with its documented labels; the group series come from the source set
// by SetGroups, read at each scrape.
func TestHealthSeriesAreScrapeable(t *testing.T) {
	m := metrics.NewLabeled(prometheus.Labels{"node": "2"})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	groups := []metrics.GroupStats{{Stream: "s", Topic: "t", Group: "g", Members: 3, Generation: 5, Rebalances: 5, Expiries: 1, Commits: 7}}
	m.SetGroups(func() []metrics.GroupStats { return groups })
	m.MetadataLeader.Set(3)
	m.Shard(1).Led.Inc()
	m.RaftGroup(metrics.GroupMetadata).Elections.Inc()
	m.Fsync(metrics.LogMetadata).Observe(0.002)
	for name, want := range map[string]int{
		"parkway_group_members": 1, "parkway_group_generation": 1, "parkway_group_rebalances_total": 1,
		"parkway_group_expiries_total": 1, "parkway_group_commits_total": 1,
		"parkway_metadata_leader": 1, "parkway_partitions_led": 1,
		// A shard resolves its series up front (partition elections, the
		// segment and raft fsyncs): they exist, at 0, before any event.
		"parkway_leader_elections_total": 2, "parkway_fsync_seconds": 3,
	} {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || got != want {
			t.Errorf("%s: %d series (%v), want %d", name, got, err, want)
		}
	}
	if got := testutil.ToFloat64(m.MetadataLeader); got != 3 {
		t.Fatalf("metadata leader %v, want 3", got)
	}
	groups = nil
	if got, _ := testutil.GatherAndCount(reg, "parkway_group_members"); got != 0 {
		t.Fatalf("%d group series once the source reports none", got)
	}
}

// BenchmarkHealthObserve is the cost a produce pays for the new series
// on top of the clock reads: one histogram observation.
func BenchmarkHealthObserve(b *testing.B) {
	m := metrics.New()
	o := m.Topic("s", "t").Latency
	b.ReportAllocs()
	for b.Loop() {
		o.Observe(0.0012)
	}
}
