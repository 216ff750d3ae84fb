package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/kafka"
	"github.com/parkway-io/parkway/transport"
)

const serveUsage = `usage: parkway serve [flags]

Runs one parkway node until SIGINT or SIGTERM, then shuts it down
gracefully (in-flight calls answered, partitions synced, files closed)
within --shutdown-timeout.

Every flag can also be set by an environment variable: PARKWAY_ and the
flag's name in capitals with '-' as '_' (--data-dir is PARKWAY_DATA_DIR).
A flag on the command line wins over the variable.

A single node needs only --data-dir. A cluster member needs --node-id,
--listen (its address for the other members), --peers (every founding
member, this one included, as id=host:port,…) and TLS: --cluster-id with
--tls-cert, --tls-key (a certificate naming parkway://<cluster-id>/node/<id>)
and --tls-ca (the cluster's CAs), or --insecure-plaintext on a trusted
network.

Joining a running cluster: start the new node with an empty --data-dir,
--join, its --node-id and --listen, --peers naming every member and
itself, and --join-via naming the HTTP addresses (--http) of the members,
which run with --admin. It asks each of them to admit its address to
their bus (POST /admin/peers), then one of them to add it to the cluster
(POST /admin/nodes, Cluster.AddNode), retrying until one does; it logs
"joined the cluster" then. Removing a node: 'parkway remove-node' asks a
member to remove it (DELETE /admin/nodes/{id}, Cluster.RemoveNode, which
first moves its replicas to the others) and every member to take it off
its bus (DELETE /admin/peers/{id}). --admin serves these calls on --http
to anyone who can reach it: keep --http on a trusted network (the default
is loopback). A member started without --admin refuses them (404).

HTTP (--http): /metrics (Prometheus), /healthz (200 while the node is
open), /readyz (200 once the metadata is applied and every partition this
node holds is materialised; 503 with the reason otherwise).

Kafka (--kafka ADDR): a Kafka wire-protocol listener in front of the
node, started once the node is open and drained before it closes.
--kafka-advertised is the host:port clients are told to connect to
(default: the bound address). In a cluster, --kafka-brokers lists every
member's advertised Kafka address, this one included, as
id=host:port,…: each partition's leader is then announced as its Kafka
leader. Topics a client auto-creates get --kafka-partitions partitions.
The listener speaks plaintext without authentication: keep it on a
trusted network.

Exit codes: 0 clean shutdown; 1 the node failed to start, failed while
running, or did not shut down within --shutdown-timeout; 2 usage error.
`

type serveConfig struct {
	dataDir         string
	shards          int
	nodeID          uint64
	listen          string
	peers           string
	join            bool
	joinVia         string
	admin           bool
	clusterID       string
	tlsCert         string
	tlsKey          string
	tlsCA           string
	plaintext       bool
	httpAddr        string
	kafkaAddr       string
	kafkaAdvertised string
	kafkaBrokers    string
	kafkaPartitions int
	fsync           string
	shutdownTimeout time.Duration
	logLevel        string
	logFormat       string
}

func runServe(args []string, stdout, stderr io.Writer) error {
	f := newFlags("serve", serveUsage, stderr)
	var c serveConfig
	f.StringVar(&c.dataDir, "data-dir", "", "the data directory (empty: everything in memory, lost at exit)")
	f.IntVar(&c.shards, "shards", 0, "shards (0: one per CPU)")
	f.Uint64Var(&c.nodeID, "node-id", 0, "this node's id in a cluster (0: a single node)")
	f.StringVar(&c.listen, "listen", "", "cluster: the address this node listens on for the other members (host:port)")
	f.StringVar(&c.peers, "peers", "", "cluster: every founding member, this one included: id=host:port,…")
	f.BoolVar(&c.join, "join", false, "cluster: join a running cluster (a member then adds this node) instead of founding one")
	f.StringVar(&c.joinVia, "join-via", "", "with --join: the HTTP addresses (host:port,…) of members running with --admin, asked to add this node")
	f.BoolVar(&c.admin, "admin", false, "cluster: serve /admin/peers and /admin/nodes on --http, through which a node started with --join is added and parkway remove-node removes one")
	f.StringVar(&c.clusterID, "cluster-id", "", "cluster: the cluster's id, as its certificates name it")
	f.StringVar(&c.tlsCert, "tls-cert", "", "cluster: this node's certificate chain (PEM)")
	f.StringVar(&c.tlsKey, "tls-key", "", "cluster: this node's private key (PEM)")
	f.StringVar(&c.tlsCA, "tls-ca", "", "cluster: the CAs that sign the members' certificates (PEM)")
	f.BoolVar(&c.plaintext, "insecure-plaintext", false, "cluster: no TLS; anyone who can reach --listen can act as any member")
	f.StringVar(&c.httpAddr, "http", "127.0.0.1:9470", "address of /metrics, /healthz and /readyz (empty: none)")
	f.StringVar(&c.kafkaAddr, "kafka", "", "address of a Kafka protocol listener (empty: none)")
	f.StringVar(&c.kafkaAdvertised, "kafka-advertised", "", "the host:port Kafka clients are told to connect to (empty: the bound address)")
	f.StringVar(&c.kafkaBrokers, "kafka-brokers", "", "cluster: every member's advertised Kafka address, this one included: id=host:port,…")
	f.IntVar(&c.kafkaPartitions, "kafka-partitions", 1, "partitions of a topic a Kafka client auto-creates")
	f.StringVar(&c.fsync, "fsync", "always", "default fsync policy of topics that set none: always, interval or never")
	f.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown may take before the process exits with 1")
	f.StringVar(&c.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	f.StringVar(&c.logFormat, "log-format", "text", "text or json")
	if err := applyEnv(f.FlagSet, os.LookupEnv); err != nil {
		return err
	}
	pos, err := f.parse(args, stdout)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("serve: unexpected argument %q (the data directory is --data-dir)", pos[0])
	}
	cfg, err := c.nodeConfig()
	if err != nil {
		return err
	}
	logger, err := c.logger(stderr)
	if err != nil {
		return err
	}
	cfg.Logger = logger.Named("node")
	kcfg, err := c.kafkaConfig(logger.Named("kafka"))
	if err != nil {
		return err
	}
	return serve(c, cfg, kcfg, logger)
}

