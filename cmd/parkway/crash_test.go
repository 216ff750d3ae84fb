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
	"time"

	"github.com/parkway-io/parkway"
)

// crashChildEnv makes the test binary, re-executed, a node that produces
// into the directory the variable names and then waits to be killed.
const crashChildEnv = "PARKWAY_CLI_TEST_CRASH_CHILD"

// crashChild opens a node on dir, produces 500 acknowledged messages to
// partition 0 of shop/orders (fsync on every write: the store's journal
// holds them, their own files are written behind), prints "produced" and
// waits for SIGKILL.
func crashChild(dir string) {
	node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 1})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	st, err := node.Admin().CreateStream(ctx, "shop")
	if err == nil {
		var tp parkway.Topic
		tp, err = node.Admin().CreateTopic(ctx, st, "orders", 1)
		for i := 0; err == nil && i < 500; i++ {
			_, err = node.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: fmt.Appendf(nil, "m%d", i)})
		}
	}
	if err != nil {
		fmt.Println("produce:", err)
		os.Exit(1)
	}
	fmt.Println("produced")
	select {}
}

// TestAfterACrash: a node killed with SIGKILL leaves its directory as a
// crash does (a journal whose records its partitions' files may lack);
// the read-only commands read it as found, say what a node opening it
// would replay, and change nothing; a node opening it then has every
// acknowledged message, and the directory verifies clean.
func TestAfterACrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+dir)
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

	before := checksum(t, dir)
	journals, _ := filepath.Glob(filepath.Join(dir, "journal", "*.journal"))
	t.Logf("after the kill: %d journal files", len(journals))
	r := runBin(t, "verify", dir)
	t.Logf("verify said:\n%s", r.stdout)
	if r.code != 0 && r.code != exitProblems {
		t.Fatalf("verify after a crash:\n%v", r)
	}
	if len(journals) > 0 && !strings.Contains(r.stdout, "replays") {
		t.Fatalf("verify does not mention the journal:\n%v", r)
	}
	r = runBin(t, "inspect", "--json", dir)
	var in inspection
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != 0 {
		t.Fatalf("inspect after a crash: %v\n%v", err, r)
	}
	if len(in.Partitions) != 1 || in.Partitions[0].End > 500 {
		t.Fatalf("inspect after a crash: %+v", in.Partitions)
	}
	// dump prints the files' records and then the journal's beyond them.
	r = runBin(t, "dump", dir, "--stream", "shop", "--topic", "orders", "--partition", "0")
	if msgs := dumpLines(t, r.stdout); r.code != 0 || len(msgs) != 500 {
		t.Fatalf("dump after a crash: %d messages\n%v", len(msgs), r)
	}
	if checksum(t, dir) != before {
		t.Fatal("a read-only command changed the crashed directory")
	}

	// A node opening it recovers every acknowledged message.
	node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := node.Stream(ctx, "shop")
	if err == nil {
		var tp parkway.Topic
		if tp, err = node.Topic(ctx, st, "orders"); err == nil {
			var offs parkway.PartitionOffsets
			for offs.End < 500 && err == nil && ctx.Err() == nil {
				offs, err = node.Admin().PartitionOffsets(ctx, tp, 0, "")
			}
		}
	}
	if cerr := node.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	r = runBin(t, "inspect", "--json", dir)
	var after inspection
	err = json.Unmarshal([]byte(r.stdout), &after)
	pending := 0
	for _, j := range after.Journal {
		pending += j.Records
	}
	if err != nil || len(after.Partitions) != 1 || after.Partitions[0].End != 500 || pending != 0 {
		t.Fatalf("inspect after recovery: %v %+v, %d journal records\n%v", err, after.Partitions, pending, r)
	}
	if r := runBin(t, "verify", dir); r.code != 0 {
		t.Fatalf("verify after recovery:\n%v", r)
	}
}
