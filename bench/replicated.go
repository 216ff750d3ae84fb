package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/transport"
)

// The replicated section: parkway as three nodes in one process, over
// loopback TCP (transport.ListenTCP per node) and over the in-memory network
// (transport.NewNetwork), against embedded NATS JetStream as a three-server
// cluster in one process with routes on loopback TCP and a stream of three
// replicas. Both acknowledge a produce once a quorum (two of the three
// replicas) holds it. The TCP systems are the like for like in transport.
//
// Durability: each side runs in memory and on disk. parkway ×3 memory (no DataDir: raft
// logs and partitions in memory) is compared with a JetStream stream with
// MemoryStorage, whose raft log is in memory too. parkway ×3 disk (a
// DataDir per node: raft logs beside the segments, metadata raft log, all
// on disk; the topic's FsyncInterval 2m policy syncs them on the interval)
// is compared with a JetStream stream with FileStorage and the server's
// default sync_interval, also 2 minutes.

// replicas is the number of nodes (JetStream: servers) and of replicas of
// the partition (stream).
const replicas = 3

// ReplicatedSizes are the floors of the replicated section (messages a
// round does at least, as SetSizes); a zero count leaves the case out.
type ReplicatedSizes struct {
	ProduceWait    int // case R1
	Pipelined      int // case R2
	PipelinedAsync int // case R2a: R2 through parkway's ProduceAsync
	Batch          int // case R3; a multiple of 100
	// Topics is case R6's exact number of topics (JetStream: streams)
	// created and produced to, each replicated on all three nodes.
	Topics int
}

func (s ReplicatedSizes) validate() error {
	var errs []error
	if s.Batch%produceBatch != 0 {
		errs = append(errs, fmt.Errorf("replicated: Batch %d is not a multiple of %d", s.Batch, produceBatch))
	}
	for _, v := range []int{s.ProduceWait, s.Pipelined, s.PipelinedAsync, s.Batch, s.Topics} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("replicated: negative count %d", v))
		}
	}
	return errors.Join(errs...)
}

// replicatedSet is the name of the section in -run filters and progress
// lines: "replicated/<key>".
const replicatedSet = "replicated"

// replicatedCases are cases 1–3 and 6 on three replicas: the same
// payloads, pipelining depth and batch size as the single-node cases, so
// the single-node figures of the same run sit beside them.
func replicatedCases(sz ReplicatedSizes) []replCase {
	all := []replCase{
		{caseSpec{id: "R1", key: "produce-wait", title: "produce and wait, one message per call, quorum ack", payload: 100,
			count: sz.ProduceWait, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, p50, p99, allocsPerMsg}}, runProduceWait},
		{caseSpec{id: "R2", key: "pipelined", title: "pipelined produce, 4,096 outstanding, quorum ack", payload: 100,
			count: sz.Pipelined, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec, allocsPerMsg}}, runPipelined},
		{caseSpec{id: "R2a", key: "pipelined-async", title: "pipelined produce, async API, 4,096 outstanding, quorum ack", payload: 100,
			count: sz.PipelinedAsync, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec, allocsPerMsg}}, runPipelinedAsync},
		{caseSpec{id: "R3", key: "batch", title: "batched produce, 100 messages per call, quorum ack", payload: 100,
			count: sz.Batch, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec, allocsPerMsg}}, runBatch},
		{caseSpec{id: "R6", key: "convergence", title: "create a topic of 3 replicas and produce at once: time to first ack", payload: 100,
			count: sz.Topics, parts: 1, metrics: []metric{p50, p99, cpuPerMsg, allocsPerMsg}}, runReplConvergence},
	}
	out := all[:0]
	for _, c := range all {
		if c.spec.count > 0 {
			out = append(out, c)
		}
	}
	return out
}

// runReplConvergence is case 6 on three replicas (R6): each new topic
// (JetStream: stream) is replicated on all three nodes, so its first ack
// waits for the metadata commit, the partition's raft group on three
// nodes with its first leader, and one replication round. The produces
// go to the node (server) of the bench partition's leader; a new
// partition led elsewhere is reached through it, on both sides.
func runReplConvergence(ctx context.Context, p producer, c caseSpec, m *meter) error {
	in, ok := p.(creator)
	if !ok {
		return fmt.Errorf("%T cannot create topics", p)
	}
	return converge(ctx, in, c, m)
}

// convergenceTopic is the name of case 6's (and R6's) i-th topic.
func convergenceTopic(i int) string { return fmt.Sprintf("conv-%d", i) }

// topicVerifier checks, after case R6, that every replica of each of its n
// topics holds exactly the one acknowledged message.
type topicVerifier interface {
	verifyTopics(ctx context.Context, n int) error
}

type replCase struct {
	spec caseSpec
	run  func(ctx context.Context, p producer, c caseSpec, m *meter) error
}

// replSystem opens fresh instances of one replicated system.
type replSystem interface {
	name() string
	// open starts the replicas under dir, creates one partition (stream)
	// replicated on all of them, writes warm to it and waits until every
	// replica holds it, so the clock starts on a settled cluster.
	open(ctx context.Context, dir string, warm []byte) (replInstance, error)
}

// replInstance is one open replicated system.
type replInstance interface {
	producer
	// entry names the node (server) the produces go to: the leader's.
	entry() string
	// verify checks, after the timed section, that every replica holds
	// exactly want messages (the warm one included) and that the leader
	// is still the one the produces were sent to.
	verify(ctx context.Context, want int) error
	// busDrops is how many replication messages the transport dropped
	// (parkway's in-memory network drops a message for a full inbox and
	// raft re-sends it); -1 when the transport does not count them.
	busDrops() int64
}

