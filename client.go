package parkway

import (
	"context"
	"fmt"
	"hash"
	"sync"
	"time"

	"github.com/spaolacci/murmur3"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
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
// The key is also stored with every message of the batch that has no
// Message.Key of its own, and Poll returns it.
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
	// Kept reports that the node keeps the batch's bytes as the stored
	// messages instead of a copy (ProduceAsyncGive to a node that stores
	// in memory): the caller must never write them again.
	Kept bool
}

// Produce appends msgs to one partition of topic t, whole or not at all,
// and returns once they are appended. A produce is only ever appended to
// the incarnation of the topic its handle names: once that topic is
// deleted the produce fails with ErrTopicNotFound (wrapping
// ErrStaleHandle), even when a new topic took its ids, wherever the
// request was parked or forwarded. A partition that is still
// materialising (the topic was just created) parks the request at its
// shard, so a produce right after CreateTopic succeeds. Payloads are copied;
// the caller may reuse msgs afterwards.
//
// A message's Timestamp is the producer's (Kafka's CreateTime): kept as
// given, or set to the node clock's now when zero. AppendTime is stamped
// by the partition's shard when it appends (Kafka's LogAppendTime;
// non-decreasing along a partition); a value set by the caller is
// ignored. Message.Key is stored with the message.
func (n *Node) Produce(ctx context.Context, t Topic, to Partitioning, msgs ...Message) (Ack, error) {
	start := n.cfg.Clock.Now()
	var one *oneProduce
	if len(msgs) == 1 {
		one = n.takeOneProduce()
	}
	req, part, size, err := n.prepareProduce(ctx, start, t, to, msgs, nil, one)
	if err != nil {
		n.recycle(one) // never sent
		return Ack{}, err
	}
	count := len(req.Messages)
	var offset uint64
	if one != nil {
		var reusable bool
		reusable, err = n.eng.CallReusing(ctx, req, one.reply, n.resolver(t, part), &one.resp)
		offset = one.resp.Offset
		if reusable {
			n.recycle(one)
		}
		err = publicError(err)
	} else {
		offset, err = n.callOffset(ctx, req, t, part)
	}
	if err != nil {
		return Ack{}, err
	}
	n.countProduced(t, count, size, start)
	return Ack{Partition: part, FirstOffset: offset, Count: count}, nil
}

// callOffset is call for Produce's batch, answering the first offset: its
// own frame keeps the response off Produce's (see oneProduce.resp).
//
//go:noinline
func (n *Node) callOffset(ctx context.Context, req *shard.Request, t Topic, part uint32) (uint64, error) {
	r, err := n.call(ctx, req, t, part)
	return r.Offset, err
}

// topicMetrics returns t's client-side counters, labelled by its stream's
// and its own name and resolved once per topic incarnation: the
// revision is global and never reused, so it names the topic (and its
// names) alone, where ids are reused after a delete.
func (n *Node) topicMetrics(t Topic) *metrics.Topic {
	key := t.Revision
	if m, ok := n.topicMetricsCache.Load(key); ok {
		return m.(*metrics.Topic)
	}
	// Incarnations come and go: the cache starts afresh past a bound
	// rather than keep every topic ever produced to.
	if n.topicMetricsCount.Add(1) > maxTopicMetrics {
		n.topicMetricsCache.Clear()
		n.topicMetricsCount.Store(1)
	}
	m, _ := n.topicMetricsCache.LoadOrStore(key, n.eng.Metrics().Topic(t.Stream.Name, t.Name))
	return m.(*metrics.Topic)
}

// maxTopicMetrics bounds topicMetricsCache.
const maxTopicMetrics = 1 << 14

// countProduced counts an acknowledged batch of count messages, size
// bytes as prepareProduce measured them, produced since start.
func (n *Node) countProduced(t Topic, count, size int, start time.Time) {
	m := n.topicMetrics(t)
	m.Produced.Add(float64(count))
	m.ProducedBytes.Add(float64(size))
	m.Latency.Observe(n.cfg.Clock.Now().Sub(start).Seconds())
}

func batchBytes(msgs []Message) int {
	total := 0
	for i := range msgs {
		total += messageSize(&msgs[i])
	}
	return total
}

// The errors of prepareBatch's limits, built out of its frame: every
// synchronous producer's stack holds the deepest frames of a produce
// (TestSyncProduceStack), and each formatted error otherwise reserves its
// arguments there.

