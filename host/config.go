package host

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
)

// Config configures an Engine. Zero fields take the defaults named on
// each; parkway.Config documents the user-facing meaning of most of them.
type Config struct {
	// Shards is the number of shards (required, > 0).
	Shards int
	// InboxSize bounds each shard's inbox (default 1,024 frames).
	InboxSize int
	// InboxBytes bounds the bytes of peer frames in each shard's inbox
	// (shard.Config.InboxBytes; default shard.DefaultInboxBytes).
	InboxBytes int64
	// Park bounds each shard's park buffer.
	Park shard.ParkLimits
	// PinShards pins shard i's pump to CPU i mod NumCPU (Linux only).
	PinShards bool

	// DataDir is where metadata and partitions are stored; empty keeps
	// everything in memory.
	DataDir string
	// FS is the filesystem under DataDir (default vfs.Default).
	FS vfs.FS
	// SegmentSize, Preallocate and VerifyOnOpen configure the file store
	// (see partition.FileConfig).
	SegmentSize  int64
	Preallocate  bool
	VerifyOnOpen bool
	// MaxOpenFiles is the file store's descriptor budget
	// (partition.FileConfig.MaxOpenFiles; 0 for its default).
	MaxOpenFiles int
	// MetadataSnapshotEvery is how many metadata commands are logged (or
	// kept in the metadata group's raft log) between snapshots (default
	// metadata.DefaultSnapshotEvery).
	MetadataSnapshotEvery int
	// WrapStore, when set, wraps the partition store the engine opened
	// (in memory, or the file store on DataDir) before anything uses it:
	// a host's own store, instrumentation, or a simulator's fault hooks.
	// meta is the node's committed metadata, already restored.
	WrapStore func(store partition.Store, meta *metadata.Store) partition.Store

	// Defaults are the topic settings partitions get when their topic
	// sets none.
	Defaults metadata.TopicConfig
	// ReconcileInterval is the period of each shard's reconcile pass
	// (default reconciler.DefaultPeriod).
	ReconcileInterval time.Duration
	// BuildBackoffMin and BuildBackoffMax bound the default reconciler's
	// build retry delay.
	BuildBackoffMin, BuildBackoffMax time.Duration
	// RetentionInterval is how often retention is enforced.
	RetentionInterval time.Duration
	// PrebuildPartitions makes a started engine's reconcilers build the
	// partitions a metadata command creates while the command is being
	// made durable (see metadata.Store.Announce and
	// reconciler.Prebuilder), rather than after it commits.
	PrebuildPartitions bool
	// NewReconciler, when set, builds shard i's reconciler instead of the
	// default reconciler.Partitions. cfg is what the default would get
	// (its Shard, Meta and Store fields are the engine's), table the
	// node's shards table.
	NewReconciler func(cfg reconciler.Config, table *router.Table) (reconciler.Reconciler, error)
	// WrapSender, when set, wraps the router's handle on shard i (the
	// only path by which frames enter a shard's inbox): instrumentation,
	// or a simulator recording what each inbox holds. With it set, a
	// synchronous call's frame takes the inbox too, through the wrapper,
	// rather than the shard's waited lane (shard.SendWaited).
	WrapSender func(i int, s *shard.Shard) router.Sender[shard.Frame]

	// RequestTimeout bounds metadata commands and forwarded requests whose
	// context has no deadline (default 10 s); RetryBackoffMin and
	// RetryBackoffMax pace their retries (defaults 100 µs and 50 ms).
	RequestTimeout                   time.Duration
	RetryBackoffMin, RetryBackoffMax time.Duration

	// Cluster, when set, makes the engine one replica of a cluster.
	Cluster *Cluster

	// Manual, when true, builds an engine that starts no goroutine: its
	// shards are manual (shard.Config.Manual) and the caller drives every
	// unit of work — shard steps, reconcile passes, metadata ticks and
	// readies, message delivery — through the Engine's methods, on one
	// goroutine (etcd raft's RawNode style). The deterministic simulator
	// drives the engine this way. Start and Run refuse a manual engine.
	Manual bool

	// Logger receives diagnostics (default: silent). Clock is the source
	// of time (default: the wall clock). ShardClock, when set, gives shard
	// i its own view of the clock (a simulator watches each shard's
	// timers); it defaults to Clock.
	Logger     hclog.Logger
	Clock      clock.Clock
	ShardClock func(i int) clock.Clock
	// Metrics receives the engine's counters (default: a private set,
	// labelled node="<id>" in a cluster).
	Metrics *metrics.Metrics
	// Events observes the metadata group (default: nothing).
	Events Events
}

