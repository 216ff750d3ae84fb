package parkway

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/vfs"
)

// Config configures a Node. The zero value is valid: an in-memory node
// with one shard per CPU and the reference server's defaults.
type Config struct {
	// DataDir is where metadata and partitions are stored. Empty keeps
	// everything in memory. Opening an existing DataDir brings back every
	// stream, topic, partition (same incarnation), message and consumer
	// offset that was durable. One Node holds a DataDir at a time (a lock
	// on its LOCK file, ErrDataDirLocked for a second Open), and the
	// directory records the cluster and node it belongs to
	// (ErrWrongDataDir for another's).
	DataDir string
	// FS is the filesystem under DataDir (default: the operating system).
	// Tests inject an in-memory or fault-injecting one.
	FS vfs.FS
	// VerifyOnOpen makes reopening a partition verify the checksum of every
	// message of every segment (a full read of the log). Without it only
	// the tail segment, where a crash tears, and each older segment's end
	// are verified at open; damage before that is found by the read that
	// reaches it. Either way a read that reaches damage gets a
	// *partition.CorruptError naming the file and byte offset (the README's
	// durability section says what else damage does).
	VerifyOnOpen bool
	// MetadataSnapshotEvery is how many metadata commands are logged
	// between snapshots (default 1,024). In a cluster it is how many
	// commands the metadata group's raft log holds before it is compacted
	// behind a snapshot of the store.
	MetadataSnapshotEvery int
	// SegmentSize is the size at which a partition's segment rolls over
	// (default 1 GiB; 1 MiB to 1 GiB). Only with DataDir.
	SegmentSize int64
	// Preallocate reserves each new segment's full size on disk with
	// fallocate, so appends never fail for lack of space mid-segment.
	Preallocate bool
	// MaxOpenFiles bounds the descriptors the partition store holds at
	// once, over all partitions: segment files (and, in a cluster, the
	// partitions' raft logs) are opened when used and the least recently
	// used idle ones closed, so a node can hold far more partitions than
	// descriptors (default: half the process's soft
	// RLIMIT_NOFILE, 64 to 65,536; at least 4; see
	// partition.FileConfig.MaxOpenFiles). Only with DataDir.
	MaxOpenFiles int

	// Fsync is the default fsync policy of topics that do not set one
	// (default FsyncAlways: an acknowledged produce survives power loss;
	// concurrent produces share fsyncs through group commit).
	Fsync FsyncPolicy
	// FsyncInterval is the default loss window of FsyncInterval topics
	// (default 1 s).
	FsyncInterval time.Duration
	// RetentionAge and RetentionBytes are the default retention bounds of
	// topics that set none (default: keep everything).
	RetentionAge   time.Duration
	RetentionBytes int64
	// RetentionInterval is how often retention is enforced (default 10 s).
	RetentionInterval time.Duration

	// Shards is the number of shards (default: GOMAXPROCS, at most
	// MaxShards).
	Shards int
	// InboxSize bounds each shard's inbox (default 1,024 frames, at most
	// MaxInboxSize), and 8 times it (shard.WaitedLaneFactor) the lane
	// beside it where synchronous Produce calls of one message queue
	// (each waits for its answer before it can queue again). A caller
	// finding either full waits for room until its deadline.
	InboxSize int
	// InboxBytes bounds the bytes of the raft and catch-up messages from
	// peers waiting in each shard's inbox (default 64 MiB, at most
	// MaxInboxBytes; a cluster only), and one partition's messages to a
	// quarter of it: one that would pass either is dropped and counted
	// (parkway_frame_drops_total{reason="inbox_bytes"}) and sent again by
	// its peer, unless nothing is held ahead of it, so a message larger
	// than the bound still gets through. Client requests are not charged:
	// their callers wait for room (and a forwarded one is charged to
	// ClusterConfig.MaxForwardedBytes).
	InboxBytes int64
	// PinShards pins shard i's pump to CPU i mod NumCPU (Linux only). Off
	// by default: the library lives in the host's process and should not
	// take cores without being asked. Unpinned, a single node's
	// synchronous call that finds its shard idle is run by the calling
	// goroutine itself (no hand-off to the pump and back); pinned, every
	// call goes through the pump on its CPU.
	PinShards bool

	// ReconcileInterval is the period of each shard's reconcile pass when
	// no metadata commit wakes it (default 1 s, at most 30 s). It also
	// paces park aging: a parked frame is answered after at most
	// Park.MaxPasses intervals.
	ReconcileInterval time.Duration
	// PrebuildPartitions builds the partitions of a new topic (or of
	// CreatePartitions) while the metadata command that creates them is
	// being made durable — the metadata log's fsync on one node, the
	// metadata raft round in a cluster, on the node the call goes through
	// — instead of after it commits; the first produce's wait then
	// overlaps the commit. What the commit does not confirm is removed,
	// at once or, after a crash, by the next start's orphan sweep.
	//
	// On one node the partition is built deferred (nothing on disk) and
	// handed to its shard at once, provisional: a produce issued with the
	// create (CreateTopicAndProduce) is written to the node's journal
	// while the command is made durable and answered once it commits, so
	// the two fsyncs overlap. In a cluster the replica's files are built.
	//
	// Off by default: it was measured when the prebuild created the
	// partition's files, whose directory and file creations joined the
	// metadata log's fsync on one filesystem and slowed it down as much
	// as they saved (the create call from 0.7 to 1.5 ms, median).
	PrebuildPartitions bool
	// Park bounds each shard's park buffer (defaults: 128 frames and 4 MiB
	// per namespace, 16 MiB per shard, 4 KiB alignment, 3 passes).
	Park shard.ParkLimits
	// BuildBackoffMin and BuildBackoffMax bound the retry delay of a failed
	// partition build or removal (defaults 1 s and 60 s).
	BuildBackoffMin, BuildBackoffMax time.Duration

	// MaxMessageSize caps one message's payload plus headers, each
	// header counted with its 8 bytes of framing (default 1 MiB, at most
	// MaxBatchBytesLimit).
	MaxMessageSize int
	// MaxBatchMessages caps the messages of one produce (default 10,000,
	// at most MaxBatchMessagesLimit).
	MaxBatchMessages int
	// MaxBatchBytes caps one produce's messages, sized as MaxMessageSize
	// counts them (default 16 MiB, at most MaxBatchBytesLimit). It exists
	// because a batch travels whole: as one forwarded request to the
	// partition's leader and as one raft entry to its followers, each one
	// transport frame (64 MiB). A batch over it is refused at once with
	// ErrBatchTooLarge; one within it fits every frame on the way.
	MaxBatchBytes int

	// RequestTimeout bounds a call whose context has no deadline (default
	// 10 s). Retriable answers are retried in place until the deadline, so
	// it must exceed Park.MaxPasses × ReconcileInterval for a request that
	// races a topic creation to be served rather than failed.
	RequestTimeout time.Duration
	// RetryBackoffMin and RetryBackoffMax bound the pause between in-place
	// retries (defaults 100 µs and 50 ms, doubling).
	RetryBackoffMin, RetryBackoffMax time.Duration

	// Cluster, when set, makes the node one replica of a cluster: every
	// partition and the metadata are replicated with raft, a produce is
	// acknowledged once a quorum has it, and a request to a follower is
	// forwarded to the leader. The node takes ownership of Cluster.Bus and
	// closes it on Close. With a DataDir every raft group's state (the
	// metadata group's and each partition's) is kept on disk, so a node
	// restarted on the same DataDir rejoins as the same member; without
	// one it is kept in memory, and such a node must not be restarted
	// under the same ID (it would have forgotten its votes).
	Cluster *ClusterConfig

	// NewReconciler, when set, builds each shard's reconciler instead of
	// the default reconciler.Partitions: cfg is what the default would
	// get, table the node's shards table. A host places or materialises
	// partitions its own way through it; the barrier's guarantees hold as
	// long as its reconciler talks to the shard through the shard's
	// exported operations.
	NewReconciler func(cfg reconciler.Config, table *router.Table) (reconciler.Reconciler, error)

	// Logger receives diagnostics (default: silent).
	Logger hclog.Logger
	// Clock is the source of time (default: the wall clock).
	Clock clock.Clock
	// Metrics receives the Node's counters (default: a fresh set, see
	// MetricsLabels). Register Node.Metrics() on the host's registry.
	Metrics *metrics.Metrics
	// MetricsLabels are constant labels on every series of a default
	// Metrics. Two Nodes registered on one registry need distinct labels;
	// a cluster node with none gets node="<Cluster.ID>".
	MetricsLabels prometheus.Labels
}

