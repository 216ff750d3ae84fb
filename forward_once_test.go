package parkway_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/transport"
)

// requestPath is a node's bus that counts the forwarded requests the
// node sends, by receiver, and can hold the forwarded requests and the
// probes that ask about them on their way to one node — a slow request
// path, while raft and liveness traffic flow, so leadership stays put.
type requestPath struct {
	transport.Bus
	mu   sync.Mutex
	sent map[transport.NodeID]int
	// holdFor is the node whose requests and probes are held (0: none).
	holdFor transport.NodeID
	held    []transport.Message
	// loseReplies is how many of the next answers to forwarded requests
	// are lost.
	loseReplies int
}

func (b *requestPath) Send(m transport.Message) error {
	b.mu.Lock()
	if m.Kind == host.KindRequest {
		b.sent[m.To]++
	}
	if m.Kind == host.KindReply && b.loseReplies > 0 {
		b.loseReplies--
		b.mu.Unlock()
		return nil
	}
	if (m.Kind == host.KindRequest || m.Kind == host.KindProbe) && m.To == b.holdFor {
		m.Payload = bytes.Clone(m.Payload)
		b.held = append(b.held, m)
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	return b.Bus.Send(m)
}

func (b *requestPath) requests(to transport.NodeID) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent[to]
}

func (b *requestPath) loseReply() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.loseReplies++
}

func (b *requestPath) hold(to transport.NodeID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holdFor = to
}

// release ends the hold: what it held is sent in order, or lost.
func (b *requestPath) release(lose bool) {
	b.mu.Lock()
	held := b.held
	b.holdFor, b.held = 0, nil
	b.mu.Unlock()
	if !lose {
		for _, m := range held {
			_ = b.Bus.Send(m)
		}
	}
}

// A produce forwarded to a leader that is slow to take it is sent to that
// leader once. The follower's forwarded requests, and its probes, wait 3 s
// on their way to the leader — six forward timeouts (500 ms with the
// default tick) — while raft and liveness traffic flow. Every forward
// timeout the follower asks the leader whether it holds the request, and
// waits on without an answer. Before, each timeout ended the attempt with
// an unknown outcome and the retry stacked another full copy of the batch
// on the same leader (6 copies here, as a follower under a starved race
// run sent a multi-MiB batch 4–5 times). Then a request is lost: the
// leader answers the next probe that it does not hold it, and the
// follower sends it once more — a loss costs a copy, not the caller's
// deadline. Then an answer is lost: the leader says it lacks the request,
// which is sent again and answered from the partition's deduplication
// window, with the first copy's offset. Each batch is appended once.
func TestForwardedProduceSentOncePerLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		t.Cleanup(func() { _ = net.Close() })
		peers := []transport.NodeID{1, 2, 3}
		nodes := map[transport.NodeID]*parkway.Node{}
		buses := map[transport.NodeID]*requestPath{}
		for _, id := range peers {
			buses[id] = &requestPath{Bus: net.Endpoint(id), sent: map[transport.NodeID]int{}}
			nodes[id] = open(t, parkway.Config{Shards: 1, RequestTimeout: time.Minute,
				Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: buses[id]}})
		}
		ctx := context.Background()
		tp := mustTopic(t, nodes[1], mustStream(t, nodes[1], "s"), "t", 1)
		mustProduce(t, nodes[1], tp, parkway.PartitionID(0), "warm")
		// settle lets leadership settle (the group's first leader may hand
		// it to its preferred leader, also when a node it thought dead
		// comes back), then names the leader and a node that does not
		// lead, which knows the leader.
		settle := func() (lead, from transport.NodeID) {
			time.Sleep(2 * time.Second)
			waitFor(t, "a leader", func() bool {
				l, err := nodes[1].Cluster().Leader(ctx, tp, 0)
				lead = l
				return err == nil && l != 0
			})
			from = peers[0]
			if from == lead {
				from = peers[1]
			}
			waitFor(t, "the producer's node knowing the leader", func() bool {
				l, err := nodes[from].Cluster().Leader(ctx, tp, 0)
				return err == nil && l == lead
			})
			return lead, from
		}
		payload := bytes.Repeat([]byte{7}, 256<<10)
		produce := func(from transport.NodeID, tag byte) (parkway.Ack, error) {
			p := bytes.Clone(payload)
			p[0] = tag
			return nodes[from].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: p})
		}
		type result struct {
			ack parkway.Ack
			err error
		}
		res := make(chan result, 1)

		// A slow leader: the request reaches it 3 s after it was sent.
		lead, from := settle()
		before := buses[from].requests(lead)
		buses[from].hold(lead)
		go func() { a, err := produce(from, 1); res <- result{a, err} }()
		time.Sleep(3 * time.Second)
		buses[from].release(false)
		r := <-res
		if r.err != nil || r.ack.FirstOffset != 1 {
			t.Fatalf("produce through a slow leader: %+v, %v", r.ack, r.err)
		}
		if n := buses[from].requests(lead) - before; n != 1 {
			t.Fatalf("the leader was sent %d copies of the request, want 1", n)
		}
		if l, err := nodes[from].Cluster().Leader(ctx, tp, 0); err != nil || l != lead {
			t.Fatalf("the leader moved from %d to %d (%v): the copies were not all for one leader", lead, l, err)
		}

		// A lost request: sent again once the leader says it lacks it.
		lead, from = settle()
		before = buses[from].requests(lead)
		buses[from].hold(lead)
		go func() { a, err := produce(from, 2); res <- result{a, err} }()
		time.Sleep(2 * time.Second)
		buses[from].release(true)
		r = <-res
		if r.err != nil || r.ack.FirstOffset != 2 {
			t.Fatalf("produce after the request was lost: %+v, %v", r.ack, r.err)
		}
		if n := buses[from].requests(lead) - before; n != 2 {
			t.Fatalf("the leader was sent %d copies of a request lost once, want 2", n)
		}
		if l, err := nodes[from].Cluster().Leader(ctx, tp, 0); err != nil || l != lead {
			t.Fatalf("the leader moved from %d to %d (%v): the copies were not all for one leader", lead, l, err)
		}

		// A lost answer: the leader appended the batch and its answer was
		// lost; it says it lacks the request, which is sent again and
		// answered from the partition's deduplication window.
		lead, from = settle()
		before = buses[from].requests(lead)
		buses[lead].loseReply()
		a, err := produce(from, 3)
		if err != nil || a.FirstOffset != 3 {
			t.Fatalf("produce whose answer was lost: %+v, %v", a, err)
		}
		if n := buses[from].requests(lead) - before; n != 2 {
			t.Fatalf("the leader was sent %d copies of a request whose answer was lost once, want 2", n)
		}

		b, err := nodes[lead].Poll(ctx, tp, 0, parkway.AtOffset(1), 10)
		if err != nil || len(b.Messages) != 3 || b.Messages[0].Payload[0] != 1 || b.Messages[1].Payload[0] != 2 || b.Messages[2].Payload[0] != 3 {
			t.Fatalf("the partition after the three produces: %d messages, %v; want each batch once", len(b.Messages), err)
		}
	})
}
