package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// broker is one broker of the Metadata answer.
type broker struct {
	id   int32
	host string
	port int32
}

// brokerList is every broker announced: this listener alone, or the
// cluster's listeners (Config.Brokers) in id order.
func (s *Server) brokerList() []broker {
	if s.cfg.Brokers == nil {
		host, port := s.advertisedAddr()
		return []broker{{s.cfg.BrokerID, host, port}}
	}
	out := make([]broker, 0, len(s.cfg.Brokers))
	for id, addr := range s.cfg.Brokers {
		b := broker{id: id}
		if id == s.cfg.BrokerID && s.cfg.AdvertisedAddr == "" {
			b.host, b.port = s.advertisedAddr()
		} else {
			host, port, _ := net.SplitHostPort(addr) // Validate checked it
			p, _ := strconv.Atoi(port)
			b.host, b.port = host, int32(p)
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b broker) int { return int(a.id) - int(b.id) })
	return out
}

// liveBrokers is brokerList without the brokers whose nodes this node
// judges dead, as Kafka's Metadata lists only the brokers registered
// alive: a client picks any listed broker for a request that may go
// anywhere (FindCoordinator among them, which franz-go sends once,
// without a retry), so a dead one listed makes such requests fail —
// and a heartbeat that fails to find its coordinator twice makes the
// member rejoin its group. This broker is always listed.
func (s *Server) liveBrokers() []broker {
	all := s.brokerList()
	dead := s.dead.Load()
	if dead == nil {
		return all
	}
	return slices.DeleteFunc(all, func(b broker) bool { return b.id != s.cfg.BrokerID && (*dead)[b.id] })
}

// readLiveness records which brokers' nodes this node judges dead
// (liveBrokers), in a cluster; the janitor calls it every tick.
func (s *Server) readLiveness(ctx context.Context) {
	if s.cfg.Brokers == nil {
		return
	}
	st, err := s.node.Cluster().State(ctx)
	if err != nil {
		return // kept as last read
	}
	dead := map[int32]bool{}
	for _, m := range st.Members {
		if !m.Live {
			dead[int32(m.ID)] = true
		}
	}
	s.dead.Store(&dead)
}

// The coordinator of a consumer group, in a cluster, is the raft leader
// of one partition of an internal topic of the listener's stream
// (coordinatorTopic), chosen by a hash of the group id — as Kafka's is the
// leader of a partition of __consumer_offsets. Raft elects at most one
// leader per term and every node learns it, so once the cluster agrees
// every listener names the same coordinator, and when its node dies the
// partition elects another and the groups move with it. The partition
// holds the group log of its groups (grouplog.go): membership and
// committed offsets, written in the coordinator's term and replayed by
// the next coordinator, so a move loses neither.
const (
	coordinatorTopic      = "__group_coordinators"
	coordinatorPartitions = 8
)

// coordTopic returns the internal coordinator topic and its partition
// count, creating the topic with the node's default replication when it
// is missing (every listener may race to create it: one wins).
func (s *Server) coordTopic(ctx context.Context) (parkway.Topic, int, error) {
	s.coordMu.Lock()
	t, n := s.coordT, s.coordN
	s.coordMu.Unlock()
	if n > 0 {
		return t, n, nil
	}
	stream, err := s.topics.streamHandle(ctx)
	if err != nil {
		return parkway.Topic{}, 0, err
	}
	t, err = s.node.Topic(ctx, stream, coordinatorTopic)
	if errors.Is(err, parkway.ErrTopicNotFound) {
		t, err = s.node.Admin().CreateTopic(ctx, stream, coordinatorTopic, coordinatorPartitions)
		if errors.Is(err, parkway.ErrTopicExists) {
			t, err = s.node.Topic(ctx, stream, coordinatorTopic)
		} else if err == nil {
			s.log.Info("created the group coordinators' topic", "topic", coordinatorTopic, "partitions", coordinatorPartitions)
		}
	}
	if err != nil {
		s.forgetStream(stream, err)
		return parkway.Topic{}, 0, err
	}
	info, err := s.node.Admin().TopicInfo(ctx, t)
	if err != nil {
		s.forgetStream(stream, err)
		return parkway.Topic{}, 0, err
	}
	if info.Partitions <= 0 {
		return parkway.Topic{}, 0, fmt.Errorf("kafka: %s has no partitions", coordinatorTopic)
	}
	s.coordMu.Lock()
	s.coordT, s.coordN = t, info.Partitions
	s.coordMu.Unlock()
	return t, info.Partitions, nil
}

// forgetStream drops the cached stream handle when err says the stream
// went (the next call recreates it).
func (s *Server) forgetStream(stream parkway.Stream, err error) {
	if errors.Is(err, parkway.ErrStreamNotFound) {
		s.topics.forget(parkway.Topic{Stream: stream}, err)
	}
}

// forgetCoordTopic drops the cached coordinator topic when err says its
// incarnation (or its stream) is gone.
func (s *Server) forgetCoordTopic(t parkway.Topic, err error) {
	if !errors.Is(err, parkway.ErrTopicNotFound) && !errors.Is(err, parkway.ErrStreamNotFound) {
		return
	}
	s.coordMu.Lock()
	if s.coordT == t {
		s.coordT, s.coordN = parkway.Topic{}, 0
	}
	s.coordMu.Unlock()
	s.forgetStream(t.Stream, err)
}