// applyEnv sets every flag of fs whose PARKWAY_ variable is set, before
// the command line is parsed (which then wins).
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(fl *flag.Flag) {
		name := "PARKWAY_" + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
		if v, ok := lookup(name); ok && err == nil {
			if serr := fs.Set(fl.Name, v); serr != nil {
				err = usageErr("serve: %s=%q: %v", name, v, serr)
			}
		}
	})
	return err
}

func (c *serveConfig) logger(w io.Writer) (hclog.Logger, error) {
	level := hclog.LevelFromString(c.logLevel)
	if level == hclog.NoLevel {
		return nil, usageErr("serve: --log-level %q: want trace, debug, info, warn or error", c.logLevel)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return nil, usageErr("serve: --log-format %q: want text or json", c.logFormat)
	}
	return hclog.New(&hclog.LoggerOptions{Name: "parkway", Level: level, Output: w, JSONFormat: c.logFormat == "json"}), nil
}

// nodeConfig checks the flags and builds the node's configuration (the
// cluster's bus is made by serve).
func (c *serveConfig) nodeConfig() (parkway.Config, error) {
	cfg := parkway.Config{DataDir: c.dataDir, Shards: c.shards}
	switch c.fsync {
	case "always":
		cfg.Fsync = parkway.FsyncAlways
	case "interval":
		cfg.Fsync = parkway.FsyncInterval
	case "never":
		cfg.Fsync = parkway.FsyncNever
	default:
		return cfg, usageErr("serve: --fsync %q: want always, interval or never", c.fsync)
	}
	if c.shards < 0 {
		return cfg, usageErr("serve: --shards %d is negative", c.shards)
	}
	if c.shutdownTimeout <= 0 {
		return cfg, usageErr("serve: --shutdown-timeout must be positive")
	}
	cluster := c.nodeID != 0 || c.listen != "" || c.peers != "" || c.join
	if !cluster {
		if c.admin || c.joinVia != "" {
			return cfg, usageErr("serve: --admin and --join-via are for a cluster member (--node-id, --listen, --peers)")
		}
		if c.clusterID != "" || c.tlsCert != "" || c.tlsKey != "" || c.tlsCA != "" || c.plaintext {
			return cfg, usageErr("serve: TLS and --cluster-id are for a cluster member (--node-id, --listen, --peers)")
		}
		return cfg, nil
	}
	switch {
	case c.nodeID == 0:
		return cfg, usageErr("serve: a cluster member needs --node-id")
	case c.listen == "":
		return cfg, usageErr("serve: a cluster member needs --listen")
	case c.peers == "":
		return cfg, usageErr("serve: a cluster member needs --peers")
	case c.plaintext == (c.tlsCert != "" || c.tlsKey != "" || c.tlsCA != ""):
		return cfg, usageErr("serve: a cluster member needs TLS (--cluster-id, --tls-cert, --tls-key, --tls-ca) or --insecure-plaintext, not both")
	case !c.plaintext && (c.clusterID == "" || c.tlsCert == "" || c.tlsKey == "" || c.tlsCA == ""):
		return cfg, usageErr("serve: TLS needs all of --cluster-id, --tls-cert, --tls-key and --tls-ca")
	}
	if _, err := parsePeers(c.peers, c.nodeID); err != nil {
		return cfg, err
	}
	switch {
	case c.join && c.joinVia == "":
		return cfg, usageErr("serve: --join needs --join-via (the HTTP addresses of members running with --admin)")
	case !c.join && c.joinVia != "":
		return cfg, usageErr("serve: --join-via is for a node started with --join")
	case c.admin && c.httpAddr == "":
		return cfg, usageErr("serve: --admin needs --http")
	}
	if c.joinVia != "" {
		if _, err := parseJoinVia(c.joinVia); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// parsePeers parses id=host:port,… ; self must be among them.
func parsePeers(s string, self uint64) (map[transport.NodeID]string, error) {
	return parseIDAddrs("--peers", s, self)
}

// parseIDAddrs parses the flag's id=host:port,… ; self must be among them.
func parseIDAddrs(flag, s string, self uint64) (map[transport.NodeID]string, error) {
	out := map[transport.NodeID]string{}
	for _, p := range strings.Split(s, ",") {
		idStr, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
		id, err := strconv.ParseUint(idStr, 10, 64)
		if !ok || err != nil || id == 0 || addr == "" {
			return nil, usageErr("serve: %s entry %q: want id=host:port with a non-zero id", flag, p)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, usageErr("serve: %s entry %q: %v", flag, p, err)
		}
		if _, dup := out[transport.NodeID(id)]; dup {
			return nil, usageErr("serve: %s names node %d twice", flag, id)
		}
		out[transport.NodeID(id)] = addr
	}
	if _, ok := out[transport.NodeID(self)]; !ok {
		return nil, usageErr("serve: %s must include this node (%d)", flag, self)
	}
	return out, nil
}

// kafkaConfig checks the Kafka flags and builds the listener's
// configuration; nil without --kafka.
func (c *serveConfig) kafkaConfig(log hclog.Logger) (*kafka.Config, error) {
	if c.kafkaAddr == "" {
		if c.kafkaAdvertised != "" || c.kafkaBrokers != "" {
			return nil, usageErr("serve: --kafka-advertised and --kafka-brokers need --kafka")
		}
		return nil, nil
	}
	kc := &kafka.Config{Addr: c.kafkaAddr, AdvertisedAddr: c.kafkaAdvertised, BrokerID: int32(c.nodeID),
		DefaultPartitions: c.kafkaPartitions, Logger: log}
	if c.kafkaBrokers != "" {
		if c.nodeID == 0 {
			return nil, usageErr("serve: --kafka-brokers is for a cluster member (--node-id)")
		}
		brokers, err := parseIDAddrs("--kafka-brokers", c.kafkaBrokers, c.nodeID)
		if err != nil {
			return nil, err
		}
		kc.Brokers = map[int32]string{}
		for id, addr := range brokers {
			if id > math.MaxInt32 {
				return nil, usageErr("serve: --kafka-brokers: node id %d is beyond a Kafka broker id", id)
			}
			kc.Brokers[int32(id)] = addr
		}
		if c.nodeID > math.MaxInt32 {
			return nil, usageErr("serve: --kafka-brokers: node id %d is beyond a Kafka broker id", c.nodeID)
		}
	} else if c.nodeID != 0 {
		return nil, usageErr("serve: a cluster member with --kafka needs --kafka-brokers (every member's advertised Kafka address)")
	}
	if err := kc.Validate(); err != nil {
		return nil, usageErr("serve: %v", err)
	}
	return kc, nil
}

// tlsConfig loads the TLS files.
func (c *serveConfig) tlsConfig() (*transport.TLSConfig, error) {
	cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	pem, err := os.ReadFile(c.tlsCA)
	if err != nil {
		return nil, fmt.Errorf("TLS CAs: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS CAs: no PEM certificate in %s", c.tlsCA)
	}
	return &transport.TLSConfig{ClusterID: c.clusterID, Certificate: &cert, CAs: pool}, nil
}

// serve opens the node, serves HTTP, and shuts down on a signal.
func serve(c serveConfig, cfg parkway.Config, kcfg *kafka.Config, log hclog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fail := func(format string, args ...any) error {
		err := fmt.Errorf(format, args...)
		log.Error("failed", "error", err)
		return &exitError{code: exitProblems, err: errQuiet}
	}
	var bus *transport.TCPBus
	if c.nodeID != 0 {
		peers, _ := parsePeers(c.peers, c.nodeID)
		opts := transport.TCPOptions{InsecurePlaintext: c.plaintext}
		if !c.plaintext {
			t, err := c.tlsConfig()
			if err != nil {
				return fail("%w", err)
			}
			opts.TLS = t
		}
		var err error
		bus, err = transport.ListenTCP(transport.NodeID(c.nodeID), c.listen, peers, opts)
		if err != nil {
			return fail("listen on %s: %w", c.listen, err)
		}
		ids := make([]transport.NodeID, 0, len(peers))
		for id := range peers {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		cfg.Cluster = &parkway.ClusterConfig{ID: transport.NodeID(c.nodeID), Peers: ids, Join: c.join, Bus: bus}
	}
	if cfg.DataDir == "" {
		log.Warn("no --data-dir: everything is kept in memory and lost when the process exits")
	}
	start := time.Now()
	node, err := parkway.Open(cfg)
	if err != nil {
		if cfg.Cluster != nil {
			_ = cfg.Cluster.Bus.Close()
		}
		return fail("open the node: %w", err)
	}
	closed := make(chan error, 1)
	closeNode := func() { closed <- node.Close() }
	reg := prometheus.NewRegistry()
	reg.MustRegister(node.Metrics(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var srv *http.Server
	var closing atomic.Bool
	httpErr := make(chan error, 1)
	if c.httpAddr != "" {
		ln, err := net.Listen("tcp", c.httpAddr)
		if err != nil {
			go closeNode()
			<-closed
			return fail("listen on %s: %w", c.httpAddr, err)
		}
		var admin *adminAPI
		if c.admin {
			admin = &adminAPI{node: node, bus: bus, log: log.Named("admin")}
		}
		srv = &http.Server{Handler: httpHandler(node, reg, &closing, admin), ReadHeaderTimeout: 10 * time.Second}
		go func() { httpErr <- srv.Serve(ln) }()
		c.httpAddr = ln.Addr().String()
	}
	var ksrv *kafka.Server
	kafkaErr := make(chan error, 1)
	if kcfg != nil {
		ln, err := net.Listen("tcp", kcfg.Addr)
		if err == nil {
			ksrv, err = kafka.NewServer(node, *kcfg)
			if err != nil {
				ln.Close()
			}
		}
		if err != nil {
			if srv != nil {
				_ = srv.Close()
			}
			go closeNode()
			<-closed
			return fail("kafka listener on %s: %w", kcfg.Addr, err)
		}
		reg.MustRegister(ksrv.Metrics())
		c.kafkaAddr = ln.Addr().String()
		go func() { kafkaErr <- ksrv.Serve(ln) }()
	}
	log.Info("serving", "data_dir", c.dataDir, "node_id", c.nodeID, "shards", node.Admin().Shards(), "http", c.httpAddr,
		"cluster_listen", c.listen, "kafka", c.kafkaAddr, "opened_in", time.Since(start).Round(time.Millisecond).String())

	joined := make(chan struct{})
	if c.join {
		via, _ := parseJoinVia(c.joinVia)
		go func() {
			defer close(joined)
			joinCluster(ctx, transport.NodeID(c.nodeID), c.listen, via, log.Named("join"))
		}()
	} else {
		close(joined)
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", c.shutdownTimeout.String())
	case err := <-httpErr:
		runErr = fmt.Errorf("http server: %w", err)
		log.Error("http server stopped; shutting down", "error", err)
	case err := <-kafkaErr:
		runErr = fmt.Errorf("kafka listener: %w", err)
		log.Error("kafka listener stopped; shutting down", "error", err)
	}
	stop() // a second signal kills the process: it also ends the join
	<-joined
	closing.Store(true)
	deadline := time.NewTimer(c.shutdownTimeout)
	defer deadline.Stop()
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if ksrv != nil {
		// Drain: requests in flight are answered (a produce acknowledged
		// or refused, never cut off mid-way), then the node closes.
		if err := ksrv.Shutdown(sctx); err != nil {
			log.Warn("closing the kafka listener", "error", err)
		}
	}
	if srv != nil {
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("closing the http server", "error", err)
		}
	}
	go closeNode()
	select {
	case err := <-closed:
		if err != nil {
			return fail("close the node: %w", err)
		}
	case <-deadline.C:
		return fail("the node did not close within %v", c.shutdownTimeout)
	}
	if runErr != nil {
		return fail("%w", runErr)
	}
	log.Info("stopped")
	return nil
}

// httpHandler serves /metrics, /healthz and /readyz; /healthz fails once
// closing is set (the shutdown has begun).
// admin, when set, adds the membership calls (see adminAPI).
func httpHandler(node *parkway.Node, reg *prometheus.Registry, closing *atomic.Bool, admin *adminAPI) http.Handler {
	mux := http.NewServeMux()
	if admin != nil {
		mux.HandleFunc("POST /admin/peers", admin.addPeer)
		mux.HandleFunc("POST /admin/nodes", admin.addNode)
		mux.HandleFunc("DELETE /admin/nodes/{id}", admin.removeNode)
		mux.HandleFunc("DELETE /admin/peers/{id}", admin.removePeer)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if closing.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := node.Ready(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}
