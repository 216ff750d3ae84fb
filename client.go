package parkway

import (
	"context"
	"fmt"
	"hash"
	"sync"
	"unicode/utf8"

	"github.com/spaolacci/murmur3"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
)

// Partitioning chooses the partition a produce goes to.
type Partitioning struct {
	kind partitioningKind
	id   uint32
	key  []byte
}

type partitioningKind uint8

const (
	byBalanced partitioningKind = iota
	byID
	byKey
)

// PartitionID sends to one partition by id.
func PartitionID(id uint32) Partitioning { return Partitioning{kind: byID, id: id} }

// Key sends to the partition murmur3(key) mod partition count, so one key's
// messages stay in one partition, in order, while the count is unchanged.
func Key(key []byte) Partitioning { return Partitioning{kind: byKey, key: key} }

// Balanced spreads produces round-robin over the topic's partitions. It is
// the zero Partitioning.
func Balanced() Partitioning { return Partitioning{} }

// Ack acknowledges a produce.
type Ack struct {
	// Partition is the partition the batch went to.
	Partition uint32
	// FirstOffset is the offset of the batch's first message; the rest
	// follow densely.
	FirstOffset uint64
	// Count is the number of messages appended.
	Count int
}

// Produce appends msgs to one partition of a topic, whole or not at all,
// and returns once they are appended. A produce is never acknowledged
// against a dead incarnation; one racing a delete and recreate of its topic
// may land in the new incarnation (the client re-resolves before each
// retry), or fail with a not-found error. A partition that is still
// materialising (the topic was just created) parks the request at its
// shard, so a produce right after CreateTopic succeeds. Payloads are copied;
// the caller may reuse msgs afterwards.
func (n *Node) Produce(ctx context.Context, stream, topic uint32, to Partitioning, msgs ...Message) (Ack, error) {
	req, part, err := n.prepareProduce(ctx, stream, topic, to, msgs)
	if err != nil {
		return Ack{}, err
	}
	r, err := n.call(ctx, req, stream, topic, part)
	if err != nil {
		return Ack{}, err
	}
	return Ack{Partition: part, FirstOffset: r.Offset, Count: len(req.Messages)}, nil
}

