//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRemoveNode runs four members as processes with --admin, produces 40
// records through the first one's Kafka listener to a topic of two
// partitions (three replicas each, so node 4 holds some), and removes
// node 4 with `parkway remove-node --via` naming every member's HTTP
// address, node 4's first (a member cannot remove itself: the command
// goes on to the next). Checked from outside: the command exits 0; the
// remaining members' logs say it was removed and taken off their buses;
// every record is read back through node 1 after node 4 is stopped; and,
// once every process stopped, `parkway inspect` of a remaining member's
// directory lists nodes 1–3 and no replica on node 4. Bad uses exit 2.
func TestRemoveNode(t *testing.T) {
	for _, args := range [][]string{
		{"remove-node", "4"},                              // no --via
		{"remove-node", "--via", "127.0.0.1:1"},           // no id
		{"remove-node", "--via", "127.0.0.1:1", "0"},      // id 0
		{"remove-node", "--via", "nohostport", "4"},       // bad --via
		{"remove-node", "--via", "127.0.0.1:1", "x", "y"}, // two ids
	} {
		if r := runBin(t, args...); r.code != exitUsage {
			t.Fatalf("%v: exit %d, want %d\n%v", args, r.code, exitUsage, r)
		}
	}

	addrs := freeAddrs(t, 5) // four members, then node 1's Kafka listener
	kafkaAddr := addrs[4]
	peers := fmt.Sprintf("1=%s,2=%s,3=%s,4=%s", addrs[0], addrs[1], addrs[2], addrs[3])
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	var members []*server
	for i := range 4 {
		args := []string{"--data-dir", dirs[i], "--node-id", fmt.Sprint(i + 1), "--listen", addrs[i],
			"--peers", peers, "--insecure-plaintext", "--shards", "1", "--admin"}
		if i == 0 {
			args = append(args, "--kafka", kafkaAddr, "--kafka-brokers", "1="+kafkaAddr)
		}
		members = append(members, startServe(t, nil, args...))
	}
	for _, s := range members {
		s.waitReady()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.DefaultProduceTopic("orders"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := kadm.NewClient(cl).CreateTopics(ctx, 2, -1, nil, "orders"); err != nil || res["orders"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["orders"].Err)
	}
	const n = 40
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	cl.Close()

	via := members[3].http + "," + members[0].http + "," + members[1].http + "," + members[2].http
	r := runBin(t, "remove-node", "--via", via, "--timeout", "2m", "4")
	if r.code != 0 || !strings.Contains(r.stdout, "node 4 removed from the cluster") {
		t.Fatalf("remove-node:\n%v", r)
	}
	removed := 0
	for _, s := range members[:3] {
		if strings.Contains(s.log(), "node removed") {
			removed++
		} else if !strings.Contains(s.log(), "peer removed") {
			t.Fatalf("a remaining member's log says nothing of node 4's removal:\n%s", s.log())
		}
	}
	if removed != 1 {
		t.Fatalf("%d members removed node 4, want 1", removed)
	}
	if code := members[3].stop(); code != 0 {
		t.Logf("node 4 exited %d after SIGTERM", code)
	}

	// Every record is there without node 4.
	cons, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < n && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	cons.Close()
	if len(seen) != n {
		t.Fatalf("%d of %d records read back after node 4's removal", len(seen), n)
	}

	for i, s := range members[:3] {
		if code := s.stop(); code != 0 {
			t.Fatalf("member %d: exit %d after SIGTERM:\n%s", i+1, code, s.log())
		}
	}
	r = runBin(t, "inspect", "--json", dirs[0])
	var in inspection
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != 0 {
		t.Fatalf("inspect: %v\n%v", err, r)
	}
	if !slices.Equal(in.Nodes, []uint64{1, 2, 3}) {
		t.Fatalf("cluster nodes %v after the removal, want [1 2 3]", in.Nodes)
	}
	for _, p := range in.Partitions {
		if slices.Contains(p.Replicas, 4) {
			t.Fatalf("partition %d still has a replica on node 4: %+v", p.Partition, p)
		}
	}
}
