package kafka

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxPipelined bounds the requests of one connection read ahead of their
// responses (Kafka clients pipeline up to 5 produces per connection by
// default). A connection past it is not read until a response is written.
const maxPipelined = 16

// connBufferSize is each direction's buffer: what an idle connection
// costs besides its two goroutines (16 KiB for both, so 1,024 idle
// connections hold 16 MiB).
const connBufferSize = 8 << 10

// conn serves one client connection with two goroutines: the reader reads,
// decodes and starts each request in arrival order; the writer waits for
// each response in the same order and writes it. Responses are thus in
// request order, as the protocol requires, while produces are pipelined.
type conn struct {
	s      *Server
	nc     net.Conn
	ctx    context.Context // ends when the connection is aborted or the server closes
	cancel context.CancelFunc

	remote string // "/ip", as Kafka reports a client host
	// budget bounds the request bytes this connection holds at once (its
	// share of the server's), so one client pipelining large requests
	// cannot take the whole of MaxInflightBytes from the others.
	budget    *budget
	sess      *session
	stopping  atomic.Bool // Shutdown: read no further request
	abortOnce sync.Once
}

// pending is one request between the reader and the writer.
type pending struct {
	hdr   reqHeader
	start time.Time
	// resp is the response when it is ready at once; otherwise wait
	// computes it (a produce waiting for its acks, a fetch waiting for
	// records) on the writer's goroutine.
	resp kmsg.Response
	wait func(ctx context.Context) kmsg.Response
	// noResponse: acks=0, the client expects none.
	noResponse bool
	// remote is the client's address, as DescribeGroups reports it.
	remote string
	// held is the budget the request's bytes took, released once the
	// response is computed (produced records are referenced until their
	// append).
	held int64
	// lent: record batches of the request are kept pointing into its
	// frame until the node copies them (a produce to a node that keeps
	// batches as sent), so the frame is not free (frameFree); once the
	// response is computed it is unset if the node copied every one.
	// frame is then the frame to give back to the pool, if pooled.
	lent  bool
	frame []byte
}

// frameFree reports whether nothing of the request points into its
// frame any longer: always after process but for a produce whose batches
// are lent to the node, which frees it once its response is computed and
// every batch lent was copied.
func (p *pending) frameFree() bool { return !p.lent }

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(s.ctx)
	remote := "/"
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		remote += a.IP.String()
	}
	return &conn{s: s, nc: nc, ctx: ctx, cancel: cancel, remote: remote, sess: s.newSession(),
		budget: newBudget(connBudget(s.cfg))}
}

// connBudget is what one connection may hold of request bodies: four
// requests at the limit, within the server's total.
func connBudget(cfg Config) int64 {
	return min(4*int64(cfg.MaxRequestSize), cfg.MaxInflightBytes)
}

// acquire takes n bytes of the connection's budget, then of the server's.
func (c *conn) acquire(n int64) error {
	if err := c.budget.acquire(c.ctx, n); err != nil {
		return err
	}
	if err := c.s.budget.acquire(c.ctx, n); err != nil {
		c.budget.release(n)
		return err
	}
	return nil
}

// release gives n bytes back to both budgets.
func (c *conn) release(n int64) {
	c.s.budget.release(n)
	c.budget.release(n)
}

// stopReading makes the reader stop before its next request (Shutdown).
func (c *conn) stopReading() {
	c.stopping.Store(true)
	_ = c.nc.SetReadDeadline(time.Now())
}

// abort closes the connection at once (Close).
func (c *conn) abort() {
	c.abortOnce.Do(func() {
		c.cancel()
		_ = c.nc.Close()
	})
}

// serve runs the connection until the client leaves, a request is refused
// or the server stops, then closes it.
func (c *conn) serve() {
	queue := make(chan *pending, maxPipelined)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop(queue)
	}()
	c.readLoop(queue)
	close(queue)
	<-writerDone
	c.abort()
}

