package kafka

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// cgStripes is how many locks the consumer groups (KIP-848) share, by a
// hash of the group id. A group's heartbeats, its expiries and its
// members' commits each hold the group's lock from reading its state to
// the group log write of their change, so the log holds a group's
// changes in the order they were made, no heartbeat is answered from a
// state the log may not hold, and a member's commit of a partition lands
// before the record that frees the partition for another member.
const cgStripes = 64

// cgStripe is the index of group's lock (and of its view, cgViews).
func cgStripe(group string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(group))
	return h.Sum32() % cgStripes
}

func (s *Server) cgLock(group string) func() {
	mu := &s.cgMu[cgStripe(group)]
	mu.Lock()
	return mu.Unlock
}

// maxStripeViews bounds the views a stripe keeps (cgViews): past it the
// stripe's views are dropped, and each group resolves its topics again
// at its next heartbeat.
const maxStripeViews = maxGroups/cgStripes + 1

// cgView is a consumer group's subscribed topics as a heartbeat read
// them from the metadata: the names asked, the IDs and partition counts
// of those that exist, when, and the topic cache's generation before.
// A group's members heartbeat every heartbeat interval, each asking for
// the same topics: the view answers them for one interval, so a group's
// heartbeats read its topics at most once an interval however many
// members it has, not once per topic per heartbeat under the group's
// lock (in a cluster each read is a read index through the metadata
// group's leader). A topic created, deleted, recreated (a new topic ID)
// or grown reaches the group's target at once when this listener made
// or saw the change (the topic cache's generation moved), otherwise
// (another node, the parkway API) at most an interval late, as a member
// hears of it at its next heartbeat.
type cgView struct {
	names  []string
	topics map[string]cgTopic
	at     time.Time
	gen    uint64
}

// fresh reports whether v answers a heartbeat at now asking for names
// (sorted, unique) with the topic cache at generation gen.
func (v *cgView) fresh(names []string, now time.Time, ttl time.Duration, gen uint64) bool {
	return v.gen == gen && !now.Before(v.at) && now.Sub(v.at) < ttl && slices.Equal(names, v.names)
}

// subscribedTopics resolves names for a heartbeat of group at now, from
// the group's view while it is fresh (cgView). The caller holds the
// group's lock.
func (s *Server) subscribedTopics(ctx context.Context, group string, names []string, now time.Time) (map[string]cgTopic, error) {
	slices.Sort(names)
	names = slices.Compact(names)
	stripe := cgStripe(group)
	views := s.cgViews[stripe]
	gen := s.topics.generation() // before the reads: a change made during them is read again
	if v := views[group]; v != nil && v.fresh(names, now, s.groups.cgInterval, gen) {
		return v.topics, nil
	}
	meta, err := s.consumerTopics(ctx, names)
	if err != nil {
		delete(views, group)
		return nil, err
	}
	if views == nil || len(views) >= maxStripeViews {
		views = map[string]*cgView{}
		s.cgViews[stripe] = views
	}
	views[group] = &cgView{names: names, topics: meta, at: now, gen: gen}
	return meta, nil
}

