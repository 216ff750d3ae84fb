package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway"
)

// Server serves the Kafka protocol on a parkway Node. It is safe for
// concurrent use; Close and Shutdown are idempotent and wait for every
// goroutine the Server started.
type Server struct {
	node    *parkway.Node
	cfg     Config
	log     hclog.Logger
	metrics *serverMetrics
	budget  *budget
	zstd    *zstd.Decoder
	topics  *topicCache
	pids    *producers
	groups  *coordinator
	// coordMu guards the cached handle and partition count of the
	// internal topic whose partitions' leaders coordinate the groups (in
	// a cluster; cluster.go).
	// loadMu makes coordinator partition loads one at a time
	// (groupstate.go).
	loadMu sync.Mutex
	// logMu is shared by group log writes and taken alone by a
	// compaction (groupstate.go, compact.go).
	logMu sync.RWMutex
	// cgMu are the consumer groups' locks (cgLock, consumerapi.go);
	// cgViews[i] holds the subscribed topics of stripe i's groups as
	// their last heartbeats resolved them, guarded by cgMu[i].
	cgMu    [cgStripes]sync.Mutex
	cgViews [cgStripes]map[string]*cgView
	coordMu sync.Mutex
	coordT  parkway.Topic
	coordN  int
	// sessions are the fetch sessions (KIP-227) of every connection.
	sessions *fetchSessions
	// bufs recycles the large buffers of fetch responses; inflateBufs
	// those compressed produce batches inflate into (apart, so that
	// neither kind's sizes are lent to the other).
	bufs        bufPool
	inflateBufs bufPool
	// frames recycles the frames of produce requests, which nothing
	// references once the produce has decoded them, or, a batch kept as
	// sent, once the node has copied it (readFrame).
	frames bufPool
	// kept is set once the node kept a batch's bytes instead of copying
	// them (ProduceAsyncGive: it stores in memory). From then on batches
	// inflate into buffers of their own size, never a pooled one whose
	// spare capacity the partition would keep alive with them, and none
	// is recycled; until then, and on a node that copies, the inflate
	// buffers are lent by the pool and recycled after the acks.
	kept atomic.Bool
	// dead are the brokers of Config.Brokers whose nodes this node
	// judges dead (Cluster.State), as the janitor last read them: Metadata
	// leaves them out (liveBrokers). Nil until the first read.
	dead atomic.Pointer[map[int32]bool]
	// isr are the partitions' in-sync replica sets Metadata answers, in
	// a cluster, read by the refresher (isr.go); isrWake asks it to read
	// at once.
	isr     *isrTable
	isrWake chan struct{}

	// ctx is cancelled by Close: it ends the work of every request in
	// flight (waiting fetches, produces waiting for their acks).
	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	listeners  map[net.Listener]struct{}
	conns      map[*conn]struct{}
	advertised string // host:port announced; set from the first listener when not configured
	draining   bool   // Shutdown or Close began: accept no more
	wg         sync.WaitGroup
	closeOnce  sync.Once
	done       chan struct{} // closed once Close has finished

	// The group coordinator's janitor (session expiry, rebalance
	// deadlines) and, in a cluster, the in-sync replica refresher run
	// from the first Serve until Shutdown or Close.
	janitorOnce sync.Once
	janitorDone chan struct{} // closed when it returned; nil if it never started
	isrDone     chan struct{} // closed when the refresher returned; nil if it never started
}

