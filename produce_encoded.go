package parkway

import (
	"context"
	"fmt"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
)

// Encoded is a batch of messages in its producer's encoding, for a
// protocol listener that receives batches already encoded (the Kafka
// listener's record batches, compressed or not): ProduceAsyncEncoded
// gives it to a node, which keeps it as it is where it can and decodes it
// where it cannot. The producer validates the batch whole before giving
// it (every method answers from that validation, and Decode must
// succeed), and nothing may write its bytes afterwards.
type Encoded interface {
	// Len is the number of messages, at least 1.
	Len() int
	// Size is the bytes the batch occupies as kept (its encoding): what
	// an in-memory partition's size, and retention by bytes, count for it.
	Size() int64
	// MessageSizes are the largest of its messages' sizes and their sum,
	// as MaxMessageSize and MaxBatchBytes count them (key, payload and
	// headers, header framing included).
	MessageSizes() (largest, total int)
	// MaxTimestamp is the newest Timestamp of its messages.
	MaxTimestamp() int64
	// Decode returns its Len messages in order, with ID, Timestamp (never
	// 0), Key, Headers and Payload set, in memory of their own that
	// nothing else writes: the node keeps them. It may be called from the
	// node's goroutines, more than once.
	Decode() ([]Message, error)
}

// LentEncoded is an Encoded whose bytes its producer lends only until the
// append is acknowledged, so that it can read each batch into a buffer it
// reuses (the Kafka listener's request frames). A node that keeps the
// batch as it is copies Bytes into memory of its own and hands the copy
// to Own before the ack. A batch not owned when its append is
// acknowledged (refused, timed out, or decoded instead) may still be
// referenced: its producer must not reuse the bytes then.
type LentEncoded interface {
	Encoded
	// Bytes is the batch's encoding as lent, Size bytes of it.
	Bytes() []byte
	// Own makes the batch hold b, a copy of Bytes the node keeps, instead
	// of the lent bytes: called at most once, from the node's goroutines,
	// before the append's ack.
	Own(b []byte)
}

// ProduceAsyncEncoded is ProduceAsyncGive for a batch in its producer's
// encoding. A node that stores partitions in memory (no DataDir) and is
// not clustered keeps the batch as it is, one stored unit: it decodes it
// only when a Poll or a Consumer first reads its messages, and a reader
// of the same encoding (PollEncoded) gets it back as it is. Any other
// node decodes it first (on the caller's goroutine) and produces its
// messages as ProduceAsyncGive does. to must choose a partition by id or
// Balanced (Key partitioning would write the batch's messages). The
// batch is the node's once this is called; Ack.Kept reports that it was
// kept encoded (or its decoded messages kept).
func (n *Node) ProduceAsyncEncoded(ctx context.Context, t Topic, to Partitioning, seq ProducerSeq, b Encoded) *PendingAck {
	if to.kind == byKey {
		return &PendingAck{done: true, err: fmt.Errorf("%w: an encoded batch is not partitioned by key", ErrInvalidArgument)}
	}
	if !n.KeepsEncoded() {
		msgs, err := decodeEncoded(b)
		if err != nil {
			return &PendingAck{done: true, err: err}
		}
		return n.produceAsync(ctx, t, to, seq, nil, msgs)
	}
	start := n.cfg.Clock.Now()
	if err := n.begin(ctx); err != nil {
		return &PendingAck{done: true, err: err}
	}
	count := b.Len()
	largest, total := b.MessageSizes()
	switch {
	case count <= 0:
		return &PendingAck{done: true, err: ErrEmptyBatch}
	case count > n.cfg.MaxBatchMessages:
		return &PendingAck{done: true, err: fmt.Errorf("%w: %d messages > %d", ErrBatchTooLarge, count, n.cfg.MaxBatchMessages)}
	case largest > n.cfg.MaxMessageSize:
		return &PendingAck{done: true, err: fmt.Errorf("%w: a message of %d bytes > %d", ErrMessageTooLarge, largest, n.cfg.MaxMessageSize)}
	case total > n.cfg.MaxBatchBytes:
		return &PendingAck{done: true, err: fmt.Errorf("%w: more than %d bytes", ErrBatchTooLarge, n.cfg.MaxBatchBytes)}
	}
	var (
		part  uint32
		ns    metadata.Namespace
		epoch uint64
	)
	err := n.awaitMetadata(ctx, func() (err error) {
		if part, err = n.choose(ctx, t, to); err != nil {
			return err
		}
		ns, epoch, err = n.resolve(ctx, t, part)
		return err
	})
	if err != nil {
		return &PendingAck{done: true, err: err}
	}
	// Not clustered: no producer pair (a single node never has an
	// unknown outcome to deduplicate).
	req := &shard.Request{Op: shard.OpProduce, NS: ns, Epoch: epoch, Encoded: toEngine(b), Give: true, Deadline: n.callDeadline(ctx, start)}
	return &PendingAck{n: n, req: req, call: n.eng.StartCall(ctx, req), topic: t, part: part, size: total, start: start}
}

// KeepsEncoded reports whether ProduceAsyncEncoded keeps batches as they
// are: a node that stores partitions in memory (no DataDir) and is not
// clustered. Any other decodes them first, so a caller that can make the
// messages as cheaply gives those instead (ProduceAsyncGive).
func (n *Node) KeepsEncoded() bool {
	_, mem := n.eng.Store().(*partition.MemStore)
	return mem && !n.eng.Clustered()
}

// decodeEncoded is b's messages, checked against its count.
func decodeEncoded(b Encoded) ([]Message, error) {
	msgs, err := partition.DecodeEncoded(engineEncoded{b})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return clientMessages(msgs), nil
}

// engineEncoded is an Encoded as the partition package's (the same
// messages: Message and partition.Message share their layout).
type engineEncoded struct{ Encoded }

func (e engineEncoded) Decode() ([]partition.Message, error) {
	msgs, err := e.Encoded.Decode()
	return engineMessages(msgs), err
}

// engineLent is a LentEncoded as the partition package's Lent.
type engineLent struct {
	engineEncoded
	l LentEncoded
}

func (e engineLent) Bytes() []byte { return e.l.Bytes() }
func (e engineLent) Own(b []byte)  { e.l.Own(b) }

// toEngine is b as the partition package's Encoded (and Lent when b is
// LentEncoded).
func toEngine(b Encoded) partition.Encoded {
	if l, ok := b.(LentEncoded); ok {
		return engineLent{engineEncoded{b}, l}
	}
	return engineEncoded{b}
}

// produced is the number of messages r produces.
func produced(r *shard.Request) int {
	if r.Encoded != nil {
		return r.Encoded.Len()
	}
	return len(r.Messages)
}
