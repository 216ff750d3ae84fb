package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// partProduce is one partition of a produce request on its way: the
// appends started for its batches and, for an idempotent producer, their
// sequence records.
type partProduce struct {
	topic, part int // indexes into the response
	handle      parkway.Topic
	byID        bool
	key         producerKey
	acks        []*parkway.PendingAck
	seqs        []*seqBatch // one per ack (nil for a batch without a producer id)
	dup         *seqBatch   // the request is a retry of this batch
	// lent are the batches handed to the node still in the request's
	// frame (keptBatch.raw), which it copies as it keeps them.
	lent []*keptBatch
}

// produce decodes every partition's record batches and starts their
// appends (ProduceAsync: queued at the partition's shard in request order,
// pipelined behind the connection's earlier produces); the response is
// assembled on the writer once the acks are in. acks=0 gets no response.
func (s *Server) produce(ctx context.Context, r *kmsg.ProduceRequest, p *pending) {
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	p.noResponse = r.Acks == 0
	wctx, cancel := s.requestContext(ctx, r.TimeoutMillis)
	dec := decoder{zstd: s.zstd, left: s.cfg.MaxRequestSize}
	// A node that keeps batches as they came gets them so, validated
	// (nothing inflated is kept); any other gets their messages.
	dec.encoded = s.node.KeepsEncoded()
	if dec.encoded || !s.kept.Load() {
		dec.bufs = &s.inflateBufs
	}
	var work []*partProduce

	resp.Topics = make([]kmsg.ProduceResponseTopic, len(r.Topics))
	for ti := range r.Topics {
		rt := &r.Topics[ti]
		st := &resp.Topics[ti]
		*st = kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		var (
			t    parkway.Topic
			tErr error
		)
		byID := r.Version >= 13
		switch {
		case r.TransactionID != nil:
			tErr = errTransactional
		case byID:
			t, tErr = s.topics.lookupID(wctx, rt.TopicID)
		case !validTopicName(rt.Topic):
			tErr = fmt.Errorf("%w: %q", parkway.ErrInvalidName, rt.Topic)
		default:
			t, tErr = s.ensure(wctx, rt.Topic, s.allowed(ctx, OpCreate, ResourceTopic, rt.Topic))
		}
		if tErr == nil && !s.allowed(ctx, OpWrite, ResourceTopic, t.Name) {
			tErr = errTopicDenied
		}
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			sp := &st.Partitions[pi]
			*sp = kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.BaseOffset = rp.Partition, -1
			if tErr != nil {
				sp.ErrorCode = s.produceErrorCode(tErr, byID)
				continue
			}
			if rp.Partition < 0 {
				sp.ErrorCode = s.code(kmsg.Produce, kerr.UnknownTopicOrPartition.Code)
				continue
			}
			if lead, epoch, ok := s.leaderElsewhere(wctx, t, rp.Partition); ok {
				s.notLeader(resp, sp, lead, epoch)
				continue
			}
			batches, err := dec.decodeBatches(rp.Records)
			if err != nil {
				sp.ErrorCode = s.code(kmsg.Produce, recordsErrorCode(err))
				msg := err.Error()
				sp.ErrorMessage = &msg
				s.log.Debug("produce: records refused", "topic", t.Name, "partition", rp.Partition, "err", err)
				continue
			}
			w := &partProduce{topic: ti, part: pi, handle: t, byID: byID, key: producerKey{topic: t, part: rp.Partition}}
			s.startAppends(wctx, w, batches, sp)
			work = append(work, w)
			p.lent = p.lent || len(w.lent) > 0
		}
	}
	p.wait = func(context.Context) kmsg.Response {
		defer cancel()
		acked, kept := true, false
		for _, w := range work {
			a, k := s.finishAppends(wctx, w, &resp.Topics[w.topic].Partitions[w.part])
			acked, kept = acked && a, kept || k
		}
		if kept {
			s.kept.Store(true)
		}
		// An append not acknowledged (refused, timed out) may still be
		// queued or in flight with the records, and a kept one's records
		// are the partition's: their buffers are left to the collector.
		if acked && !kept {
			dec.recycle()
		}
		if p.lent {
			// The frame is free once the node copied every batch lent
			// from it; one it did not copy (its append refused, or
			// still queued past the timeout) may yet be kept pointing
			// into it, so the frame is then left to the collector.
			p.lent = slices.ContainsFunc(work, func(w *partProduce) bool {
				return slices.ContainsFunc(w.lent, func(k *keptBatch) bool { return !k.owned.Load() })
			})
		}
		return resp
	}
}

