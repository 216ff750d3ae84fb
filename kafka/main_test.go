package kafka

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/parkway-io/parkway"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// Server, Node and client a test starts must be closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every call a test makes: a safety net, never an
// assertion.
const testTimeout = 30 * time.Second

func ctxFor(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// fixture is a node with a listener on a loopback port.
type fixture struct {
	node *parkway.Node
	srv  *Server
	addr string
}

// serve opens an in-memory node and serves cfg on 127.0.0.1:0; both
// close when the test ends, the server first.
func serve(t testing.TB, cfg Config) *fixture {
	t.Helper()
	node, err := parkway.Open(parkway.Config{Shards: 2})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { // runs after the listener's (cleanups run last first)
		if err := node.Close(); err != nil {
			t.Errorf("node Close: %v", err)
		}
	})
	if testing.Verbose() && cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: os.Stderr})
	}
	l := listen(t, node, cfg)
	t.Cleanup(func() {
		l.stop()
		if n := testutil.ToFloat64(l.srv.metrics.closed.WithLabelValues("panic")); n != 0 {
			t.Errorf("%v connections were closed by a panic", n)
		}
	})
	return &fixture{node: node, srv: l.srv, addr: l.addr}
}

// listening is a Server serving on a loopback port of a node the test
// owns.
type listening struct {
	t      testing.TB
	srv    *Server
	addr   string
	served chan error
	once   sync.Once
	err    error // what Serve returned, once it did
}

// listen serves cfg on node at 127.0.0.1:0 until stop, which also runs
// when the test ends (before the cleanups registered earlier, such as
// the node's close).
func listen(t testing.TB, node *parkway.Node, cfg Config) *listening {
	t.Helper()
	srv, err := NewServer(node, cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	l := &listening{t: t, srv: srv, addr: nl.Addr().String(), served: make(chan error, 1)}
	go func() { l.served <- srv.Serve(nl) }()
	t.Cleanup(l.stop)
	return l
}

// serveErr waits for Serve to return and returns what it returned.
func (l *listening) serveErr() error {
	l.once.Do(func() { l.err = <-l.served })
	return l.err
}

// stop closes the server and checks that Serve returned
// ErrServerClosed. It may be called again.
func (l *listening) stop() {
	if err := l.srv.Close(); err != nil {
		l.t.Errorf("Close: %v", err)
	}
	if err := l.serveErr(); !errors.Is(err, ErrServerClosed) {
		l.t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
}

// client returns a franz-go client of the fixture, closed at test end.
func (f *fixture) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.addr)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consume polls cl until it has n records or the test's deadline.
func consume(t testing.TB, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	ctx := ctxFor(t)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(out), n)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, p, err)
		})
		out = append(out, fs.Records()...)
	}
	return out
}

// fetchRequest is a Fetch v12, outside any fetch session, of partition 0
// of topic from offset, the partition's budget and the response's
// budget bytes, not waiting; a caller sets any other field it needs.
func fetchRequest(topic string, offset int64, budget int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes = 12, budget
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes = offset, budget
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	return req
}