// replicatedDurability is the topic policy of the replicated parkway
// nodes: the interval set's, FsyncInterval with JetStream's default
// sync_interval (2 minutes), so the topic is configured as in the
// single-node interval set. On the disk cluster it syncs each raft log and
// partition log on that interval; in memory there is nothing to sync.
var replicatedDurability = durability{interval: jetStreamDefaultSyncInterval}

// verifyTimeout bounds the wait for followers to catch up after a run.
const verifyTimeout = 30 * time.Second

// --- parkway, three nodes over the in-memory network or loopback TCP --------

// parkwayClusterSystem is three parkway nodes; with disk each has its own
// DataDir under the run's directory, so every raft group's state is on
// disk; without, everything is in memory. With tcp the nodes talk over
// parkway's TCP transport on 127.0.0.1 (one listener per node), as
// JetStream's servers do over their routes; without, over the in-memory
// network.
// parkwayClusterSystem is a parkway cluster of three nodes in one
// process; log, when set, receives the nodes' warnings (Config.NodeLog).
type parkwayClusterSystem struct {
	disk, tcp bool
	log       io.Writer
}

func (s parkwayClusterSystem) name() string {
	n := "parkway ×3 memory"
	if s.disk {
		n = "parkway ×3 disk"
	}
	if s.tcp {
		n += " TCP"
	}
	return n
}

// profileTag names the system in its CPU profile files.
func (s parkwayClusterSystem) profileTag() string {
	t := "memory"
	if s.disk {
		t = "disk"
	}
	if s.tcp {
		t += "-tcp"
	}
	return t
}

// tcpOptions are the options of every parkway TCP bus in the bench: the
// defaults, in plaintext on loopback (asked for by name, as the transport
// requires), like JetStream's routes here.
func tcpOptions() transport.TCPOptions {
	return transport.TCPOptions{InsecurePlaintext: true}
}

type parkwayCluster struct {
	*parkwayInstance                     // the partition leader's node: every produce goes there
	net              *transport.Network  // the in-memory network, or nil
	buses            []*transport.TCPBus // the TCP endpoints, or nil
	nodes            []*parkway.Node
	leader           transport.NodeID
}

func (s parkwayClusterSystem) open(ctx context.Context, dir string, warm []byte) (replInstance, error) {
	c := &parkwayCluster{}
	peers := make([]transport.NodeID, replicas)
	for i := range peers {
		peers[i] = transport.NodeID(i + 1)
	}
	bus := func(id transport.NodeID) transport.Bus { return c.net.Endpoint(id) }
	if s.tcp {
		if err := c.listenTCP(peers); err != nil {
			return nil, errors.Join(err, c.close())
		}
		bus = func(id transport.NodeID) transport.Bus { return c.buses[id-1] }
	} else {
		c.net = transport.NewNetwork(transport.NetworkOptions{})
	}
	for _, id := range peers {
		// Two shards per node, as on one node. With disk, each node has
		// its own data directory (partitions, their raft logs, the
		// metadata raft log); without, all of it is in memory.
		cfg := parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: bus(id)}}
		if s.log != nil {
			cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: fmt.Sprintf("node%d", id), Level: hclog.Warn, Output: s.log})
		}
		if s.disk {
			cfg.DataDir = filepath.Join(dir, fmt.Sprintf("node-%d", id))
			// The default descriptor budget is half the process's limit
			// for one node; three in one process share the limit, and at
			// 10,000 topics the three budgets together exceeded it (the
			// builds failed with EMFILE; issue 33).
			cfg.MaxOpenFiles = partition.DefaultMaxOpenFiles() / replicas
		}
		n, err := parkway.Open(cfg)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("parkway: open node %d: %w", id, err), c.close())
		}
		c.nodes = append(c.nodes, n)
	}
	if err := c.setUp(ctx, warm); err != nil {
		return nil, errors.Join(err, c.close())
	}
	return c, nil
}

// listenTCP starts one TCP bus per node on a free loopback port and tells
// each the others' addresses.
func (c *parkwayCluster) listenTCP(peers []transport.NodeID) error {
	for _, id := range peers {
		b, err := transport.ListenTCP(id, "127.0.0.1:0", nil, tcpOptions())
		if err != nil {
			return fmt.Errorf("parkway: listen tcp for node %d: %w", id, err)
		}
		c.buses = append(c.buses, b)
	}
	for _, b := range c.buses {
		for _, p := range c.buses {
			if err := b.AddPeer(p.ID(), p.Addr().String()); err != nil {
				return fmt.Errorf("parkway: node %d: add peer %d: %w", b.ID(), p.ID(), err)
			}
		}
	}
	return nil
}

func (c *parkwayCluster) setUp(ctx context.Context, warm []byte) error {
	first := c.nodes[0]
	stream, err := first.Admin().CreateStream(ctx, "bench")
	if err != nil {
		return fmt.Errorf("parkway: create stream: %w", err)
	}
	opt := parkway.WithFsync(parkway.FsyncInterval, replicatedDurability.interval)
	topic, err := first.Admin().CreateTopic(ctx, stream, "bench", 1, opt)
	if err != nil {
		return fmt.Errorf("parkway: create topic: %w", err)
	}
	// The warm produce goes through node 1, which forwards it to the
	// leader if it is not the leader itself; it returns once the
	// partition exists on a quorum and has a leader.
	if _, err := first.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: warm}); err != nil {
		return fmt.Errorf("parkway: warm produce: %w", err)
	}
	if err := waitFor(ctx, "node 1 to know the partition leader", func() (bool, error) {
		c.leader, err = first.Cluster().Leader(ctx, topic, 0)
		return c.leader != 0, err
	}); err != nil {
		return fmt.Errorf("parkway: leader: %w", err)
	}
	c.parkwayInstance = &parkwayInstance{node: c.nodes[c.leader-1], stream: stream, topic: topic, opt: opt}
	return c.verify(ctx, 1)
}

