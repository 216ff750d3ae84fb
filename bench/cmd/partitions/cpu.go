package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parkway-io/parkway"
)

// The partition-count sweep (-cpu): CPU per produced message as the
// number of partitions the same load is spread over grows. For each
// partition count and fsync policy, a fresh 2-shard node on a fresh data
// directory gets the partitions (topics of 1,000, or one topic of fewer),
// one message to each and an untimed round before the clock (materialised,
// layout durable), then rounds of at least -round each: one goroutine produces one 100-byte
// message per ProduceAsync call, the k-th to partition k mod count, with
// at most -inflight unacknowledged (the oldest awaited before its slot is
// reused, case 2a's ring). At 8 partitions the produces in flight meet at
// each partition hundreds at a time; at 10,000 no two in flight meet at
// one, so whatever the node does per partition touched is paid per message.
// CPU is the process's user+sys time (getrusage) over the round, so the
// driver's own cost is in it, the same at every count.

// cpuCase is one (partition count, policy) cell of the sweep.
type cpuCase struct {
	parts  int
	policy parkway.FsyncPolicy
}

func policyName(p parkway.FsyncPolicy) string {
	switch p {
	case parkway.FsyncInterval:
		return "interval"
	case parkway.FsyncAlways:
		return "always"
	case parkway.FsyncNever:
		return "never"
	}
	return p.String()
}