// Cluster makes an engine a member of a cluster: each partition is a raft
// group on the nodes its metadata places it on (a topic's replication
// factor of them), driven by its owner shard on each, and the metadata is
// one more raft group on every node, driven by the engine. Nodes join a
// running cluster with Join and Engine.AddNode.
type Cluster struct {
	// ID is this node (1 to 2^32−1: internal/raftid); Peers lists every
	// node, this one included. For a
	// node that founds the cluster, Peers are the founding members (the
	// same list on each); for one that joins, the nodes it can reach
	// first, itself included.
	ID    transport.NodeID
	Peers []transport.NodeID
	// Join makes this node join a running cluster instead of founding
	// one: it starts with an empty metadata member and waits until a
	// member adds it (Engine.AddNode), then receives the cluster's
	// metadata from the metadata leader. A node restarted on a data
	// directory rejoins as the member it became, Join or not.
	Join bool
	// Bus is this node's endpoint on the transport; the engine closes it.
	Bus transport.Bus
	// ClusterID names the cluster. A data directory records the cluster
	// and node it was first used by, and an engine refuses a directory of
	// another cluster or node (ErrWrongDataDir). Empty: the bus's cluster
	// id when it has one (a TLS TCP bus: its TLSConfig.ClusterID), else
	// none. At most 253 bytes.
	ClusterID string
	// TickInterval is the raft tick (default shard.DefaultTickInterval).
	TickInterval time.Duration
	// CompactEntries and CompactBytes bound each partition's raft log
	// (see shard.Replication).
	CompactEntries uint64
	CompactBytes   int64
	// LivenessInterval is how often this node sends each peer a
	// heartbeat (default 10 ticks); LivenessTimeout is how long a peer
	// may send nothing before it is declared dead and the quiesced
	// groups it led, partition groups and the metadata group, elect new
	// leaders (default 5 intervals). Both are rounded down to whole
	// ticks; while the metadata group is quiesced, a started engine
	// checks them once per interval. The silence is counted in the ticks
	// the engine's driver planned (liveness.go): a late wake, from a
	// pause of the process or a CPU it waited for, does not count its
	// lateness toward any peer's silence. A started engine sends its
	// heartbeats from a goroutine of their own (runBeater), not from the
	// metadata driver, for up to driverStallTimeouts timeouts of the
	// driver stuck in one step. Both the heartbeats and the quiesced
	// driver's checks fall on the multiples of the interval on the
	// engine's clock, so an idle node wakes once per interval.
	LivenessInterval time.Duration
	LivenessTimeout  time.Duration
	// MaxForwardedBytes bounds the bytes of the requests other nodes
	// forward to this one that it holds while serving them, each counted
	// with 8 KiB for what serving it takes (default
	// DefaultMaxForwardedBytes, 256 MiB); MaxForwardedPeerBytes bounds
	// those of one sending node (default DefaultMaxForwardedPeerBytes,
	// 64 MiB; a node holding none may always have one request served). A
	// request past either is answered at once with ErrRetry, which the
	// forwarding node retries in place.
	MaxForwardedBytes     int64
	MaxForwardedPeerBytes int64
}