func (c *parkwayCluster) entry() string {
	return fmt.Sprintf("node %d", c.leader)
}

// verify: the leader node still sees itself as leader, and a local Poll on
// every node (AtOffset(n).Local(): served from that node's own replica,
// committed messages only, not forwarded to the leader) finds exactly want
// messages, waiting for followers to apply the last commits.
func (c *parkwayCluster) verify(ctx context.Context, want int) error {
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	if lead, err := c.node.Cluster().Leader(ctx, c.topic, 0); err != nil || lead != c.leader {
		return fmt.Errorf("parkway: partition leader is %d (%v), the produces went to node %d", lead, err, c.leader)
	}
	for i, n := range c.nodes {
		for {
			got, err := parkwayCount(ctx, n, c.topic, want)
			if err != nil {
				return fmt.Errorf("parkway: node %d: %w", i+1, err)
			}
			if got == want {
				break
			}
			if got > want {
				return fmt.Errorf("parkway: node %d holds %d messages, %d were acknowledged", i+1, got, want)
			}
			if err := pause(ctx); err != nil {
				return fmt.Errorf("parkway: node %d holds %d of %d acknowledged messages: %w", i+1, got, want, err)
			}
		}
	}
	return nil
}

// verifyTopics: every node's own replica of each of case R6's n topics
// holds exactly its one message (a local Poll, waiting for followers).
func (c *parkwayCluster) verifyTopics(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	streams := c.streams
	if len(streams) == 0 {
		streams = []parkway.Stream{c.stream}
	}
	for i := range n {
		name := convergenceTopic(i)
		for j, node := range c.nodes {
			topic, err := node.Topic(ctx, streams[i/topicsPerStream], name)
			if err != nil {
				return fmt.Errorf("parkway: node %d: topic %s: %w", j+1, name, err)
			}
			for {
				got, err := parkwayCount(ctx, node, topic, 1)
				if err != nil {
					return fmt.Errorf("parkway: node %d: topic %s: %w", j+1, name, err)
				}
				if got == 1 {
					break
				}
				if got > 1 {
					return fmt.Errorf("parkway: node %d: topic %s holds %d messages, 1 was acknowledged", j+1, name, got)
				}
				if err := pause(ctx); err != nil {
					return fmt.Errorf("parkway: node %d: topic %s holds none of its acknowledged message: %w", j+1, name, err)
				}
			}
		}
	}
	return nil
}

// parkwayCount returns how many messages node's own replica holds in
// partition 0 from offset 0, reading at most want+1: enough to tell fewer,
// exactly and more. The reads are local: a plain Poll is served by the
// leader, which would not check the follower's replica.
func parkwayCount(ctx context.Context, n *parkway.Node, topic parkway.Topic, want int) (int, error) {
	got := 0
	for next := uint64(0); got <= want; {
		b, err := n.Poll(ctx, topic, 0, parkway.AtOffset(next).Local(), min(consumeBatch, want+1-got))
		if err != nil {
			return got, err
		}
		if len(b.Messages) == 0 {
			break
		}
		got += len(b.Messages)
		next = b.Next
	}
	return got, nil
}

// busDrops: the in-memory network's messages dropped for a full inbox;
// over TCP, the sends refused for a full peer queue and the received
// messages dropped for a full inbox, over the three buses.
func (c *parkwayCluster) busDrops() int64 {
	if c.net != nil {
		return int64(c.net.Stats().Overflow)
	}
	var n uint64
	for _, b := range c.buses {
		st := b.Stats()
		n += st.QueueFull + st.InboxFull
	}
	return int64(n)
}

// close closes the nodes (each closes its bus), then the network, and
// every TCP bus again: a bus whose node never opened is closed only here
// (closing a bus twice is harmless).
func (c *parkwayCluster) close() error {
	var errs []error
	for i, n := range c.nodes {
		if err := n.Close(); err != nil {
			errs = append(errs, fmt.Errorf("parkway: close node %d: %w", i+1, err))
		}
	}
	if c.net != nil {
		if err := c.net.Close(); err != nil {
			errs = append(errs, fmt.Errorf("parkway: close network: %w", err))
		}
	}
	for _, b := range c.buses {
		if err := b.Close(); err != nil {
			errs = append(errs, fmt.Errorf("parkway: close tcp bus %d: %w", b.ID(), err))
		}
	}
	return errors.Join(errs...)
}

// --- JetStream, three servers with routes on loopback -----------------------

type jetStreamClusterSystem struct{ storage nats.StorageType }

func (s jetStreamClusterSystem) name() string {
	if s.storage == nats.MemoryStorage {
		return "JetStream R3 memory"
	}
	return "JetStream R3 file"
}

type jetStreamCluster struct {
	*jetStreamInstance // the client, connected to the stream leader's server
	srvs               []*server.Server
	leader             string // the stream leader's server name
	storage            nats.StorageType
}

// jsStream is the replicated stream's name and only subject.
const jsStream = "bench"

// jsAccount is the account the in-process clients use: nats-server's
// global account when no accounts are configured.
const jsAccount = server.DEFAULT_GLOBAL_ACCOUNT

