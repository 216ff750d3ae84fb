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
	// ReasonOutOfReach: a raft message whose term (or snapshot index) is
	// further ahead of the receiver's than any correct run gets
	// (replica.ErrOutOfReach), refused so it cannot spend the group's term
	// or index space.
	ReasonOutOfReach = "raft_out_of_reach"
	// ReasonWaitersFull: a waiting poll refused by the shard's bound on
	// waiting polls.
	ReasonWaitersFull = "waiters_full"
	// ReasonInboxBytes: a peer's raft or catch-up message refused by the
	// shard inbox's byte bound (the peer sends it again).
	ReasonInboxBytes = "inbox_bytes"
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
	ReplicaRepairs  *prometheus.CounterVec // shard
	RaftQuiesces    *prometheus.CounterVec // shard
	RaftWakes       *prometheus.CounterVec // shard
	RaftHibernates  *prometheus.CounterVec // shard
	LeaderTransfers *prometheus.CounterVec // shard

	// The client side, counted by the node a call was made on.
	Produced      *prometheus.CounterVec   // stream, topic: messages acknowledged
	ProducedBytes *prometheus.CounterVec   // stream, topic: their bytes (partition.MessageSize)
	Polled        *prometheus.CounterVec   // stream, topic: messages returned by polls
	PolledBytes   *prometheus.CounterVec   // stream, topic
	PollWait      *prometheus.HistogramVec // stream, topic: how long waiting polls waited
	ConsumerLag   *prometheus.GaugeVec     // stream, topic, partition, consumer

	// The node-to-node transport's statistics (SetTransport), read at
	// scrape time.
	transportDescs transportDescs
	transport      transportSource
	// The forwarded requests' statistics (SetForwarded).
	forwarded *forwarded

	// Latencies, leadership and consumer groups (health.go).
	Health
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
		Produced: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_produced_messages_total",
			Help:        "Messages whose produce was acknowledged to a caller of this node, by stream and topic name.",
		}, []string{"stream", "topic"}),
		ProducedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_produced_bytes_total",
			Help:        "Bytes of the acknowledged messages as the produce limits count them (payload, key, headers and record framing), by stream and topic name.",
		}, []string{"stream", "topic"}),
		Polled: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_polled_messages_total",
			Help:        "Messages returned to pollers on this node, by stream and topic name.",
		}, []string{"stream", "topic"}),
		PolledBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_polled_bytes_total",
			Help:        "Bytes of the messages returned to pollers, counted as parkway_produced_bytes_total counts them, by stream and topic name.",
		}, []string{"stream", "topic"}),
		PollWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			ConstLabels: labels,
			Name:        "parkway_poll_wait_seconds",
			Help:        "How long waiting polls (WaitFor > 0) took to be answered, by stream and topic name.",
			Buckets:     []float64{.0005, .001, .005, .01, .05, .1, .5, 1, 5, 30},
		}, []string{"stream", "topic"}),
		ConsumerLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			ConstLabels: labels,
			Name:        "parkway_consumer_lag_messages",
			Help:        "Messages between a Consumer's position and its partition's end at its last poll; consumer is the consumer name or group:<group>.",
		}, []string{"stream", "topic", "partition", "consumer"}),
		CaughtUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_catchup_messages_total",
			Help:        "Messages a replica fetched from a peer's partition log after installing a snapshot.",
		}, shard),
		ReplicaRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_replica_repairs_total",
			Help:        "Replicas of a partition found damaged on disk (a *CorruptError) whose local copy was set aside to be fetched again from their peers.",
		}, shard),
		RaftQuiesces: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_raft_quiesces_total",
			Help:        "Partition raft groups that stopped ticking (quiesced) with nothing to do.",
		}, shard),
		RaftWakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_raft_wakes_total",
			Help:        "Partition raft groups that started ticking: created, or woken from quiescence by a proposal, a read, a peer's message or node liveness.",
		}, shard),
		RaftHibernates: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_raft_hibernations_total",
			Help:        "Partition raft groups whose follower dropped its raft node after staying quiesced (hibernated); it is rebuilt when the group wakes.",
		}, shard),
		LeaderTransfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			ConstLabels: labels,
			Name:        "parkway_leader_transfers_total",
			Help:        "Partition raft groups whose leadership this node handed back to their preferred leader (leader balance).",
		}, shard),
		transportDescs: newTransportDescs(labels),
		forwarded:      newForwarded(labels),
		Health:         newHealth(labels),
	}
}

