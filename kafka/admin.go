package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// dispatch starts serving a decoded request: at once, or — for what
// waits — on the writer's goroutine, so the reader goes on reading: a
// Produce's acks, a Fetch waiting for records, a JoinGroup or SyncGroup
// waiting for the rebalance.
func (s *Server) dispatch(ctx context.Context, req kmsg.Request, p *pending, sess *session) {
	key := req.Key()
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		p.resp = apiVersionsResponse(r.Version, 0)
	case *kmsg.MetadataRequest:
		p.resp = s.metadata(ctx, r)
	case *kmsg.CreateTopicsRequest:
		p.resp = s.createTopics(ctx, r)
	case *kmsg.DeleteTopicsRequest:
		p.resp = s.deleteTopics(ctx, r)
	case *kmsg.InitProducerIDRequest:
		p.resp = s.initProducerID(r)
	case *kmsg.DescribeClusterRequest:
		p.resp = s.describeCluster(r)
	case *kmsg.ListOffsetsRequest:
		p.resp = s.listOffsets(ctx, r)
	case *kmsg.OffsetForLeaderEpochRequest:
		p.resp = s.offsetForLeaderEpoch(ctx, r)
	case *kmsg.ProduceRequest:
		s.produce(ctx, r, p)
	case *kmsg.FetchRequest:
		p.wait = func(ctx context.Context) kmsg.Response { return s.fetch(ctx, r) }
	case *kmsg.FindCoordinatorRequest:
		p.resp = s.findCoordinator(ctx, r)
	case *kmsg.JoinGroupRequest:
		s.joinGroup(ctx, r, p.hdr.clientID, p.remote, p)
	case *kmsg.SyncGroupRequest:
		s.syncGroup(ctx, r, p)
	case *kmsg.HeartbeatRequest:
		p.resp = s.heartbeat(ctx, r)
	case *kmsg.LeaveGroupRequest:
		p.resp = s.leaveGroup(ctx, r)
	case *kmsg.OffsetCommitRequest:
		p.resp = s.offsetCommit(ctx, r)
	case *kmsg.OffsetFetchRequest:
		p.resp = s.offsetFetch(ctx, r)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		p.resp = s.consumerGroupHeartbeat(ctx, r, p.hdr.clientID, p.remote)
	case *kmsg.ConsumerGroupDescribeRequest:
		p.resp = s.consumerGroupDescribe(ctx, r)
	case *kmsg.ListGroupsRequest:
		p.resp = s.listGroups(ctx, r)
	case *kmsg.DescribeGroupsRequest:
		p.resp = s.describeGroups(ctx, r)
	case *kmsg.DeleteGroupsRequest:
		p.resp = s.deleteGroups(ctx, r)
	case *kmsg.OffsetDeleteRequest:
		p.resp = s.offsetDelete(ctx, r)
	case *kmsg.CreatePartitionsRequest:
		p.resp = s.createPartitions(ctx, r)
	case *kmsg.DeleteRecordsRequest:
		p.resp = s.deleteRecords(ctx, r)
	case *kmsg.DescribeConfigsRequest:
		p.resp = s.describeConfigs(ctx, r)
	case *kmsg.IncrementalAlterConfigsRequest:
		p.resp = s.incrementalAlterConfigs(ctx, r)
	case *kmsg.SASLHandshakeRequest:
		p.resp = s.saslHandshake(r, sess)
	case *kmsg.SASLAuthenticateRequest:
		p.resp = s.saslAuthenticate(ctx, r, sess)
	default:
		// parseRequest admits only the keys of served; a key listed there
		// without a case here is a bug, answered as a closed connection.
		panic(fmt.Sprintf("kafka: no handler for %s", apiName(key)))
	}
}

// code counts a non-zero error code of API key and returns it.
func (s *Server) code(key kmsg.Key, code int16) int16 {
	s.metrics.countError(int16(key), code)
	return code
}

// requestContext bounds a request's work by its own timeout (ms, when
// positive) or RequestTimeout.
func (s *Server) requestContext(ctx context.Context, ms int32) (context.Context, context.CancelFunc) {
	d := s.cfg.RequestTimeout
	if ms > 0 {
		d = min(time.Duration(ms)*time.Millisecond, d)
	}
	return context.WithTimeout(ctx, d)
}