// NewServer validates cfg and returns a Server for node. It starts
// nothing: Serve or ListenAndServe does. The node must outlive the
// Server (close the Server first).
func NewServer(node *parkway.Node, cfg Config) (*Server, error) {
	if node == nil {
		return nil, fmt.Errorf("%w: nil node", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = node.Logger()
	}
	cfg = cfg.withDefaults()
	// A zstd frame states its window; WithDecoderMaxMemory refuses a frame
	// that would inflate past the request limit (a zip bomb) before the
	// memory is taken. Concurrency 1: DecodeAll runs on the caller's
	// goroutine, the decoder starts none of its own.
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(uint64(cfg.MaxRequestSize)), zstd.WithDecoderMaxWindow(uint64(max(cfg.MaxRequestSize, zstd.MinWindowSize))))
	if err != nil {
		return nil, fmt.Errorf("kafka: zstd decoder: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		node: node, cfg: cfg, log: cfg.Logger.Named("kafka"),
		metrics: newServerMetrics(cfg.MetricsLabels),
		budget:  newBudget(cfg.MaxInflightBytes),
		zstd:    dec,
		ctx:     ctx, cancel: cancel,
		listeners:  map[net.Listener]struct{}{},
		conns:      map[*conn]struct{}{},
		advertised: cfg.AdvertisedAddr,
		done:       make(chan struct{}),
		isr:        newISRTable(),
		isrWake:    make(chan struct{}, 1),
	}
	s.topics = newTopicCache(node, cfg.Stream)
	s.pids = newProducers(cfg.Brokers != nil)
	s.groups = newCoordinator(cfg.GroupHeartbeatInterval, cfg.GroupSessionTimeout)
	s.sessions = newFetchSessions()
	return s, nil
}

// Metrics returns the Server's Prometheus collectors; register them on the
// host's registry beside the node's.
func (s *Server) Metrics() prometheus.Collector { return s.metrics }

// ListenAndServe listens on Config.Addr (with TLS when Config.TLS is set)
// and serves until Shutdown or Close, which make it return
// ErrServerClosed.
func (s *Server) ListenAndServe() error {
	l, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

// Serve accepts connections on l and serves each until Shutdown or Close,
// which make it return ErrServerClosed; it closes l. With Config.TLS set,
// connections are wrapped in TLS. Serve may be called on several
// listeners at once.
func (s *Server) Serve(l net.Listener) error {
	if s.cfg.TLS != nil {
		l = tls.NewListener(l, s.cfg.TLS)
	}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		_ = l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	if s.advertised == "" {
		s.advertised = advertise(l.Addr())
	}
	s.wg.Add(1) // this Serve; Close waits for it to leave
	s.janitorOnce.Do(func() {
		s.janitorDone = make(chan struct{})
		go func() {
			defer close(s.janitorDone)
			s.runJanitor(s.ctx)
		}()
		if s.cfg.Brokers != nil {
			s.isrDone = make(chan struct{})
			go func() {
				defer close(s.isrDone)
				s.runISR(s.ctx, s.isrWake)
			}()
		}
	})
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		_ = l.Close()
	}()

	backoff := 5 * time.Millisecond
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isDraining() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Anything else (out of descriptors, a connection reset
			// before accept) is worth another try after a pause.
			s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return ErrServerClosed
			}
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		s.accept(nc)
	}
}

// accept admits nc under the connection limit and starts serving it.
func (s *Server) accept(nc net.Conn) {
	s.mu.Lock()
	switch {
	case s.draining:
		s.mu.Unlock()
		_ = nc.Close()
		return
	case len(s.conns) >= s.cfg.MaxConnections:
		s.mu.Unlock()
		s.metrics.refused.WithLabelValues("limit").Inc()
		s.log.Debug("connection refused: at the connection limit", "remote", nc.RemoteAddr(), "limit", s.cfg.MaxConnections)
		_ = nc.Close()
		return
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.metrics.connections.Inc()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.metrics.connections.Dec()
	}()
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// Shutdown stops accepting, lets every connection finish the request it is
// serving (no new request is read), and returns once all have closed; if
// ctx ends first it closes the rest as Close does and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for l := range s.listeners {
		_ = l.Close()
	}
	for c := range s.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	waited := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		s.finish()
		return nil
	case <-ctx.Done():
		_ = s.Close()
		<-waited
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once, ending the
// requests in flight, and waits for every goroutine the Server started. A
// produce in flight may or may not have been appended, as when a client's
// connection breaks. Close is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	s.draining = true
	for l := range s.listeners {
		_ = l.Close()
	}
	for c := range s.conns {
		c.abort()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.finish()
	return nil
}

// finish releases what outlives the goroutines, once.
func (s *Server) finish() {
	s.closeOnce.Do(func() {
		s.cancel()
		s.mu.Lock()
		s.janitorOnce.Do(func() {}) // none starts from now on
		janitor, isr := s.janitorDone, s.isrDone
		s.mu.Unlock()
		if janitor != nil {
			<-janitor
		}
		if isr != nil {
			<-isr
		}
		s.zstd.Close()
		close(s.done)
	})
}

// advertisedAddr returns the host and port announced to clients.
func (s *Server) advertisedAddr() (string, int32) {
	s.mu.Lock()
	addr := s.advertised
	s.mu.Unlock()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "127.0.0.1", 9092
	}
	p, _ := strconv.Atoi(port)
	return host, int32(p)
}

// advertise turns a listener's address into one a client can dial: an
// unspecified IP (listening on every interface) becomes 127.0.0.1.
func advertise(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port))
}

// budget bounds the request bytes held over all connections. A request
// larger than the whole budget never reaches it: MaxRequestSize is at most
// MaxInflightBytes (Validate).
type budget struct {
	mu    sync.Mutex
	free  int64
	wake  chan struct{} // closed and replaced on every release
	total int64
}

func newBudget(total int64) *budget {
	return &budget{free: total, total: total, wake: make(chan struct{})}
}

// acquire takes n bytes, waiting while they are not free, until ctx ends.
func (b *budget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.free += n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}
