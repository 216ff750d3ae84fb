package shard

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// Op is what a frame asks of a partition.
type Op uint8

// The partition operations.
const (
	OpProduce Op = iota + 1
	OpPoll
	OpStoreOffset
	OpGetOffset
	// OpTruncate makes messages below Offset unreadable.
	OpTruncate
	// OpPurge removes every message (offsets continue, never reused).
	OpPurge
	// OpRaft carries a raft message between replicas of a partition. It
	// has no client: it is never answered, and dropping it is safe
	// because raft re-sends.
	OpRaft
	// OpCatchUp carries a catch-up fetch or its data between replicas of
	// a partition (Payload): a replica sent a snapshot fetches the messages
	// its log lacks. Like OpRaft it has no client and may be dropped: the
	// fetch is repeated.
	OpCatchUp
	// OpOffsets reads a partition's start and end offsets and, with
	// Consumer set, the consumer's stored offset (Found, Offset). A read
	// like OpGetOffset: a leader read when FromLeader.
	OpOffsets
	// OpDeleteOffset removes Consumer's stored offset (Found: there was
	// one): a replicated write, like OpStoreOffset.
	OpDeleteOffset

	// opFlush is Flush's marker frame; it never reaches a partition.
	opFlush Op = 255
)

// String is the op's name, used as the variant label of drop counters.
func (o Op) String() string {
	switch o {
	case OpProduce:
		return "produce"
	case OpPoll:
		return "poll"
	case OpStoreOffset:
		return "store_offset"
	case OpGetOffset:
		return "get_offset"
	case OpTruncate:
		return "truncate"
	case OpPurge:
		return "purge"
	case OpRaft:
		return "raft"
	case OpCatchUp:
		return "catchup"
	case OpOffsets:
		return "offsets"
	case OpDeleteOffset:
		return "delete_offset"
	}
	return "unknown"
}

// IsWrite reports whether o changes a partition: on a replicated
// partition only its leader takes it, and proposes it.
func (o Op) IsWrite() bool {
	switch o {
	case OpProduce, OpStoreOffset, OpDeleteOffset, OpTruncate, OpPurge:
		return true
	}
	return false
}