func (m *Metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.FrameDrops, m.Materialised, m.Removed, m.BuildFailures,
		m.ParkedFrames, m.ParkedBytes, m.StaleRejects, m.TransientDenies, m.Forwarded,
		m.RaftCompactions, m.RaftSnapshots, m.CaughtUp, m.ReplicaRepairs, m.RaftQuiesces, m.RaftWakes, m.RaftHibernates, m.LeaderTransfers,
		m.Produced, m.ProducedBytes, m.Polled, m.PolledBytes, m.PollWait, m.ConsumerLag}
}

// Topic returns the pre-resolved client-side handles of one topic, named
// by its stream's and its own name (ids are reused after a delete, so a
// series labelled by ids would mix two topics), so produce and poll count
// without a label lookup; a caller caches it per topic incarnation.
func (m *Metrics) Topic(stream, topic string) *Topic {
	s, t := stream, topic
	return &Topic{
		Produced:      m.Produced.WithLabelValues(s, t),
		ProducedBytes: m.ProducedBytes.WithLabelValues(s, t),
		Polled:        m.Polled.WithLabelValues(s, t),
		PolledBytes:   m.PolledBytes.WithLabelValues(s, t),
		PollWait:      m.PollWait.WithLabelValues(s, t),
		Latency:       m.ProduceLatency.WithLabelValues(s, t),
	}
}

// Topic is one topic's client-side counters.
type Topic struct {
	Produced, ProducedBytes prometheus.Counter
	Polled, PolledBytes     prometheus.Counter
	PollWait                prometheus.Observer
	// Latency observes each acknowledged Produce's seconds.
	Latency prometheus.Observer
}

// SetLag sets a consumer's lag on a partition: messages between its
// position and the partition's end.
// stream and topic are names, as in Topic.
func (m *Metrics) SetLag(stream, topic string, partition uint32, consumer string, lag uint64) {
	m.ConsumerLag.WithLabelValues(stream, topic, strconv.FormatUint(uint64(partition), 10), consumer).Set(float64(lag))
}

// DeleteLag removes a consumer's lag series of a partition it no longer
// reads.
func (m *Metrics) DeleteLag(stream, topic string, partition uint32, consumer string) {
	m.ConsumerLag.DeleteLabelValues(stream, topic, strconv.FormatUint(uint64(partition), 10), consumer)
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
	for _, c := range m.Health.collectors() {
		c.Describe(ch)
	}
	m.transportDescs.describe(ch)
	m.forwarded.describe(ch)
	m.groups.describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
	for _, c := range m.Health.collectors() {
		c.Collect(ch)
	}
	m.groups.collect(ch)
	if stats := m.transport.stats.Load(); stats != nil {
		m.transportDescs.collect(ch, (*stats)())
	}
	m.forwarded.collect(ch)
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
		ReplicaRepairs:  m.ReplicaRepairs.WithLabelValues(s),
		RaftQuiesces:    m.RaftQuiesces.WithLabelValues(s),
		RaftWakes:       m.RaftWakes.WithLabelValues(s),
		RaftHibernates:  m.RaftHibernates.WithLabelValues(s),
		LeaderTransfers: m.LeaderTransfers.WithLabelValues(s),
		CommitLatency:   m.CommitLatency.WithLabelValues(s),
		SegmentSyncs:    m.Fsync(LogSegment),
		RaftSyncs:       m.Fsync(LogRaft),
		Raft:            m.RaftGroup(GroupPartition),
		Led:             m.PartitionsLed,
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
	// ReplicaRepairs counts damaged replicas set aside for a repair.
	ReplicaRepairs  prometheus.Counter
	RaftQuiesces    prometheus.Counter
	RaftWakes       prometheus.Counter
	RaftHibernates  prometheus.Counter
	LeaderTransfers prometheus.Counter
	// CommitLatency observes commit groups (parkway_commit_group_seconds).
	CommitLatency prometheus.Observer
	// SegmentSyncs and RaftSyncs observe fsyncs of partition segments and
	// raft logs (parkway_fsync_seconds).
	SegmentSyncs, RaftSyncs prometheus.Observer
	// Raft observes the partition groups' commits and elections; Led
	// counts the partitions this node leads (shared by every shard).
	Raft RaftGroup
	Led  prometheus.Gauge
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