// coordinatorOf is the broker coordinating group and the raft term of
// its coordinator partition's leader. On a single node it is this
// listener (term 0); in a cluster ok is false while no leader is known
// (the topic being created, an election under way) or the leader has no
// listener in Config.Brokers.
func (s *Server) coordinatorOf(ctx context.Context, group string) (b broker, term uint64, ok bool) {
	if s.cfg.Brokers == nil {
		host, port := s.advertisedAddr()
		return broker{s.cfg.BrokerID, host, port}, 0, true
	}
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	t, n, err := s.coordTopic(ctx)
	if err != nil {
		s.log.Debug("group coordinator: the coordinators' topic", "err", err)
		return broker{}, 0, false
	}
	lead, term, err := s.node.Cluster().LeaderTerm(ctx, t, groupPartition(group, n))
	if err != nil {
		s.forgetCoordTopic(t, err)
		return broker{}, 0, false
	}
	if lead == 0 {
		return broker{}, 0, false
	}
	for _, b := range s.brokerList() {
		if b.id == int32(lead) {
			return b, term, true
		}
	}
	return broker{}, 0, false
}

// groupPartition is the coordinator partition of group, of n.
func groupPartition(group string, n int) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(group))
	return h.Sum32() % uint32(n)
}

// sweepGroups, in a cluster, unloads the coordinator partitions this
// listener no longer leads in the term it loaded them in (and the groups
// it holds without a load), so that a group that moved is neither listed
// nor described here, nor its members kept waiting, until a request for
// it arrives and loads it again. Each partition's leader is asked once; a
// partition whose leader could not be asked is left as it is.
func (s *Server) sweepGroups(ctx context.Context) {
	if s.cfg.Brokers == nil {
		return
	}
	parts := s.groups.loadedParts()
	if len(parts) == 0 {
		return
	}
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	t, _, err := s.coordTopic(ctx)
	if err != nil {
		return
	}
	for _, p := range sortedParts(parts) {
		lead, term, err := s.node.Cluster().LeaderTerm(ctx, t, p)
		if err != nil {
			s.forgetCoordTopic(t, err)
			continue
		}
		if cp := parts[p]; cp == nil || int32(lead) != s.cfg.BrokerID || cp.term != term {
			s.groups.unload(p)
		}
	}
}

// partitionsOf describes a topic's partitions: on a single node this
// broker leads all; in a cluster each partition's leader is its raft
// leader as this node sees it and its replicas are its placement. The
// in-sync set is the raft leader's, whichever listener answers, as the
// refresher last read it (isr.go); while none is known for the current
// leader, the placement.
func (s *Server) partitionsOf(ctx context.Context, t parkway.Topic, count int) []kmsg.MetadataResponseTopicPartition {
	out := make([]kmsg.MetadataResponseTopicPartition, 0, count)
	if s.cfg.Brokers == nil {
		for p := range int32(count) {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition, mp.Leader, mp.LeaderEpoch = p, s.cfg.BrokerID, 0
			mp.Replicas, mp.ISR = []int32{s.cfg.BrokerID}, []int32{s.cfg.BrokerID}
			out = append(out, mp)
		}
		return out
	}
	infos, err := s.node.Admin().Partitions(ctx, t)
	if err != nil {
		return out
	}
	out = make([]kmsg.MetadataResponseTopicPartition, len(infos))
	// Leaders of partitions held elsewhere are asked of their replicas
	// (a round trip each when not learnt recently): several at once.
	var wg sync.WaitGroup
	sem := make(chan struct{}, leaderLookups)
	for i, info := range infos {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = int32(info.Partition)
		mp.Replicas = nodeIDs(info.Replicas)
		mp.ISR = mp.Replicas
		out[i] = mp
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			lead, epoch := s.leaderOf(ctx, t, int32(info.Partition))
			out[i].Leader, out[i].LeaderEpoch = lead, epoch
			if lead < 0 {
				out[i].ErrorCode = s.code(kmsg.Metadata, kerr.LeaderNotAvailable.Code)
				return
			}
			isr, ok, wake := s.isr.lookup(isrKey{t, info.Partition, info.CreatedRevision}, lead, epoch, out[i].Replicas, time.Now())
			if ok {
				out[i].ISR = isr
			}
			if wake {
				select {
				case s.isrWake <- struct{}{}:
				default: // a wake is pending: the refresher reads every due entry
				}
			}
		})
	}
	wg.Wait()
	return out
}

// leaderLookups bounds the partition leaders one Metadata request looks
// up at once.
const leaderLookups = 8

// leaderOf is a partition's leader and leader epoch as this node sees
// them: on a single node this broker, epoch 0; in a cluster the raft
// group's leader and term (-1 and -1 while no leader is known). The
// raft term serves as Kafka's leader epoch (KIP-320): it only grows, and
// each new leader is elected in a term of its own.
func (s *Server) leaderOf(ctx context.Context, t parkway.Topic, part int32) (lead, epoch int32) {
	if s.cfg.Brokers == nil {
		return s.cfg.BrokerID, 0
	}
	l, term, err := s.node.Cluster().LeaderTerm(ctx, t, uint32(part))
	if err != nil || l == 0 {
		return -1, -1
	}
	return int32(l), termEpoch(term)
}

// epochCode judges a request's CurrentLeaderEpoch against the
// partition's (KIP-320): -1 (either) checks nothing; an older one is
// FENCED_LEADER_EPOCH — the client's metadata is stale, and it refreshes
// it — and a newer one UNKNOWN_LEADER_EPOCH: this broker has not heard
// of the election yet, and the client retries.
func epochCode(requested, epoch int32) int16 {
	switch {
	case requested < 0 || epoch < 0 || requested == epoch:
		return 0
	case requested < epoch:
		return kerr.FencedLeaderEpoch.Code
	}
	return kerr.UnknownLeaderEpoch.Code
}
