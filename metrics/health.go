package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The series users alert on: latencies (produce, commit group, fsync,
// raft commit), leadership (partitions led, elections, the metadata
// leader) and consumer groups. Observations go to pre-resolved
// histograms and counters (atomic adds, no lock, no allocation); the
// group series are read from the committed metadata at scrape time.

// Label values of parkway_fsync_seconds{log}: which log an fsync made
// durable.
const (
	// LogSegment: a partition's tail segment (Partition.Sync, or an
	// Append with FileConfig.Sync).
	LogSegment = "segment"
	// LogJournal: the store's shared journal (one fdatasync per commit
	// group of a shard, or of several shards at once).
	LogJournal = "journal"
	// LogRaft: a replicated partition's raft log.
	LogRaft = "raft"
	// LogMetadata: the metadata log (the metadata raft group's log on a
	// cluster node, the metadata write-ahead log on a single node).
	LogMetadata = "metadata"
)

// Label values of the raft series' {group} label.
const (
	GroupPartition = "partition"
	GroupMetadata  = "metadata"
)

// latencyBuckets span 50 µs (an fsync on a fast NVMe device, a commit on
// one node) to 10 s (a stalled disk, an election under partition).
var latencyBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Health holds the collectors users alert on (latencies, leadership,
// consumer groups); Metrics embeds it, so its fields are Metrics's.
type Health struct {
	// ProduceLatency: stream, topic (names). Seconds from a Produce call
	// on this node to its acknowledgement, retries and forwarding
	// included.
	ProduceLatency *prometheus.HistogramVec
	// CommitLatency: shard. Seconds from a commit group's first append to
	// its acknowledgements (the group's fsync included), for partitions
	// this node acknowledges without raft.
	CommitLatency *prometheus.HistogramVec
	// FsyncLatency: log (LogSegment, LogJournal, LogRaft, LogMetadata).
	FsyncLatency *prometheus.HistogramVec
	// RaftCommitLatency: group (GroupPartition, GroupMetadata). Seconds
	// from an entry's append to the leader's log to its commit, observed
	// by the leader.
	RaftCommitLatency *prometheus.HistogramVec
	// Elections: group. Leaders this node learned of with a new term.
	Elections *prometheus.CounterVec
	// PartitionsLed is how many partition raft groups this node leads.
	PartitionsLed prometheus.Gauge
	// MetadataLeader is the metadata group's leader as this node knows it
	// (0: none known; always 0 on a single node).
	MetadataLeader prometheus.Gauge

	groups *groupCollector
}

func newHealth(labels prometheus.Labels) Health {
	hist := func(name, help string, label string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			ConstLabels: labels, Name: name, Help: help, Buckets: latencyBuckets,
		}, []string{label})
	}
	return Health{
		ProduceLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			ConstLabels: labels,
			Name:        "parkway_produce_seconds",
			Help:        "Seconds from a Produce call on this node to its acknowledgement (forwarding and retries included), by stream and topic name.",
			Buckets:     latencyBuckets,
		}, []string{"stream", "topic"}),
		CommitLatency: hist("parkway_commit_group_seconds",
			"Seconds from a commit group's first append to its acknowledgements (its fsync included), for partitions acknowledged without raft, by shard.", "shard"),
		FsyncLatency: hist("parkway_fsync_seconds",
			"Seconds each fsync took, by log: segment (a partition's tail), journal (the shared journal), raft (a partition's raft log), metadata (the metadata log).", "log"),
		RaftCommitLatency: hist("parkway_raft_commit_seconds",
			"Seconds from an entry's append to the leader's raft log to its commit, observed by the leader, by group (partition or metadata).", "group"),
		Elections: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_leader_elections_total",
			Help:        "Raft leaders this node learned of with a new term (an election it observed), by group (partition or metadata).",
		}, []string{"group"}),
		PartitionsLed: prometheus.NewGauge(prometheus.GaugeOpts{
			ConstLabels: labels,
			Name:        "parkway_partitions_led",
			Help:        "Partition raft groups this node leads.",
		}),
		MetadataLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			ConstLabels: labels,
			Name:        "parkway_metadata_leader",
			Help:        "The node id of the metadata group's leader as this node knows it (0: none known, or a single node).",
		}),
		groups: newGroupCollector(labels),
	}
}

