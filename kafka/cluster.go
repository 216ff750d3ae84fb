package kafka

import (
	"context"
	"hash/fnv"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"

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

// coordinatorFor is the broker coordinating a group: a hash of its id over
// the brokers, so every listener of a cluster names the same one and a
// group's members meet at one coordinator.
func (s *Server) coordinatorFor(group string) broker {
	list := s.brokerList()
	h := fnv.New32a()
	_, _ = h.Write([]byte(group))
	return list[h.Sum32()%uint32(len(list))]
}

// isCoordinator reports whether this listener coordinates group.
func (s *Server) isCoordinator(group string) bool {
	return s.cfg.Brokers == nil || s.coordinatorFor(group).id == s.cfg.BrokerID
}

// partitionsOf describes a topic's partitions: on a single node this
// broker leads all; in a cluster each partition's leader is its raft
// leader as this node sees it and its replicas are its placement (also
// given as the in-sync set: the listener does not see raft's progress).
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
		for _, r := range info.Replicas {
			mp.Replicas = append(mp.Replicas, int32(r))
		}
		mp.ISR = mp.Replicas
		out[i] = mp
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			lead, epoch := s.leaderOf(ctx, t, int32(info.Partition))
			out[i].Leader, out[i].LeaderEpoch = lead, epoch
			if lead < 0 {
				out[i].ErrorCode = s.code(kmsg.Metadata, kerr.LeaderNotAvailable.Code)
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
	return int32(l), int32(min(term, math.MaxInt32))
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
