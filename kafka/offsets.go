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
	lp.LeaderEpoch = 0
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