func (s jetStreamClusterSystem) open(ctx context.Context, dir string, warm []byte) (replInstance, error) {
	// The route ports are picked free beforehand (every server must be
	// configured with all routes); if another process takes one in
	// between, the cluster's listeners fail to come up and a fresh set of
	// ports is tried.
	var errs []error
	for attempt := 1; attempt <= 3; attempt++ {
		c, err := startJetStreamCluster(filepath.Join(dir, fmt.Sprintf("try%d", attempt)))
		if errors.Is(err, errListen) {
			errs = append(errs, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		c.storage = s.storage
		if err := c.setUp(ctx, s.storage, warm); err != nil {
			return nil, errors.Join(err, c.close())
		}
		return c, nil
	}
	return nil, errors.Join(errs...)
}

var errListen = errors.New("nats-server: route listener did not come up")

// startJetStreamCluster starts three servers named js-1…js-3, each with its
// own store directory under dir, JetStream enabled and routes to all three
// on 127.0.0.1, and waits until every server is ready for connections.
func startJetStreamCluster(dir string) (*jetStreamCluster, error) {
	ports, err := freePorts(replicas)
	if err != nil {
		return nil, err
	}
	routes := make([]*url.URL, replicas)
	for i, p := range ports {
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)}
	}
	c := &jetStreamCluster{}
	for i := range replicas {
		srv, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("js-%d", i+1),
			JetStream:  true,
			StoreDir:   filepath.Join(dir, fmt.Sprintf("js-%d", i+1)),
			// A client listener on a random loopback port: nats-server
			// starts its route listener only after the client accept loop
			// (DontListen would leave the routes down). The bench's client
			// connects in-process all the same.
			Host:    "127.0.0.1",
			Port:    server.RANDOM_PORT,
			NoLog:   true,
			NoSigs:  true,
			Cluster: server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: ports[i]},
			// Every server lists all three routes, its own included (it
			// recognises and drops the route to itself): JetStream sizes
			// its meta group from the configured routes.
			Routes: routes,
		})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("nats-server %d: new: %w", i+1, err), c.close())
		}
		c.srvs = append(c.srvs, srv)
		srv.Start()
	}
	for i, srv := range c.srvs {
		if !srv.ReadyForConnections(10 * time.Second) {
			return nil, errors.Join(fmt.Errorf("%w: server js-%d not ready after 10s", errListen, i+1), c.close())
		}
	}
	return c, nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var (
		ports []int
		lns   []net.Listener
		err   error
	)
	for range n {
		var ln net.Listener
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			break
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		err = errors.Join(err, ln.Close())
	}
	if err != nil {
		return nil, fmt.Errorf("free ports: %w", err)
	}
	return ports, nil
}