//go:noinline
func tooManyMessages(count, max int) error {
	return fmt.Errorf("%w: %d messages > %d", ErrBatchTooLarge, count, max)
}

//go:noinline
func messageTooLarge(i, size, max int) error {
	return fmt.Errorf("%w: message %d is %d bytes > %d", ErrMessageTooLarge, i, size, max)
}

//go:noinline
func batchTooLarge(max int) error {
	return fmt.Errorf("%w: more than %d bytes", ErrBatchTooLarge, max)
}

// prepareBatch is the part of prepareProduce that needs no partition:
// the batch validated against the limits, copied (or, given, used in
// place) and stamped, with its size. one is returned as used: nil for a
// given batch.
func (n *Node) prepareBatch(ctx context.Context, start time.Time, to Partitioning, lent, given []Message, one *oneProduce) (batch []Message, total int, _ *oneProduce, err error) {
	// Two parameters, not a slice and a flag: a lent batch is only read
	// (copied below), so escape analysis keeps a caller's variadic slice
	// on its stack; only a given one is kept.
	give := given != nil
	msgs := lent
	if give {
		msgs = given
	}
	if err := n.begin(ctx); err != nil {
		return nil, 0, nil, err
	}
	if len(msgs) == 0 {
		return nil, 0, nil, ErrEmptyBatch
	}
	if len(msgs) > n.cfg.MaxBatchMessages {
		return nil, 0, nil, tooManyMessages(len(msgs), n.cfg.MaxBatchMessages)
	}
	// The batch is copied so timestamps and keys can be set without
	// writing to the caller's slice; payload bytes are copied later by the
	// partition.
	now := start.UnixMicro()
	switch {
	case give:
		batch = given // the caller gave the slice too: set in place
		one = nil
	case len(msgs) == 1:
		if one == nil {
			one = &oneProduce{}
		}
		batch = one.msg[:]
	default:
		batch = make([]Message, len(msgs))
	}
	for i := range msgs {
		if !give {
			batch[i] = msgs[i]
		}
		m := &batch[i]
		m.Offset, m.AppendTime = 0, 0
		if m.Timestamp == 0 {
			m.Timestamp = now
		}
		if m.Key == nil && to.kind == byKey {
			m.Key = to.key
		}
		size := messageSize(m)
		if size > n.cfg.MaxMessageSize {
			return nil, 0, nil, messageTooLarge(i, size, n.cfg.MaxMessageSize)
		}
		if total += size; total > n.cfg.MaxBatchBytes {
			return nil, 0, nil, batchTooLarge(n.cfg.MaxBatchBytes)
		}
	}
	return batch, total, one, nil
}

// prepareProduce validates and copies a batch (a given one is used in
// place, ProduceAsyncGive), chooses its partition and resolves its
// namespace: everything of a produce before it is sent. It also returns
// the batch's size (partition.MessageSize summed), which the limits
// checked and the produced-bytes metric counts.
//
// start is the caller's clock read at the call's start: it stamps the
// batch and starts the call's deadline. one, when not nil, holds the
// request and the copy of a one-message lent batch (Produce's, pooled);
// nil, prepareProduce allocates what it needs.
func (n *Node) prepareProduce(ctx context.Context, start time.Time, t Topic, to Partitioning, lent, given []Message, one *oneProduce) (req *shard.Request, part uint32, size int, err error) {
	batch, total, one, err := n.prepareBatch(ctx, start, to, lent, given, one)
	if err != nil {
		return nil, 0, 0, err
	}
	var (
		ns    metadata.Namespace
		epoch uint64
	)
	err = n.awaitMetadata(ctx, func() (err error) {
		if part, err = n.choose(ctx, t, to); err != nil {
			return err
		}
		ns, epoch, err = n.resolve(ctx, t, part)
		return err
	})
	if err != nil {
		return nil, 0, 0, err
	}
	if one != nil {
		req = &one.req // cleared when it was put back (recycle)
	} else {
		req = &shard.Request{}
	}
	// Set field by field on the zero request: a composite literal
	// assigned through the pointer is built in a 240-byte temporary in
	// this frame first, which every synchronous producer's stack holds
	// (TestSyncProduceStack). The call's deadline comes from the clock
	// read that stamped the batch, so dispatch need not read it again.
	req.Op, req.NS, req.Epoch = shard.OpProduce, ns, epoch
	req.Messages = engineMessages(batch)
	req.Deadline = n.callDeadline(ctx, start)
	if n.eng.Clustered() {
		req.Producer, req.Seq = n.producer, n.seq.Add(1)
	}
	return req, part, total, nil
}