// Events are optional observers of the metadata group, called on the
// goroutine that drives it. They must not call back into the Engine.
type Events struct {
	// MetadataOpened reports the node's metadata store once it is
	// restored from a snapshot, before the committed commands of the log
	// are replayed into it (through MetadataApplied).
	MetadataOpened func(meta *metadata.Store)
	// MetadataApplied follows the apply of the committed metadata entry
	// at index (on every member, in log order): cmd is nil when the entry
	// did not decode, dup is true when deduplication skipped it.
	MetadataApplied func(index uint64, cmd metadata.Command, res metadata.Result, err error, dup bool)
	// MetadataSnapshotInstalled follows the install of a metadata
	// snapshot sent by the leader; before and after are the committed
	// partitions around it.
	MetadataSnapshotInstalled func(index uint64, before, after []metadata.PartitionInfo, err error)
	// MetadataLeaderChanged reports a new metadata leader (0: none) and
	// how many of this member's proposals in flight were forgotten.
	MetadataLeaderChanged func(lead uint64, forgot int)
	// MetadataCompacted follows an attempt to compact the metadata raft
	// log behind a snapshot at index.
	MetadataCompacted func(index uint64, err error)
	// MetadataReopened reports the metadata member reopened from its raft
	// log after it went down on a failed write; it resumes applying after
	// index, the last entry its store holds.
	MetadataReopened func(index uint64)
}

// Defaults of Config.
const (
	DefaultRequestTimeout  = 10 * time.Second
	DefaultRetryBackoffMin = 100 * time.Microsecond
	DefaultRetryBackoffMax = 50 * time.Millisecond
)

// Upper bounds of Config and Cluster fields, so a value no deployment
// needs is refused with a message rather than by a failed allocation, an
// overflowed duration or an engine that never elects a leader.
const (
	// MaxShards bounds Config.Shards: a shard is a goroutine, an inbox
	// and a reconciler, made at New whether used or not; it is meant to be
	// one per core.
	MaxShards = 1024
	// MaxTickInterval bounds Cluster.TickInterval: leaders are elected
	// within 10–20 ticks, members declared dead after 50.
	MaxTickInterval = 10 * time.Second
	// MaxLiveness bounds Cluster.LivenessInterval and LivenessTimeout.
	MaxLiveness = time.Hour
)

// ErrInvalidConfig wraps every problem Config.Validate reports.
var ErrInvalidConfig = errors.New("parkway: invalid engine config")

