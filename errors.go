package parkway

import (
	"errors"
	"fmt"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
)

// Errors returned by a Node. Check them with errors.Is: they are usually
// wrapped with the name or id that caused them.
var (
	// ErrClosed reports a call on a closed Node.
	ErrClosed = host.ErrClosed

	// ErrRetry is the root of every transient, node-local answer: a
	// partition still materialising, mid-teardown, changing incarnation, a
	// full inbox or park buffer. The Node retries these in place until the
	// caller's deadline and returns one only when the deadline passes.
	ErrRetry = shard.ErrRetry
	// ErrStaleIncarnation reports a request that reached a partition after a
	// delete and recreate replaced the incarnation it was meant for. It
	// wraps ErrRetry.
	ErrStaleIncarnation = shard.ErrStaleIncarnation
	// ErrNotLeader means "go elsewhere": the node does not lead the
	// partition. It is distinct from ErrRetry — a client never fails over
	// because of ErrRetry, and never retries ErrNotLeader in place. A
	// single node leads everything, so only replicated deployments return
	// it.
	ErrNotLeader = shard.ErrNotLeader
	// ErrOutcomeUnknown reports a write whose leader changed (or whose
	// deadline passed) after it was proposed, or, on a node, whose write
	// or fsync failed after its records reached the log and could not be
	// taken back out of it: it may or may not have been applied. A Node
	// applies no write twice behind its caller's back: on one node it
	// never retries it; in a cluster it retries a produce within the
	// call's deadline only because the request carries its (producer,
	// sequence) pair, which the partition deduplicates, and a read, which
	// changes nothing; past the deadline the call fails with an error
	// matching ErrOutcomeUnknown (or ctx's error if ctx ended first). A
	// consumer offset stored or deleted, a partition truncated or purged
	// is never sent again: applied once, then again after another
	// client's later write, it would undo that write; its call fails with
	// the unknown outcome at once, and the caller decides (the
	// Consumer's next commit stores its own later position). A caller
	// that calls again sends a new request: a producer that needs
	// exactly-once retries with its own message ids and deduplicates on
	// read.
	ErrOutcomeUnknown = shard.ErrOutcomeUnknown

	// ErrInvalidName reports an empty, over-long or malformed name. One
	// rule holds for the names of streams, topics, consumer groups, group
	// members and consumers: 1 to 255 bytes of valid UTF-8 without
	// control characters. Names are case-sensitive and never used as
	// paths as they are.
	ErrInvalidName = metadata.ErrInvalidName
	// ErrStreamExists and ErrTopicExists report a duplicate name.
	ErrStreamExists = metadata.ErrStreamExists
	ErrTopicExists  = metadata.ErrTopicExists
	// ErrStreamNotFound, ErrTopicNotFound and ErrPartitionNotFound report
	// an id that is not committed.
	ErrStreamNotFound    = metadata.ErrStreamNotFound
	ErrTopicNotFound     = metadata.ErrTopicNotFound
	ErrPartitionNotFound = metadata.ErrPartitionNotFound
	// ErrInvalidPartitionCount reports a partition count out of range.
	ErrInvalidPartitionCount = metadata.ErrInvalidPartitionCount
	// ErrStaleHandle reports a Stream or Topic handle whose incarnation
	// is gone: the stream or topic was deleted (and its id possibly taken
	// by a new one). It always comes wrapped together with
	// ErrStreamNotFound or ErrTopicNotFound.
	ErrStaleHandle = errors.New("parkway: stale handle")
	// ErrTooManyStreams and ErrTooManyTopics report that every stream id
	// (of the node), or every topic id (of the stream), is in use.
	ErrTooManyStreams = metadata.ErrTooManyStreams
	ErrTooManyTopics  = metadata.ErrTooManyTopics
	// ErrInvalidTopicConfig reports a TopicConfig with an unknown fsync
	// policy or a negative duration or size.
	ErrInvalidTopicConfig = metadata.ErrInvalidTopicConfig

	// ErrEmptyBatch reports a produce with no messages.
	ErrEmptyBatch = partition.ErrEmptyBatch
	// ErrBatchTooLarge reports a produce over Config.MaxBatchMessages or
	// Config.MaxBatchBytes. It is never retried: the batch can never fit.
	ErrBatchTooLarge = errors.New("parkway: batch too large")
	// ErrMessageTooLarge reports a message over Config.MaxMessageSize; the
	// batch holding it is refused whole.
	ErrMessageTooLarge = errors.New("parkway: message too large")
	// ErrPartitionFailed reports a partition fenced after a failed fsync:
	// what it holds past its last durable point may not survive a power
	// loss, so it serves nothing until the reconciler has rebuilt it from
	// disk (behind the build backoff). It also reports a partition that
	// cannot be opened from disk for damage: the error then wraps the
	// *partition.CorruptError naming the file and byte offset (it matches
	// ErrCorrupt), and the build is retried behind the same backoff. In a
	// cluster it also answers a local read of a replica re-seeded while it
	// ran, until its new replica is built. Not retried in place.
	ErrPartitionFailed = shard.ErrPartitionFailed
	// ErrMetadataFailed reports that this node's member of the metadata
	// raft group stopped for good (its raft log cannot be reopened): the
	// node takes no metadata commands until it is restarted. A failed
	// write to that log does not cause it: the member reopens itself from
	// its log, and calls meanwhile fail with retriable errors.
	ErrMetadataFailed = host.ErrMetadataFailed
	// ErrNoSpace reports a write refused because the disk is full. The
	// node keeps serving reads and the partitions whose writes fit, and
	// writes succeed again once space returns. A produce that gets it was
	// not appended: its records are not in the log, now or after a
	// rebuild or a restart (a failed write is truncated away, a failed
	// group commit takes the group's records back out of the partition's
	// files and of the journal, each durably), so sending it again does
	// not write it twice. Where taking them back fails too, the answer is
	// ErrOutcomeUnknown instead, never ErrNoSpace. On a cluster it means
	// not acknowledged; its outcome follows the usual rule for a failed
	// write. Not retried in place.
	ErrNoSpace = partition.ErrNoSpace
	// ErrCorrupt reports stored data that fails its checksum or framing
	// (a *partition.CorruptError names the file and byte offset): a read
	// that reaches damaged or missing messages, a produce to a partition
	// whose last segment is damaged (fenced: see the README's durability
	// section), a partition that cannot be opened. Not retried in place.
	ErrCorrupt = partition.ErrCorrupt
	// ErrOffsetOutOfRange reports an offset outside a partition's log.
	ErrOffsetOutOfRange = partition.ErrOffsetOutOfRange
	// ErrInvalidConsumer reports a malformed consumer name. Consumer
	// names follow the rule of every name (see ErrInvalidName), and the
	// error matches ErrInvalidName too.
	ErrInvalidConsumer = errors.New("parkway: invalid consumer name")
	// ErrTooManyWaiters reports a waiting poll refused because its
	// partition's shard already holds its bound of waiting polls (10,000).
	// It is not retried in place (it does not match ErrRetry): back off,
	// poll without waiting, or raise the bound.
	ErrTooManyWaiters = shard.ErrTooManyWaiters
	// ErrDataDirLocked reports an Open of a DataDir another node holds
	// (another process, or another Node in this one): a *LockedError
	// names the directory and the holder's pid. The lock ends with the
	// holder's Close or its process.
	ErrDataDirLocked = host.ErrDataDirLocked
	// ErrWrongDataDir reports an Open of a DataDir that records another
	// node or another cluster (ClusterConfig.ClusterID) than the one opening
	// it: a *WrongDataDirError names both.
	ErrWrongDataDir = host.ErrWrongDataDir
	// ErrInvalidArgument reports any other bad argument (a negative count,
	// an unknown partitioning, a negative or over-long poll wait).
	ErrInvalidArgument = errors.New("parkway: invalid argument")

	// ErrGroupExists and ErrGroupNotFound report a consumer group name
	// taken, or not found on its topic.
	ErrGroupExists   = metadata.ErrGroupExists
	ErrGroupNotFound = metadata.ErrGroupNotFound
	// ErrUnknownMember reports a group member that left or whose session
	// lapsed: it must join again. A Consumer rejoins by itself.
	ErrUnknownMember = metadata.ErrUnknownMember
	// ErrNotAssigned and ErrStaleGeneration refuse a group member's poll
	// or commit for a partition it does not hold in its generation
	// (DESIGN behaviour 23): the group rebalanced. Refresh the assignment
	// with Member.Heartbeat; a Consumer does so by itself.
	ErrNotAssigned     = metadata.ErrNotAssigned
	ErrStaleGeneration = metadata.ErrStaleGeneration
	// ErrRebalanceInProgress refuses a poll or commit of a partition that
	// moved to the member from one still in the group that has not
	// released it yet (DESIGN behaviour 33): poll again shortly. A
	// Consumer does so by itself.
	ErrRebalanceInProgress = metadata.ErrRebalanceInProgress
	// ErrOffsetRegression refuses a group commit below the offset the
	// group already committed for the partition.
	ErrOffsetRegression = metadata.ErrOffsetRegression
	// ErrTooManyGroups and ErrTooManyMembers report the limits
	// metadata.MaxGroupsPerTopic and metadata.MaxMembersPerGroup.
	ErrTooManyGroups  = metadata.ErrTooManyGroups
	ErrTooManyMembers = metadata.ErrTooManyMembers

	// ErrInvalidNode reports a membership call naming node 0, or a node
	// RemoveNode's metadata does not know; ErrNodeExists an AddNode of a
	// member (Cluster.AddNode itself treats that as done).
	ErrInvalidNode = metadata.ErrInvalidNode
	ErrNodeExists  = metadata.ErrNodeExists
	// ErrNotEnoughNodes refuses a RemoveNode that would leave a topic
	// with fewer nodes than its replication factor.
	ErrNotEnoughNodes = metadata.ErrNotEnoughNodes
	// ErrNotPromoted reports an AddNode whose context ended while the
	// node was still a learner of the metadata group: added (the metadata
	// names it, partitions may be placed on it), but not caught up with
	// the metadata yet, so not a voter. The metadata leader promotes it
	// once it catches up; call AddNode again to wait for that, or
	// RemoveNode to take it out. The error wraps the context's too.
	ErrNotPromoted = host.ErrNotPromoted
)

