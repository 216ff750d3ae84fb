package parkway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// TestBehaviour18ForwardedRetryHereSurvivesTheWire pins behaviour 18 across
// a forward: the answer a leader gives a forwarded request travels back
// through encodeResponse and decodeResponse, and a "retry here shortly"
// (ErrRetry, and ErrStaleIncarnation, which wraps it) must still be one
// after the trip — retried in place by the client, never taken for "not
// leader / go elsewhere" — while "not leader" keeps its hint and is never
// retried in place.
func TestBehaviour18ForwardedRetryHereSurvivesTheWire(t *testing.T) {
	retryHere := []struct {
		name  string
		err   error
		stale bool
	}{
		{"ErrRetry", shard.ErrRetry, false},
		{"wrapped ErrRetry", fmt.Errorf("partition materialising: %w", shard.ErrRetry), false},
		{"ErrStaleIncarnation", shard.ErrStaleIncarnation, true},
		{"wrapped ErrStaleIncarnation", fmt.Errorf("ns 0/1/0: %w", shard.ErrStaleIncarnation), true},
	}
	for _, c := range retryHere {
		r, err := host.DecodeResponse(host.EncodeResponse(shard.Response{Err: c.err}))
		if err != nil {
			t.Fatalf("%s: decode: %v", c.name, err)
		}
		var nl *shard.NotLeaderError
		switch {
		case !errors.Is(r.Err, ErrRetry):
			t.Errorf("%s came back as %v: no longer ErrRetry", c.name, r.Err)
		case errors.Is(r.Err, ErrNotLeader) || errors.As(r.Err, &nl):
			t.Errorf("%s came back as %v: typed as not-leader", c.name, r.Err)
		case !host.RetryInPlace(r.Err):
			t.Errorf("%s came back as %v: not retried in place", c.name, r.Err)
		case c.stale != errors.Is(r.Err, shard.ErrStaleIncarnation):
			t.Errorf("%s came back as %v: stale incarnation %v, want %v", c.name, r.Err, !c.stale, c.stale)
		}
	}

	r, err := host.DecodeResponse(host.EncodeResponse(shard.Response{Err: &shard.NotLeaderError{Leader: 3}}))
	if err != nil {
		t.Fatal(err)
	}
	var nl *shard.NotLeaderError
	if !errors.As(r.Err, &nl) || nl.Leader != 3 || errors.Is(r.Err, ErrRetry) || host.RetryInPlace(r.Err) {
		t.Fatalf("not-leader (node 3) came back as %v", r.Err)
	}
}

// TestBehaviour18ForwardedRetryHereRetriedInPlace drives the forward end to
// end: node 1 believes node 3 leads a partition, so a produce on node 1 is
// answered "not leader (node 3)" by its own shard and forwarded to node 3
// over the bus. Node 3 is the test: it answers the first forward "retry
// here" (ErrRetry, then, for a second produce, ErrStaleIncarnation) and the
// next one with an ack. Each produce must succeed with that ack, after
// exactly two forwards: the decoded retry-here was retried in place (the
// shard still names node 3, so the retry forwards again) — not returned to
// the caller, and not taken for a "not leader" with no one to follow.
func TestBehaviour18ForwardedRetryHereRetriedInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		t.Cleanup(func() { _ = net.Close() }) // after the nodes' cleanups: ends the fake peer
		peers := []transport.NodeID{1, 2, 3}
		nodes := map[transport.NodeID]*Node{}
		for _, id := range peers[:2] {
			n, err := Open(Config{Shards: 1, RequestTimeout: 5 * time.Second,
				Cluster: &ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				synctest.Wait()
				if err := n.Close(); err != nil {
					t.Errorf("close node %d: %v", id, err)
				}
			})
			nodes[id] = n
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n1 := nodes[1]
		s, err := n1.Admin().CreateStream(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		tp, err := n1.Admin().CreateTopic(ctx, s, "t", 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n1.Produce(ctx, tp, PartitionID(0), Message{Payload: []byte("a")}); err != nil {
			t.Fatal(err)
		}
		ns, _, err := n1.resolve(ctx, tp, 0)
		if err != nil {
			t.Fatal(err)
		}
		epoch, _ := n1.meta.CreatedRevision(ns)

		// Node 3, played by the test: it records every forwarded request
		// and answers from a script.
		peer3 := net.Endpoint(3)
		answers := make(chan shard.Response, 2)
		forwarded := make(chan *shard.Request, 8)
		go func() {
			for m := range peer3.Recv() {
				if m.Kind != host.KindRequest {
					continue // raft traffic to node 3: dropped
				}
				req, err := host.DecodeRequest(m.Payload, time.Now())
				if err != nil {
					t.Errorf("node 3 got a malformed forward: %v", err)
					continue
				}
				forwarded <- req
				r := shard.Response{Err: errors.New("node 3: unscripted forward")}
				select {
				case r = <-answers:
				default:
				}
				_ = peer3.Send(transport.Message{To: m.From, Kind: host.KindReply, Group: m.Group, Payload: host.EncodeResponse(r)})
			}
		}()
		followNode3 := func() {
			t.Helper()
			hb, err := proto.Marshal(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(),
				From: proto.Uint64(3), To: proto.Uint64(1), Term: proto.Uint64(1 << 20)})
			if err != nil {
				t.Fatal(err)
			}
			payload := append(binary.LittleEndian.AppendUint64(nil, epoch), hb...)
			if err := peer3.Send(transport.Message{To: 1, Kind: host.KindPartitionRaft, Group: uint64(ns), Payload: payload}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if lead, err := n1.Cluster().Leader(ctx, tp, 0); err != nil || lead != 3 {
				t.Fatalf("node 1 sees leader %d (%v), want node 3", lead, err)
			}
		}

		for i, first := range []error{shard.ErrRetry, shard.ErrStaleIncarnation} {
			followNode3()
			want := uint64(70 + i)
			answers <- shard.Response{Err: first}
			answers <- shard.Response{Offset: want}
			ack, err := n1.Produce(ctx, tp, PartitionID(0), Message{Payload: []byte("x")})
			if err != nil || ack.FirstOffset != want {
				t.Fatalf("produce whose forward was answered %v first: ack %+v, err %v; want the ack at %d", first, ack, err, want)
			}
			for try := range 2 {
				select {
				case req := <-forwarded:
					if req.Op != shard.OpProduce || req.NS != ns {
						t.Fatalf("forward %d: %v %v, want a produce to %v", try, req.Op, req.NS, ns)
					}
				default:
					t.Fatalf("%d forwards for a produce answered %v then ack, want 2", try, first)
				}
			}
			if len(forwarded) != 0 {
				t.Fatalf("more than 2 forwards for a produce answered %v then ack", first)
			}
		}
	})
}

