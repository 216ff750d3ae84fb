package parkway_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
)

// In a cluster a waiting poll on the partition's leader is woken when the
// produce commits and the leader applies it, and a waiting local read on
// a follower when the follower applies it: both long before their
// deadline. (A waiting poll a follower forwards to the leader: see
// TestClusterForwardedWaitingPollAndOffsets.)
func TestClusterWaitingPollWokenByCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := threeNodes(t)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 1)
		mustProduce(t, nodes[1], tp, parkway.PartitionID(0), "warm")
		leader, err := nodes[1].Cluster().Leader(ctx, tp, 0)
		if err != nil || leader == 0 {
			t.Fatalf("leader %d: %v", leader, err)
		}
		follower := others(leader)[0]
		waitFor(t, "the follower's copy", func() bool { return len(readAll(t, nodes[follower], tp, 0)) == 1 })

		start := time.Now()
		atLeader := pollAsync(nodes[leader], ctx, tp, 0, parkway.AtOffset(1), 10, parkway.WaitFor(20*time.Second))
		atFollower := pollAsync(nodes[follower], ctx, tp, 0, parkway.AtOffset(1).Local(), 10, parkway.WaitFor(20*time.Second))
		time.Sleep(time.Second) // virtual: raft keeps ticking; neither poll may return
		for _, ch := range []<-chan pollResult{atLeader, atFollower} {
			select {
			case r := <-ch:
				t.Fatalf("waiting poll returned early: %v, %v", payloads(r.b.Messages), r.err)
			default:
			}
		}
		mustProduce(t, nodes[follower], tp, parkway.PartitionID(0), "x")
		for name, ch := range map[string]<-chan pollResult{"leader": atLeader, "follower (local)": atFollower} {
			r := <-ch
			if r.err != nil || !slices.Equal(payloads(r.b.Messages), []string{"x@1"}) || r.b.Next != 2 {
				t.Fatalf("%s: %v next %d, %v; want x@1", name, payloads(r.b.Messages), r.b.Next, r.err)
			}
			if waited := r.at.Sub(start); waited >= 5*time.Second {
				t.Fatalf("%s: answered after %v, not by the commit", name, waited)
			}
		}
	})
}

// A waiting poll sent to a follower is forwarded to the leader with its
// wait, start kind and budget (the forwarded request carries them) and is
// answered by the commit of a produce, not at its deadline; the forward
// does not time out while the leader holds it. A follower also answers
// PartitionOffsets and an AtTime poll through the leader.
func TestClusterForwardedWaitingPollAndOffsets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := threeNodes(t)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 1)
		mustProduce(t, nodes[1], tp, parkway.PartitionID(0), "warm")
		leader, err := nodes[1].Cluster().Leader(ctx, tp, 0)
		if err != nil || leader == 0 {
			t.Fatalf("leader %d: %v", leader, err)
		}
		follower := others(leader)[0]
		start := time.Now()
		ch := pollAsync(nodes[follower], ctx, tp, 0, parkway.AtLast(), 10, parkway.WaitFor(25*time.Second), parkway.MinMessages(2))
		time.Sleep(2 * time.Second) // past the 0.5 s forward timeout: still waiting
		select {
		case r := <-ch:
			t.Fatalf("forwarded waiting poll returned early: %v, %v", payloads(r.b.Messages), r.err)
		default:
		}
		mustProduce(t, nodes[leader], tp, parkway.PartitionID(0), "a")
		mustProduce(t, nodes[leader], tp, parkway.PartitionID(0), "b")
		r := <-ch
		// AtLast starts at the last message (warm@0); two messages satisfy
		// MinMessages once a lands.
		if r.err != nil || !slices.Equal(payloads(r.b.Messages), []string{"warm@0", "a@1"}) {
			t.Fatalf("forwarded waiting poll: %v, %v; want warm@0, a@1", payloads(r.b.Messages), r.err)
		}
		if waited := r.at.Sub(start); waited >= 20*time.Second {
			t.Fatalf("answered after %v: at its deadline, not by the commit", waited)
		}
		offs, err := nodes[follower].Admin().PartitionOffsets(ctx, tp, 0, "")
		if err != nil || offs.Start != 0 || offs.End != 3 {
			t.Fatalf("PartitionOffsets through a follower: %+v, %v; want [0, 3)", offs, err)
		}
		b, err := nodes[follower].Poll(ctx, tp, 0, parkway.AtTime(time.Now().Add(time.Hour)), 10)
		if err != nil || len(b.Messages) != 0 || b.Next != 3 {
			t.Fatalf("AtTime past the last message through a follower: %v next %d, %v; want none, next 3", payloads(b.Messages), b.Next, err)
		}
	})
}
