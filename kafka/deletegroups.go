package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// DeleteGroups and OffsetDelete remove a group's committed offsets: a
// record of the group log (fenced to the coordinator's term, as a commit
// is), then the named consumer offsets of the group id committed before
// the group log existed, each a replicated write of its partition
// (Admin.DeleteConsumerOffset). As in
// Kafka, a group with members is not deleted (NON_EMPTY_GROUP), and an
// offset of a topic the group's members subscribe to is not removed
// (GROUP_SUBSCRIBED_TO_TOPIC): a member would commit it again, or
// resume from its reset policy behind its own position. A group that
// neither the coordinator nor any committed offset knows is
// GROUP_ID_NOT_FOUND.

// groupDelete is the coordinator's side of a DeleteGroups: a group with
// members is refused; one without is forgotten and marked deleting until
// the caller, having removed its offsets, calls deleted. known reports
// whether the coordinator knew it.
func (c *coordinator) groupDelete(name string) (code int16, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleting[name] {
		return kerr.CoordinatorLoadInProgress.Code, true
	}
	g, ok := c.groups[name]
	if ok && (len(g.members) > 0 || len(g.pending) > 0) {
		return kerr.NonEmptyGroup.Code, true
	}
	cg, cok := c.cgroups[name]
	if cok && len(cg.members) > 0 {
		return kerr.NonEmptyGroup.Code, true
	}
	ok = ok || cok
	delete(c.groups, name)
	delete(c.cgroups, name)
	if c.deleting == nil {
		c.deleting = map[string]bool{}
	}
	c.deleting[name] = true
	return 0, ok
}

// deleted ends a deletion groupDelete began.
func (c *coordinator) deleted(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.deleting, name)
}

// subscriptions reports what OffsetDelete needs of a group: whether the
// coordinator knows it, whether it has members, whether they speak the
// consumer protocol, and the topics they subscribe to (from each
// member's consumer protocol metadata: the chosen protocol's, or every
// protocol's while none is chosen).
func (c *coordinator) subscriptions(name string) (known, members, consumer bool, topics map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cg, ok := c.cgroups[name]; ok && len(cg.members) > 0 {
		topics = map[string]bool{}
		for _, t := range cg.subscribed() {
			topics[t] = true
		}
		return true, true, true, topics
	}
	g, ok := c.groups[name]
	if !ok {
		return false, false, false, nil
	}
	topics = map[string]bool{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.protocol != "" && p.Name != g.protocol {
				continue
			}
			var meta kmsg.ConsumerMemberMetadata
			if meta.ReadFrom(p.Metadata) != nil {
				continue
			}
			for _, t := range meta.Topics {
				topics[t] = true
			}
		}
	}
	return true, len(g.members) > 0, g.protocolType == "consumer", topics
}

// groupDeleteGate checks what both requests check first: a valid id, the
// principal may delete the group, and this broker coordinates it (with
// the partition and term its records are fenced to).
func (s *Server) groupDeleteGate(ctx context.Context, group string) (uint32, uint64, int16) {
	switch {
	case !validGroupID(group):
		return 0, 0, kerr.InvalidGroupID.Code
	case !s.allowed(ctx, OpDelete, ResourceGroup, group):
		return 0, 0, kerr.GroupAuthorizationFailed.Code
	}
	return s.holdGroup(ctx, group)
}

