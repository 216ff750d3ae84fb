//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/metadata"
)

// rollChildEnv makes the test binary, re-executed, a node that runs
// rollChild on the directory the variable names and then waits to be
// killed.
const rollChildEnv = "PARKWAY_CLI_TEST_ROLL_CHILD"

// rollChild opens a node on a fresh dir (nothing closed cleanly, ever),
// creates shop/orders with 3 partitions and fills the journal's first
// file (64 MiB): 320 messages of almost 200 KiB to partition 0 (each one
// commit, within the journal's stash bound: a batch past it goes to the
// partition's own file, not the journal), then as many to partition 1 as
// it takes the journal to start a second file. The
// node then checkpoints partitions 0 and 1 into their own directories
// and drops the first file. It produces 3 small messages to partition 2,
// which lives in the second journal file only (deferred, DESIGN behaviour
// 32), prints "produced" once the first file is gone, and waits for
// SIGKILL. So after the kill: partition 0 has a directory built after
// any clean close and no record in the journal; partition 2 may have no
// directory, and its records are in the second journal file.
func rollChild(dir string) {
	fail := func(what string, err error) {
		fmt.Println(what+":", err)
		os.Exit(1)
	}
	node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 1})
	if err != nil {
		fail("open", err)
	}
	ctx := context.Background()
	st, err := node.Admin().CreateStream(ctx, "shop")
	if err != nil {
		fail("stream", err)
	}
	tp, err := node.Admin().CreateTopic(ctx, st, "orders", 3)
	if err != nil {
		fail("topic", err)
	}
	journal := func(seq int) string { return filepath.Join(dir, "journal", fmt.Sprintf("%020d.journal", seq)) }
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }
	big := make([]byte, 200<<10-64)
	for i := range 320 {
		big[0] = byte(i)
		if _, err := node.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: big}); err != nil {
			fail("produce", err)
		}
	}
	if exists(journal(2)) {
		fail("produce", errors.New("the journal started a second file before partition 0 was done"))
	}
	for i := 0; !exists(journal(2)); i++ {
		if i == 20 {
			fail("produce", errors.New("the journal started no second file"))
		}
		if _, err := node.Produce(ctx, tp, parkway.PartitionID(1), parkway.Message{Payload: big}); err != nil {
			fail("produce", err)
		}
	}
	for i := range 3 {
		if _, err := node.Produce(ctx, tp, parkway.PartitionID(2), parkway.Message{Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			fail("produce", err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); exists(journal(1)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			fail("waiting", fmt.Errorf("%s is still there", journal(1)))
		}
	}
	fmt.Println("produced")
	select {}
}

// runRollChild runs rollChild on a new directory, kills it and returns
// the directory.
func runRollChild(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), rollChildEnv+"="+dir)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	if strings.TrimSpace(line) != "produced" {
		t.Fatalf("the child node said %q", line)
	}
	return dir
}

// TestVerifyFindsFilesMissingAfterACrash: a node killed with SIGKILL
// never closed cleanly, so no manifest of a clean close says what it had.
// verify still finds every file removed behind it: a partition directory
// built after the node started (its records no longer in the journal),
// a journal file, the whole journal — from PARTITIONS, which the node
// rewrites whenever its journal starts or drops a file (before this,
// each of them looked like a partition with no record yet, built empty:
// exit 0 and acknowledged messages gone). Untouched, the directory
// verifies clean, and a node opening it has every message.
func TestVerifyFindsFilesMissingAfterACrash(t *testing.T) {
	crashed := runRollChild(t)
	if _, err := os.Stat(partitionDir(crashed, mustNS(t, 0))); err != nil {
		t.Fatalf("partition 0 has no directory after the roll: %v", err)
	}
	journals, _ := filepath.Glob(filepath.Join(crashed, "journal", "*.journal"))
	if len(journals) != 1 {
		t.Fatalf("journal files after the roll: %v, want the second only", journals)
	}

	t.Run("untouched", func(t *testing.T) {
		dir := copyDir(t, crashed)
		if r := runBin(t, "verify", dir); r.code != 0 {
			t.Fatalf("verify:\n%v", r)
		}
		node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := node.Stream(ctx, "shop")
		var tp parkway.Topic
		if err == nil {
			tp, err = node.Topic(ctx, st, "orders")
		}
		ends := map[uint32]uint64{}
		for part := range uint32(3) {
			var offs parkway.PartitionOffsets
			if err == nil {
				offs, err = node.Admin().PartitionOffsets(ctx, tp, part, "")
			}
			ends[part] = offs.End
		}
		t.Logf("ends after reopening: %v", ends)
		for part, want := range []uint64{320, ends[1], 3} {
			var offs parkway.PartitionOffsets
			for err == nil && offs.End < want && ctx.Err() == nil {
				offs, err = node.Admin().PartitionOffsets(ctx, tp, uint32(part), "")
			}
			if err == nil && offs.End != want {
				err = fmt.Errorf("partition %d ends at %d, want %d", part, offs.End, want)
			}
		}
		if cerr := node.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		if r := runBin(t, "verify", dir); r.code != 0 {
			t.Fatalf("verify after the node reopened it:\n%v", r)
		}
	})

	for _, c := range []struct {
		name   string
		remove func(dir string) error
		want   string // in the report
	}{
		{"partition directory built after the last start", func(dir string) error {
			return os.RemoveAll(partitionDir(dir, mustNS(t, 0)))
		}, "streams/0/topics/0/partitions/0:0: partition 0/0/0 (incarnation"},
		{"journal file", func(dir string) error {
			files, _ := filepath.Glob(filepath.Join(dir, "journal", "*.journal"))
			return os.Remove(files[0])
		}, "journal/00000000000000000002.journal:0: journal file missing"},
		{"journal directory", func(dir string) error {
			return os.RemoveAll(filepath.Join(dir, "journal"))
		}, "journal/00000000000000000002.journal:0: journal file missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, crashed)
			if err := c.remove(dir); err != nil {
				t.Fatal(err)
			}
			before := checksum(t, dir)
			r := runBin(t, "verify", dir)
			if r.code != exitProblems || !strings.Contains(r.stdout, c.want) {
				t.Fatalf("verify, want exit %d and %q:\n%v", exitProblems, c.want, r)
			}
			if checksum(t, dir) != before {
				t.Fatal("verify changed the directory")
			}
		})
	}
}

// mustNS is partition part of stream 0's topic 0.
func mustNS(t *testing.T, part uint32) metadata.Namespace {
	t.Helper()
	ns, err := metadata.NewNamespace(0, 0, part)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}