// setUp waits until the cluster has a meta leader that sees all three
// servers, adds the stream (retrying while the cluster refuses it as not
// ready), waits until the stream has a leader and both followers are
// current, connects the client to the leader's server in-process and
// writes the warm message.
func (c *jetStreamCluster) setUp(ctx context.Context, storage nats.StorageType, warm []byte) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i, srv := range c.srvs {
		jsc := srv.JetStreamConfig()
		if jsc == nil {
			return fmt.Errorf("nats-server js-%d: JetStream is not enabled", i+1)
		}
		if jsc.SyncAlways || jsc.SyncInterval != jetStreamDefaultSyncInterval {
			return fmt.Errorf("nats-server js-%d: runs with sync_always=%v sync_interval=%v, want the default %v",
				i+1, jsc.SyncAlways, jsc.SyncInterval, jetStreamDefaultSyncInterval)
		}
	}
	if err := waitFor(ctx, "a JetStream meta leader that sees 3 servers", func() (bool, error) {
		for _, srv := range c.srvs {
			if srv.JetStreamIsLeader() && len(srv.JetStreamClusterPeers()) == replicas {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}

	// A set-up client on js-1 adds the stream.
	setup, err := nats.Connect("", nats.InProcessServer(c.srvs[0]), nats.Name("bench-setup"))
	if err != nil {
		return fmt.Errorf("nats: connect in-process to js-1: %w", err)
	}
	defer setup.Close()
	sjs, err := setup.JetStream()
	if err != nil {
		return fmt.Errorf("nats: jetstream context: %w", err)
	}
	cfg := &nats.StreamConfig{Name: jsStream, Subjects: []string{jsStream}, Storage: storage, Replicas: replicas}
	var lastErr error
	if err := waitFor(ctx, "the cluster to accept the stream", func() (bool, error) {
		_, lastErr = sjs.AddStream(cfg, nats.Context(ctx))
		return lastErr == nil, nil
	}); err != nil {
		return fmt.Errorf("%w (last error: %v)", err, lastErr)
	}
	if err := waitFor(ctx, "a stream leader with both followers current", func() (bool, error) {
		c.leader = ""
		for _, srv := range c.srvs {
			if srv.JetStreamIsStreamLeader(jsAccount, jsStream) {
				c.leader = srv.Name()
			}
		}
		if c.leader == "" {
			return false, nil
		}
		return c.caughtUp(ctx, sjs, -1)
	}); err != nil {
		return err
	}
	var lsrv *server.Server
	for _, srv := range c.srvs {
		if srv.Name() == c.leader {
			lsrv = srv
		}
	}
	j := &jetStreamInstance{srv: lsrv, streams: []string{jsStream}, subjects: []string{jsStream}}
	if j.nc, err = nats.Connect("", nats.InProcessServer(lsrv), nats.Name("bench")); err != nil {
		return fmt.Errorf("nats: connect in-process to %s: %w", c.leader, err)
	}
	c.jetStreamInstance = j
	if j.js, err = j.nc.JetStream(nats.PublishAsyncMaxPending(maxPending)); err != nil {
		return fmt.Errorf("nats: jetstream context: %w", err)
	}
	if err := j.produceOne(ctx, 0, warm); err != nil {
		return fmt.Errorf("nats: warm publish: %w", err)
	}
	return c.verify(ctx, 1)
}

// caughtUp reports whether the stream's leader is c.leader and reports
// both followers current with no lag. With want ≥ 0 it also checks that
// the leader holds exactly want messages, and fails (rather than waits) on
// another leader or count: the leader applies before it acknowledges.
func (c *jetStreamCluster) caughtUp(ctx context.Context, js nats.JetStreamContext, want int) (bool, error) {
	info, err := js.StreamInfo(jsStream, nats.Context(ctx))
	if err != nil || info.Cluster == nil {
		return false, nil // not answerable yet; the wait retries
	}
	if info.Cluster.Leader != c.leader {
		if want < 0 {
			return false, nil // still settling during set-up
		}
		return false, fmt.Errorf("nats: stream leader is %q, the produces went to %q", info.Cluster.Leader, c.leader)
	}
	if want >= 0 && info.State.Msgs != uint64(want) {
		return false, fmt.Errorf("nats: stream leader holds %d messages, %d were acknowledged", info.State.Msgs, want)
	}
	return followersCurrent(info), nil
}

// followersCurrent reports whether a replicated stream's info lists both
// followers, each current, online and with no lag.
func followersCurrent(info *nats.StreamInfo) bool {
	if len(info.Cluster.Replicas) != replicas-1 {
		return false
	}
	for _, r := range info.Cluster.Replicas {
		if !r.Current || r.Offline || r.Lag != 0 {
			return false
		}
	}
	return true
}

func (c *jetStreamCluster) entry() string {
	return c.leader
}

// verify: the stream leader is unchanged, holds exactly want messages, and
// reports both followers current with no lag.
func (c *jetStreamCluster) verify(ctx context.Context, want int) error {
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	return waitFor(ctx, fmt.Sprintf("both followers to hold the %d acknowledged messages", want), func() (bool, error) {
		return c.caughtUp(ctx, c.js, want)
	})
}

// createAndProduce is case R6's: AddStream with three replicas on the
// cluster's storage, then Publish to it at once (the client's server is
// the bench stream leader's; the new stream's leader may be another).
func (c *jetStreamCluster) createAndProduce(ctx context.Context, name string, payload []byte) error {
	if _, err := c.js.AddStream(&nats.StreamConfig{Name: name, Subjects: []string{name}, Storage: c.storage, Replicas: replicas},
		nats.Context(ctx)); err != nil {
		return fmt.Errorf("nats: add stream %s: %w", name, err)
	}
	if _, err := c.js.Publish(name, payload); err != nil {
		return fmt.Errorf("nats: publish to new stream %s: %w", name, err)
	}
	return nil
}

// verifyTopics: each of case R6's n streams has a leader holding exactly
// its one message, with both followers current.
func (c *jetStreamCluster) verifyTopics(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	for i := range n {
		name := convergenceTopic(i)
		if err := waitFor(ctx, fmt.Sprintf("stream %s's followers to hold its message", name), func() (bool, error) {
			info, err := c.js.StreamInfo(name, nats.Context(ctx))
			if errors.Is(err, nats.ErrStreamNotFound) {
				return false, fmt.Errorf("nats: stream %s: %w", name, err)
			}
			if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
				return false, nil // not answerable yet; the wait retries
			}
			if info.State.Msgs != 1 {
				return false, fmt.Errorf("nats: stream %s holds %d messages, 1 was acknowledged", name, info.State.Msgs)
			}
			return followersCurrent(info), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func (c *jetStreamCluster) busDrops() int64 { return -1 }

// close closes the client, then shuts every server down and waits until
// its goroutines have finished.
func (c *jetStreamCluster) close() error {
	if c.jetStreamInstance != nil && c.nc != nil {
		c.nc.Close()
	}
	for _, srv := range c.srvs {
		srv.Shutdown()
	}
	for _, srv := range c.srvs {
		srv.WaitForShutdown()
	}
	return nil
}

// waitFor polls ready every few milliseconds until it reports true, fails,
// or ctx ends. It is for conditions with no notification to wait on.
func waitFor(ctx context.Context, what string, ready func() (bool, error)) error {
	for {
		ok, err := ready()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if err := pause(ctx); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
	}
}

// pause waits 5 ms or until ctx ends.
func pause(ctx context.Context) error {
	t := time.NewTimer(5 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// --- running the section ---------------------------------------------------

func replicatedSystems() []replSystem {
	return []replSystem{
		parkwayClusterSystem{}, parkwayClusterSystem{tcp: true},
		parkwayClusterSystem{disk: true}, parkwayClusterSystem{disk: true, tcp: true},
		jetStreamClusterSystem{nats.MemoryStorage}, jetStreamClusterSystem{nats.FileStorage},
	}
}

// replGroup is one table of the section: the systems of one storage kind
// and the like-for-like pairs among them (a parkway system, its JetStream
// counterpart), by system name.
type replGroup struct {
	title   string
	systems []string
	pairs   [][2]string
}

// replicatedGroups are the tables of the section: parkway's in-memory
// nodes with JetStream's memory stream, parkway's disk nodes with
// JetStream's file stream; in each, parkway over the in-memory network and
// over loopback TCP. The TCP pair is like for like in transport too:
// JetStream's servers always talk over loopback TCP.
func replicatedGroups() []replGroup {
	mem, memTCP := parkwayClusterSystem{}.name(), parkwayClusterSystem{tcp: true}.name()
	disk, diskTCP := parkwayClusterSystem{disk: true}.name(), parkwayClusterSystem{disk: true, tcp: true}.name()
	jsMem, jsFile := jetStreamClusterSystem{nats.MemoryStorage}.name(), jetStreamClusterSystem{nats.FileStorage}.name()
	return []replGroup{
		{"In memory", []string{memTCP, mem, jsMem}, [][2]string{{memTCP, jsMem}, {mem, jsMem}}},
		{"On disk", []string{diskTCP, disk, jsFile}, [][2]string{{diskTCP, jsFile}, {disk, jsFile}}},
	}
}

// replResult is the replicated section of a report.
type replResult struct {
	systems []string
	cases   []replCaseResult
}

// index returns the position of system name in r.systems, or -1.
func (r *replResult) index(name string) int {
	for i, s := range r.systems {
		if s == name {
			return i
		}
	}
	return -1
}

type replCaseResult struct {
	spec    caseSpec
	samples [][]sample // per system, one per round
	entries [][]string // per system: the replica the produces went to, per round
	drops   [][]int64  // per system: transport drops, per round (-1: not counted)
}

// runReplicated runs the replicated section. Each round rotates which
// system goes first, so each goes first in one round of every six.
func (r *runner) runReplicated(ctx context.Context, sizes ReplicatedSizes) (*replResult, error) {
	var systems []replSystem
	for _, s := range replicatedSystems() {
		if r.cfg.Systems == nil || r.cfg.Systems.MatchString(s.name()) {
			if p, ok := s.(parkwayClusterSystem); ok && r.cfg.NodeLog != nil {
				p.log = r.cfg.NodeLog
				s = p
			}
			systems = append(systems, s)
		}
	}
	res := &replResult{}
	for _, s := range systems {
		res.systems = append(res.systems, s.name())
	}
	for _, c := range replicatedCases(sizes) {
		if !r.selected(replicatedSet + "/" + c.spec.key) {
			continue
		}
		cr := replCaseResult{spec: c.spec, samples: make([][]sample, len(systems)),
			entries: make([][]string, len(systems)), drops: make([][]int64, len(systems))}
		for round := 1; round <= r.cfg.Rounds; round++ {
			for k := range systems {
				i := (k + round - 1) % len(systems)
				s, entry, drops, err := r.runReplCase(ctx, systems[i], c, round)
				if err != nil {
					return nil, fmt.Errorf("bench: %s/%s on %s, round %d: %w", replicatedSet, c.spec.key, systems[i].name(), round, err)
				}
				r.progress(replicatedSet, c.spec.key, round, systems[i].name(), s)
				cr.samples[i] = append(cr.samples[i], s)
				cr.entries[i] = append(cr.entries[i], entry)
				cr.drops[i] = append(cr.drops[i], drops)
			}
		}
		res.cases = append(res.cases, cr)
	}
	if len(res.cases) == 0 {
		return nil, nil
	}
	return res, nil
}

// runReplCase runs one replicated case once on one system, on fresh
// directories that are removed afterwards, and verifies every replica
// afterwards (not timed).
func (r *runner) runReplCase(ctx context.Context, sys replSystem, c replCase, round int) (s sample, entry string, drops int64, err error) {
	dir, remove, err := r.roundDir(replicatedSet, c.spec.key, sys.name(), round)
	if err != nil {
		return sample{}, "", 0, err
	}
	defer func() { err = errors.Join(err, remove()) }()
	ctx, cancel := context.WithTimeout(ctx, r.runTimeout())
	defer cancel()

	in, err := sys.open(ctx, dir, make([]byte, c.spec.payload))
	if err != nil {
		return sample{}, "", 0, err
	}
	m := &meter{minRound: r.cfg.MinRound}
	if pc, ok := sys.(parkwayClusterSystem); ok && r.cfg.CPUProfileDir != "" {
		m.profile = filepath.Join(r.cfg.CPUProfileDir,
			fmt.Sprintf("%s-%s-%s-r%d.pprof", replicatedSet, c.spec.key, pc.profileTag(), round))
	}
	err = c.run(ctx, in, c.spec, m)
	err = errors.Join(err, m.finishProfile())
	switch {
	case err != nil:
	case c.spec.key == "convergence":
		// Every new topic's one message was acknowledged: every replica
		// of every topic must hold it, and nothing more; the bench
		// topic still holds just the warm message.
		err = errors.Join(in.verify(ctx, 1), in.(topicVerifier).verifyTopics(ctx, c.spec.count))
	default:
		// Every produce was acknowledged; every replica must hold all of
		// them, and nothing more, with the warm message.
		err = in.verify(ctx, m.s.msgs+1)
	}
	drops = in.busDrops()
	err = errors.Join(err, in.close())
	if err == nil && (!m.started || m.s.msgs == 0) {
		err = errors.New("the case measured nothing")
	}
	m.s.dir = dir
	return m.s, in.entry(), drops, err
}

// --- the report ------------------------------------------------------------

const replicatedHowItRuns = `parkway: three nodes in one process,
` + "`parkway.Open(parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{ID: i, Peers: []transport.NodeID{1, 2, 3}, Bus: bus_i}})`" + `,
where bus_i is either node i's endpoint on one ` + "`transport.NewNetwork(transport.NetworkOptions{})`" + `
(the in-memory bus) or, in the systems marked **TCP**, node i's
` + "`transport.ListenTCP(i, \"127.0.0.1:0\", nil, opts)`" + ` (the default options, plaintext,
like JetStream's routes here) with the other two nodes added as peers
(parkway's TCP transport over loopback); and one topic of
1 partition created with ` + "`parkway.WithFsync(parkway.FsyncInterval, 2*time.Minute)`" + `.
It runs twice: **parkway ×3 memory** has no ` + "`DataDir`" + `, so the partition and
every raft log are in memory; **parkway ×3 disk** gives each node its own
` + "`DataDir`" + ` (a fresh temporary directory per node) and a third of the default
descriptor budget (` + "`MaxOpenFiles: partition.DefaultMaxOpenFiles() / 3`" + `: three
nodes share the process's limit), so each node keeps the
partition's segments with its raft log beside them, and the metadata raft
log, on disk. Under ` + "`FsyncInterval`" + ` both logs are written as they grow and
fsynced on the 2-minute interval; the partition log is also synced before
each raft log compaction (every 4,096 entries or 16 MiB by default). A
produce is acknowledged once the raft entry carrying it is committed (held
by 2 of the 3 nodes) and applied by the leader. The produces are sent to
the partition leader's node (` + "`Cluster.Leader`" + `), so none is forwarded.

JetStream: three embedded nats-servers in the same process (` + "`js-1`…`js-3`" + `,
one cluster, JetStream enabled, a store directory each, routes over TCP on
127.0.0.1) and one stream of 1 subject with
` + "`Replicas: 3`" + `, also run twice: **R3 memory** (` + "`Storage: nats.MemoryStorage`" + `:
the stream and its raft log in memory) and **R3 file** (` + "`nats.FileStorage`" + `:
the stream and its raft log in files, synced on the server's default
sync_interval of 2 minutes, read back from every server). The nats.go
client connects in-process (` + "`nats.InProcessServer`" + `) to the stream leader's
server, so its publishes reach the leader without a hop, like parkway's. A
publish is acknowledged once the stream's raft group has committed it (2
of 3) and the leader has stored it.

Durability, like for like: parkway ×3 memory against JetStream R3 memory
(both hold an acknowledged message in the memory of a quorum, nothing on
disk), and parkway ×3 disk against JetStream R3 file (both write every
message and raft entry to the filesystem on every replica, so it survives a
crash of all three processes, and fsync on a 2-minute interval). The ratio
columns pair them so.

Transport: JetStream's servers always talk over loopback TCP (nats-server has
no in-memory route transport), so the **TCP** parkway systems are the like
for like: every raft message between parkway nodes is framed, written to a
loopback socket and read back, as between nats-servers. The parkway systems
without the mark exchange raft messages over the in-memory bus (marshalled,
then handed over Go channels: no socket), parkway's way of running several
nodes in one process; they are kept to show what the socket costs. The
clients are in-process on both sides.

Before the clock: on parkway, the topic is created, a warm message is
acknowledged and read back from all three nodes; on JetStream, the meta
leader sees all three servers, the stream is added, it has a leader and both
followers report current, and a warm message is acknowledged. After every
timed run (not timed) each side checks that the leader is still the node
(server) the produces went to and that every replica holds exactly the
acknowledged messages plus the warm one (parkway: a local ` + "`Poll`" + ` on each node,
` + "`AtOffset(n).Local()`" + `, which serves that node's own replica; JetStream: the
leader's message count and both followers current with no lag). A failed
ack, a leader change, or a missing or extra message fails the run.

| case | parkway, 3 nodes | JetStream, 3 servers |
| --- | --- | --- |
| R1 produce and wait | ` + "`Produce`" + ` of one message to the leader node, sequential | ` + "`js.Publish`" + `, sequential |
| R2 pipelined, 4,096 outstanding | as case 2: 4,096 goroutines, each ` + "`Produce`" + ` one message and wait, to the leader node | as case 2: ` + "`js.PublishAsync`" + `, a ring of 4,096 ack futures |
| R2a pipelined, async API | as case 2a: one goroutine, ` + "`ProduceAsync`" + ` to the leader node with a ring of 4,096 ` + "`PendingAck`" + `s | as case 2a: R2 run again |
| R3 batched, 100 per call | ` + "`Produce`" + ` with 100 messages, sequential | as case 3: 100 ` + "`PublishAsync`" + ` calls, then wait on all 100 |
| R6 create a topic and produce at once | as case 6, each topic replicated on the three nodes (the default factor): ` + "`CreateTopic`" + ` (1 partition) through the leader node above, then ` + "`Produce`" + ` one message to it at once through the same node (forwarded when the new partition's leader is another); latency to the ack, over N topics | ` + "`js.AddStream`" + ` (` + "`Replicas: 3`" + `, the system's storage), then ` + "`js.Publish`" + ` at once, through the same client (routed when the new stream's leader is another server) |

After case R6 (not timed), every node's own replica of every new topic
must hold exactly its one acknowledged message (parkway: a local ` + "`Poll`" + ` per
node and topic; JetStream: each stream's leader holds 1 message, both
followers current with no lag), and the bench topic still just the warm one.
`

func (r *Report) writeReplicated(b *strings.Builder) {
	rr := r.replicated
	if rr == nil {
		return
	}
	b.WriteString("## Three replicas, quorum acknowledged\n\n")
	b.WriteString(replicatedHowItRuns)
	b.WriteString("\n")
	fmt.Fprintf(b, "Each round rotates which of the %d systems runs first. ", len(rr.systems))
	b.WriteString("One table per storage kind; ratios are a parkway system's median / its like-for-like JetStream " +
		"system's median. The messages column gives the median messages per round of each system, in the " +
		"table's column order.\n\n")
	for _, g := range replicatedGroups() {
		r.writeReplGroup(b, g)
	}
	r.writeEntries(b)
	r.writeReplicationCost(b)
}

// writeReplGroup writes one table of the replicated section: the group's
// systems that ran, and the ratio of each pair of them.
func (r *Report) writeReplGroup(b *strings.Builder, g replGroup) {
	rr := r.replicated
	var cols []int
	for _, name := range g.systems {
		if i := rr.index(name); i >= 0 {
			cols = append(cols, i)
		}
	}
	if len(cols) == 0 {
		return
	}
	type pair struct{ pw, js int }
	var pairs []pair
	for _, p := range g.pairs {
		if i, j := rr.index(p[0]), rr.index(p[1]); i >= 0 && j >= 0 {
			pairs = append(pairs, pair{i, j})
		}
	}
	fmt.Fprintf(b, "### %s\n\n| case | messages per round | metric |", g.title)
	for _, i := range cols {
		fmt.Fprintf(b, " %s |", rr.systems[i])
	}
	for _, p := range pairs {
		fmt.Fprintf(b, " %s / %s |", rr.systems[p.pw], rr.systems[p.js])
	}
	b.WriteString("\n| --- | ---: | --- |" + strings.Repeat(" ---: |", len(cols)+len(pairs)) + "\n")
	for _, c := range rr.cases {
		for i, k := range c.spec.metrics {
			name, cnt := "", ""
			if i == 0 {
				name = fmt.Sprintf("%s %s (%s, %s)", c.spec.id, c.spec.title, c.spec.key, formatPayload(c.spec.payload))
				counts := make([]string, len(cols))
				for j, col := range cols {
					counts[j] = formatRate(medianMsgs(c.samples[col]))
				}
				cnt = strings.Join(counts, " / ")
			}
			fmt.Fprintf(b, "| %s | %s | %s |", name, cnt, metricLabel(k))
			sums := make([]summary, len(c.samples))
			for j, ss := range c.samples {
				sums[j] = summarize(k, ss)
			}
			for _, col := range cols {
				fmt.Fprintf(b, " %s |", formatSummary(k, sums[col]))
			}
			for _, p := range pairs {
				fmt.Fprintf(b, " %s |", formatRatioOf(sums[p.pw].median, sums[p.js].median))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
}

// writeEntries states where the produces went in every run, and what the
// parkway networks dropped.
func (r *Report) writeEntries(b *strings.Builder) {
	rr := r.replicated
	b.WriteString("The produces went to the leader in every run (checked before and after each): ")
	var dropped []string
	for i, s := range rr.systems {
		seen := map[string]int{}
		var order []string
		var drops int64
		counted := false
		for _, c := range rr.cases {
			for j, e := range c.entries[i] {
				if seen[e] == 0 {
					order = append(order, e)
				}
				seen[e]++
				if d := c.drops[i][j]; d >= 0 {
					drops += d
					counted = true
				}
			}
		}
		if counted {
			dropped = append(dropped, fmt.Sprintf("%s in the runs of %s", formatCount(int(drops)), s))
		}
		slices.Sort(order)
		parts := make([]string, len(order))
		for j, e := range order {
			parts[j] = fmt.Sprintf("%s in %d", e, seen[e])
		}
		sep := "; "
		if i == len(rr.systems)-1 {
			sep = ".\n\n"
		}
		fmt.Fprintf(b, "%s to %s run(s)%s", s, strings.Join(parts, ", "), sep)
	}
	if len(dropped) > 0 {
		fmt.Fprintf(b, "parkway's transports dropped messages over the section (in-memory network: for a full inbox; "+
			"TCP: for a full peer queue or inbox): %s (raft re-sends what it loses).\n\n", strings.Join(dropped, ", "))
	}
}

// writeReplicationCost sets the replicated figures beside the single-node
// cases 1–3 of the same run (the interval set), when that set ran. Each
// side is compared with its replicated system of the same storage and sync
// setting as its single node: parkway ×3 disk (file store, FsyncInterval
// 2m) and JetStream R3 file (file storage, default sync_interval), so each
// 3 / 1 is replication alone.
func (r *Report) writeReplicationCost(b *strings.Builder) {
	rr := r.replicated
	b.WriteString("### Beside the single-node figures of this run\n\n")
	// parkway's disk cluster over TCP is the like for like of JetStream's
	// routed servers; over the in-memory network when TCP did not run.
	pwSys := parkwayClusterSystem{disk: true, tcp: true}.name()
	disk := rr.index(pwSys)
	if disk < 0 {
		pwSys = parkwayClusterSystem{disk: true}.name()
		disk = rr.index(pwSys)
	}
	file := rr.index(jetStreamClusterSystem{nats.FileStorage}.name())
	rows := []struct {
		key string
		k   metric
	}{
		{"produce-wait", msgsPerSec}, {"produce-wait", p50}, {"produce-wait", p99},
		{"pipelined", msgsPerSec}, {"pipelined-async", msgsPerSec}, {"batch", msgsPerSec},
		{"batch", cpuPerMsg},
	}
	var lines []string
	for _, row := range rows {
		single, ok := r.find("interval", row.key)
		if !ok || disk < 0 || file < 0 {
			continue
		}
		var repl *replCaseResult
		for i := range rr.cases {
			if rr.cases[i].spec.key == row.key {
				repl = &rr.cases[i]
			}
		}
		if repl == nil {
			continue
		}
		pw1, js1 := summarize(row.k, single.samples[0]).median, summarize(row.k, single.samples[1]).median
		pw3, js3 := summarize(row.k, repl.samples[disk]).median, summarize(row.k, repl.samples[file]).median
		lines = append(lines, fmt.Sprintf("| %s / %s %s | %s | %s | %s | %s | %s | %s | %s |", single.spec.id, repl.spec.id,
			row.key, metricLabel(row.k), formatMetric(row.k, pw1), formatMetric(row.k, pw3), formatRatioOf(pw3, pw1),
			formatMetric(row.k, js1), formatMetric(row.k, js3), formatRatioOf(js3, js1)))
	}
	if len(lines) == 0 {
		b.WriteString("The single-node cases 1–3 of the interval set did not run in this run (the section was run " +
			"on its own, or without the disk-backed systems); a full run sets them side by side here.\n\n")
		return
	}
	fmt.Fprintf(b, "Medians. The single-node figures are the interval set's cases above (parkway: one node, file "+
		"store, FsyncInterval 2m; JetStream: one server, file storage, default sync_interval). Each 3 / 1 "+
		"compares that node with the replicated system of the same storage and sync setting (%s, "+
		"FsyncInterval 2m; JetStream R3 file, default sync_interval), so it is the cost of replication alone: "+
		"the raft log written beside the store, the quorum round trip, and three replicas sharing one "+
		"machine. CPU per message counts the whole process: all three replicas.\n\n", pwSys)
	fmt.Fprintf(b, "| case | metric | parkway, 1 node | %s | 3 / 1 | JetStream, 1 server | JetStream R3 file | 3 / 1 |\n", pwSys)
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n\n")
}
