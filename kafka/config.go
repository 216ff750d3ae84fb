package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrInvalidConfig reports a Config that Validate refuses.
var ErrInvalidConfig = errors.New("kafka: invalid config")

// ErrServerClosed is returned by Serve and ListenAndServe after Shutdown
// or Close.
var ErrServerClosed = errors.New("kafka: server closed")

// Defaults and bounds of Config.
const (
	DefaultAddr              = ":9092"
	DefaultStream            = "kafka"
	DefaultPartitions        = 1
	DefaultMaxRequestSize    = 16 << 20
	DefaultMaxInflightBytes  = 256 << 20
	DefaultMaxConnections    = 1024
	DefaultIdleTimeout       = 10 * time.Minute
	DefaultRequestTimeout    = 30 * time.Second
	MinMaxRequestSize        = 1 << 10
	MaxMaxRequestSize        = 1 << 30
	maxPartitionsPerCreation = 1000 // parkway's bound on one CreateTopic
)

// Config configures a Server. The zero value is valid: it listens on
// :9092, keeps its topics in the stream "kafka", auto-creates topics with
// one partition, and applies the limits' defaults.
type Config struct {
	// Addr is the address ListenAndServe listens on (default ":9092").
	Addr string
	// AdvertisedAddr is the host:port clients are told to connect to, in
	// Metadata and FindCoordinator answers. Empty advertises the address
	// the listener is bound to (127.0.0.1 for an unspecified IP): set it
	// when listening on every interface or behind a NAT.
	AdvertisedAddr string
	// BrokerID is the broker id this node announces (default 0). In a
	// cluster it is the node's parkway NodeID.
	BrokerID int32
	// Brokers, in a cluster, are the advertised addresses (host:port) of
	// every node's listener by broker id, this node's included: Metadata
	// then announces every node as a broker, each partition's raft leader
	// as its leader and its placement as its replicas, and each consumer
	// group's coordinator is the one whose node leads the group's
	// partition of the internal topic __group_coordinators (created in
	// Stream when missing), so it moves when that node dies. Nil on a
	// single node: this listener is the only broker.
	Brokers map[int32]string
	// ClusterID is the Kafka cluster id announced in Metadata (default
	// "parkway").
	ClusterID string

	// Stream is the parkway stream holding the Kafka topics, created when
	// missing (default "kafka"). In a cluster it also holds the internal
	// topic __group_coordinators (see Brokers), which Kafka clients do not
	// see.
	Stream string
	// DisableAutoCreate turns off Kafka's auto.create.topics.enable: by
	// default a produce to, or a Metadata request that allows creation
	// of, an unknown topic creates it.
	DisableAutoCreate bool
	// DefaultPartitions is the partition count of an auto-created topic,
	// and of a CreateTopics that asks for the default (-1). Default 1.
	DefaultPartitions int
	// DefaultReplicationFactor is the replication factor of such topics;
	// 0 leaves it to the node (min(3, nodes)).
	DefaultReplicationFactor int

	// MaxRequestSize bounds one request's body (its size prefix is
	// checked before anything is allocated) and what a produce request's
	// record batches inflate to. Default 16 MiB; 1 KiB to 1 GiB.
	MaxRequestSize int
	// MaxInflightBytes bounds the request bodies held at once over all
	// connections: a connection whose next request does not fit waits
	// before reading it. One connection holds at most four requests at
	// the limit of it. Default 256 MiB; at least MaxRequestSize.
	MaxInflightBytes int64
	// MaxConnections bounds the open client connections; one over it is
	// closed as soon as it is accepted. Default 1,024.
	MaxConnections int
	// IdleTimeout closes a connection that sends no request for this
	// long (default 10 minutes).
	IdleTimeout time.Duration
	// RequestTimeout bounds reading one request once its size is read
	// (a client that sends one byte a minute is closed), writing one
	// response, and a request's work when the request names no timeout
	// of its own. Default 30 s.
	RequestTimeout time.Duration

	// GroupHeartbeatInterval is the heartbeat interval a consumer group
	// member of the KIP-848 protocol (ConsumerGroupHeartbeat) is told
	// (Kafka's group.consumer.heartbeat.interval.ms; default 5 s).
	GroupHeartbeatInterval time.Duration
	// GroupSessionTimeout removes such a member that sends no heartbeat
	// for this long (group.consumer.session.timeout.ms; default 45 s). It
	// must exceed GroupHeartbeatInterval.
	GroupSessionTimeout time.Duration

	// TLS, when set, makes the listener serve TLS (ListenAndServe and
	// Serve alike).
	TLS *tls.Config
	// SASL, when set, requires every connection to authenticate with
	// PLAIN or SCRAM-SHA-256/512 against the host's credentials. Set TLS
	// too: PLAIN sends passwords as they are.
	SASL *SASLConfig
	// Authorizer, when set, is asked before every topic and group
	// operation (nil allows everything to everyone).
	Authorizer Authorizer
	// Logger receives the server's log lines, named "kafka" (default:
	// the node's logger, Node.Logger).
	Logger hclog.Logger
	// MetricsLabels are constant labels on every series of Metrics, as
	// parkway.Config.MetricsLabels labels the node's. With Brokers set and
	// no labels given, the series carry node="<BrokerID>", as a cluster
	// node's own do.
	MetricsLabels prometheus.Labels
}