// startAppends checks each batch's producer sequence and starts its
// append. A batch refused by its sequence stops the partition's later
// batches (they could only be out of order).
func (s *Server) startAppends(ctx context.Context, w *partProduce, batches []decodedBatch, sp *kmsg.ProduceResponseTopicPartition) {
	for _, b := range batches {
		var seq *seqBatch
		if b.hdr.ProducerID >= 0 {
			w.key.pid = b.hdr.ProducerID
			verdict, sb := s.pids.check(w.key, b.hdr.ProducerEpoch, b.hdr.FirstSequence, b.hdr.NumRecords)
			switch verdict {
			case seqDuplicate:
				if len(w.acks) == 0 {
					w.dup = sb
				}
				return
			case seqOutOfOrder:
				sp.ErrorCode = s.code(kmsg.Produce, kerr.OutOfOrderSequenceNumber.Code)
				return
			case seqStaleEpoch:
				sp.ErrorCode = s.code(kmsg.Produce, kerr.InvalidProducerEpoch.Code)
				return
			}
			seq = sb
		}
		to := parkway.PartitionID(uint32(w.key.part))
		var key parkway.ProducerSeq // none: the node draws its own
		if seq != nil {
			// The batch's identity goes with it into the partition's
			// replicated deduplication window: a retry through any
			// listener, after a leader change too, applies once.
			key = dedupeKey(b.hdr.ProducerID, b.hdr.ProducerEpoch, b.hdr.FirstSequence)
		}
		if b.kept != nil {
			// The batch as the client sent it: kept so, one stored unit,
			// and handed back so by a fetch.
			w.acks = append(w.acks, s.node.ProduceAsyncEncoded(ctx, w.handle, to, key, b.kept))
			w.lent = append(w.lent, b.kept)
		} else {
			// The records' bytes are the request's own (its frame, or the
			// buffer the batch inflated into): given, so a node that
			// stores in memory keeps them instead of copying every record.
			w.acks = append(w.acks, s.node.ProduceAsyncGive(ctx, w.handle, to, key, b.msgs...))
		}
		w.seqs = append(w.seqs, seq)
	}
}

// finishAppends waits for a partition's appends and fills in its
// response: the first batch's offset, or the first error. It reports
// whether every append it started was acknowledged, and whether the node
// kept any batch's bytes (Ack.Kept).
func (s *Server) finishAppends(ctx context.Context, w *partProduce, sp *kmsg.ProduceResponseTopicPartition) (acked, kept bool) {
	if w.dup != nil {
		// A retry's batches were not appended again: nothing of this
		// request's is in flight for them.
		select {
		case <-w.dup.done:
			if w.dup.err != nil {
				sp.ErrorCode = s.produceErrorCode(w.dup.err, w.byID)
			} else {
				sp.BaseOffset = w.dup.offset
			}
		case <-ctx.Done():
			sp.ErrorCode = s.code(kmsg.Produce, kerr.RequestTimedOut.Code)
		}
		return len(w.acks) == 0, false
	}
	acked = true
	for i, a := range w.acks {
		ack, err := a.Wait(ctx)
		if w.seqs[i] != nil {
			s.pids.finish(w.key, w.seqs[i], int64(ack.FirstOffset), err)
		}
		if err != nil {
			acked = false
			if errors.Is(err, parkway.ErrTopicNotFound) {
				s.topics.forget(w.handle, err)
			}
			if sp.ErrorCode == 0 {
				sp.ErrorCode = s.produceErrorCode(err, w.byID)
				sp.BaseOffset = -1
			}
			continue
		}
		kept = kept || ack.Kept
		if i == 0 && sp.ErrorCode == 0 {
			sp.BaseOffset = int64(ack.FirstOffset)
		}
	}
	return acked, kept
}