func (s *Server) metadata(ctx context.Context, r *kmsg.MetadataRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	for _, br := range s.liveBrokers() {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = br.id, br.host, br.port
		resp.Brokers = append(resp.Brokers, b)
	}
	resp.ClusterID = &s.cfg.ClusterID
	resp.ControllerID = s.cfg.BrokerID

	// Before v4 a Metadata request always allowed auto-creation.
	create := r.Version < 4 || r.AllowAutoTopicCreation
	if r.Topics == nil {
		all, err := s.topics.all(ctx)
		if err != nil {
			s.log.Warn("metadata: listing topics", "err", err)
		}
		for _, t := range all {
			if s.allowed(ctx, OpDescribe, ResourceTopic, t.Name) {
				resp.Topics = append(resp.Topics, s.describeTopic(ctx, t))
			}
		}
		return resp
	}
	for _, rt := range r.Topics {
		var (
			t   parkway.Topic
			err error
		)
		if rt.Topic == nil && rt.TopicID != [16]byte{} {
			t, err = s.topics.lookupID(ctx, rt.TopicID)
		} else if rt.Topic != nil {
			if !validTopicName(*rt.Topic) {
				err = fmt.Errorf("%w: %q", parkway.ErrInvalidName, *rt.Topic)
			} else if !s.allowed(ctx, OpDescribe, ResourceTopic, *rt.Topic) {
				err = errTopicDenied
			} else {
				t, err = s.ensure(ctx, *rt.Topic, create && s.allowed(ctx, OpCreate, ResourceTopic, *rt.Topic))
			}
		} else {
			err = fmt.Errorf("%w: neither a topic name nor an ID", parkway.ErrInvalidName)
		}
		if err != nil {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID = rt.Topic, rt.TopicID
			mt.ErrorCode = s.topicErrorCode(kmsg.Metadata, err)
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, s.describeTopic(ctx, t))
	}
	return resp
}

// topicErrorCode is the code of a failed topic resolution: an unknown
// topic ID is UNKNOWN_TOPIC_ID; the rest as errorCode.
func (s *Server) topicErrorCode(key kmsg.Key, err error) int16 {
	if errors.Is(err, errTopicDenied) {
		return s.code(key, kerr.TopicAuthorizationFailed.Code)
	}
	if errors.Is(err, errUnknownTopicID) {
		return s.code(key, kerr.UnknownTopicID.Code)
	}
	return s.code(key, errorCode(err))
}

// describeTopic is a topic's Metadata entry (partitionsOf).
func (s *Server) describeTopic(ctx context.Context, t parkway.Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic, mt.TopicID = &name, topicID(t)
	info, err := s.node.Admin().TopicInfo(ctx, t)
	if err != nil {
		s.topics.forget(t, err)
		mt.ErrorCode = s.code(kmsg.Metadata, errorCode(err))
		return mt
	}
	mt.Partitions = s.partitionsOf(ctx, t, info.Partitions)
	return mt
}

func (s *Server) describeCluster(r *kmsg.DescribeClusterRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	for _, br := range s.liveBrokers() {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port = br.id, br.host, br.port
		resp.Brokers = append(resp.Brokers, b)
	}
	resp.ClusterID = s.cfg.ClusterID
	resp.ControllerID = s.cfg.BrokerID
	resp.EndpointType = r.EndpointType
	if r.Version >= 1 && r.EndpointType != 1 { // 1: brokers; 2: controllers, which clients cannot reach here
		resp.ErrorCode = s.code(kmsg.DescribeCluster, kerr.UnsupportedEndpointType.Code)
	}
	return resp
}