func parsePolicies(s string) ([]parkway.FsyncPolicy, error) {
	var out []parkway.FsyncPolicy
	for f := range strings.SplitSeq(s, ",") {
		switch strings.TrimSpace(f) {
		case "interval":
			out = append(out, parkway.FsyncInterval)
		case "always":
			out = append(out, parkway.FsyncAlways)
		case "never":
			out = append(out, parkway.FsyncNever)
		default:
			return nil, fmt.Errorf("unknown fsync policy %q (interval, always, never)", f)
		}
	}
	return out, nil
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad partition count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// cpuResult is one round's figures.
type cpuResult struct {
	msgs int
	wall time.Duration
	cpu  time.Duration
}

func (r cpuResult) perMsg() time.Duration { return r.cpu / time.Duration(max(r.msgs, 1)) }
func (r cpuResult) rate() float64         { return float64(r.msgs) / r.wall.Seconds() }

// sweepCPU runs every cell of counts × policies, rounds rounds each, and
// prints each round and a table of medians with the ratio to the first
// count of the same policy.
func sweepCPU(counts []int, policies []parkway.FsyncPolicy, shards, rounds, inflight int, round, timeout time.Duration, profDir string) error {
	if rounds < 1 {
		return errors.New("-rounds must be at least 1")
	}
	fmt.Printf("partition-count sweep: %d shards, %d rounds of at least %v per cell, ProduceAsync of 100 B, %d in flight; load average %s\n",
		shards, rounds, round, inflight, loadavg())
	med := make(map[cpuCase]cpuResult)
	for _, pol := range policies {
		for _, count := range counts {
			c := cpuCase{count, pol}
			res, err := runCPUCase(c, shards, rounds, inflight, round, timeout, profDir)
			if err != nil {
				return fmt.Errorf("%d partitions, %s: %w", count, policyName(pol), err)
			}
			slices.SortFunc(res, func(a, b cpuResult) int { return int(a.perMsg() - b.perMsg()) })
			med[c] = res[len(res)/2]
		}
	}
	fmt.Printf("\nload average at the end %s\n\n", loadavg())
	fmt.Println("| fsync | partitions | msgs/s | CPU/msg (median) | ratio to " + strconv.Itoa(counts[0]) + " |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: |")
	for _, pol := range policies {
		base := med[cpuCase{counts[0], pol}].perMsg()
		for _, count := range counts {
			r := med[cpuCase{count, pol}]
			fmt.Printf("| %s | %d | %.3gk | %.3g µs | %.2f× |\n", policyName(pol), count, r.rate()/1000,
				float64(r.perMsg())/float64(time.Microsecond), float64(r.perMsg())/float64(base))
		}
	}
	return nil
}

func runCPUCase(c cpuCase, shards, rounds, inflight int, round, timeout time.Duration, profDir string) ([]cpuResult, error) {
	dir, err := os.MkdirTemp("", "parkway-cpu-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	n, err := parkway.Open(parkway.Config{DataDir: dir, Shards: shards, RequestTimeout: time.Minute})
	if err != nil {
		return nil, err
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := n.Admin().CreateStream(ctx, "sweep")
	if err != nil {
		return nil, err
	}
	per := min(c.parts, perTopic)
	var topics []parkway.Topic
	for left, i := c.parts, 0; left > 0; i++ {
		t, err := n.Admin().CreateTopic(ctx, s, fmt.Sprintf("t%d", i), min(left, per), parkway.WithFsync(c.policy, 0))
		if err != nil {
			return nil, err
		}
		topics = append(topics, t)
		left -= per
	}
	// One message to each partition: materialised, its layout durable.
	if _, err := produceSpread(ctx, n, topics, per, c.parts, 0, inflight, func(k int) bool { return k < c.parts }); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	// An untimed round longer than the interval policy's default loss
	// window (1 s), and longer with more partitions: the new partitions'
	// first syncs, which also make their layout durable (directories,
	// incarnation file: several fsyncs each, 5 s for 10,000 on the
	// machine this was written on), happen in it and not in the first
	// timed round.
	warm, warmFor := time.Now(), max(round, 2*time.Second+time.Duration(c.parts)*500*time.Microsecond)
	if _, err := produceSpread(ctx, n, topics, per, c.parts, 0, inflight, func(k int) bool {
		return k%1024 != 0 || time.Since(warm) < warmFor
	}); err != nil {
		return nil, fmt.Errorf("warm-up round: %w", err)
	}
	var out []cpuResult
	for r := range rounds {
		if profDir != "" {
			f, err := os.Create(fmt.Sprintf("%s/%s-%d-r%d.pprof", profDir, policyName(c.policy), c.parts, r))
			if err != nil {
				return nil, err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return nil, err
			}
			defer f.Close()
		}
		runtime.GC()
		start, cpu0 := time.Now(), cpuNow()
		msgs, err := produceSpread(ctx, n, topics, per, c.parts, 0, inflight, func(k int) bool {
			return k%1024 != 0 || time.Since(start) < round
		})
		res := cpuResult{msgs: msgs, wall: time.Since(start), cpu: cpuNow() - cpu0}
		if profDir != "" {
			pprof.StopCPUProfile()
		}
		if err != nil {
			return nil, err
		}
		fmt.Printf("%s, %d partitions, round %d: %d msgs in %v, %.3gk msgs/s, CPU %v, %.3g µs/msg\n",
			policyName(c.policy), c.parts, r+1, res.msgs, res.wall.Round(time.Millisecond), res.rate()/1000,
			res.cpu.Round(time.Millisecond), float64(res.perMsg())/float64(time.Microsecond))
		out = append(out, res)
	}
	return out, nil
}

// produceSpread produces one message per ProduceAsync call while more(k)
// holds for the k-th, the k-th to partition (first+k) mod count, with at
// most inflight unacknowledged; every one is awaited before it returns,
// which returns how many it produced.
func produceSpread(ctx context.Context, n *parkway.Node, topics []parkway.Topic, per, count, first, inflight int, more func(int) bool) (int, error) {
	ring := make([]*parkway.PendingAck, inflight)
	msg := parkway.Message{Payload: make([]byte, 100)}
	var firstErr error
	wait := func(pa *parkway.PendingAck) {
		if _, err := pa.Wait(ctx); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	k := 0
	for ; more(k); k++ {
		slot := k % inflight
		if pa := ring[slot]; pa != nil {
			if wait(pa); firstErr != nil {
				return k, firstErr
			}
		}
		i := (first + k) % count
		ring[slot] = n.ProduceAsync(ctx, topics[i/per], parkway.PartitionID(uint32(i%per)), msg)
	}
	for j := range ring {
		if pa := ring[(k+j)%inflight]; pa != nil {
			wait(pa)
		}
	}
	return k, firstErr
}

// loadavg is /proc/loadavg's first three fields ("n/a" off Linux).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}