// produceErrorCode maps a produce's error; by topic ID, a topic whose
// incarnation is gone is UNKNOWN_TOPIC_ID (the incarnation fence).
func (s *Server) produceErrorCode(err error, byID bool) int16 {
	switch {
	case errors.Is(err, errTransactional):
		return s.code(kmsg.Produce, kerr.TransactionalIDAuthorizationFailed.Code)
	case errors.Is(err, errTopicDenied):
		return s.code(kmsg.Produce, kerr.TopicAuthorizationFailed.Code)
	case errors.Is(err, parkway.ErrInvalidName):
		return s.code(kmsg.Produce, kerr.InvalidTopicException.Code)
	case byID && errors.Is(err, parkway.ErrTopicNotFound):
		return s.code(kmsg.Produce, kerr.UnknownTopicID.Code)
	}
	return s.topicErrorCode(kmsg.Produce, err)
}

// dedupeKey is parkway's deduplication key of a Kafka producer's batch:
// the producer is the (id, epoch) pair, hashed (never 0), the sequence the
// batch's first.
func dedupeKey(pid int64, epoch int16, firstSeq int32) parkway.ProducerSeq {
	h := fnv.New64a()
	var b [10]byte
	binary.BigEndian.PutUint64(b[:], uint64(pid))
	binary.BigEndian.PutUint16(b[8:], uint16(epoch))
	_, _ = h.Write(b[:])
	return parkway.ProducerSeq{Producer: h.Sum64() | 1, Seq: uint64(uint32(firstSeq))}
}

// leaderElsewhere reports the broker leading a partition when it is
// another broker of the cluster, as this node's raft sees it. A Kafka
// client is told to go there (NOT_LEADER_OR_FOLLOWER) rather than having
// its request forwarded inside parkway: it refreshes its metadata at once
// and sends the partition's next batches to the leader, where a forward
// would hide the move and keep every batch taking a second hop until the
// client's periodic metadata refresh (five minutes by default in kgo,
// librdkafka and the Java client). A retry of the same batch at the new
// leader is safe: the batch's identity is in the partition's replicated
// deduplication window. While no leader is known (an election, a
// partition being built) or the leader has no listener in Config.Brokers,
// the produce is handed to parkway as before, which parks it until a
// leader serves it.
//
// It also returns the partition's leader epoch as this node sees it
// (leaderOf).
func (s *Server) leaderElsewhere(ctx context.Context, t parkway.Topic, part int32) (lead, epoch int32, elsewhere bool) {
	lead, epoch = s.leaderOf(ctx, t, part)
	if lead < 0 || lead == s.cfg.BrokerID {
		return lead, epoch, false
	}
	if _, ok := s.cfg.Brokers[lead]; !ok {
		return lead, epoch, false
	}
	return lead, epoch, true
}

// notLeader answers a partition NOT_LEADER_OR_FOLLOWER naming its leader:
// from Produce v10 (KIP-951) in the response itself, so the client moves
// without waiting for a Metadata round trip.
func (s *Server) notLeader(resp *kmsg.ProduceResponse, sp *kmsg.ProduceResponseTopicPartition, lead, epoch int32) {
	sp.ErrorCode = s.code(kmsg.Produce, kerr.NotLeaderForPartition.Code)
	sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = lead, epoch
	if resp.Version < 10 {
		return
	}
	if slices.ContainsFunc(resp.Brokers, func(b kmsg.ProduceResponseBroker) bool { return b.NodeID == lead }) {
		return
	}
	if b, ok := s.broker(lead); ok {
		rb := kmsg.NewProduceResponseBroker()
		rb.NodeID, rb.Host, rb.Port = b.id, b.host, b.port
		resp.Brokers = append(resp.Brokers, rb)
	}
}

// broker is the announced broker of an id.
func (s *Server) broker(id int32) (broker, bool) {
	for _, b := range s.brokerList() {
		if b.id == id {
			return b, true
		}
	}
	return broker{}, false
}
