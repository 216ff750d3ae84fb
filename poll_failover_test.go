package parkway_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// A waiting poll forwarded to a partition's leader follows the new leader
// when the old one is cut off: the node that forwarded it learns of the
// election and sends the poll again there, so it is answered with the
// message produced after the failover, long before its MaxWait (before,
// it waited for the old leader's answer until MaxWait and the forward
// timeout had passed, and then failed).
func TestWaitingPollFollowsNewLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := threeNodes(t)
		ctx := context.Background()
		tp := mustTopic(t, nodes[1], mustStream(t, nodes[1], "s"), "t", 1)
		mustProduce(t, nodes[1], tp, parkway.PartitionID(0), "before")
		var lead transport.NodeID
		waitFor(t, "a leader", func() bool {
			l, err := nodes[1].Cluster().Leader(ctx, tp, 0)
			lead = l
			return err == nil && l != 0
		})
		var from, other transport.NodeID
		for _, id := range []transport.NodeID{1, 2, 3} {
			if id == lead {
				continue
			}
			if from == 0 {
				from = id
			} else {
				other = id
			}
		}
		waitFor(t, "the poller knowing the leader", func() bool {
			l, err := nodes[from].Cluster().Leader(ctx, tp, 0)
			return err == nil && l == lead
		})
		const maxWait = 10 * time.Second
		type result struct {
			b   parkway.Batch
			err error
			at  time.Time
		}
		res := make(chan result, 1)
		start := time.Now()
		go func() {
			b, err := nodes[from].Poll(ctx, tp, 0, parkway.AtOffset(1), 10, parkway.WaitFor(maxWait))
			res <- result{b, err, time.Now()}
		}()
		synctest.Wait() // the poll waits at the leader
		net.Partition([]transport.NodeID{lead}, []transport.NodeID{from, other})
		waitFor(t, "a new leader, as the poller sees it", func() bool {
			l, err := nodes[from].Cluster().Leader(ctx, tp, 0)
			return err == nil && l != 0 && l != lead
		})
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := nodes[other].Produce(pctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")}); err != nil {
			t.Fatal(err)
		}
		r := <-res
		if r.err != nil || len(r.b.Messages) != 1 || string(r.b.Messages[0].Payload) != "after" {
			t.Fatalf("poll across the failover: %v, %v; want the message produced after it", payloads(r.b.Messages), r.err)
		}
		if r.at.Sub(start) >= maxWait {
			t.Fatalf("answered %v after it was made: it waited out its MaxWait (%v) at the old leader", r.at.Sub(start), maxWait)
		}
		net.Heal()
	})
}

// A produce forwarded to a leader that is cut off right then ends with
// an unknown outcome as soon as the forwarding node learns of the new
// leader, and is retried there (with its producer sequence, so it is
// applied once), instead of waiting out the forward timeout.
func TestForwardedProduceFollowsNewLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := threeNodes(t)
		ctx := context.Background()
		tp := mustTopic(t, nodes[1], mustStream(t, nodes[1], "s"), "t", 1)
		mustProduce(t, nodes[1], tp, parkway.PartitionID(0), "before")
		var lead transport.NodeID
		waitFor(t, "a leader", func() bool {
			l, err := nodes[1].Cluster().Leader(ctx, tp, 0)
			lead = l
			return err == nil && l != 0
		})
		var from, other transport.NodeID
		for _, id := range []transport.NodeID{1, 2, 3} {
			switch {
			case id == lead:
			case from == 0:
				from = id
			default:
				other = id
			}
		}
		waitFor(t, "the producer's node knowing the leader", func() bool {
			l, err := nodes[from].Cluster().Leader(ctx, tp, 0)
			return err == nil && l == lead
		})
		// Keep the partition busy so its group does not quiesce.
		busy, stop := context.WithCancel(ctx)
		busyDone := make(chan struct{})
		defer func() { stop(); <-busyDone }()
		go func() {
			defer close(busyDone)
			for busy.Err() == nil {
				c, cancel := context.WithTimeout(busy, time.Second)
				_, _ = nodes[other].Produce(c, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("busy")})
				cancel()
				time.Sleep(2 * time.Millisecond)
			}
		}()
		time.Sleep(50 * time.Millisecond)
		net.Partition([]transport.NodeID{lead}, []transport.NodeID{from, other})
		start := time.Now()
		// When the producer's node learns of the new leader: the moment
		// the forward must end. An election usually takes 10–20 ticks of
		// the cut, but split votes between the two remaining members
		// (raft's randomised timeouts, drawn from its own random source)
		// can take it past the forward timeout now and then, so the
		// produce is judged against the news, not a fixed bound.
		news := make(chan time.Duration, 1)
		go func() {
			for range 10000 { // 10 s of virtual time
				if l, err := nodes[from].Cluster().Leader(ctx, tp, 0); err == nil && l != 0 && l != lead {
					news <- time.Since(start)
					return
				}
				time.Sleep(time.Millisecond) // virtual time inside the bubble
			}
			news <- -1
		}()
		ack, err := nodes[from].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("across")})
		took := time.Since(start)
		learned := <-news
		stop()
		if err != nil {
			t.Fatal(err)
		}
		l, _ := nodes[from].Cluster().Leader(ctx, tp, 0)
		if l == lead {
			t.Fatalf("acknowledged at %d by the old leader %d", ack.FirstOffset, lead)
		}
		// The forward timeout is 50 ticks (500 ms). Once the producer's
		// node knows the new leader, the forward ends at once and the
		// retry there takes a replication round: well under 10 ticks.
		if learned < 0 {
			t.Fatalf("the produce took %v and its node never learned of a new leader", took)
		}
		if took >= learned+100*time.Millisecond {
			t.Fatalf("the produce took %v, its node learned of the new leader after %v: it waited out the forward timeout at the old leader", took, learned)
		}
		net.Heal()
	})
}
