package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// Special timestamps of ListOffsets.
const (
	listLatest       = -1
	listEarliest     = -2
	listMaxTimestamp = -3
)

// listOffsets answers earliest (the partition's start), latest (its
// end), and by timestamp: the first message appended at or after it
// (parkway's time index is by append time, which Kafka calls
// LogAppendTime; a producer's CreateTime far from it is not what is
// searched). Max timestamp answers the last message.
func (s *Server) listOffsets(ctx context.Context, r *kmsg.ListOffsetsRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, r.TimeoutMillis)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range r.Topics {
		lt := kmsg.NewListOffsetsResponseTopic()
		lt.Topic = rt.Topic
		t, tErr := s.topics.lookup(ctx, rt.Topic)
		if tErr == nil && !s.allowed(ctx, OpDescribe, ResourceTopic, rt.Topic) {
			tErr = errTopicDenied
		}
		for _, rp := range rt.Partitions {
			lp := kmsg.NewListOffsetsResponseTopicPartition()
			lp.Partition = rp.Partition
			switch {
			case tErr != nil:
				lp.ErrorCode = s.topicErrorCode(kmsg.ListOffsets, tErr)
			case rp.Partition < 0:
				lp.ErrorCode = s.code(kmsg.ListOffsets, kerr.UnknownTopicOrPartition.Code)
			default:
				s.listOffset(ctx, t, rp, &lp)
			}
			lt.Partitions = append(lt.Partitions, lp)
		}
		resp.Topics = append(resp.Topics, lt)
	}
	return resp
}

func (s *Server) listOffset(ctx context.Context, t parkway.Topic, rp kmsg.ListOffsetsRequestTopicPartition, lp *kmsg.ListOffsetsResponseTopicPartition) {
	part := uint32(rp.Partition)
	_, epoch := s.leaderOf(ctx, t, rp.Partition)
	if code := epochCode(rp.CurrentLeaderEpoch, epoch); code != 0 {
		lp.ErrorCode = s.code(kmsg.ListOffsets, code)
		return
	}
	lp.LeaderEpoch = max(epoch, 0)
	switch ts := rp.Timestamp; {
	case ts == listLatest || ts == listEarliest:
		po, err := s.node.Admin().PartitionOffsets(ctx, t, part, "")
		if err != nil {
			s.topics.forget(t, err)
			lp.ErrorCode = s.topicErrorCode(kmsg.ListOffsets, err)
			return
		}
		lp.Offset = int64(po.End)
		if ts == listEarliest {
			lp.Offset = int64(po.Start)
		}
		lp.Timestamp = -1
	case ts == listMaxTimestamp || ts >= 0:
		from := parkway.AtLast()
		if ts >= 0 {
			from = parkway.AtTime(time.UnixMilli(ts))
		}
		b, err := s.node.Poll(ctx, t, part, from, 1)
		if err != nil {
			s.topics.forget(t, err)
			lp.ErrorCode = s.topicErrorCode(kmsg.ListOffsets, err)
			return
		}
		if len(b.Messages) == 0 {
			lp.Offset, lp.Timestamp = -1, -1 // no message at or after it
			return
		}
		m := b.Messages[0]
		lp.Offset, lp.Timestamp = int64(m.Offset), m.Timestamp/1000
	default:
		lp.ErrorCode = s.code(kmsg.ListOffsets, kerr.InvalidRequest.Code)
	}
}

// offsetForLeaderEpoch answers where each asked leader epoch ends
// (KIP-320): a client that consumed up to an offset under an epoch asks
// after a leader change, and finds a truncation if the answer lies below
// its position. The epoch is the partition group's raft term. A
// committed message is never truncated in parkway (a raft leader never
// loses a committed entry, and Fetch serves committed messages only), so
// no epoch's messages were cut short: an epoch up to the current one is
// answered with the partition's end, which never lies below a position a
// client reached. An epoch newer than the current one is unknown here
// (-1, -1, as Kafka answers it).
func (s *Server) offsetForLeaderEpoch(ctx context.Context, r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range r.Topics {
		et := kmsg.NewOffsetForLeaderEpochResponseTopic()
		et.Topic = rt.Topic
		t, tErr := s.topics.lookup(ctx, rt.Topic)
		if tErr == nil && !s.allowed(ctx, OpDescribe, ResourceTopic, rt.Topic) {
			tErr = errTopicDenied
		}
		for _, rp := range rt.Partitions {
			ep := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			ep.Partition, ep.LeaderEpoch, ep.EndOffset = rp.Partition, -1, -1
			switch {
			case tErr != nil:
				ep.ErrorCode = s.topicErrorCode(kmsg.OffsetForLeaderEpoch, tErr)
			case rp.Partition < 0:
				ep.ErrorCode = s.code(kmsg.OffsetForLeaderEpoch, kerr.UnknownTopicOrPartition.Code)
			default:
				s.epochEnd(ctx, t, rp, &ep)
			}
			et.Partitions = append(et.Partitions, ep)
		}
		resp.Topics = append(resp.Topics, et)
	}
	return resp
}

func (s *Server) epochEnd(ctx context.Context, t parkway.Topic, rp kmsg.OffsetForLeaderEpochRequestTopicPartition, ep *kmsg.OffsetForLeaderEpochResponseTopicPartition) {
	_, epoch, elsewhere := s.leaderElsewhere(ctx, t, rp.Partition)
	switch {
	case elsewhere:
		ep.ErrorCode = s.code(kmsg.OffsetForLeaderEpoch, kerr.NotLeaderForPartition.Code)
		return
	case epoch < 0:
		ep.ErrorCode = s.code(kmsg.OffsetForLeaderEpoch, kerr.LeaderNotAvailable.Code)
		return
	}
	if code := epochCode(rp.CurrentLeaderEpoch, epoch); code != 0 {
		ep.ErrorCode = s.code(kmsg.OffsetForLeaderEpoch, code)
		return
	}
	if rp.LeaderEpoch < 0 || rp.LeaderEpoch > epoch {
		return // unknown here: -1, -1
	}
	po, err := s.node.Admin().PartitionOffsets(ctx, t, uint32(rp.Partition), "")
	if err != nil {
		s.topics.forget(t, err)
		ep.ErrorCode = s.topicErrorCode(kmsg.OffsetForLeaderEpoch, err)
		return
	}
	ep.LeaderEpoch, ep.EndOffset = rp.LeaderEpoch, int64(po.End)
}