// PendingAck is a produce started by ProduceAsync.
type PendingAck struct {
	n     *Node
	req   *shard.Request
	call  host.PendingCall
	topic Topic
	part  uint32
	size  int       // the batch's bytes, for the produced-bytes metric
	start time.Time // when ProduceAsync was called, for the latency metric
	done  bool
	ack   Ack
	err   error
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
func (n *Node) ProduceAsync(ctx context.Context, t Topic, to Partitioning, msgs ...Message) *PendingAck {
	return n.produceAsync(ctx, t, to, ProducerSeq{}, msgs, nil)
}

// ProducerSeq names one logical produce across retries, for a caller that
// deduplicates its own writes (a protocol listener relaying a client's
// idempotent producer): a producer id and its sequence number. In a
// cluster the pair goes into the partition's replicated deduplication
// window (its last 65,536 pairs): a produce whose pair the partition has
// applied is answered with the first offset the first copy got and not
// appended again, through whichever node the retry arrives, after a
// leader change too. Producer must not be 0 (0 is "none"); choose
// producers so that they do not collide with another writer's. On a
// single node a produce's outcome is never unknown to the node, and the
// pair is not used.
type ProducerSeq struct{ Producer, Seq uint64 }

// ProduceAsyncIdempotent is ProduceAsync under the caller's producer and
// sequence instead of a pair the Node draws: a retry under the same pair
// applies once.
func (n *Node) ProduceAsyncIdempotent(ctx context.Context, t Topic, to Partitioning, seq ProducerSeq, msgs ...Message) *PendingAck {
	if seq.Producer == 0 {
		return &PendingAck{done: true, err: fmt.Errorf("%w: producer 0 (0 is none)", ErrInvalidArgument)}
	}
	return n.produceAsync(ctx, t, to, seq, msgs, nil)
}

// ProduceAsyncGive is ProduceAsyncIdempotent (ProduceAsync when
// seq.Producer is 0) for a caller that gives the node the batch instead
// of lending it: the msgs slice, whose messages the node completes in
// place (Offset, AppendTime, a zero Timestamp, the key of Key
// partitioning) where Produce copies the slice first, and the bytes the
// messages point to (Key, Headers with their values, Payload). A node
// that stores partitions in memory (no DataDir) keeps those bytes as the
// stored messages of a partition that is not replicated, where Produce
// and ProduceAsync copy them, and Wait reports it (Ack.Kept); readers get
// them from Poll. So the caller must not touch msgs nor write the bytes
// until Wait returns, nor write the bytes ever after Wait returns an Ack
// with Kept set, or an error (the node may hold them). Otherwise the
// bytes were copied and may be reused once Wait returned. A listener that
// decodes each client batch into a buffer of its own gives that buffer
// and recycles it only when it was not kept.
func (n *Node) ProduceAsyncGive(ctx context.Context, t Topic, to Partitioning, seq ProducerSeq, msgs ...Message) *PendingAck {
	return n.produceAsync(ctx, t, to, seq, nil, msgs)
}

// produceAsync starts a produce, under seq when its producer is set; give
// offers the batch's bytes to the partition (ProduceAsyncGive).
func (n *Node) produceAsync(ctx context.Context, t Topic, to Partitioning, seq ProducerSeq, lent, given []Message) *PendingAck {
	start := n.cfg.Clock.Now()
	req, part, size, err := n.prepareProduce(ctx, start, t, to, lent, given, nil)
	if err != nil {
		return &PendingAck{done: true, err: err}
	}
	if seq.Producer != 0 && n.eng.Clustered() {
		req.Producer, req.Seq = seq.Producer, seq.Seq
	}
	req.Give = given != nil
	return &PendingAck{n: n, req: req, call: n.eng.StartCall(ctx, req), topic: t, part: part, size: size, start: start}
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
	if ctx == nil {
		return Ack{}, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	r, err := p.call.Wait(ctx, p.n.resolver(p.topic, p.part))
	err = publicError(err)
	p.done, p.err = true, err
	if err == nil {
		p.ack = Ack{Partition: p.part, FirstOffset: r.Offset, Count: produced(p.req), Kept: r.Kept}
		p.n.countProduced(p.topic, produced(p.req), p.size, p.start)
	}
	return p.ack, p.err
}

// choose applies a Partitioning against the committed partition count.
func (n *Node) choose(ctx context.Context, t Topic, to Partitioning) (uint32, error) {
	if to.kind == byID {
		return to.id, nil
	}
	return n.chooseOf(ctx, t, to)
}

// chooseOf is choose for a partitioning that reads the topic, in a frame
// of its own: a produce to a partition by id does not carry it (see
// resolveCaughtUp).
//
//go:noinline
func (n *Node) chooseOf(ctx context.Context, t Topic, to Partitioning) (uint32, error) {
	info, err := n.topicInfo(ctx, t)
	if err != nil {
		return 0, err
	}
	if info.Partitions == 0 {
		return 0, fmt.Errorf("%w: %v has no partitions", ErrPartitionNotFound, t)
	}
	switch to.kind {
	case byKey:
		return keyHash(to.key) % uint32(info.Partitions), nil
	case byBalanced:
		return uint32(n.roundRobin.Add(1)-1) % uint32(info.Partitions), nil
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

// Start says where a poll begins: AtOffset, AtFirst, AtLast, AtTime,
// AtConsumer (a named consumer's stored offset) or AtCommitted (a
// group's committed offset: Member.Poll only; Node.Poll refuses it with
// ErrInvalidArgument). Every start position resolves (DESIGN behaviour
// 24): a consumer always has a next position.
type Start struct {
	kind      shard.StartKind
	offset    uint64
	consumer  string
	reset     OffsetReset
	timestamp int64
	local     bool
	committed bool // AtCommitted: a group member's committed offset
}

// OffsetReset says where a poll AtConsumer or AtCommitted (and a
// Consumer, ConsumerConfig.Reset) starts when there is no stored or
// committed offset, or one outside the partition's [start, end] (a
// truncation or retention passed it): Kafka's auto.offset.reset.
type OffsetReset uint8

// The reset policies.
const (
	// ResetEarliest starts at the partition's start offset: the default.
	// A stored offset below the start is read as the start, so a consumer
	// never wedges after a truncation.
	ResetEarliest OffsetReset = OffsetReset(shard.ResetEarliest)
	// ResetLatest starts at the end: only messages produced from now on.
	ResetLatest OffsetReset = OffsetReset(shard.ResetLatest)
	// ResetError fails the poll with ErrOffsetOutOfRange.
	ResetError OffsetReset = OffsetReset(shard.ResetError)
)

// Local makes the poll read this node's own replica of the partition
// instead of the leader's. In a cluster a poll is served by the
// partition's leader, so it sees every acknowledged write (a follower
// forwards it); a local read is not forwarded, but the replica may be
// behind the leader: it serves committed messages only, possibly not the
// latest acknowledged ones. On a single node it changes nothing. A local
// waiting poll is woken by this replica's apply of the messages.
func (s Start) Local() Start { s.local = true; return s }

// OrReset sets the reset policy of an AtConsumer or AtCommitted start
// (ResetEarliest unless set); other starts ignore it.
func (s Start) OrReset(r OffsetReset) Start { s.reset = r; return s }

// AtOffset starts a poll at an offset. An offset below the partition's
// start offset fails with ErrOffsetOutOfRange; one past the end reads as
// the end: the batch is empty (or the poll waits) and Batch.Next is the
// end, an offset that can be stored.
func AtOffset(offset uint64) Start { return Start{kind: shard.StartOffset, offset: offset} }

// AtFirst starts a poll at the partition's oldest readable message (its
// start offset).
func AtFirst() Start { return Start{kind: shard.StartFirst} }

// AtLast starts a poll at the partition's last message; on an empty
// partition, at the end (a waiting poll then returns the next message
// produced).
func AtLast() Start { return Start{kind: shard.StartLast} }

// AtTime starts a poll at the first message appended at or after t (by
// its AppendTime); at the end if there is none.
func AtTime(t time.Time) Start { return Start{kind: shard.StartTimestamp, timestamp: t.UnixMicro()} }

// AtConsumer starts a poll at the consumer's stored offset: the next
// offset it will read, as in Kafka. With none stored, or one outside the
// partition's [start, end], the reset policy decides (OrReset): by
// default the start offset.
func AtConsumer(consumer string) Start {
	return Start{kind: shard.StartNext, consumer: consumer}
}

// Batch is the result of a poll.
type Batch struct {
	// Messages are in offset order. Treat them as read-only: they may share
	// memory with the partition.
	Messages []Message
	// Encoded, set only by PollEncoded, is the batch kept in its
	// producer's encoding that holds the poll's start, handed out whole
	// instead of Messages; EncodedBase is its first message's offset.
	Encoded     Encoded
	EncodedBase uint64
	// Next is the offset to poll from next: after the last message, or the
	// poll's resolved start when it returned none. It is always in the
	// partition's [start, end], so it can be stored with StoreOffset.
	Next uint64
	// End is the partition's end (next) offset when the poll was
	// answered: End − Next is the poller's lag.
	End uint64
}

// MaxPollWait caps PollOption WaitFor: the longest a poll waits.
const MaxPollWait = shard.MaxPollWait

// pollDeadlineMargin bounds how much earlier than its context's deadline
// a waiting poll is answered (see Poll).
const pollDeadlineMargin = 100 * time.Millisecond

// PollOption configures a poll.
type PollOption func(*pollOptions)

type pollOptions struct {
	wait     time.Duration
	minCount int
	maxBytes int
	err      error
}

// WaitFor makes the poll wait up to d for messages (a long poll): it
// returns as soon as MinMessages messages (default 1) can be returned, or
// the byte budget is reached, and with what there is — possibly nothing —
// once d has passed. A waiting poll costs no CPU: it is registered at the
// partition's shard and woken by the produce that satisfies it (in a
// cluster, by the commit that makes it readable). d must be in [0,
// MaxPollWait] (30 s); a context deadline earlier than d shortens the
// wait, so the poll returns its batch shortly before the context ends.
//
// A waiting poll whose partition is deleted, truncated past its start or
// whose node closes ends with an error. A shard holds at most 10,000
// waiting polls (shard.DefaultMaxWaiters); past it a poll fails with
// ErrTooManyWaiters. A poll abandoned by its context keeps its place at
// the shard until its wait ends.
func WaitFor(d time.Duration) PollOption {
	return func(o *pollOptions) {
		if d < 0 || d > MaxPollWait {
			o.err = fmt.Errorf("%w: poll wait %v outside [0, %v]", ErrInvalidArgument, d, MaxPollWait)
		}
		o.wait = d
	}
}

// MinMessages makes a waiting poll return once n messages are available
// (default 1; capped by the poll's maximum). n must be at least 1.
func MinMessages(n int) PollOption {
	return func(o *pollOptions) {
		if n < 1 {
			o.err = fmt.Errorf("%w: minimum message count %d must be positive", ErrInvalidArgument, n)
		}
		o.minCount = n
	}
}

// MaxBytes is the poll's byte budget (payloads, keys and headers): the
// batch stops before the message that would exceed it, but always holds
// the first message, however large. A waiting poll also returns once the
// budget is reached. n must be positive.
func MaxBytes(n int) PollOption {
	return func(o *pollOptions) {
		if n < 1 {
			o.err = fmt.Errorf("%w: byte budget %d must be positive", ErrInvalidArgument, n)
		}
		o.maxBytes = n
	}
}

// Poll reads up to max messages from a partition, starting at from. With
// WaitFor it waits for messages (a long poll) instead of returning an
// empty batch at once.
func (n *Node) Poll(ctx context.Context, t Topic, part uint32, from Start, max int, opts ...PollOption) (Batch, error) {
	return n.poll(ctx, t, part, from, max, false, opts)
}

// poll is Poll, answered with an encoded batch where its start is in one
// with encoded (PollEncoded).
func (n *Node) poll(ctx context.Context, t Topic, part uint32, from Start, max int, encoded bool, opts []PollOption) (Batch, error) {
	if err := n.begin(ctx); err != nil {
		return Batch{}, err
	}
	if max <= 0 {
		return Batch{}, fmt.Errorf("%w: poll count %d must be positive", ErrInvalidArgument, max)
	}
	if from.committed {
		// A group's committed offset: only a Member has a group to read
		// it from.
		return Batch{}, fmt.Errorf("%w: AtCommitted is a group member's start (Member.Poll)", ErrInvalidArgument)
	}
	var o pollOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return Batch{}, o.err
	}
	req := &shard.Request{
		Op: shard.OpPoll, Offset: from.offset, Count: max, FromLeader: !from.local,
		Start: from.kind, Reset: shard.Reset(from.reset), Timestamp: from.timestamp,
		MaxWait: o.wait, MinCount: o.minCount, MaxBytes: o.maxBytes,
		// Only a node that is not clustered keeps encoded batches
		// (ProduceAsyncEncoded), and its polls never cross the wire.
		ReadEncoded: encoded && !n.eng.Clustered(),
	}
	if d, ok := ctx.Deadline(); ok && o.wait > 0 {
		// Answer before the caller gives up: the shard answers a tenth of
		// the time left (at most pollDeadlineMargin) before the context
		// ends, so its answer, not the context's error, comes back.
		left := time.Until(d)
		if left -= min(left/10, pollDeadlineMargin); left < o.wait {
			req.MaxWait = left // may be ≤ 0: then the poll does not wait
		}
	}
	if from.kind == shard.StartNext {
		if err := validConsumer(from.consumer); err != nil {
			return Batch{}, err
		}
		// UseConsumer is the form every sender understands; Start says the
		// same to those that read it.
		req.Consumer, req.UseConsumer = from.consumer, true
	}
	ns, epoch, err := n.resolveWait(ctx, t, part)
	if err != nil {
		return Batch{}, err
	}
	req.NS, req.Epoch = ns, epoch
	var began time.Time
	if o.wait > 0 {
		began = n.cfg.Clock.Now() // only waiting polls are timed
	}
	r, err := n.call(ctx, req, t, part)
	if err != nil {
		return Batch{}, err
	}
	m := n.topicMetrics(t)
	end := r.End
	if end < r.Offset {
		end = r.Offset // a node that sent no end
	}
	b := Batch{Messages: clientMessages(r.Messages), Next: r.Offset, End: end}
	if len(r.Messages) > 0 {
		m.Polled.Add(float64(len(r.Messages)))
		m.PolledBytes.Add(float64(batchBytes(b.Messages)))
	}
	if r.Encoded != nil {
		// Every encoded batch a partition keeps came from
		// ProduceAsyncEncoded, wrapped.
		switch e := r.Encoded.(type) {
		case engineEncoded:
			b.Encoded = e.Encoded
		case engineLent:
			b.Encoded = e.Encoded
		default:
			return Batch{}, fmt.Errorf("parkway: a partition answered an encoded batch of type %T", r.Encoded)
		}
		b.EncodedBase = r.EncodedBase
		_, total := b.Encoded.MessageSizes()
		m.Polled.Add(float64(b.Encoded.Len()))
		m.PolledBytes.Add(float64(total))
	}
	if o.wait > 0 {
		m.PollWait.Observe(n.cfg.Clock.Now().Sub(began).Seconds())
	}
	return b, nil
}

// PollEncoded is Poll for a reader of the encoding batches were produced
// in (ProduceAsyncEncoded: the Kafka listener's fetch): where the poll's
// start is in a batch the node keeps encoded, it answers that batch whole
// (Batch.Encoded, its first offset Batch.EncodedBase, at or below the
// start: the reader skips what it did not ask for) with no Messages, and
// Next after the batch's last message; elsewhere it answers messages as
// Poll does. The batch is read-only, as Poll's messages are.
func (n *Node) PollEncoded(ctx context.Context, t Topic, part uint32, from Start, max int, opts ...PollOption) (Batch, error) {
	return n.poll(ctx, t, part, from, max, true, opts)
}

// PartitionOffsets describes a partition's log and, optionally, one
// consumer's position in it.
type PartitionOffsets struct {
	// Start is the first readable offset; End the offset the next message
	// will get. The partition holds End − Start messages.
	Start, End uint64
	// Stored is the consumer's stored offset, when HasStored.
	Stored    uint64
	HasStored bool
	// Lag is how many messages the consumer has not read: End minus where
	// a poll AtConsumer with the default reset would start (the stored
	// offset, or Start when none is stored or it is below Start).
	Lag uint64
}

// validConsumer applies the one naming rule of parkway (streams, topics,
// groups, members, consumers: 1 to 255 bytes of UTF-8 without control
// characters, metadata.ValidateName). A consumer name is never used as a
// path as it is: the partition stores its offset in a file whose name
// escapes every byte outside [A-Za-z0-9_.-] (see package partition), so
// no name reaches outside the offsets directory. The error matches both
// ErrInvalidConsumer and ErrInvalidName.
func validConsumer(name string) error {
	if err := metadata.ValidateName("consumer", name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConsumer, err)
	}
	return nil
}
