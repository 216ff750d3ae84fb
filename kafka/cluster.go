package kafka

import (
	"context"
	"hash/fnv"
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
		mp.Partition, mp.LeaderEpoch = int32(info.Partition), 0
		for _, r := range info.Replicas {
			mp.Replicas = append(mp.Replicas, int32(r))
		}
		mp.ISR = mp.Replicas
		out[i] = mp
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			lead, err := s.node.Cluster().Leader(ctx, t, info.Partition)
			if err != nil || lead == 0 {
				out[i].Leader = -1
				out[i].ErrorCode = s.code(kmsg.Metadata, kerr.LeaderNotAvailable.Code)
			} else {
				out[i].Leader = int32(lead)
			}
		})
	}
	wg.Wait()
	return out
}

// leaderLookups bounds the partition leaders one Metadata request looks
// up at once.
const leaderLookups = 8