func (s *Server) deleteGroups(ctx context.Context, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, name := range r.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = name
		dg.ErrorCode = s.code(kmsg.DeleteGroups, s.deleteGroup(ctx, name))
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

// deleteGroup deletes one group: its membership here, then every
// committed offset of it in the listener's stream.
func (s *Server) deleteGroup(ctx context.Context, name string) int16 {
	part, term, code := s.groupDeleteGate(ctx, name)
	if code != 0 {
		return code
	}
	code, known := s.groups.groupDelete(name)
	if code != 0 {
		return code
	}
	defer s.groups.deleted(name)
	known = s.groups.hasLogOffsets(name) || known
	if _, err := s.writeGroupLog(ctx, part, term, name, &logRecord{kind: logDelete}); err != nil {
		s.logFailed(part, term, err)
		return logWriteCode(err)
	}
	stream, err := s.topics.streamHandle(ctx)
	if err != nil {
		return errorCode(err)
	}
	removed, err := s.node.Admin().DeleteConsumer(ctx, stream, name)
	if errors.Is(err, parkway.ErrStreamNotFound) {
		s.topics.forget(parkway.Topic{Stream: stream}, err)
		return kerr.GroupIDNotFound.Code
	}
	if err != nil {
		s.log.Warn("DeleteGroups: removing committed offsets", "group", name, "removed", removed, "err", err)
		return errorCode(err)
	}
	if removed == 0 && !known {
		return kerr.GroupIDNotFound.Code
	}
	return 0
}

func (s *Server) offsetDelete(ctx context.Context, r *kmsg.OffsetDeleteRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	part, term, code := s.groupDeleteGate(ctx, r.Group)
	if code != 0 {
		resp.ErrorCode = s.code(kmsg.OffsetDelete, code)
		return resp
	}
	known, members, consumer, subscribed := s.groups.subscriptions(r.Group)
	if members && !consumer {
		// Kafka refuses a group with members whose protocol it cannot
		// read subscriptions from.
		resp.ErrorCode = s.code(kmsg.OffsetDelete, kerr.NonEmptyGroup.Code)
		return resp
	}
	found := known
	for _, rt := range r.Topics {
		dt := kmsg.NewOffsetDeleteResponseTopic()
		dt.Topic = rt.Topic
		t, tErr := s.topics.lookup(ctx, rt.Topic)
		if tErr == nil && !s.allowed(ctx, OpRead, ResourceTopic, rt.Topic) {
			tErr = errTopicDenied
		}
		for _, rp := range rt.Partitions {
			dp := kmsg.NewOffsetDeleteResponseTopicPartition()
			dp.Partition = rp.Partition
			switch {
			case tErr != nil:
				dp.ErrorCode = s.topicErrorCode(kmsg.OffsetDelete, tErr)
			case rp.Partition < 0:
				dp.ErrorCode = s.code(kmsg.OffsetDelete, kerr.UnknownTopicOrPartition.Code)
			case subscribed[rt.Topic]:
				dp.ErrorCode = s.code(kmsg.OffsetDelete, kerr.GroupSubscribedToTopic.Code)
			default:
				tp := topicPart{rt.Topic, rp.Partition}
				found = s.groups.hasOffset(r.Group, tp) || found
				if _, err := s.writeGroupLog(ctx, part, term, r.Group, &logRecord{kind: logForget, forgets: []topicPart{tp}}); err != nil {
					s.logFailed(part, term, err)
					dp.ErrorCode = s.code(kmsg.OffsetDelete, logWriteCode(err))
					break
				}
				had, err := s.node.Admin().DeleteConsumerOffset(ctx, t, uint32(rp.Partition), r.Group)
				if err != nil {
					s.topics.forget(t, err)
					dp.ErrorCode = s.topicErrorCode(kmsg.OffsetDelete, err)
				}
				found = found || had
			}
			dt.Partitions = append(dt.Partitions, dp)
		}
		resp.Topics = append(resp.Topics, dt)
	}
	if !found && !s.hasOffsets(ctx, r.Group) {
		resp.ErrorCode = s.code(kmsg.OffsetDelete, kerr.GroupIDNotFound.Code)
		resp.Topics = nil
	}
	return resp
}

// hasOffsets reports whether the group has a committed offset in any
// partition of the listener's stream: whether it exists, for a group the
// coordinator does not know (an error reading is taken for "it may"):
// in the group log, or as a named consumer offset committed before it.
func (s *Server) hasOffsets(ctx context.Context, group string) bool {
	if s.groups.hasLogOffsets(group) {
		return true
	}
	all, err := s.topics.all(ctx)
	if err != nil {
		return true
	}
	for _, t := range all {
		parts, err := s.node.Admin().Partitions(ctx, t)
		if err != nil {
			continue
		}
		for _, p := range parts {
			_, ok, err := s.node.Admin().ConsumerOffset(ctx, t, p.Partition, group)
			if ok || err != nil && !errors.Is(err, parkway.ErrTopicNotFound) && !errors.Is(err, parkway.ErrPartitionNotFound) {
				return true
			}
		}
	}
	return false
}