// LockedError reports a DataDir locked by another holder: Dir, and PID the
// process holding it (0 if unknown). It matches ErrDataDirLocked.
type LockedError = host.LockedError

// WrongDataDirError reports a DataDir recorded for another node or cluster:
// Dir, what the Node opening it is (WantCluster, WantNode) and what the
// directory holds (FoundCluster, FoundNode); node 0 is a single node. It
// matches ErrWrongDataDir.
type WrongDataDirError = host.WrongDataDirError

// publicError makes an answer from the layers below match a root
// sentinel: what a caller gets is always documented here.
func publicError(err error) error {
	if !errors.Is(err, ErrOutcomeUnknown) {
		// A write whose outcome is unknown may be in the log: it is not
		// ErrNoSpace (not appended), whatever filled the disk.
		err = partition.ClassifyNoSpace(err)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, partition.ErrTooLarge) && !errors.Is(err, ErrBatchTooLarge):
		return fmt.Errorf("%w: %w", ErrBatchTooLarge, err)
	case errors.Is(err, partition.ErrUnusable) && !errors.Is(err, ErrPartitionFailed):
		return fmt.Errorf("%w: %w", ErrPartitionFailed, err)
	case (errors.Is(err, partition.ErrClosed) || errors.Is(err, shard.ErrClosed)) && !errors.Is(err, ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}
