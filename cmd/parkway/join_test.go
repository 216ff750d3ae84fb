//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestServeJoin runs three members as processes with --admin, creates a
// topic through the first one's Kafka listener, then starts a fourth
// process on an empty data directory with --join and --join-via naming
// the members' HTTP addresses: it asks them to admit and add it, and
// becomes a member that knows the topic created before it joined. Checked
// from outside: its log says it joined, and after every process stopped,
// `parkway inspect` of its directory and of a founder's lists four nodes
// and the topic. A node without --admin has no such calls.
func TestServeJoin(t *testing.T) {
	addrs := freeAddrs(t, 5) // four members, then node 1's Kafka listener
	kafkaAddr := addrs[4]
	founders := fmt.Sprintf("1=%s,2=%s,3=%s", addrs[0], addrs[1], addrs[2])
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	var members []*server
	for i := range 3 {
		args := []string{"--data-dir", dirs[i], "--node-id", fmt.Sprint(i + 1), "--listen", addrs[i],
			"--peers", founders, "--insecure-plaintext", "--shards", "1"}
		if i == 0 {
			args = append(args, "--kafka", kafkaAddr, "--kafka-brokers", "1="+kafkaAddr)
		}
		members = append(members, startServe(t, nil, append(args, "--admin")...))
	}
	for _, s := range members {
		s.waitReady()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := kadm.NewClient(adm).CreateTopics(ctx, 2, -1, nil, "orders"); err != nil || res["orders"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["orders"].Err)
	}
	adm.Close()

	all := founders + ",4=" + addrs[3]
	joiner := startServe(t, nil, "--data-dir", dirs[3], "--node-id", "4", "--listen", addrs[3],
		"--peers", all, "--insecure-plaintext", "--shards", "1", "--join",
		"--join-via", members[0].http+","+members[1].http+","+members[2].http)
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(joiner.log(), "joined the cluster") {
		if time.Now().After(deadline) {
			t.Fatalf("node 4 did not join within 2 minutes:\n%s", joiner.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// It learns the metadata committed before it joined.
	for {
		code, _ := joiner.get("/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 4 not ready after joining:\n%s", joiner.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A node without --admin has no membership calls.
	resp, err := http.PostForm("http://"+joiner.http+"/admin/nodes", url.Values{"id": {"5"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/admin/nodes on a node without --admin: %s, want 404", resp.Status)
	}
	for i, s := range append(members, joiner) {
		if code := s.stop(); code != 0 {
			t.Fatalf("member %d: exit %d after SIGTERM:\n%s", i+1, code, s.log())
		}
	}
	for _, dir := range []string{dirs[3], dirs[0]} {
		r := runBin(t, "inspect", "--json", dir)
		if r.code != 0 {
			t.Fatalf("inspect %s:\n%v", dir, r)
		}
		var in inspection
		if err := json.Unmarshal([]byte(r.stdout), &in); err != nil {
			t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
		}
		if !slices.Equal(in.Nodes, []uint64{1, 2, 3, 4}) {
			t.Fatalf("%s: cluster nodes %v, want [1 2 3 4]", dir, in.Nodes)
		}
		found := false
		for _, st := range in.Streams {
			for _, tp := range st.Topics {
				found = found || tp.Name == "orders"
			}
		}
		if !found {
			t.Fatalf("%s: topic orders, created before node 4 joined, is not in its metadata:\n%s", dir, r.stdout)
		}
	}
}