// closeFor logs and counts why the server closed the connection.
func (c *conn) closeFor(reason string, err error) {
	c.s.metrics.closed.WithLabelValues(reason).Inc()
	c.s.log.Debug("closing connection", "remote", c.nc.RemoteAddr(), "reason", reason, "err", err)
}

// recovered turns a panic on one of the connection's goroutines into a
// closed connection: a fault serving one client never takes the host
// process down.
func (c *conn) recovered(where string) {
	if v := recover(); v != nil {
		c.s.metrics.closed.WithLabelValues("panic").Inc()
		c.s.log.Error("panic serving a connection; closing it", "where", where, "remote", c.nc.RemoteAddr(), "panic", v, "stack", string(debug.Stack()))
		c.abort()
	}
}

func (c *conn) readLoop(queue chan<- *pending) {
	defer c.recovered("reader")
	if tc, ok := c.nc.(*tls.Conn); ok {
		// The handshake is bounded like a request: a client that
		// connects and never completes it is closed.
		_ = c.nc.SetDeadline(time.Now().Add(c.s.cfg.RequestTimeout))
		if err := tc.HandshakeContext(c.ctx); err != nil {
			c.closeFor("tls", err)
			return
		}
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	r := bufio.NewReaderSize(c.nc, connBufferSize)
	var size [4]byte
	for !c.stopping.Load() {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.IdleTimeout))
		if _, err := io.ReadFull(r, size[:]); err != nil {
			if !errors.Is(err, io.EOF) && !c.stopping.Load() && c.ctx.Err() == nil {
				c.closeFor("read", err)
			}
			return
		}
		// The rest of the request must arrive within the request timeout:
		// a client trickling bytes holds its budget no longer than that.
		_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.RequestTimeout))
		n := int32(binary.BigEndian.Uint32(size[:]))
		if n < 10 || int(n) > c.s.cfg.MaxRequestSize {
			c.closeFor("size", fmt.Errorf("%w: %d bytes (limit %d)", errFrameSize, n, c.s.cfg.MaxRequestSize))
			return
		}
		if err := c.acquire(int64(n)); err != nil {
			return
		}
		frame, pooled, err := c.readFrame(r, int(n))
		if err != nil {
			c.release(int64(n))
			c.closeFor("read", err)
			return
		}
		// The key is the frame's first two bytes (n is at least 10): an
		// unknown one is counted as "unknown", so a client cannot grow
		// the series.
		c.s.metrics.bytesIn.WithLabelValues(apiName(int16(binary.BigEndian.Uint16(frame)))).Add(float64(n) + 4)
		p, err := c.s.process(c.ctx, frame, c.remote, c.sess)
		switch {
		case !pooled:
		case err == nil && !p.frameFree():
			p.frame = frame // given back by the writer (frameFree)
		default:
			c.s.frames.put(frame)
		}
		if err != nil {
			c.release(int64(n))
			c.closeFor(refusal(err), err)
			return
		}
		p.held = int64(n)
		select {
		case queue <- p:
		case <-c.ctx.Done():
			c.release(int64(n))
			return
		}
	}
}

// readFrame reads a request frame of n bytes. A produce's is read into
// a buffer lent by the server's pool (pooled), which the caller gives
// back once nothing of the request references it (pending.frameFree):
// the produce decodes its batches before process returns, and what it
// keeps of them it copies (records decoded into messages), or the node
// copies before the acks (a batch kept as sent, into the partition's
// memory: keptBatch.Own), so nothing references the frame after
// (TestProduceFrameReusable). Without the pool every produce
// allocated and zeroed its frame, on the hot path of a busy producer.
// Any other request is read into a frame of its own, since what it
// decodes may point into the frame for as long as the request's effects
// live (a group member's protocol metadata, for one), and a pooled
// buffer lent to it would be kept whole.
func (c *conn) readFrame(r *bufio.Reader, n int) (frame []byte, pooled bool, err error) {
	key, err := r.Peek(2)
	if err != nil {
		return nil, false, err
	}
	if int16(binary.BigEndian.Uint16(key)) == int16(kmsg.Produce) {
		frame, pooled = c.s.frames.get(), true
	}
	switch {
	case cap(frame) >= n:
		frame = frame[:n]
	case pooled:
		// Room for at least what the pool keeps, so that it keeps it.
		frame = make([]byte, n, max(n, minPooled))
	default:
		frame = make([]byte, n)
	}
	if _, err := io.ReadFull(r, frame); err != nil {
		return nil, false, err
	}
	return frame, pooled, nil
}