// Request is a partition operation addressed to a namespace.
type Request struct {
	Op Op
	NS metadata.Namespace
	// Epoch, when non-zero, is the incarnation the sender addresses: the
	// frame is served only by a partition of that epoch. Client frames leave
	// it zero and are stamped when parked; replicated traffic carries it.
	Epoch uint64
	// Messages is the batch of a produce.
	Messages []partition.Message
	// Encoded, when set instead of Messages, is a produce's batch in its
	// producer's encoding (a Kafka record batch), given as Give gives
	// bytes: a partition that keeps encoded batches
	// (partition.EncodedKeeper) stores it as it is, any other gets its
	// decoded messages (kept). Only a node that is not clustered sends
	// it: a frame forwarded to another node or proposed to a raft group
	// carries Messages only.
	Encoded partition.Encoded
	// Give offers the produce's bytes (its messages' keys, headers and
	// payloads) to the partition: one that stores bytes as given
	// (partition.Keeper) keeps them instead of copying them, and the
	// answer says so (Response.Kept). The sender must not write them
	// until it is answered, nor ever after a Kept answer or none. Only
	// a local, unreplicated append keeps them; a frame sent to another
	// node goes without it.
	Give bool
	// Carried marks a produce whose messages are a new partition's first
	// and are durable elsewhere once the partition's incarnation (Epoch)
	// commits: they ride in the metadata log's record of the command
	// that creates the partition (metadata.Durable.ApplyCarrying), so
	// one fsync of that log makes the topic and its first messages
	// durable together (DESIGN behaviour 32). The shard appends them
	// only to an empty partition: one that holds anything holds them
	// already, since they were its first and what survives of a log is a
	// prefix of it (this is what lets a partition built after a restart
	// take the log's copy, Config.Carried, whether or not its journal
	// kept them), and answers such a produce with offset 0 without
	// appending. Under FsyncAlways it answers without waiting for the
	// partition's fsync (a provisional partition still holds the answer
	// until its commit), syncs the partition with its next commit group
	// or a few milliseconds later, keeps the request until such an fsync
	// covers the messages — a partition built for the incarnation
	// meanwhile (a rebuild after a failed fsync) gets them again before
	// anything else — and then calls
	// Carried on its goroutine with nil, or with the error of each failed
	// fsync; it must not block. Under any other policy the
	// produce takes the ordinary path and Carried is not called. Only a
	// node that is not clustered sends it, with Messages.
	Carried func(err error)
	// ReadEncoded asks a poll whose start is in a batch its partition
	// keeps encoded (partition.EncodedKeeper) for that batch whole
	// (Response.Encoded) instead of its messages. Never sent to another
	// node.
	ReadEncoded bool
	// Offset is where a poll starts, or the offset a consumer stores.
	Offset uint64
	// Count is the most messages a poll returns.
	Count int
	// Consumer names the consumer of a get/store offset, or of a poll that
	// starts at the consumer's stored offset (UseConsumer, or Start
	// StartNext).
	Consumer string
	// UseConsumer is Start = StartNext (the form older senders use).
	UseConsumer bool
	// Start is where a poll starts (StartOffset, the zero value, uses
	// Offset); Reset decides for StartNext when the consumer has no
	// stored offset or one out of range; Timestamp is StartTimestamp's
	// time (µs since the Unix epoch).
	Start     StartKind
	Reset     Reset
	Timestamp int64
	// MaxWait, when positive, makes a poll wait — registered at the
	// partition's shard, costing nothing — until MinCount messages (at
	// least 1) are readable, or MaxBytes bytes, or MaxWait passes (capped
	// at MaxPollWait); see wait.go. MaxBytes, when positive, is the
	// poll's byte budget (payloads, keys and headers): the batch stops
	// before the message that would exceed it, but always holds the first.
	MaxWait  time.Duration
	MinCount int
	MaxBytes int
	// Raft is the message of an OpRaft frame; Epoch is then the sender's
	// incarnation of the partition.
	Raft *raftpb.Message
	// Payload is an OpCatchUp frame's message; Epoch is the sender's
	// incarnation.
	Payload []byte
	// Peer is the node a peer frame (OpRaft, OpCatchUp) came from, as the
	// transport authenticated it (not the raft message's From, which the
	// sender writes): the inbox charges the frame's bytes to that peer's
	// share too (Config.InboxBytes). Zero when not known.
	Peer uint64
	// FromLeader asks for a read (poll, consumer offset) of a replicated
	// partition to be served by its leader, which has applied every
	// acknowledged write: a follower answers NotLeaderError. Without it a
	// replica serves its own copy — committed messages only, but possibly
	// behind the leader.
	FromLeader bool
	// Producer and Seq identify a produce across retries on a replicated
	// partition: a batch whose (Producer, Seq) was applied already is not
	// applied again. Zero Producer disables deduplication.
	Producer, Seq uint64
	// Term, when non-zero, fences a write to the leadership of one raft
	// term: only a leader elected in that term proposes it, and one that
	// is not (a follower, a leader of another term, a partition that is
	// not replicated) answers errTermFenced, which matches ErrNotLeader.
	// An entry proposed in term T commits only as part of term T's log, so
	// a writer that loaded state at term T never writes after a later
	// leader's (Cluster.ProduceInTerm). Never forwarded: a frame carrying
	// it is sent to the local shard only.
	Term uint64
	// Deadline, when set, is when the client stops waiting for this
	// attempt: a frame parked for its partition is answered by then
	// (retriable) even if no reconcile pass runs meanwhile — a build
	// stuck on a slow disk must not hold a parked request past its
	// deadline. Zero means only the park age bound applies.
	Deadline time.Time
}

// Response is the answer to a Request.
type Response struct {
	// Err is nil on success. Errors wrapping ErrRetry are transient.
	Err error
	// Offset is the first offset of a produce, the next offset after a
	// poll, or a consumer's stored offset.
	Offset uint64
	// Found reports whether a consumer offset was stored (before an
	// OpDeleteOffset removed it).
	Found bool
	// Start and End are the partition's start offset and end (next)
	// offset, answered by OpOffsets.
	Start, End uint64
	// Term is the raft term of the partition's group where an OpOffsets
	// was served (0 on a partition that is not replicated): a leader
	// read's is the term its leader was elected in.
	Term uint64
	// InSync are the nodes of the group's in-sync replicas (Group.InSync:
	// the leader and the followers keeping up with it), answered with a
	// leader read of OpOffsets (FromLeader) by the leader that served it:
	// only the leader sees its followers' progress, and any node learns
	// it by asking (Cluster.InSyncReplicas).
	InSync []uint64
	// Messages are a poll's messages (read-only: they may be the
	// partition's own, partition.Read).
	Messages []partition.Message
	// Encoded is a poll's encoded batch (Request.ReadEncoded), read-only,
	// in place of Messages, and EncodedBase its first offset (at or below
	// the poll's start); Offset is then the offset after its last message.
	Encoded     partition.Encoded
	EncodedBase uint64
	// Kept reports that a produce's partition kept the bytes its Give
	// offered instead of copying them.
	Kept bool
}

