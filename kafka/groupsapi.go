package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// groupGate is the check every group request passes first: the
// principal may read the group, and this broker coordinates it with its
// coordinator partition loaded (holdGroup). It returns the partition and
// the term the group's writes are fenced to.
func (s *Server) groupGate(ctx context.Context, group string) (uint32, uint64, int16) {
	if !s.allowed(ctx, OpRead, ResourceGroup, group) {
		return 0, 0, kerr.GroupAuthorizationFailed.Code
	}
	return s.holdGroup(ctx, group)
}

// Coordinator key types of FindCoordinator.
const (
	coordinatorGroup       = 0
	coordinatorTransaction = 1
)

// findCoordinator answers each group's coordinator (coordinatorOf):
// this broker on a single node; in a cluster the current leader of the
// group's coordinator partition, or COORDINATOR_NOT_AVAILABLE while none
// is known, which clients retry. Transactions are not supported.
func (s *Server) findCoordinator(ctx context.Context, r *kmsg.FindCoordinatorRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	answer := func(key string) (broker, int16, *string) {
		switch {
		case r.CoordinatorType == coordinatorTransaction:
			msg := "transactions are not supported"
			return broker{id: -1}, s.code(kmsg.FindCoordinator, kerr.TransactionalIDAuthorizationFailed.Code), &msg
		case r.CoordinatorType != coordinatorGroup:
			msg := "unknown coordinator type"
			return broker{id: -1}, s.code(kmsg.FindCoordinator, kerr.InvalidRequest.Code), &msg
		case !validGroupID(key):
			return broker{id: -1}, s.code(kmsg.FindCoordinator, kerr.InvalidGroupID.Code), nil
		}
		b, _, ok := s.coordinatorOf(ctx, key)
		if !ok {
			msg := "no coordinator is known yet: an election is under way"
			return broker{id: -1}, s.code(kmsg.FindCoordinator, kerr.CoordinatorNotAvailable.Code), &msg
		}
		return b, 0, nil
	}
	if r.Version < 4 {
		var b broker
		b, resp.ErrorCode, resp.ErrorMessage = answer(r.CoordinatorKey)
		resp.NodeID, resp.Host, resp.Port = b.id, b.host, b.port
		return resp
	}
	for _, key := range r.CoordinatorKeys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		var b broker
		b, c.ErrorCode, c.ErrorMessage = answer(key)
		c.Key, c.NodeID, c.Host, c.Port = key, b.id, b.host, b.port
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp
}

// joinGroup answers at once (an error, MEMBER_ID_REQUIRED) or once the
// rebalance completes, on the writer's goroutine.
func (s *Server) joinGroup(ctx context.Context, r *kmsg.JoinGroupRequest, clientID *string, clientHost string, p *pending) {
	cid := "kafka"
	if clientID != nil && *clientID != "" {
		cid = *clientID
	}
	part, _, code := s.groupGate(ctx, r.Group)
	if code != 0 {
		resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.Generation = -1
		resp.ErrorCode = s.code(kmsg.JoinGroup, code)
		p.resp = resp
		return
	}
	resp, wait := s.groups.join(r, part, cid, clientHost, time.Now())
	if wait == nil {
		s.code(kmsg.JoinGroup, resp.ErrorCode)
		p.resp = resp
		return
	}
	p.wait = func(ctx context.Context) kmsg.Response {
		select {
		case got := <-wait:
			got.Version = r.Version
			s.code(kmsg.JoinGroup, got.ErrorCode)
			return got
		case <-ctx.Done():
			resp.ErrorCode = s.code(kmsg.JoinGroup, kerr.CoordinatorNotAvailable.Code)
			return resp
		}
	}
}

func (s *Server) syncGroup(ctx context.Context, r *kmsg.SyncGroupRequest, p *pending) {
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	s.groups.mu.Lock()
	if g, ok := s.groups.groups[r.Group]; ok {
		pt, proto := g.protocolType, g.protocol
		resp.ProtocolType, resp.Protocol = &pt, &proto
	}
	s.groups.mu.Unlock()
	fill := func(a syncAnswer) kmsg.Response {
		resp.ErrorCode = s.code(kmsg.SyncGroup, a.code)
		resp.MemberAssignment = a.assignment
		return resp
	}
	part, term, code := s.groupGate(ctx, r.Group)
	if code != 0 {
		p.resp = fill(syncAnswer{code: code})
		return
	}
	now, wait, persist := s.groups.sync(r, time.Now())
	if wait == nil {
		p.resp = fill(now)
		return
	}
	if persist != nil {
		// The leader's assignment: written to the group log before any
		// member is answered with it.
		code := int16(0)
		if _, err := s.writeGroupLog(ctx, part, term, r.Group, persist); err != nil {
			s.log.Debug("group log: a generation", "group", r.Group, "err", err)
			code = logWriteCode(err)
			s.logFailed(part, term, err)
		}
		s.groups.synced(r.Group, persist.group.generation, code)
	}
	p.wait = func(ctx context.Context) kmsg.Response {
		select {
		case a := <-wait:
			return fill(a)
		case <-ctx.Done():
			return fill(syncAnswer{code: kerr.CoordinatorNotAvailable.Code})
		}
	}
}