func (s *Server) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, r.TimeoutMillis)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, rt := range r.Topics {
		ct := kmsg.NewCreateTopicsResponseTopic()
		ct.Topic = rt.Topic
		fail := func(code int16, msg string) {
			ct.ErrorCode = s.code(kmsg.CreateTopics, code)
			ct.ErrorMessage = &msg
		}
		partitions := int(rt.NumPartitions)
		if partitions == -1 {
			partitions = s.cfg.DefaultPartitions
		}
		opts, optErr := topicOptions(rt.Configs)
		switch {
		case !validTopicName(rt.Topic):
			fail(kerr.InvalidTopicException.Code, "a topic name is 1-249 letters, digits, '.', '_' or '-'")
		case !s.allowed(ctx, OpCreate, ResourceTopic, rt.Topic):
			fail(kerr.TopicAuthorizationFailed.Code, "not authorized to create the topic")
		case partitions <= 0 || partitions > maxPartitionsPerCreation:
			fail(kerr.InvalidPartitions.Code, fmt.Sprintf("partitions must be 1..%d", maxPartitionsPerCreation))
		case rt.ReplicationFactor == 0 || rt.ReplicationFactor < -1:
			fail(kerr.InvalidReplicationFactor.Code, "the replication factor must be positive, or -1 for the default")
		case len(rt.ReplicaAssignment) > 0:
			fail(kerr.InvalidReplicaAssignment.Code, "replica assignments are not supported: parkway places replicas")
		case optErr != nil:
			fail(kerr.InvalidConfig.Code, optErr.Error())
		default:
			if rt.ReplicationFactor > 0 {
				opts = append(opts, parkway.WithReplicas(int(rt.ReplicationFactor)))
			} else {
				opts = append(opts, s.defaultReplicas()...)
			}
			if r.ValidateOnly {
				ct.NumPartitions, ct.ReplicationFactor = int32(partitions), rt.ReplicationFactor
				break
			}
			t, err := s.topics.create(ctx, rt.Topic, partitions, opts...)
			if err != nil {
				fail(errorCode(err), err.Error())
				break
			}
			ct.TopicID = topicID(t)
			ct.NumPartitions = int32(partitions)
			ct.ReplicationFactor = rt.ReplicationFactor
			if info, err := s.node.Admin().TopicInfo(ctx, t); err == nil && info.Config.Replicas > 0 {
				ct.ReplicationFactor = int16(info.Config.Replicas)
			}
		}
		resp.Topics = append(resp.Topics, ct)
	}
	return resp
}

func (s *Server) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, r.TimeoutMillis)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	targets := r.Topics
	for _, name := range r.TopicNames { // before v6
		t := kmsg.NewDeleteTopicsRequestTopic()
		t.Topic = &name
		targets = append(targets, t)
	}
	for _, rt := range targets {
		dt := kmsg.NewDeleteTopicsResponseTopic()
		dt.Topic, dt.TopicID = rt.Topic, rt.TopicID
		var (
			t   parkway.Topic
			err error
		)
		if rt.Topic != nil {
			t, err = s.topics.lookupFresh(ctx, *rt.Topic)
		} else {
			t, err = s.topics.lookupID(ctx, rt.TopicID)
		}
		if err == nil && !s.allowed(ctx, OpDelete, ResourceTopic, t.Name) {
			err = errTopicDenied
		}
		if err == nil {
			name := t.Name
			dt.Topic, dt.TopicID = &name, topicID(t)
			err = s.node.Admin().DeleteTopic(ctx, t)
			s.topics.forget(t, parkway.ErrTopicNotFound)
			if err == nil {
				s.log.Info("deleted topic", "topic", t.Name)
			} else if rt.Topic == nil && errors.Is(err, parkway.ErrTopicNotFound) {
				err = fmt.Errorf("%w: %w", errUnknownTopicID, err)
			}
		}
		if err != nil {
			dt.ErrorCode = s.topicErrorCode(kmsg.DeleteTopics, err)
			msg := err.Error()
			dt.ErrorMessage = &msg
		}
		resp.Topics = append(resp.Topics, dt)
	}
	return resp
}

// initProducerID hands out idempotent producer ids. Transactions are not
// supported: a transactional id is refused with
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients treat as final.
func (s *Server) initProducerID(r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		resp.ErrorCode = s.code(kmsg.InitProducerID, kerr.TransactionalIDAuthorizationFailed.Code)
		return resp
	}
	if r.Version >= 3 && r.ProducerID >= 0 && r.ProducerEpoch >= 0 && r.ProducerEpoch < 1<<15-1 {
		// A producer bumping its epoch after an error keeps its id.
		resp.ProducerID, resp.ProducerEpoch = r.ProducerID, r.ProducerEpoch+1
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = s.pids.newID(), 0
	return resp
}