func (h *Health) collectors() []prometheus.Collector {
	return []prometheus.Collector{h.ProduceLatency, h.CommitLatency, h.FsyncLatency,
		h.RaftCommitLatency, h.Elections, h.PartitionsLed, h.MetadataLeader}
}

// Fsync returns the observer of one log's fsyncs (a Log* constant).
func (m *Metrics) Fsync(log string) prometheus.Observer { return m.FsyncLatency.WithLabelValues(log) }

// RaftGroup returns one kind of raft group's observers (GroupPartition or
// GroupMetadata): commit latency and elections.
func (m *Metrics) RaftGroup(group string) RaftGroup {
	return RaftGroup{Commit: m.RaftCommitLatency.WithLabelValues(group), Elections: m.Elections.WithLabelValues(group)}
}

// RaftGroup is one kind of raft group's pre-resolved series.
type RaftGroup struct {
	Commit    prometheus.Observer
	Elections prometheus.Counter
}

// GroupStats is one consumer group as the group series report it. Groups
// are labelled by stream, topic and group name: slab ids are reused after
// a delete, names identify what a user alerts on. A group deleted and
// created again under the same names continues the same series, its
// counters reset (Prometheus' rate handles resets).
type GroupStats struct {
	Stream, Topic, Group string
	// Members are the live members, Generation the group's generation.
	Members, Generation uint64
	// Rebalances, Expiries and Commits count since the group was created
	// (Rebalances) or since this node loaded it (Expiries, Commits: they
	// are not part of the metadata snapshot).
	Rebalances, Expiries, Commits uint64
}

// groupCollector reports consumer groups from a source read at scrape
// time, so a group's series exist exactly while it does.
type groupCollector struct {
	members, generation, rebalances, expiries, commits *prometheus.Desc
	stats                                              atomic.Pointer[func() []GroupStats]
}

func newGroupCollector(labels prometheus.Labels) *groupCollector {
	l := []string{"stream", "topic", "group"}
	return &groupCollector{
		members:    prometheus.NewDesc("parkway_group_members", "Live members of a consumer group.", l, labels),
		generation: prometheus.NewDesc("parkway_group_generation", "A consumer group's generation (each rebalance starts the next).", l, labels),
		rebalances: prometheus.NewDesc("parkway_group_rebalances_total", "Rebalances of a consumer group since it was created (joins, leaves, expiries and partition changes each start one).", l, labels),
		expiries:   prometheus.NewDesc("parkway_group_expiries_total", "Members of a consumer group removed because their session lapsed, since this node loaded the group.", l, labels),
		commits:    prometheus.NewDesc("parkway_group_commits_total", "Offset commits applied to a consumer group, since this node loaded the group.", l, labels),
	}
}

func (g *groupCollector) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.members, g.generation, g.rebalances, g.expiries, g.commits} {
		ch <- d
	}
}

func (g *groupCollector) collect(ch chan<- prometheus.Metric) {
	stats := g.stats.Load()
	if stats == nil {
		return
	}
	for _, s := range (*stats)() {
		l := []string{s.Stream, s.Topic, s.Group}
		ch <- prometheus.MustNewConstMetric(g.members, prometheus.GaugeValue, float64(s.Members), l...)
		ch <- prometheus.MustNewConstMetric(g.generation, prometheus.GaugeValue, float64(s.Generation), l...)
		ch <- prometheus.MustNewConstMetric(g.rebalances, prometheus.CounterValue, float64(s.Rebalances), l...)
		ch <- prometheus.MustNewConstMetric(g.expiries, prometheus.CounterValue, float64(s.Expiries), l...)
		ch <- prometheus.MustNewConstMetric(g.commits, prometheus.CounterValue, float64(s.Commits), l...)
	}
}

// SetGroups makes the collectors report consumer groups, read by calling
// stats at every scrape (nil: none). stats must be safe to call from any
// goroutine.
func (m *Metrics) SetGroups(stats func() []GroupStats) {
	if stats == nil {
		m.groups.stats.Store(nil)
		return
	}
	m.groups.stats.Store(&stats)
}