// prepareProduce validates and copies a batch, chooses its partition and
// resolves its namespace: everything of a produce before it is sent.
func (n *Node) prepareProduce(ctx context.Context, stream, topic uint32, to Partitioning, msgs []Message) (*shard.Request, uint32, error) {
	if err := n.begin(ctx); err != nil {
		return nil, 0, err
	}
	if len(msgs) == 0 {
		return nil, 0, ErrEmptyBatch
	}
	if len(msgs) > n.cfg.MaxBatchMessages {
		return nil, 0, fmt.Errorf("%w: %d messages > %d", ErrBatchTooLarge, len(msgs), n.cfg.MaxBatchMessages)
	}
	// The batch is copied so timestamps can be set without writing to the
	// caller's slice; payload bytes are copied later by the partition.
	now := n.cfg.Clock.Now().UnixMicro()
	batch := make([]Message, len(msgs))
	total := 0
	for i := range msgs {
		size := partition.MessageSize(&msgs[i])
		if size > n.cfg.MaxMessageSize {
			return nil, 0, fmt.Errorf("%w: message %d is %d bytes > %d", ErrMessageTooLarge, i, size, n.cfg.MaxMessageSize)
		}
		if total += size; total > n.cfg.MaxBatchBytes {
			return nil, 0, fmt.Errorf("%w: more than %d bytes", ErrBatchTooLarge, n.cfg.MaxBatchBytes)
		}
		batch[i] = msgs[i]
		batch[i].Offset = 0
		batch[i].Timestamp = now
	}
	var (
		part uint32
		ns   metadata.Namespace
	)
	err := n.awaitMetadata(ctx, func() (err error) {
		if part, err = n.choose(stream, topic, to); err != nil {
			return err
		}
		ns, err = n.resolve(stream, topic, part)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	req := &shard.Request{Op: shard.OpProduce, NS: ns, Messages: batch}
	if n.eng.Clustered() {
		req.Producer, req.Seq = n.producer, n.seq.Add(1)
	}
	return req, part, nil
}

// PendingAck is a produce started by ProduceAsync.
type PendingAck struct {
	n                   *Node
	f                   shard.Frame
	reply               chan shard.Response
	sent                error
	stream, topic, part uint32
	done                bool
	ack                 Ack
	err                 error
}

// ProduceAsync starts a produce and returns without waiting for its
// acknowledgement: pipelining without a goroutine per message. It returns
// once the batch is queued at the partition's shard (a full inbox makes it
// wait, bounded by ctx and RequestTimeout: backpressure). Wait returns the
// outcome. The semantics are Produce's: Wait retries "retry here" answers
// and follows "not leader" hints as Produce does.
//
// Produces started from one goroutine to one partition are appended in the
// order they were started, except one that had to be retried: it is sent
// again when it is waited for, after the others.
func (n *Node) ProduceAsync(ctx context.Context, stream, topic uint32, to Partitioning, msgs ...Message) *PendingAck {
	req, part, err := n.prepareProduce(ctx, stream, topic, to, msgs)
	if err != nil {
		return &PendingAck{done: true, err: err}
	}
	p := &PendingAck{n: n, reply: make(chan shard.Response, 1), stream: stream, topic: topic, part: part}
	p.f = shard.Frame{Req: req, Reply: p.reply}
	p.sent = n.dispatch(ctx, p.f)
	return p
}

// Wait returns the produce's acknowledgement or error, waiting for it
// (and retrying) within ctx and RequestTimeout. Every later call returns
// the same. A Wait ended by ctx returns ctx's error, as Produce does: the
// produce may or may not have been applied. A PendingAck is not safe for
// concurrent use.
func (p *PendingAck) Wait(ctx context.Context) (Ack, error) {
	if p.done {
		return p.ack, p.err
	}
	r, err := p.n.await(ctx, p.f, p.reply, p.sent, p.stream, p.topic, p.part)
	p.done, p.err = true, err
	if err == nil {
		p.ack = Ack{Partition: p.part, FirstOffset: r.Offset, Count: len(p.f.Req.Messages)}
	}
	return p.ack, p.err
}

// choose applies a Partitioning against the committed partition count.
func (n *Node) choose(stream, topic uint32, to Partitioning) (uint32, error) {
	if to.kind == byID {
		return to.id, nil
	}
	t, ok := n.meta.Topic(stream, topic)
	if !ok {
		return 0, n.missing(stream, topic)
	}
	if t.Partitions == 0 {
		return 0, fmt.Errorf("%w: topic %d in stream %d has no partitions", ErrPartitionNotFound, topic, stream)
	}
	switch to.kind {
	case byKey:
		return keyHash(to.key) % uint32(t.Partitions), nil
	case byBalanced:
		return uint32(n.roundRobin.Add(1)-1) % uint32(t.Partitions), nil
	}
	return 0, fmt.Errorf("%w: unknown partitioning", ErrInvalidArgument)
}

// keyHashers pools murmur3 hashers. The streaming hasher is used rather
// than murmur3.Sum32, whose uintptr walk the race detector rejects.
var keyHashers = sync.Pool{New: func() any { return murmur3.New32() }}

func keyHash(key []byte) uint32 {
	h := keyHashers.Get().(hash.Hash32)
	h.Reset()
	_, _ = h.Write(key)
	sum := h.Sum32()
	keyHashers.Put(h)
	return sum
}

// Start says where a poll begins.
type Start struct {
	offset     uint64
	consumer   string
	atConsumer bool
	local      bool
}

// Local makes the poll read this node's own replica of the partition
// instead of the leader's. In a cluster a poll is served by the
// partition's leader, so it sees every acknowledged write (a follower
// forwards it); a local read is not forwarded, but the replica may be
// behind the leader: it serves committed messages only, possibly not the
// latest acknowledged ones. On a single node it changes nothing.
func (s Start) Local() Start { s.local = true; return s }

// AtOffset starts a poll at an offset.
func AtOffset(offset uint64) Start { return Start{offset: offset} }

// AtConsumer starts a poll at the consumer's stored offset (0 if it has
// none). The stored offset is the next offset to read, as in Kafka.
func AtConsumer(consumer string) Start { return Start{consumer: consumer, atConsumer: true} }

// Batch is the result of a poll.
type Batch struct {
	// Messages are in offset order. Treat them as read-only: they may share
	// memory with the partition.
	Messages []Message
	// Next is the offset to poll from next.
	Next uint64
}

// Poll reads up to max messages from a partition.
func (n *Node) Poll(ctx context.Context, stream, topic, part uint32, from Start, max int) (Batch, error) {
	if err := n.begin(ctx); err != nil {
		return Batch{}, err
	}
	if max <= 0 {
		return Batch{}, fmt.Errorf("%w: poll count %d must be positive", ErrInvalidArgument, max)
	}
	req := &shard.Request{Op: shard.OpPoll, Offset: from.offset, Count: max, FromLeader: !from.local}
	if from.atConsumer {
		if err := validConsumer(from.consumer); err != nil {
			return Batch{}, err
		}
		req.Consumer, req.UseConsumer = from.consumer, true
	}
	ns, err := n.resolveWait(ctx, stream, topic, part)
	if err != nil {
		return Batch{}, err
	}
	req.NS = ns
	r, err := n.call(ctx, req, stream, topic, part)
	if err != nil {
		return Batch{}, err
	}
	return Batch{Messages: r.Messages, Next: r.Offset}, nil
}

// StoreOffset records consumer's offset in a partition: the next offset it
// will read.
func (n *Node) StoreOffset(ctx context.Context, consumer string, stream, topic, part uint32, offset uint64) error {
	if err := n.begin(ctx); err != nil {
		return err
	}
	if err := validConsumer(consumer); err != nil {
		return err
	}
	ns, err := n.resolveWait(ctx, stream, topic, part)
	if err != nil {
		return err
	}
	req := &shard.Request{Op: shard.OpStoreOffset, NS: ns, Consumer: consumer, Offset: offset}
	_, err = n.call(ctx, req, stream, topic, part)
	return err
}

// ConsumerOffset returns consumer's stored offset in a partition and
// whether one is stored.
func (n *Node) ConsumerOffset(ctx context.Context, consumer string, stream, topic, part uint32) (uint64, bool, error) {
	if err := n.begin(ctx); err != nil {
		return 0, false, err
	}
	if err := validConsumer(consumer); err != nil {
		return 0, false, err
	}
	ns, err := n.resolveWait(ctx, stream, topic, part)
	if err != nil {
		return 0, false, err
	}
	req := &shard.Request{Op: shard.OpGetOffset, NS: ns, Consumer: consumer, FromLeader: true}
	r, err := n.call(ctx, req, stream, topic, part)
	if err != nil {
		return 0, false, err
	}
	return r.Offset, r.Found, nil
}

// validConsumer accepts 1–255 bytes of letters, digits, '.', '_' and '-',
// other than "." and "..": consumer names become file names on disk, so
// anything that could escape the offsets directory is refused up front.
func validConsumer(name string) error {
	if name == "" || len(name) > metadata.MaxNameLength || !utf8.ValidString(name) || name == "." || name == ".." {
		return fmt.Errorf("%w: %q", ErrInvalidConsumer, name)
	}
	for _, r := range name {
		ok := r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !ok {
			return fmt.Errorf("%w: %q", ErrInvalidConsumer, name)
		}
	}
	return nil
}
