package parkway_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// BenchmarkReaderResumeAfterLeaderLoss measures how long a reader waits
// after a partition's leader is cut off (issue 27): three in-memory nodes
// on the wall clock (10 ms raft ticks), one partition on all three, a
// message produced every 2 ms through the third node, and a reader on a
// follower looping waiting polls (the Consumer's default MaxWait, 5 s)
// forwarded to the leader. Each iteration cuts the leader off and reports
// elect-ms (the cut to the first moment the reader's node knows a new
// leader), resume-ms (the cut to the first message the reader gets that
// was produced after it) and after-elect-ms (their difference: the target
// is under 500). A waiting poll forwarded to a dead leader used to wait
// out its MaxWait (resume-ms about 5,500). Reported, not asserted.
//
//	go test -run '^$' -bench ReaderResumeAfterLeaderLoss -benchtime 5x .
func BenchmarkReaderResumeAfterLeaderLoss(b *testing.B) {
	var elect, resume []time.Duration
	for range b.N {
		e, r := resumeOnce(b)
		elect, resume = append(elect, e), append(resume, r)
	}
	med := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	after := make([]time.Duration, len(elect))
	for i := range elect {
		after[i] = resume[i] - elect[i]
	}
	b.ReportMetric(med(elect), "elect-ms")
	b.ReportMetric(med(resume), "resume-ms")
	b.ReportMetric(med(after), "after-elect-ms")
	b.ReportMetric(0, "ns/op")
}

func resumeOnce(b *testing.B) (elect, resume time.Duration) {
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	nodes := map[transport.NodeID]*parkway.Node{}
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			b.Fatal(err)
		}
		defer n.Close()
		nodes[id] = n
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := nodes[1].Admin().CreateStream(ctx, "s")
	if err != nil {
		b.Fatal(err)
	}
	tp, err := nodes[1].Admin().CreateTopic(ctx, s, "t", 1)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := nodes[1].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("warm")}); err != nil {
		b.Fatal(err)
	}
	var lead transport.NodeID
	for lead == 0 {
		lead, _ = nodes[1].Cluster().Leader(ctx, tp, 0)
	}
	var reader, writer transport.NodeID
	for _, id := range peers {
		switch {
		case id == lead:
		case reader == 0:
			reader = id
		default:
			writer = id
		}
	}
	for {
		if l, _ := nodes[reader].Cluster().Leader(ctx, tp, 0); l == lead {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// The writer stamps each message with the wall clock.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		for ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			_, _ = nodes[writer].Produce(pctx, tp, parkway.PartitionID(0), parkway.Message{Payload: fmt.Append(nil, time.Now().UnixNano())})
			pcancel()
			time.Sleep(2 * time.Millisecond)
		}
	})
	var cut time.Time
	var mu sync.Mutex
	got := make(chan time.Duration, 1)
	wg.Go(func() {
		next := uint64(1)
		for ctx.Err() == nil {
			batch, err := nodes[reader].Poll(ctx, tp, 0, parkway.AtOffset(next), 256, parkway.WaitFor(parkway.DefaultConsumerMaxWait))
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			now := time.Now()
			for _, m := range batch.Messages {
				var at int64
				fmt.Sscan(string(m.Payload), &at)
				mu.Lock()
				c := cut
				mu.Unlock()
				if !c.IsZero() && at > c.UnixNano() {
					select {
					case got <- now.Sub(c):
					default:
					}
					return
				}
			}
			next = batch.Next
		}
	})
	time.Sleep(200 * time.Millisecond) // the reader is waiting at the leader
	mu.Lock()
	cut = time.Now()
	mu.Unlock()
	var others []transport.NodeID
	for _, id := range peers {
		if id != lead {
			others = append(others, id)
		}
	}
	b.StartTimer()
	net.Partition([]transport.NodeID{lead}, others)
	for {
		if l, _ := nodes[reader].Cluster().Leader(ctx, tp, 0); l != 0 && l != lead {
			elect = time.Since(cut)
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case resume = <-got:
	case <-time.After(20 * time.Second):
		b.Fatal("the reader got nothing produced after the cut within 20 s")
	}
	b.StopTimer()
	net.Heal()
	return elect, resume
}