// TestForwardReplyOnlyFromTheNodeAsked: a forwarded request's answer is
// taken only from the node it was forwarded to. Node 1 forwards a produce
// to node 3 (played by the test); node 4, another holder of a cluster
// certificate, answers it first with a forged ack under the request's id.
// The forgery is dropped and the produce returns node 3's ack (it used to
// return whichever reply came first, from any peer).
func TestForwardReplyOnlyFromTheNodeAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		t.Cleanup(func() { _ = net.Close() })
		peers := []transport.NodeID{1, 2, 3}
		nodes := map[transport.NodeID]*Node{}
		for _, id := range peers[:2] {
			n, err := Open(Config{Shards: 1, RequestTimeout: 5 * time.Second,
				Cluster: &ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				synctest.Wait()
				if err := n.Close(); err != nil {
					t.Errorf("close node %d: %v", id, err)
				}
			})
			nodes[id] = n
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n1 := nodes[1]
		s, err := n1.Admin().CreateStream(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		tp, err := n1.Admin().CreateTopic(ctx, s, "t", 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n1.Produce(ctx, tp, PartitionID(0), Message{Payload: []byte("a")}); err != nil {
			t.Fatal(err)
		}
		ns, _, err := n1.resolve(ctx, tp, 0)
		if err != nil {
			t.Fatal(err)
		}
		epoch, _ := n1.meta.CreatedRevision(ns)

		peer3, peer4 := net.Endpoint(3), net.Endpoint(4)
		go func() {
			for m := range peer3.Recv() {
				if m.Kind != host.KindRequest {
					continue
				}
				forged := host.EncodeResponse(shard.Response{Offset: 666})
				_ = peer4.Send(transport.Message{To: m.From, Kind: host.KindReply, Group: m.Group, Payload: forged})
				// Virtual time: the bubble runs node 1 until it blocks,
				// so the forgery is delivered first.
				time.Sleep(time.Millisecond)
				_ = peer3.Send(transport.Message{To: m.From, Kind: host.KindReply, Group: m.Group, Payload: host.EncodeResponse(shard.Response{Offset: 70})})
			}
		}()
		hb, err := proto.Marshal(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(),
			From: proto.Uint64(3), To: proto.Uint64(1), Term: proto.Uint64(1 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		if err := peer3.Send(transport.Message{To: 1, Kind: host.KindPartitionRaft, Group: uint64(ns),
			Payload: append(binary.LittleEndian.AppendUint64(nil, epoch), hb...)}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if lead, err := n1.Cluster().Leader(ctx, tp, 0); err != nil || lead != 3 {
			t.Fatalf("node 1 sees leader %d (%v), want node 3", lead, err)
		}
		ack, err := n1.Produce(ctx, tp, PartitionID(0), Message{Payload: []byte("x")})
		if err != nil || ack.FirstOffset != 70 {
			t.Fatalf("produce forwarded to node 3: ack %+v, err %v; want node 3's ack at 70", ack, err)
		}
	})
}
