//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway"
)

// deferChildEnv makes the test binary, re-executed, a node that runs
// deferredNode on the directory the variable names and then waits to be
// killed.
const deferChildEnv = "PARKWAY_CLI_TEST_DEFER_CHILD"

// deferredNode creates shop/orders with 2 partitions on a node over dir
// and produces 3 acknowledged messages to partition 0 (fsync on every
// write): a new partition lives in the node's journal until it needs
// files (DESIGN behaviour 32), and partition 1 never gets any.
func deferredNode(dir string) (*parkway.Node, error) {
	node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 1})
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	st, err := node.Admin().CreateStream(ctx, "shop")
	if err == nil {
		var tp parkway.Topic
		tp, err = node.Admin().CreateTopic(ctx, st, "orders", 2)
		for i := 0; err == nil && i < 3; i++ {
			_, err = node.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: fmt.Appendf(nil, "m%d", i)})
		}
	}
	if err != nil {
		node.Close()
		return nil, err
	}
	return node, nil
}

func deferChild(dir string) {
	if _, err := deferredNode(dir); err != nil {
		fmt.Println("node:", err)
		os.Exit(1)
	}
	fmt.Println("produced")
	select {}
}

// TestDeferredPartitions: a node that created a 2-partition topic and
// produced 3 messages to partition 0, then was closed or killed, leaves
// partitions without directories that it rebuilds from its journal (or
// that are empty): verify finds nothing wrong, inspect shows them living
// in the journal with their records counted, dump prints the records,
// and none of them changes a byte.
func TestDeferredPartitions(t *testing.T) {
	for _, how := range []string{"closed", "killed"} {
		t.Run(how, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if how == "closed" {
				node, err := deferredNode(dir)
				if err != nil {
					t.Fatal(err)
				}
				if err := node.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				killDeferredChild(t, dir)
			}
			before := checksum(t, dir)
			parts, _ := filepath.Glob(filepath.Join(dir, "streams", "*", "topics", "*", "partitions", "*"))
			t.Logf("%s: %d partition directories", how, len(parts))

			r := runBin(t, "verify", dir)
			if r.code != 0 || strings.Contains(r.stdout, "missing") {
				t.Fatalf("verify:\n%v", r)
			}
			r = runBin(t, "inspect", "--json", dir)
			var in inspection
			if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != 0 {
				t.Fatalf("inspect: %v\n%v", err, r)
			}
			if len(in.Partitions) != 2 {
				t.Fatalf("inspect: %+v", in.Partitions)
			}
			for _, pv := range in.Partitions {
				want := uint64(0)
				if pv.Partition == 0 {
					want = 3
				}
				if pv.End != want || strings.Contains(pv.Status, "missing") {
					t.Fatalf("inspect: partition %d: status %q, end %d, want end %d\n%v", pv.Partition, pv.Status, pv.End, want, r)
				}
				if _, err := os.Stat(filepath.Join(dir, pv.Dir)); err != nil && pv.Status != "journal" {
					t.Fatalf("inspect: partition %d has no directory, status %q", pv.Partition, pv.Status)
				}
			}
			r = runBin(t, "dump", dir, "--stream", "shop", "--topic", "orders", "--partition", "0")
			msgs := dumpLines(t, r.stdout)
			if r.code != 0 || len(msgs) != 3 {
				t.Fatalf("dump: %d messages\n%v", len(msgs), r)
			}
			for i, m := range msgs {
				if m.Offset != uint64(i) || m.Payload == nil || *m.Payload != fmt.Sprintf("m%d", i) {
					t.Fatalf("dump: message %d: %+v", i, m)
				}
			}
			r = runBin(t, "dump", dir, "--stream", "shop", "--topic", "orders", "--partition", "0", "--from", "1", "--count", "1")
			if msgs := dumpLines(t, r.stdout); r.code != 0 || len(msgs) != 1 || msgs[0].Offset != 1 {
				t.Fatalf("dump --from 1 --count 1:\n%v", r)
			}
			r = runBin(t, "dump", dir, "--stream", "shop", "--topic", "orders", "--partition", "1")
			if r.code != 0 || r.stdout != "" {
				t.Fatalf("dump of the empty partition:\n%v", r)
			}
			if checksum(t, dir) != before {
				t.Fatal("a read-only command changed the directory")
			}
		})
	}
}

// killDeferredChild runs deferredNode in a child process on dir and
// kills it with SIGKILL once it has produced.
func killDeferredChild(t *testing.T, dir string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), deferChildEnv+"="+dir)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "produced" {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("the child node said %q", line)
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
}
