// Package metrics holds parkway's Prometheus collectors. A Node owns one
// Metrics; the host registers it on its own registry (parkway never touches
// the global default registry). Two Nodes registered on one registry need
// distinct constant labels (NewLabeled, or parkway's Config.MetricsLabels;
// a cluster node adds node="<id>" by itself), or their series collide.
//
// Hosts that wire shards and reconcilers by hand pass a *Metrics to each
// (a nil one means a private, unregistered set).
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Drop reasons, the label values of parkway_frame_drops_total{reason}.
const (
	ReasonFull           = "full"
	ReasonDisconnected   = "disconnected"
	ReasonUnroutable     = "unroutable"
	ReasonDeliveryFailed = "delivery_failed"
	ReasonMisrouted      = "misrouted"
	ReasonParkOverflow   = "park_overflow"
	ReasonParkExpired    = "park_expired"
	ReasonNotOwner       = "not_owner"
	ReasonRemoved        = "removed"
	ReasonBuildFailed    = "build_failed"
	ReasonShutdown       = "shutdown"
	// ReasonNotReplicated: raft traffic for a partition this node holds
	// without a raft group (a single-node peer, a misconfiguration).
	ReasonNotReplicated = "not_replicated"
	// ReasonInvalidRaft: a raft message no correct peer sends, refused
	// before raft sees it (replica.ErrInvalidMessage).
	ReasonInvalidRaft = "invalid_raft_message"
	// ReasonWaitersFull: a waiting poll refused by the shard's bound on
	// waiting polls.
	ReasonWaitersFull = "waiters_full"
)

// Transient deny reasons, the label values of
// parkway_transient_denies_total{reason}.
const (
	DenyTombstoned  = "tombstoned"
	DenyIncarnation = "incarnation_mismatch"
	// DenyNoLeader: a replicated partition with no leader elected yet.
	DenyNoLeader = "no_leader"
)

// Metrics is the set of parkway collectors. It implements
// prometheus.Collector.
type Metrics struct {
	FrameDrops      *prometheus.CounterVec // shard, variant, reason
	Materialised    *prometheus.CounterVec // shard
	Removed         *prometheus.CounterVec // shard
	BuildFailures   *prometheus.CounterVec // shard
	ParkedFrames    *prometheus.GaugeVec   // shard
	ParkedBytes     *prometheus.GaugeVec   // shard
	StaleRejects    *prometheus.CounterVec // shard
	TransientDenies *prometheus.CounterVec // shard, reason
	Forwarded       *prometheus.CounterVec // shard
	RaftCompactions *prometheus.CounterVec // shard
	RaftSnapshots   *prometheus.CounterVec // shard
	CaughtUp        *prometheus.CounterVec // shard

	// The node-to-node transport's statistics (SetTransport), read at
	// scrape time.
	transportDescs transportDescs
	transport      transportSource
}

// New returns fresh, unregistered collectors with no constant labels.
func New() *Metrics { return NewLabeled(nil) }

// NewLabeled returns fresh, unregistered collectors whose every series
// carries labels (for example node="2"). Several Nodes in one process can
// then register on one registry: series that differ in a constant label
// are distinct, where unlabelled ones would collide.
func NewLabeled(labels prometheus.Labels) *Metrics {
	shard := []string{"shard"}
	return &Metrics{
		FrameDrops: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_frame_drops_total",
			Help:        "Frames not delivered to a partition, by frame variant and reason. Every dropped client frame was answered with an error.",
		}, []string{"shard", "variant", "reason"}),
		Materialised: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_partitions_materialised_total",
			Help:        "Partitions built and handed to their owning shard.",
		}, shard),
		Removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_partitions_removed_total",
			Help:        "Partitions torn down after their deletion committed.",
		}, shard),
		BuildFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_partition_builds_failed_total",
			Help:        "Failed partition builds and removals; each is retried with backoff.",
		}, shard),
		ParkedFrames: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			ConstLabels: labels,
			Name:        "parkway_parked_frames",
			Help:        "Frames parked waiting for their partition to materialise.",
		}, shard),
		ParkedBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			ConstLabels: labels,
			Name:        "parkway_parked_bytes",
			Help:        "Resident footprint of parked frames (lengths rounded up to the park alignment).",
		}, shard),
		StaleRejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_stale_rejects_total",
			Help:        "Frames stamped with a dead incarnation, rejected instead of served into its replacement.",
		}, shard),
		TransientDenies: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_transient_denies_total",
			Help:        "Requests answered with a retry-here error while the shard converges.",
		}, []string{"shard", "reason"}),
		Forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_frames_forwarded_total",
			Help:        "Frames a non-owner shard forwarded to the committed owner.",
		}, shard),
		RaftCompactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_raft_compactions_total",
			Help:        "Partition raft logs compacted behind a snapshot.",
		}, shard),
		RaftSnapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_raft_snapshots_installed_total",
			Help:        "Raft snapshots installed by a replica that lagged behind its leader's compacted log.",
		}, shard),
		CaughtUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_catchup_messages_total",
			Help:        "Messages a replica fetched from a peer's partition log after installing a snapshot.",
		}, shard),
		transportDescs: newTransportDescs(labels),
	}
}

func (m *Metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.FrameDrops, m.Materialised, m.Removed, m.BuildFailures,
		m.ParkedFrames, m.ParkedBytes, m.StaleRejects, m.TransientDenies, m.Forwarded,
		m.RaftCompactions, m.RaftSnapshots, m.CaughtUp}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
	m.transportDescs.describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
	if stats := m.transport.stats.Load(); stats != nil {
		m.transportDescs.collect(ch, (*stats)())
	}
}

// Shard returns the pre-resolved per-shard handles, so hot paths never
// look up label values.
func (m *Metrics) Shard(id int) *Shard {
	s := strconv.Itoa(id)
	return &Shard{
		m:               m,
		id:              s,
		Materialised:    m.Materialised.WithLabelValues(s),
		Removed:         m.Removed.WithLabelValues(s),
		BuildFailed:     m.BuildFailures.WithLabelValues(s),
		ParkedFrames:    m.ParkedFrames.WithLabelValues(s),
		ParkedBytes:     m.ParkedBytes.WithLabelValues(s),
		StaleRejects:    m.StaleRejects.WithLabelValues(s),
		Forwarded:       m.Forwarded.WithLabelValues(s),
		RaftCompactions: m.RaftCompactions.WithLabelValues(s),
		RaftSnapshots:   m.RaftSnapshots.WithLabelValues(s),
		CaughtUp:        m.CaughtUp.WithLabelValues(s),
	}
}

// Shard is one shard's view of the metrics.
type Shard struct {
	m            *Metrics
	id           string
	Materialised prometheus.Counter
	Removed      prometheus.Counter
	BuildFailed  prometheus.Counter
	ParkedFrames prometheus.Gauge
	ParkedBytes  prometheus.Gauge
	StaleRejects prometheus.Counter
	Forwarded    prometheus.Counter
	// Replicated partitions.
	RaftCompactions prometheus.Counter
	RaftSnapshots   prometheus.Counter
	CaughtUp        prometheus.Counter
}

// Drop counts one dropped frame. Drops are rare, so the label lookup here
// is off the hot path.
func (s *Shard) Drop(variant, reason string) {
	s.m.FrameDrops.WithLabelValues(s.id, variant, reason).Inc()
}

// Deny counts one transient deny that was handed to the reply path.
func (s *Shard) Deny(reason string) {
	s.m.TransientDenies.WithLabelValues(s.id, reason).Inc()
}