// Defaults for Config. The engine's (request timeout, retry backoff,
// reconcile interval, segment size...) are declared once, where the
// engine applies them, and named here for the documentation.
const (
	DefaultMaxMessageSize   = 1 << 20
	DefaultMaxBatchMessages = 10_000
	DefaultMaxBatchBytes    = 16 << 20
	// MaxBatchBytesLimit keeps a batch, with its request header and raft
	// envelope, inside the transport's 64 MiB frame.
	MaxBatchBytesLimit     = 48 << 20
	DefaultRequestTimeout  = host.DefaultRequestTimeout
	DefaultRetryBackoffMin = host.DefaultRetryBackoffMin
	DefaultRetryBackoffMax = host.DefaultRetryBackoffMax
	DefaultSegmentSize     = partition.DefaultSegmentSize
	MinSegmentSize         = partition.MinSegmentSize
	MaxSegmentSize         = partition.MaxSegmentSize
	// MaxShards, MaxInboxSize, MaxInboxBytes and MaxBatchMessagesLimit
	// bound Shards, InboxSize, InboxBytes and MaxBatchMessages. Shards and
	// inboxes are made whole at Open, used or not; a shard is meant to be
	// one per core.
	MaxShards             = host.MaxShards
	MaxInboxSize          = shard.MaxInboxSize
	MaxInboxBytes         = shard.MaxInboxBytes
	DefaultInboxBytes     = shard.DefaultInboxBytes
	MaxBatchMessagesLimit = 1 << 20
)