// Validate reports every problem with c, joined.
func (c Config) Validate() error {
	var errs []error
	if c.Shards <= 0 || c.Shards > MaxShards {
		errs = append(errs, fmt.Errorf("Shards %d outside [1, %d]", c.Shards, MaxShards))
	}
	if c.MetadataSnapshotEvery < 0 {
		errs = append(errs, fmt.Errorf("MetadataSnapshotEvery %d < 0", c.MetadataSnapshotEvery))
	}
	for name, d := range map[string]time.Duration{"RequestTimeout": c.RequestTimeout,
		"RetryBackoffMin": c.RetryBackoffMin, "RetryBackoffMax": c.RetryBackoffMax,
		"BuildBackoffMin": c.BuildBackoffMin, "BuildBackoffMax": c.BuildBackoffMax,
		"RetentionInterval": c.RetentionInterval} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v < 0", name, d))
		}
	}
	if c.ReconcileInterval != 0 {
		if err := reconciler.ValidatePeriod(c.ReconcileInterval); err != nil {
			errs = append(errs, fmt.Errorf("ReconcileInterval: %w", err))
		}
	}
	if c.Cluster != nil {
		errs = append(errs, c.Cluster.Validate())
	}
	if err := (shard.Config{Park: c.Park, InboxSize: c.InboxSize, InboxBytes: c.InboxBytes}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Validate reports every problem with c, joined.
func (c *Cluster) Validate() error {
	var errs []error
	if c.ID == 0 || !slices.Contains(c.Peers, c.ID) {
		errs = append(errs, fmt.Errorf("Cluster.ID %d must be non-zero and listed in Peers", c.ID))
	}
	seen := make(map[transport.NodeID]bool, len(c.Peers))
	for _, p := range c.Peers {
		switch {
		case p == 0:
			errs = append(errs, errors.New("Cluster.Peers lists node 0 (node ids start at 1)"))
		case uint64(p) > raftid.MaxNode:
			// A node id is the low bits of its replicas' raft ids.
			errs = append(errs, fmt.Errorf("Cluster.Peers lists node %d, node ids are at most %d", p, uint64(raftid.MaxNode)))
		case seen[p]:
			errs = append(errs, fmt.Errorf("Cluster.Peers lists node %d twice", p))
		}
		seen[p] = true
	}
	if c.Bus == nil {
		errs = append(errs, errors.New("Cluster.Bus is required"))
	} else if c.Bus.ID() != c.ID {
		errs = append(errs, fmt.Errorf("Cluster.Bus is node %d's endpoint, not %d's", c.Bus.ID(), c.ID))
	}
	if len(c.ClusterID) > maxClusterName {
		errs = append(errs, fmt.Errorf("Cluster.ClusterID of %d bytes is over %d", len(c.ClusterID), maxClusterName))
	}
	if c.CompactBytes < 0 {
		errs = append(errs, fmt.Errorf("Cluster.CompactBytes %d < 0", c.CompactBytes))
	}
	if c.TickInterval < 0 || c.TickInterval > MaxTickInterval {
		errs = append(errs, fmt.Errorf("Cluster.TickInterval %v outside [0, %v] (0 for the default)", c.TickInterval, MaxTickInterval))
	}
	if c.MaxForwardedBytes < 0 || c.MaxForwardedPeerBytes < 0 {
		errs = append(errs, fmt.Errorf("Cluster.MaxForwardedBytes %d and MaxForwardedPeerBytes %d must not be negative", c.MaxForwardedBytes, c.MaxForwardedPeerBytes))
	}
	if c.LivenessInterval < 0 || c.LivenessTimeout < 0 || c.LivenessInterval > MaxLiveness || c.LivenessTimeout > MaxLiveness {
		errs = append(errs, fmt.Errorf("Cluster.LivenessInterval %v and LivenessTimeout %v must be within [0, %v] (0 for the defaults)", c.LivenessInterval, c.LivenessTimeout, MaxLiveness))
	}
	return errors.Join(errs...)
}

// WithDefaults returns c with every zero field that has a default set to
// it: the defaults New applies. A wrapper that derives its own config
// from an engine's (package parkway's Config) reads them here rather than
// declaring them again.
func (c Config) WithDefaults() Config { return c.withDefaults() }

func (c Config) withDefaults() Config {
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = reconciler.DefaultPeriod
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RetryBackoffMin == 0 {
		c.RetryBackoffMin = DefaultRetryBackoffMin
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = max(DefaultRetryBackoffMax, c.RetryBackoffMin)
	}
	if c.MetadataSnapshotEvery == 0 {
		c.MetadataSnapshotEvery = metadata.DefaultSnapshotEvery
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Cluster != nil {
		cl := *c.Cluster
		if b, ok := cl.Bus.(interface{ ClusterID() string }); ok && cl.ClusterID == "" {
			cl.ClusterID = b.ClusterID()
		}
		if cl.TickInterval == 0 {
			cl.TickInterval = shard.DefaultTickInterval
		}
		if cl.LivenessInterval == 0 {
			cl.LivenessInterval = defaultLivenessTicks * cl.TickInterval
		}
		if cl.LivenessTimeout == 0 {
			cl.LivenessTimeout = defaultLivenessMiss * cl.LivenessInterval
		}
		if cl.MaxForwardedBytes == 0 {
			cl.MaxForwardedBytes = DefaultMaxForwardedBytes
		}
		if cl.MaxForwardedPeerBytes == 0 {
			cl.MaxForwardedPeerBytes = DefaultMaxForwardedPeerBytes
		}
		c.Cluster = &cl
	}
	return c
}