// Validate reports every problem of c at once (joined), each wrapping
// ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.AdvertisedAddr != "" {
		if _, port, err := net.SplitHostPort(c.AdvertisedAddr); err != nil {
			bad("advertised address %q: %v", c.AdvertisedAddr, err)
		} else if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			bad("advertised address %q: port must be 1..65535", c.AdvertisedAddr)
		}
	}
	if c.BrokerID < 0 {
		bad("broker id %d is negative", c.BrokerID)
	}
	if c.Brokers != nil {
		if _, ok := c.Brokers[c.BrokerID]; !ok {
			bad("brokers do not list this node's broker id %d", c.BrokerID)
		}
		for id, addr := range c.Brokers {
			if _, port, err := net.SplitHostPort(addr); err != nil || id < 0 {
				bad("broker %d at %q: a non-negative id and a host:port", id, addr)
			} else if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
				bad("broker %d at %q: port must be 1..65535", id, addr)
			}
		}
	}
	if c.DefaultPartitions < 0 || c.DefaultPartitions > maxPartitionsPerCreation {
		bad("default partitions %d outside 0..%d", c.DefaultPartitions, maxPartitionsPerCreation)
	}
	if c.DefaultReplicationFactor < 0 {
		bad("default replication factor %d is negative", c.DefaultReplicationFactor)
	}
	if c.MaxRequestSize != 0 && (c.MaxRequestSize < MinMaxRequestSize || c.MaxRequestSize > MaxMaxRequestSize) {
		bad("max request size %d outside %d..%d", c.MaxRequestSize, MinMaxRequestSize, MaxMaxRequestSize)
	}
	if c.MaxInflightBytes < 0 {
		bad("max in-flight bytes %d is negative", c.MaxInflightBytes)
	} else if c.MaxInflightBytes != 0 {
		req := c.MaxRequestSize
		if req == 0 {
			req = DefaultMaxRequestSize
		}
		if c.MaxInflightBytes < int64(req) {
			bad("max in-flight bytes %d below the max request size %d", c.MaxInflightBytes, req)
		}
	}
	if c.MaxConnections < 0 {
		bad("max connections %d is negative", c.MaxConnections)
	}
	if c.IdleTimeout < 0 {
		bad("idle timeout %v is negative", c.IdleTimeout)
	}
	if c.RequestTimeout < 0 {
		bad("request timeout %v is negative", c.RequestTimeout)
	}
	if c.GroupHeartbeatInterval < 0 || c.GroupSessionTimeout < 0 {
		bad("group heartbeat interval %v or session timeout %v is negative", c.GroupHeartbeatInterval, c.GroupSessionTimeout)
	} else {
		hb, st := c.GroupHeartbeatInterval, c.GroupSessionTimeout
		if hb == 0 {
			hb = DefaultGroupHeartbeatInterval
		}
		if st == 0 {
			st = DefaultGroupSessionTimeout
		}
		if hb < time.Millisecond || st <= hb || st > maxSessionTimeout {
			bad("group heartbeat interval %v and session timeout %v: 1 ms <= interval < timeout <= %v", hb, st, maxSessionTimeout)
		}
	}
	if c.SASL != nil {
		if c.SASL.Credentials == nil {
			bad("SASL without a credential store")
		}
		for _, m := range c.SASL.Mechanisms {
			if m != MechanismPlain && m != MechanismSCRAMSHA256 && m != MechanismSCRAMSHA512 {
				bad("SASL mechanism %q: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", m)
			}
		}
	}
	if c.Stream != "" && !validTopicName(c.Stream) {
		bad("stream name %q: 1-249 letters, digits, '.', '_' or '-'", c.Stream)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.ClusterID == "" {
		c.ClusterID = "parkway"
	}
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.DefaultPartitions == 0 {
		c.DefaultPartitions = DefaultPartitions
	}
	if c.MaxRequestSize == 0 {
		c.MaxRequestSize = DefaultMaxRequestSize
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = max(DefaultMaxInflightBytes, int64(c.MaxRequestSize))
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.GroupHeartbeatInterval == 0 {
		c.GroupHeartbeatInterval = DefaultGroupHeartbeatInterval
	}
	if c.GroupSessionTimeout == 0 {
		c.GroupSessionTimeout = DefaultGroupSessionTimeout
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.MetricsLabels == nil && c.Brokers != nil {
		c.MetricsLabels = prometheus.Labels{"node": strconv.Itoa(int(c.BrokerID))}
	}
	return c
}

// validTopicName is Kafka's rule for topic names: 1 to 249 of
// [a-zA-Z0-9._-], and neither "." nor "..". Every such name is also a
// valid parkway name.
func validTopicName(name string) bool { return validName(name, 249) }

// validName accepts 1 to maxLen of [a-zA-Z0-9._-], other than "." and
// "..".
func validName(name string, maxLen int) bool {
	if name == "" || len(name) > maxLen || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '.' || c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
