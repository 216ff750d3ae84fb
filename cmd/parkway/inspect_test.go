//go:build unix

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestInspect(t *testing.T) {
	dir := makeDir(t, 30000)
	before := checksum(t, dir)
	r := runBin(t, "inspect", dir)
	t.Logf("inspect said:\n%s", r.stdout)
	if r.code != 0 {
		t.Fatalf("inspect:\n%v", r)
	}
	for _, want := range []string{
		"single node",
		"shop    orders  2",                      // the topic and its partitions
		"default",                                // its fsync policy
		"1h0m0s",                                 // its retention
		"billing   shop    orders  0          5", // the named consumer's offset
		"audit",                                  // the group
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect output lacks %q", want)
		}
	}
	r = runBin(t, "inspect", "--json", dir)
	if r.code != 0 {
		t.Fatalf("inspect --json:\n%v", r)
	}
	var in inspection
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil {
		t.Fatalf("inspect --json is not JSON: %v\n%s", err, r.stdout)
	}
	if len(in.Partitions) != 2 {
		t.Fatalf("partitions: %+v", in.Partitions)
	}
	for _, p := range in.Partitions {
		if p.Status != "ok" || p.Start != 0 || p.End != 30000 || p.Bytes == 0 || len(p.Segments) == 0 {
			t.Errorf("partition %+v", p)
		}
	}
	if len(in.Partitions[0].Segments) < 3 {
		t.Errorf("partition 0 has %d segments, want several", len(in.Partitions[0].Segments))
	}
	if len(in.Groups) != 1 || in.Groups[0].Name != "audit" || in.Groups[0].Partitions[0].Committed == nil || *in.Groups[0].Partitions[0].Committed != 3 {
		t.Errorf("groups: %+v", in.Groups)
	}
	if len(in.Consumers) != 1 || in.Consumers[0].Consumer != "billing" || in.Consumers[0].Offset != 5 {
		t.Errorf("consumers: %+v", in.Consumers)
	}
	if checksum(t, dir) != before {
		t.Fatal("inspect changed the directory")
	}
}

func TestInspectCluster(t *testing.T) {
	dir := makeDir(t, 100, inCluster)
	before := checksum(t, dir)
	r := runBin(t, "inspect", "--json", dir)
	if r.code != 0 {
		t.Fatalf("inspect:\n%v", r)
	}
	var in inspection
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil {
		t.Fatal(err)
	}
	if in.Identity == nil || in.Identity.Node != 1 {
		t.Fatalf("identity: %+v", in.Identity)
	}
	if !in.Cluster || len(in.Raft) != 3 {
		t.Fatalf("raft groups: %+v", in.Raft)
	}
	for _, g := range in.Raft {
		if g.Error != "" || g.Term == 0 || g.Commit == 0 || len(g.Voters) != 1 || g.Voters[0] != 1 {
			t.Errorf("raft group %+v", g)
		}
	}
	for _, p := range in.Partitions {
		if p.Status != "ok" || p.End != 100 {
			t.Errorf("partition %+v", p)
		}
	}
	r = runBin(t, "inspect", dir)
	t.Logf("inspect said:\n%s", r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "RAFT GROUP") || !strings.Contains(r.stdout, "shop/orders/1") {
		t.Fatalf("inspect:\n%v", r)
	}
	if checksum(t, dir) != before {
		t.Fatal("inspect changed the directory")
	}
}

// TestInspectDamaged: damage in a partition shows in its status; damage
// that keeps the metadata from loading exits 1 pointing at verify.
func TestInspectDamaged(t *testing.T) {
	base := makeDir(t, 30000)
	dir := copyDir(t, base)
	flip(t, segments(t, dir, 0)[0], 5000)
	wal := metadataLog(t, dir)
	r := runBin(t, "inspect", dir)
	// A sealed segment is checked from its last index entry at open: the
	// damage is found by the read that reaches it (dump, verify).
	if r.code != 0 {
		t.Fatalf("inspect with a damaged sealed segment:\n%v", r)
	}
	segs := segments(t, dir, 1)
	// The last record, written whole and flipped, is damage (not a torn
	// write): shown as such.
	flip(t, segs[len(segs)-1], fileSize(t, segs[len(segs)-1])-3)
	r = runBin(t, "inspect", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "damaged: ") || !strings.Contains(r.stdout, "damage, not a torn write") {
		t.Fatalf("inspect with a damaged tail record:\n%v", r)
	}
	// Its last sector unwritten (zeros) is a torn write: bytes a node
	// truncates.
	dir2 := copyDir(t, base)
	segs = segments(t, dir2, 1)
	size := fileSize(t, segs[len(segs)-1])
	zero(t, segs[len(segs)-1], min((size-1)/512*512, size-16), size)
	r = runBin(t, "inspect", dir2)
	if r.code != 0 || !strings.Contains(r.stdout, "bytes after its last whole record") {
		t.Fatalf("inspect with a torn tail record:\n%v", r)
	}
	flip(t, wal, 9)
	r = runBin(t, "inspect", dir)
	if r.code != exitProblems || !strings.Contains(r.stderr, "parkway verify") {
		t.Fatalf("inspect with damaged metadata: want exit 1\n%v", r)
	}
}