func (s *Server) heartbeat(ctx context.Context, r *kmsg.HeartbeatRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	if _, _, code := s.groupGate(ctx, r.Group); code != 0 {
		resp.ErrorCode = s.code(kmsg.Heartbeat, code)
		return resp
	}
	resp.ErrorCode = s.code(kmsg.Heartbeat, s.groups.heartbeat(r, time.Now()))
	return resp
}

func (s *Server) leaveGroup(ctx context.Context, r *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	if _, _, code := s.groupGate(ctx, r.Group); code != 0 {
		resp.ErrorCode = s.code(kmsg.LeaveGroup, code)
		return resp
	}
	defer s.persistEmptied(ctx) // the last member gone: the log says so
	if r.Version < 3 {
		resp.ErrorCode = s.code(kmsg.LeaveGroup, s.groups.leave(r.Group, []string{r.MemberID}, time.Now())[0])
		return resp
	}
	ids := make([]string, len(r.Members))
	for i, m := range r.Members {
		ids[i] = m.MemberID
	}
	for i, code := range s.groups.leave(r.Group, ids, time.Now()) {
		lm := kmsg.NewLeaveGroupResponseMember()
		lm.MemberID, lm.InstanceID, lm.ErrorCode = ids[i], r.Members[i].InstanceID, s.code(kmsg.LeaveGroup, code)
		resp.Members = append(resp.Members, lm)
	}
	return resp
}

func (s *Server) listGroups(ctx context.Context, r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	for _, g := range s.groups.list() {
		if len(r.StatesFilter) > 0 && !containsFold(r.StatesFilter, g.GroupState) || !s.allowed(ctx, OpDescribe, ResourceGroup, g.Group) {
			continue
		}
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}

func containsFold(list []string, s string) bool {
	for _, l := range list {
		if len(l) == len(s) {
			eq := true
			for i := range len(l) {
				a, b := l[i]|0x20, s[i]|0x20
				eq = eq && a == b
			}
			if eq {
				return true
			}
		}
	}
	return false
}

// offsetCommit writes the request's offsets as one commit record of the
// group log, fenced to the term the coordinator loaded the group's
// partition in, after the coordinator's generation fence: a coordinator
// that lost the partition's leadership since cannot commit (raft refuses
// its entry) and answers NOT_COORDINATOR.
func (s *Server) offsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	fence := int16(0)
	var (
		part uint32
		term uint64
	)
	var partFence func(topicPart) int16 // a consumer group member's, per partition
	if !validGroupID(r.Group) {
		fence = kerr.InvalidGroupID.Code
	} else if part, term, fence = s.groupGate(ctx, r.Group); fence == 0 {
		if s.groups.isConsumer(r.Group) {
			// Held until the commit is written: no heartbeat frees one of
			// its partitions for another member in between.
			defer s.cgLock(r.Group)()
		}
		handled, code, pf := s.groups.consumerCommitCheck(r.Group, r.MemberID, r.Generation, r.Version)
		switch {
		case handled:
			fence, partFence = code, pf
		case r.Version >= 1:
			fence = s.groups.commitCheck(r.Group, r.MemberID, r.Generation)
		}
	}
	var (
		commits []logOffset
		written []*kmsg.OffsetCommitResponseTopicPartition // answered by the write
	)
	for _, rt := range r.Topics {
		ct := kmsg.NewOffsetCommitResponseTopic()
		ct.Topic = rt.Topic
		var (
			t    parkway.Topic
			tErr error
		)
		if fence == 0 {
			t, tErr = s.topics.lookup(ctx, rt.Topic)
			if tErr == nil && !s.allowed(ctx, OpRead, ResourceTopic, rt.Topic) {
				tErr = errTopicDenied
			}
		}
		for _, rp := range rt.Partitions {
			cp := kmsg.NewOffsetCommitResponseTopicPartition()
			cp.Partition = rp.Partition
			switch {
			case fence != 0:
				cp.ErrorCode = fence
			case tErr != nil:
				cp.ErrorCode = s.topicErrorCode(kmsg.OffsetCommit, tErr)
			case rp.Partition < 0:
				cp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.Offset < 0:
				cp.ErrorCode = kerr.OffsetOutOfRange.Code
			case rp.Metadata != nil && len(*rp.Metadata) > maxCommitMetadata:
				cp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
			case partFence != nil && partFence(topicPart{rt.Topic, rp.Partition}) != 0:
				cp.ErrorCode = partFence(topicPart{rt.Topic, rp.Partition})
			default:
				lo := logOffset{tp: topicPart{rt.Topic, rp.Partition}, revision: t.Revision, offset: rp.Offset}
				if rp.Metadata != nil {
					lo.metadata = *rp.Metadata
				}
				commits = append(commits, lo)
			}
			ct.Partitions = append(ct.Partitions, cp)
		}
		resp.Topics = append(resp.Topics, ct)
	}
	// The partitions the write answers, found after the response's
	// slices stopped growing.
	for ti := range resp.Topics {
		for pi := range resp.Topics[ti].Partitions {
			if cp := &resp.Topics[ti].Partitions[pi]; cp.ErrorCode == 0 {
				written = append(written, cp)
			}
		}
	}
	if len(commits) > 0 {
		if _, err := s.writeGroupLog(ctx, part, term, r.Group, &logRecord{kind: logCommitMeta, commits: commits}); err != nil {
			s.log.Debug("group log: a commit", "group", r.Group, "err", err)
			s.logFailed(part, term, err)
			code := logWriteCode(err)
			for _, cp := range written {
				cp.ErrorCode = code
			}
		}
	}
	for ti := range resp.Topics {
		for pi := range resp.Topics[ti].Partitions {
			cp := &resp.Topics[ti].Partitions[pi]
			cp.ErrorCode = s.code(kmsg.OffsetCommit, cp.ErrorCode)
		}
	}
	return resp
}