// Frame is a request in flight with its reply path.
type Frame struct {
	Req *Request
	// Reply receives exactly one Response. It must have room for it
	// (capacity ≥ 1) so the pump never blocks on an answer. Nil for traffic
	// that has no client waiting.
	Reply chan<- Response
}

// payloadBytes is what the frame's request holds beyond its fixed part,
// the basis of its park footprint: a produce's messages (keys, headers
// and payloads), a peer's raft message (its encoded size, entries and
// snapshot included) and a catch-up payload. Peer frames park like
// client frames (a vote or an append may reach a node before it builds
// the partition), so they are charged what they pin.
func (f Frame) payloadBytes() int64 {
	r := f.Req
	n := int64(len(r.Payload))
	if r.Encoded != nil {
		n += r.Encoded.Size()
	}
	if r.Raft != nil {
		n += int64(proto.Size(r.Raft))
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		n += int64(len(m.Key) + len(m.Payload))
		for _, h := range m.Headers {
			n += int64(len(h.Key) + len(h.Value))
		}
	}
	return n
}

var (
	// ErrRetry is the root of every "retry here shortly" answer: the node
	// is converging (a partition is materialising, being torn down, or a
	// buffer is full) and the same request sent to the same node shortly
	// will likely succeed. It never means "go to another node".
	ErrRetry = errors.New("parkway: not ready here, retry shortly")
	// ErrStaleIncarnation answers a frame addressed to (or stamped with) an
	// incarnation that is not the one materialised: a delete and recreate
	// happened in between. The frame was not served. It wraps ErrRetry: a
	// client retry re-resolves the incarnation.
	ErrStaleIncarnation = fmt.Errorf("%w: frame addressed a dead incarnation", ErrRetry)
	// ErrClosed answers frames still queued or parked when the shard closes.
	ErrClosed = errors.New("parkway: shard closed")
	// ErrPartitionFailed answers every request to a partition after an
	// fsync of it failed under FsyncAlways (a group commit's, or the one
	// that makes a reopened log durable before it is served): what that
	// fsync covered is in the log but not durable, and a crash may erase
	// it and hand its offsets to other messages, so no reader may see it.
	// The partition stays fenced until it is rebuilt from what is
	// durable: the reconciler evicts a fenced partition and builds it
	// again behind its build backoff (a restart does the same). It is not
	// retriable.
	//
	// It also answers the requests for a partition whose build failed for
	// damage on disk (a sweep's VerdictBuildFailed with a cause matching
	// partition.ErrCorrupt), wrapping the *partition.CorruptError that
	// names the file and byte offset; the reconciler retries the build
	// behind its backoff, so the partition is served once the damage is
	// repaired. And it answers a local read of a replica the metadata
	// re-seeded while it ran (replaced by a newer replica on this node),
	// until the reconciler has built the new one; writes and leader
	// reads go to the group meanwhile.
	ErrPartitionFailed = errors.New("parkway: partition fenced after a failed fsync until it is rebuilt from disk")

	errTombstoned   = fmt.Errorf("%w: partition is being removed", ErrRetry)
	errIncarnation  = fmt.Errorf("%w: partition incarnation is changing", ErrRetry)
	errParkOverflow = fmt.Errorf("%w: park buffer full", ErrRetry)
	errParkExpired  = fmt.Errorf("%w: partition not materialised in time", ErrRetry)
	errNotOwner     = fmt.Errorf("%w: namespace owned by another shard", ErrRetry)
	errRemoved      = fmt.Errorf("%w: partition removed", ErrRetry)
	errForwardFull  = fmt.Errorf("%w: owner inbox full", ErrRetry)
	errBuildFailed  = fmt.Errorf("%w: partition build failed, backing off", ErrRetry)
)
