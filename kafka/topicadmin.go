package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// createPartitions grows topics to the counts asked (parkway adds
// partitions at the tail; a topic never shrinks through Kafka).
func (s *Server) createPartitions(ctx context.Context, r *kmsg.CreatePartitionsRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, r.TimeoutMillis)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, rt := range r.Topics {
		ct := kmsg.NewCreatePartitionsResponseTopic()
		ct.Topic = rt.Topic
		fail := func(code int16, msg string) {
			ct.ErrorCode = s.code(kmsg.CreatePartitions, code)
			ct.ErrorMessage = &msg
		}
		t, err := s.topics.lookupFresh(ctx, rt.Topic)
		var info parkway.TopicInfo
		if err == nil && !s.allowed(ctx, OpAlter, ResourceTopic, rt.Topic) {
			err = errTopicDenied
		}
		if err == nil {
			info, err = s.node.Admin().TopicInfo(ctx, t)
		}
		switch {
		case err != nil:
			fail(s.topicErrorCode(kmsg.CreatePartitions, err), err.Error())
		case len(rt.Assignment) > 0:
			fail(kerr.InvalidReplicaAssignment.Code, "replica assignments are not supported: parkway places replicas")
		case int(rt.Count) <= info.Partitions:
			fail(kerr.InvalidPartitions.Code, fmt.Sprintf("the topic has %d partitions; a count must be larger", info.Partitions))
		case r.ValidateOnly:
		default:
			err := s.node.Admin().CreatePartitions(ctx, t, int(rt.Count)-info.Partitions)
			// The consumer groups' views of t read it again (cgView): the
			// lookup above moved the topic cache's generation, but a
			// heartbeat may have read t's old count since.
			s.topics.changed()
			if err != nil {
				fail(errorCode(err), err.Error())
			}
		}
		resp.Topics = append(resp.Topics, ct)
	}
	return resp
}

// deleteRecords truncates partitions: every record before the offset
// given (-1: the high watermark) goes, and the new start is answered.
func (s *Server) deleteRecords(ctx context.Context, r *kmsg.DeleteRecordsRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, r.TimeoutMillis)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	for _, rt := range r.Topics {
		dt := kmsg.NewDeleteRecordsResponseTopic()
		dt.Topic = rt.Topic
		t, tErr := s.topics.lookup(ctx, rt.Topic)
		if tErr == nil && !s.allowed(ctx, OpDelete, ResourceTopic, rt.Topic) {
			tErr = errTopicDenied
		}
		for _, rp := range rt.Partitions {
			dp := kmsg.NewDeleteRecordsResponseTopicPartition()
			dp.Partition, dp.LowWatermark = rp.Partition, -1
			dp.ErrorCode = s.truncate(ctx, t, tErr, rp, &dp)
			dt.Partitions = append(dt.Partitions, dp)
		}
		resp.Topics = append(resp.Topics, dt)
	}
	return resp
}

func (s *Server) truncate(ctx context.Context, t parkway.Topic, tErr error, rp kmsg.DeleteRecordsRequestTopicPartition, dp *kmsg.DeleteRecordsResponseTopicPartition) int16 {
	if tErr != nil {
		return s.topicErrorCode(kmsg.DeleteRecords, tErr)
	}
	if rp.Partition < 0 {
		return s.code(kmsg.DeleteRecords, kerr.UnknownTopicOrPartition.Code)
	}
	part := uint32(rp.Partition)
	po, err := s.node.Admin().PartitionOffsets(ctx, t, part, "")
	if err != nil {
		s.topics.forget(t, err)
		return s.topicErrorCode(kmsg.DeleteRecords, err)
	}
	before := uint64(rp.Offset)
	switch {
	case rp.Offset == -1:
		before = po.End
	case rp.Offset < 0 || before > po.End:
		return s.code(kmsg.DeleteRecords, kerr.OffsetOutOfRange.Code)
	}
	if before > po.Start {
		if err := s.node.Admin().TruncatePartition(ctx, t, part, before); err != nil {
			return s.topicErrorCode(kmsg.DeleteRecords, err)
		}
	}
	dp.LowWatermark = int64(max(before, po.Start))
	return 0
}

// describeGroups describes the groups this listener coordinates.
func (s *Server) describeGroups(ctx context.Context, r *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, name := range r.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = name
		if !s.allowed(ctx, OpDescribe, ResourceGroup, name) {
			dg.ErrorCode = s.code(kmsg.DescribeGroups, kerr.GroupAuthorizationFailed.Code)
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		if _, _, code := s.holdGroup(ctx, name); code != 0 {
			dg.ErrorCode = s.code(kmsg.DescribeGroups, code)
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		s.groups.describe(name, &dg)
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

func (c *coordinator) describe(name string, dg *kmsg.DescribeGroupsResponseGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.groups[name]
	if !ok {
		if cg, consumer := c.cgroups[name]; consumer && len(cg.members) > 0 {
			msg := "the group is a consumer group: ConsumerGroupDescribe describes it"
			dg.ErrorCode, dg.ErrorMessage = kerr.GroupIDNotFound.Code, &msg // as Kafka answers
			return
		}
		dg.State = "Dead" // as Kafka answers for a group it does not know
		return
	}
	dg.State, dg.ProtocolType, dg.Protocol = g.state.String(), g.protocolType, g.protocol
	for _, id := range g.order {
		m := g.members[id]
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.ClientID, dm.ClientHost, dm.MemberAssignment = id, m.clientID, m.clientHost, m.assignment
		for _, p := range m.protocols {
			if p.Name == g.protocol {
				dm.ProtocolMetadata = p.Metadata
			}
		}
		dg.Members = append(dg.Members, dm)
	}
}
