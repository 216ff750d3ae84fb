package host

import (
	"encoding/binary"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/transport"
)

// A peer whose heartbeats stop while its raft frames keep arriving is
// alive and serving: whatever it sends is proof of life, not only its
// heartbeats (issue 33: a node whose heartbeat sender ran late was
// declared dead, and a third of all groups re-elected). A peer that
// sends nothing at all is declared dead as before.
func TestLivenessRaftFramesKeepASilentBeaterAlive(t *testing.T) {
	tr := newManualTrio(t)
	tr.tick(20)
	live := tr.engines[0].cl.live
	if !live.alive(2) || !live.alive(3) {
		t.Fatal("peers dead before the test")
	}
	// Node 3's metadata driver stops (no heartbeats, nothing it would
	// answer), but its shards keep sending node 1 partition raft frames.
	frame := func() transport.Message {
		m := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(3)), To: new(uint64(1)), Term: new(uint64(1))}
		payload, err := appendRaft(binary.LittleEndian.AppendUint64(nil, 1), m)
		if err != nil {
			t.Fatal(err)
		}
		return transport.Message{From: 3, To: 1, Kind: KindPartitionRaft, Group: 7, Payload: payload}
	}
	for range 4 * live.timeout {
		for _, e := range tr.engines[:2] {
			if err := e.TickMetadata(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.engines[0].Deliver(frame()); err != nil {
			t.Fatal(err)
		}
		tr.deliverExcept(3)
		if !live.alive(3) {
			t.Fatalf("node 3, whose raft frames arrive every tick, declared dead after %d ticks without its heartbeats", live.own.Load())
		}
	}
	// Then nothing at all: dead once the timeout passes.
	for range live.timeout + live.every {
		for _, e := range tr.engines[:2] {
			if err := e.TickMetadata(); err != nil {
				t.Fatal(err)
			}
		}
		tr.deliverExcept(3)
	}
	if live.alive(3) {
		t.Fatal("node 3, silent past the timeout, still alive")
	}
	if !live.alive(2) {
		t.Fatal("node 2, heard throughout, declared dead")
	}
}

// blockingLogger blocks the goroutine that logs a peer's death until
// release is closed: a stand-in for a metadata driver stuck in one step
// (an fsync, a long apply, a CPU it waits for).
type blockingLogger struct {
	hclog.Logger
	release chan struct{}
	blocked chan struct{}
}

func (l *blockingLogger) Warn(msg string, args ...any) {
	if strings.HasPrefix(msg, "peer declared dead") {
		select {
		case <-l.blocked:
		default:
			close(l.blocked)
		}
		<-l.release
	}
}

// A started engine's heartbeats do not wait for its metadata driver: a
// driver stuck in one step leaves the node's peers hearing it, for up
// to driverStallTimeouts liveness timeouts, after which a node whose
// driver is wedged falls silent and is declared dead as a crashed one
// would be. Heartbeats sent by the driver itself stopped at once (issue
// 33: at 10,000 topics a node alive and serving was declared dead
// because that one goroutine ran late).
func TestLivenessBeatsWhileTheDriverIsStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		defer net.Close()
		log := &blockingLogger{Logger: hclog.NewNullLogger(), release: make(chan struct{}), blocked: make(chan struct{})}
		e, err := New(Config{Shards: 1, Logger: log,
			Cluster: &Cluster{ID: 1, Peers: []transport.NodeID{1, 2, 3}, Bus: net.Endpoint(1)}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = e.Close() }()
		unblock := func() {
			select {
			case <-log.release:
			default:
				close(log.release)
			}
		}
		defer unblock() // before Close, which waits for the driver
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		interval := time.Duration(e.cl.live.every) * e.cl.cfg.TickInterval
		ep := net.Endpoint(2)
		beats := func() (n int) {
			synctest.Wait()
			for len(ep.Recv()) > 0 {
				if m := <-ep.Recv(); m.Kind == KindLiveness {
					n++
				}
			}
			return n
		}
		// Nodes 2 and 3 never answer: node 1's driver declares one dead
		// and is stuck logging it.
		<-log.blocked
		beats()
		stuckAt := time.Now()
		time.Sleep(10 * interval)
		if n := beats(); n < 9 {
			t.Fatalf("%d heartbeats to node 2 in the %v after the driver got stuck, want 10", n, 10*interval)
		}
		bound := driverStallTimeouts * time.Duration(e.cl.live.timeout) * e.cl.cfg.TickInterval
		time.Sleep(bound - time.Since(stuckAt) + 2*interval)
		beats()
		time.Sleep(10 * interval)
		if n := beats(); n != 0 {
			t.Fatalf("%d heartbeats to node 2 after the driver was stuck for over %v", n, bound)
		}
		unblock()
		time.Sleep(2 * interval)
		if n := beats(); n == 0 {
			t.Fatal("no heartbeat once the driver moved again")
		}
	})
}