func refusal(err error) string {
	switch {
	case errors.Is(err, errUnknownKey):
		return "unknown_key"
	case errors.Is(err, errUnsupportedVersion):
		return "unsupported_version"
	case errors.Is(err, errUnauthenticated):
		return "unauthenticated"
	default:
		return "malformed"
	}
}

func (c *conn) writeLoop(queue <-chan *pending) {
	// A panic here closes the connection; the reader then fails and
	// closes the queue, which the deferred drain empties, so neither side
	// waits for the other.
	defer func() {
		for p := range queue {
			c.release(p.held)
		}
	}()
	defer c.recovered("writer")
	w := bufio.NewWriterSize(c.nc, connBufferSize)
	var buf []byte
	failed := false
	for p := range queue {
		resp := p.finish(c.ctx)
		c.release(p.held)
		p.held = 0
		if p.frame != nil && p.frameFree() {
			c.s.frames.put(p.frame)
		}
		p.frame = nil
		api := apiName(p.hdr.key)
		c.s.metrics.requests.WithLabelValues(api).Inc()
		if p.noResponse || failed {
			continue
		}
		fetch, _ := resp.(*kmsg.FetchResponse)
		if fetch != nil && cap(buf) < fetchResponseBound(fetch) {
			buf = c.s.bufs.get()
		}
		buf = appendResponse(buf[:0], p.hdr, resp)
		if fetch != nil {
			// Its batches are copied into buf: nothing reads them again.
			c.s.bufs.recycleFetch(fetch)
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.RequestTimeout))
		if _, err := w.Write(buf); err != nil {
			failed = true
			c.abort()
			continue
		}
		c.s.metrics.bytesOut.WithLabelValues(api).Add(float64(len(buf)))
		// Flush when nothing else is ready, so pipelined responses share
		// a write.
		if len(queue) == 0 {
			if err := w.Flush(); err != nil {
				failed = true
				c.abort()
				continue
			}
		}
		c.s.metrics.latency.WithLabelValues(api).Observe(time.Since(p.start).Seconds())
		if cap(buf) > 1<<20 {
			// Do not keep one large fetch's buffer for the connection's
			// life: the next large fetch, on any connection, takes it.
			c.s.bufs.put(buf)
			buf = nil
		}
	}
	if !failed {
		_ = w.Flush()
	}
}

// finish returns the request's response, computing it if it is not ready.
func (p *pending) finish(ctx context.Context) kmsg.Response {
	if p.resp == nil && p.wait != nil {
		p.resp = p.wait(ctx)
	}
	return p.resp
}

// process decodes one request frame and starts serving it. An error means
// the connection must be closed (see parseRequest).
func (s *Server) process(ctx context.Context, frame []byte, remote string, sess *session) (*pending, error) {
	hdr, req, err := parseRequest(frame)
	p := &pending{hdr: hdr, start: time.Now(), remote: remote}
	if err != nil {
		if errors.Is(err, errUnsupportedVersion) && hdr.key == int16(kmsg.ApiVersions) {
			p.hdr.version, p.hdr.flexible = 0, false
			p.resp = apiVersionsResponse(0, errUnsupportedVersionCode)
			s.metrics.countError(hdr.key, errUnsupportedVersionCode)
			return p, nil
		}
		return nil, err
	}
	if !sess.mayServe(hdr.key) {
		return nil, fmt.Errorf("%w: %s", errUnauthenticated, apiName(hdr.key))
	}
	sess.mu.Lock()
	principal := sess.principal
	sess.mu.Unlock()
	s.dispatch(withPrincipal(ctx, principal), req, p, sess)
	return p, nil
}