// consumerGroupHeartbeat serves ConsumerGroupHeartbeat (consumergroup.go):
// the group's change is written to the group log, fenced to the
// coordinator's term, before the member is answered.
func (s *Server) consumerGroupHeartbeat(ctx context.Context, r *kmsg.ConsumerGroupHeartbeatRequest, clientID *string, clientHost string) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(code int16) kmsg.Response {
		resp.ErrorCode = s.code(kmsg.ConsumerGroupHeartbeat, code)
		return resp
	}
	switch {
	case !validGroupID(r.Group):
		return fail(kerr.InvalidGroupID.Code)
	case len(r.SubscribedTopicNames) > maxSubscribedTopics:
		return fail(kerr.InvalidRequest.Code)
	}
	part, term, code := s.groupGate(ctx, r.Group)
	if code != 0 {
		return fail(code)
	}
	cid := "kafka"
	if clientID != nil && *clientID != "" {
		cid = *clientID
	}
	defer s.cgLock(r.Group)()
	now := time.Now()
	meta, err := s.subscribedTopics(ctx, r.Group, append(s.groups.consumerSubscribed(r.Group), r.SubscribedTopicNames...), now)
	if err != nil {
		s.log.Debug("consumer group: subscribed topics", "group", r.Group, "err", err)
		return fail(kerr.CoordinatorLoadInProgress.Code) // retried by the member
	}
	a := s.groups.consumerHeartbeat(r, part, term, meta, cid, clientHost, now)
	if len(a.persist) > 0 {
		if _, err := s.writeGroupLog(ctx, part, term, r.Group, a.persist...); err != nil {
			s.log.Debug("group log: a consumer group", "group", r.Group, "err", err)
			s.consumerLogFailed(part, term)
			return fail(logWriteCode(err))
		}
	}
	a.resp.ErrorCode = s.code(kmsg.ConsumerGroupHeartbeat, a.resp.ErrorCode)
	return a.resp
}

// consumerTopics resolves the subscribed topics (names, sorted and
// unique) that exist to their topic IDs and partition counts.
func (s *Server) consumerTopics(ctx context.Context, names []string) (map[string]cgTopic, error) {
	out := make(map[string]cgTopic, len(names))
	for _, name := range names {
		if !validTopicName(name) {
			continue
		}
		for attempt := 0; ; attempt++ {
			t, err := s.topics.lookup(ctx, name)
			if errors.Is(err, parkway.ErrTopicNotFound) {
				break
			}
			if err != nil {
				return nil, err
			}
			s.metrics.groupTopics.Inc()
			info, err := s.node.Admin().TopicInfo(ctx, t)
			if err != nil {
				// A cached incarnation that is gone: ask the metadata once more.
				s.topics.forget(t, err)
				if attempt == 0 {
					continue
				}
				if errors.Is(err, parkway.ErrTopicNotFound) {
					break
				}
				return nil, err
			}
			out[name] = cgTopic{id: topicID(t), parts: int32(info.Partitions)}
			break
		}
	}
	return out, nil
}

// consumerLogFailed lets go of coordinator partition p after a consumer
// group's record failed to reach its log: the change it recorded was
// made here, and the next request reloads what the log holds.
func (s *Server) consumerLogFailed(p uint32, term uint64) {
	if cur, ok := s.groups.termOf(p); ok && cur == term {
		s.groups.unload(p)
	}
}

// expireConsumers removes the consumer group members whose session
// lapsed or whose revocation is overdue, each group's change written
// to the group log.
func (s *Server) expireConsumers(ctx context.Context, now time.Time) {
	for _, name := range s.groups.expireConsumers(now) {
		func() {
			defer s.cgLock(name)()
			recs, part, term := s.groups.expireConsumer(name, now)
			if len(recs) == 0 {
				return
			}
			if _, err := s.writeGroupLog(ctx, part, term, name, recs...); err != nil {
				s.log.Debug("group log: a consumer group's expiry", "group", name, "err", err)
				s.consumerLogFailed(part, term)
			}
		}()
	}
}

// consumerGroupDescribe describes the consumer groups this listener
// coordinates.
func (s *Server) consumerGroupDescribe(ctx context.Context, r *kmsg.ConsumerGroupDescribeRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	for _, name := range r.Groups {
		dg := kmsg.NewConsumerGroupDescribeResponseGroup()
		dg.Group = name
		switch {
		case !validGroupID(name):
			dg.ErrorCode = kerr.InvalidGroupID.Code
		case !s.allowed(ctx, OpDescribe, ResourceGroup, name):
			dg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		default:
			if _, _, code := s.holdGroup(ctx, name); code != 0 {
				dg.ErrorCode = code
			} else {
				s.groups.describeConsumer(name, &dg)
			}
		}
		dg.ErrorCode = s.code(kmsg.ConsumerGroupDescribe, dg.ErrorCode)
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}