// Validate reports every problem with c, joined.
func (c Config) Validate() error {
	var errs []error
	negInt := func(name string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %d < 0", name, v))
		}
	}
	negDur := func(name string, v time.Duration) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %v < 0", name, v))
		}
	}
	if c.Shards < 0 || c.Shards > MaxShards {
		errs = append(errs, fmt.Errorf("Shards %d outside [0, %d] (0 for one per CPU)", c.Shards, MaxShards))
	}
	if c.MaxMessageSize < 0 || c.MaxMessageSize > MaxBatchBytesLimit {
		errs = append(errs, fmt.Errorf("MaxMessageSize %d outside [0, %d] (a message travels in one batch)", c.MaxMessageSize, MaxBatchBytesLimit))
	}
	if c.MaxBatchMessages < 0 || c.MaxBatchMessages > MaxBatchMessagesLimit {
		errs = append(errs, fmt.Errorf("MaxBatchMessages %d outside [0, %d]", c.MaxBatchMessages, MaxBatchMessagesLimit))
	}
	negInt("MaxBatchBytes", c.MaxBatchBytes)
	if c.MaxBatchBytes > MaxBatchBytesLimit {
		errs = append(errs, fmt.Errorf("MaxBatchBytes %d > %d (the transport frame bounds a batch)", c.MaxBatchBytes, MaxBatchBytesLimit))
	}
	negInt("MetadataSnapshotEvery", c.MetadataSnapshotEvery)
	negDur("RequestTimeout", c.RequestTimeout)
	negDur("RetryBackoffMin", c.RetryBackoffMin)
	negDur("RetryBackoffMax", c.RetryBackoffMax)
	negDur("BuildBackoffMin", c.BuildBackoffMin)
	negDur("BuildBackoffMax", c.BuildBackoffMax)
	negDur("FsyncInterval", c.FsyncInterval)
	negDur("RetentionAge", c.RetentionAge)
	negDur("RetentionInterval", c.RetentionInterval)
	if c.RetentionBytes < 0 {
		errs = append(errs, fmt.Errorf("RetentionBytes %d < 0", c.RetentionBytes))
	}
	if c.Fsync > FsyncNever {
		//lint:ignore ST1005 the message starts with the field's name, as its neighbours do
		errs = append(errs, fmt.Errorf("Fsync: unknown policy %d", c.Fsync))
	}
	if c.SegmentSize != 0 && (c.SegmentSize < MinSegmentSize || c.SegmentSize > MaxSegmentSize) {
		errs = append(errs, fmt.Errorf("SegmentSize %d outside [%d, %d]", c.SegmentSize, MinSegmentSize, MaxSegmentSize))
	}
	if c.MaxOpenFiles != 0 && c.MaxOpenFiles < partition.MinMaxOpenFiles {
		errs = append(errs, fmt.Errorf("MaxOpenFiles %d below %d (0 for the default)", c.MaxOpenFiles, partition.MinMaxOpenFiles))
	}
	if c.ReconcileInterval != 0 {
		if err := reconciler.ValidatePeriod(c.ReconcileInterval); err != nil {
			errs = append(errs, fmt.Errorf("ReconcileInterval: %w", err))
		}
	}
	if c.RetryBackoffMax != 0 && c.RetryBackoffMin > c.RetryBackoffMax {
		errs = append(errs, fmt.Errorf("RetryBackoffMin %v > RetryBackoffMax %v", c.RetryBackoffMin, c.RetryBackoffMax))
	}
	if c.BuildBackoffMax != 0 && c.BuildBackoffMin > c.BuildBackoffMax {
		errs = append(errs, fmt.Errorf("BuildBackoffMin %v > BuildBackoffMax %v", c.BuildBackoffMin, c.BuildBackoffMax))
	}
	if c.Cluster != nil {
		errs = append(errs, c.Cluster.Validate())
	}
	// The promise of RequestTimeout's doc: a request racing a topic
	// creation must outlive the park age bound to be served, not failed.
	if c.RequestTimeout >= 0 && c.ReconcileInterval >= 0 && c.ReconcileInterval <= reconciler.MaxPeriod &&
		c.Park.MaxPasses >= 0 && c.Park.MaxPasses <= shard.MaxParkPasses {
		d := c.withDefaults()
		passes := d.Park.MaxPasses
		if passes == 0 {
			passes = shard.DefaultMaxPasses
		}
		if bound := time.Duration(passes) * d.ReconcileInterval; d.RequestTimeout <= bound {
			errs = append(errs, fmt.Errorf("RequestTimeout %v must exceed Park.MaxPasses × ReconcileInterval = %d × %v", d.RequestTimeout, passes, d.ReconcileInterval))
		}
	}
	if err := (shard.Config{Park: c.Park, InboxSize: c.InboxSize, InboxBytes: c.InboxBytes}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// ErrInvalidConfig wraps every problem Config.Validate reports.
var ErrInvalidConfig = errors.New("parkway: invalid config")

// withDefaults is c with its defaults applied: the client's own (the
// shard count, the message and batch limits) here, and the engine's as
// the engine resolves them (engineConfig), so that each default is
// declared once.
func (c Config) withDefaults() Config {
	if c.Shards == 0 {
		c.Shards = min(runtime.GOMAXPROCS(0), MaxShards)
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.MaxBatchMessages == 0 {
		c.MaxBatchMessages = DefaultMaxBatchMessages
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	e := c.engineConfig()
	c.ReconcileInterval, c.RequestTimeout = e.ReconcileInterval, e.RequestTimeout
	c.RetryBackoffMin, c.RetryBackoffMax = e.RetryBackoffMin, e.RetryBackoffMax
	c.Logger, c.Clock = e.Logger, e.Clock
	return c
}

// engineConfig is the one derivation of the node engine's config from c,
// with the engine's defaults applied.
func (c Config) engineConfig() host.Config {
	return host.Config{
		Shards: c.Shards, InboxSize: c.InboxSize, InboxBytes: c.InboxBytes, Park: c.Park, PinShards: c.PinShards,
		DataDir: c.DataDir, FS: c.FS, SegmentSize: c.SegmentSize, Preallocate: c.Preallocate,
		VerifyOnOpen: c.VerifyOnOpen, MaxOpenFiles: c.MaxOpenFiles, MetadataSnapshotEvery: c.MetadataSnapshotEvery,
		Defaults: TopicConfig{
			Fsync: c.Fsync, FsyncInterval: c.FsyncInterval,
			RetentionAge: c.RetentionAge, RetentionBytes: c.RetentionBytes,
		}.engine(),
		ReconcileInterval: c.ReconcileInterval, BuildBackoffMin: c.BuildBackoffMin, BuildBackoffMax: c.BuildBackoffMax,
		RetentionInterval: c.RetentionInterval, NewReconciler: c.NewReconciler, PrebuildPartitions: c.PrebuildPartitions,
		RequestTimeout: c.RequestTimeout, RetryBackoffMin: c.RetryBackoffMin, RetryBackoffMax: c.RetryBackoffMax,
		Cluster: c.Cluster.engine(), Logger: c.Logger, Clock: c.Clock, Metrics: c.Metrics,
	}.WithDefaults()
}