// offsetFetch reads the group's committed offsets: of the partitions
// named, or of every partition of every topic when none are.
func (s *Server) offsetFetch(ctx context.Context, r *kmsg.OffsetFetchRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	if !validGroupID(r.Group) {
		resp.ErrorCode = s.code(kmsg.OffsetFetch, kerr.InvalidGroupID.Code)
		return resp
	}
	if !s.allowed(ctx, OpDescribe, ResourceGroup, r.Group) {
		resp.ErrorCode = s.code(kmsg.OffsetFetch, kerr.GroupAuthorizationFailed.Code)
		return resp
	}
	if _, _, code := s.holdGroup(ctx, r.Group); code != 0 {
		resp.ErrorCode = s.code(kmsg.OffsetFetch, code)
		return resp
	}
	type target struct {
		name  string
		parts []int32
		all   bool // list only the committed ones
	}
	var targets []target
	if r.Topics == nil {
		all, err := s.topics.all(ctx)
		if err != nil {
			resp.ErrorCode = s.code(kmsg.OffsetFetch, errorCode(err))
			return resp
		}
		for _, t := range all {
			info, err := s.node.Admin().TopicInfo(ctx, t)
			if err != nil {
				continue
			}
			tg := target{name: t.Name, all: true}
			for p := range int32(info.Partitions) {
				tg.parts = append(tg.parts, p)
			}
			targets = append(targets, tg)
		}
	} else {
		for _, rt := range r.Topics {
			targets = append(targets, target{name: rt.Topic, parts: rt.Partitions})
		}
	}
	for _, tg := range targets {
		ft := kmsg.NewOffsetFetchResponseTopic()
		ft.Topic = tg.name
		t, tErr := s.topics.lookup(ctx, tg.name)
		for _, p := range tg.parts {
			fp := kmsg.NewOffsetFetchResponseTopicPartition()
			fp.Partition, fp.Offset, fp.LeaderEpoch = p, -1, -1
			empty := ""
			fp.Metadata = &empty
			switch {
			case tErr != nil:
				if !errors.Is(tErr, parkway.ErrTopicNotFound) {
					fp.ErrorCode = s.topicErrorCode(kmsg.OffsetFetch, tErr)
				}
			case p < 0:
				fp.ErrorCode = s.code(kmsg.OffsetFetch, kerr.UnknownTopicOrPartition.Code)
			default:
				if co, ok := s.groups.committedAt(r.Group, topicPart{tg.name, p}, t.Revision); ok {
					fp.Offset, fp.Metadata = co.offset, &co.metadata
					break
				}
				// Committed before the group log: parkway's named
				// consumer offset of the group id.
				off, found, err := s.node.Admin().ConsumerOffset(ctx, t, uint32(p), r.Group)
				switch {
				case err != nil && !errors.Is(err, parkway.ErrPartitionNotFound):
					fp.ErrorCode = s.topicErrorCode(kmsg.OffsetFetch, err)
				case found:
					fp.Offset = int64(off)
				}
			}
			if tg.all && fp.Offset < 0 && fp.ErrorCode == 0 {
				continue
			}
			ft.Partitions = append(ft.Partitions, fp)
		}
		if !tg.all || len(ft.Partitions) > 0 {
			resp.Topics = append(resp.Topics, ft)
		}
	}
	return resp
}
