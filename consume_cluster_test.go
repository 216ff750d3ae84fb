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
// deadline. (A waiting poll a follower forwards to the leader needs the
// forwarded-request fields of wire_poll.go; it is not tested here.)
func TestClusterWaitingPollWokenByCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := threeNodes(t)
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 1)
		mustProduce(t, nodes[1], s, tp, parkway.PartitionID(0), "warm")
		leader, err := nodes[1].Leader(ctx, s, tp, 0)
		if err != nil || leader == 0 {
			t.Fatalf("leader %d: %v", leader, err)
		}
		follower := others(leader)[0]
		waitFor(t, "the follower's copy", func() bool { return len(readAll(t, nodes[follower], s, tp, 0)) == 1 })

		start := time.Now()
		atLeader := pollAsync(nodes[leader], ctx, s, tp, 0, parkway.AtOffset(1), 10, parkway.WaitFor(20*time.Second))
		atFollower := pollAsync(nodes[follower], ctx, s, tp, 0, parkway.AtOffset(1).Local(), 10, parkway.WaitFor(20*time.Second))
		time.Sleep(time.Second) // virtual: raft keeps ticking; neither poll may return
		for _, ch := range []<-chan pollResult{atLeader, atFollower} {
			select {
			case r := <-ch:
				t.Fatalf("waiting poll returned early: %v, %v", payloads(r.b.Messages), r.err)
			default:
			}
		}
		mustProduce(t, nodes[follower], s, tp, parkway.PartitionID(0), "x")
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
