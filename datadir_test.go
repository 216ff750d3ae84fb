package parkway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
)

// TestBehaviour27DataDirLock: a second Open of a DataDir that a Node holds
// fails at once with a *LockedError (ErrDataDirLocked) naming the
// directory and this process as the holder, on the operating system's
// filesystem and on a MemFS; after Close (twice: idempotent) the
// directory opens again with what the first Node wrote.
func TestBehaviour27DataDirLock(t *testing.T) {
	for _, c := range []struct {
		name string
		fs   vfs.FS
		dir  func(t *testing.T) string
	}{
		{"os", nil, func(t *testing.T) string { return t.TempDir() }},
		{"mem", vfs.NewMem(), func(*testing.T) string { return "/data" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := parkway.Config{DataDir: c.dir(t), FS: c.fs, Shards: 1}
				first, err := parkway.Open(cfg)
				if err != nil {
					t.Fatal(err)
				}
				mustStream(t, first, "first")
				second, err := parkway.Open(cfg)
				if err == nil {
					_ = second.Close()
					t.Fatal("a second Open of a held DataDir succeeded")
				}
				var locked *parkway.LockedError
				if !errors.Is(err, parkway.ErrDataDirLocked) || !errors.As(err, &locked) {
					t.Fatalf("second Open: %v, want a *LockedError matching ErrDataDirLocked", err)
				}
				if locked.Dir != cfg.DataDir || locked.PID != os.Getpid() {
					t.Errorf("LockedError names %q held by pid %d, want %q and pid %d", locked.Dir, locked.PID, cfg.DataDir, os.Getpid())
				}
				if m := missingWords(err, cfg.DataDir); m != nil {
					t.Errorf("error %q does not name the directory", err)
				}
				synctest.Wait()
				if err := first.Close(); err != nil {
					t.Fatal(err)
				}
				if err := first.Close(); err != nil {
					t.Fatalf("second Close: %v", err)
				}
				again := open(t, cfg)
				if _, err := again.Stream(ctxFor(t), "first"); err != nil {
					t.Fatalf("the reopened directory lost the first node's stream: %v", err)
				}
			})
		})
	}
}

// lockChildDir is the environment variable that makes the test binary a
// child holding a DataDir (TestBehaviour27DataDirLockChild).
const lockChildDir = "PARKWAY_TEST_LOCK_CHILD_DIR"

// TestBehaviour27DataDirLockAcrossProcesses: a child process (this test
// binary, re-executed) opens a DataDir and keeps it; the parent's Open is
// refused at once, naming the child's pid. After kill -9 of the child —
// no Close, no cleanup — the kernel has dropped its lock and the parent
// opens the directory, with the stream the child created.
func TestBehaviour27DataDirLockAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^TestBehaviour27DataDirLockChild$", "-test.count=1", "-test.timeout=2m")
	child.Env = append(os.Environ(), lockChildDir+"="+dir)
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe() // the child exits when it closes
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		_ = stdin.Close()
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	ready := false
	for sc := bufio.NewScanner(stdout); sc.Scan(); {
		if strings.TrimSpace(sc.Text()) == "ready" {
			ready = true
			break
		}
	}
	if !ready {
		t.Fatal("the child exited before it held the directory")
	}

	cfg := parkway.Config{DataDir: dir, Shards: 1}
	n, err := parkway.Open(cfg)
	if err == nil {
		_ = n.Close()
		t.Fatal("Open succeeded on a DataDir another process holds")
	}
	var locked *parkway.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, parkway.ErrDataDirLocked) {
		t.Fatalf("Open: %v, want a *LockedError matching ErrDataDirLocked", err)
	}
	if locked.PID != child.Process.Pid || locked.Dir != dir {
		t.Fatalf("LockedError %v names pid %d and %q, want the child's pid %d and %q", err, locked.PID, locked.Dir, child.Process.Pid, dir)
	}

	if err := child.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed = true
	synctest.Test(t, func(t *testing.T) {
		n := open(t, cfg)
		if _, err := n.Stream(ctxFor(t), "child"); err != nil {
			t.Fatalf("after kill -9 of the holder the directory opens, but the child's stream: %v", err)
		}
	})
}

// TestBehaviour27DataDirLockChild is the child of
// TestBehaviour27DataDirLockAcrossProcesses: it opens the DataDir it is
// given, creates a stream, says "ready" and holds the directory until
// killed (or until its parent closes its stdin).
func TestBehaviour27DataDirLockChild(t *testing.T) {
	dir := os.Getenv(lockChildDir)
	if dir == "" {
		t.Skip("runs only as the child of TestBehaviour27DataDirLockAcrossProcesses")
	}
	n, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.Admin().CreateStream(ctxFor(t), "child"); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // blocks until killed or stdin closes
}

// TestBehaviour27DataDirIdentity: a data directory records the cluster and
// node that first used it. After a 3-node cluster ran and stopped, node
// 3 opened on node 2's directory, node 1 under another cluster id, and a
// single node on node 1's directory are each refused with a
// *WrongDataDirError naming what was expected and what was found (and
// touch nothing: the directories still open); every node reopens on its
// own directory, with the cluster's metadata, across restarts.
func TestBehaviour27DataDirIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newDiskCluster(t, nil)
		s := mustStream(t, c.nodes[1], "s")
		for id := range c.nodes {
			c.stop(id)
		}
		refused := func(what string, cfg parkway.Config, want parkway.WrongDataDirError) {
			t.Helper()
			n, err := parkway.Open(cfg)
			if err == nil {
				_ = n.Close()
				t.Fatalf("%s: Open succeeded", what)
			}
			var wrong *parkway.WrongDataDirError
			if !errors.Is(err, parkway.ErrWrongDataDir) || !errors.As(err, &wrong) {
				t.Fatalf("%s: %v, want a *WrongDataDirError matching ErrWrongDataDir", what, err)
			}
			if *wrong != want {
				t.Fatalf("%s: %+v, want %+v", what, *wrong, want)
			}
		}
		other := c.cfg(3)
		other.FS = c.disks[2]
		refused("node 3 on node 2's directory", other,
			parkway.WrongDataDirError{Dir: "/data", WantNode: 3, FoundNode: 2})
		otherCluster := c.cfg(1)
		otherCluster.Cluster.ClusterID = "elsewhere"
		refused("node 1 of another cluster", otherCluster,
			parkway.WrongDataDirError{Dir: "/data", WantCluster: "elsewhere", WantNode: 1, FoundNode: 1})
		refused("a single node on node 1's directory", parkway.Config{Shards: 2, DataDir: "/data", FS: c.disks[1]},
			parkway.WrongDataDirError{Dir: "/data", WantNode: 0, FoundNode: 1})

		for round := range 2 {
			for _, id := range c.peers {
				c.start(id)
			}
			for id, n := range c.nodes {
				if got, err := n.Stream(ctxFor(t), "s"); err != nil || got != s {
					t.Fatalf("restart %d: node %d on its own directory: Stream(s) = %v, %v; want %v", round, id, got, err, s)
				}
			}
			synctest.Wait()
			for id := range c.nodes {
				c.stop(id)
			}
		}
	})
}

// TestBehaviour27DataDirIdentitySingleNode: a single node's directory (on
// the operating system's filesystem) records that it is a single node: a
// cluster node refuses it, and the single node reopens it.
func TestBehaviour27DataDirIdentitySingleNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		cfg := parkway.Config{Shards: 1, DataDir: dir}
		n, err := parkway.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := mustStream(t, n, "s")
		synctest.Wait()
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		net := transport.NewNetwork(transport.NetworkOptions{})
		defer net.Close()
		_, err = parkway.Open(parkway.Config{Shards: 1, DataDir: dir,
			Cluster: &parkway.ClusterConfig{ID: 1, Peers: []transport.NodeID{1}, Bus: net.Endpoint(1), ClusterID: "c"}})
		var wrong *parkway.WrongDataDirError
		if !errors.As(err, &wrong) || wrong.FoundNode != 0 || wrong.WantNode != 1 || wrong.WantCluster != "c" {
			t.Fatalf("cluster node on a single node's directory: %v, want a *WrongDataDirError", err)
		}
		if m := missingWords(err, dir, "single node", `node 1 of cluster "c"`); m != nil {
			t.Errorf("error %q lacks %q", err, m)
		}
		again := open(t, cfg)
		if got, err := again.Stream(ctxFor(t), "s"); err != nil || got != s {
			t.Fatalf("single node reopened: %v, %v", got, err)
		}
	})
}

// TestBehaviour27DataDirIdentityEmptiedMemberRefused: a member whose data
// directory is emptied (a replaced disk) does not come back as if it held
// its log. Node 2 falls behind while nodes 1 and 3 acknowledge ten
// writes; node 3's directory is replaced by an empty one and node 1 goes
// down. Node 3 opens fine — nothing on its disk says it was a member —
// but its directory announces a new incarnation, and node 2, which
// recorded the old one, refuses its traffic (counted as
// wrong_data_dir drops): the stale node 2 cannot be elected with the
// emptied node's vote, so a write through it is not acknowledged. Once
// node 1 is back, nodes 1 and 2 hold every acknowledged write. Without
// the refusal node 2 led with node 3's vote and acknowledged a write over
// the lost ones.
func TestBehaviour27DataDirIdentityEmptiedMemberRefused(t *testing.T) {
	// restart: node 2 is restarted too before node 3 comes back, so what
	// it refuses with is the record it kept on disk.
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) { emptiedMemberRefused(t, restart) })
	}
}

func emptiedMemberRefused(t *testing.T, restart bool) {
	synctest.Test(t, func(t *testing.T) {
		c := newDiskCluster(t, nil)
		s := mustStream(t, c.nodes[1], "s")
		tp := mustTopic(t, c.nodes[1], s, "t", 1)
		want := c.produce(1, tp, "b", 3)
		c.converged(tp, want)

		c.net.Partition([]transport.NodeID{2}, []transport.NodeID{1, 3})
		want = append(want, c.produce(1, tp, "a", 10)...)
		c.stop(3)
		c.disks[3] = vfs.NewMem()
		c.stop(1)
		c.net.Heal()
		if restart {
			c.stop(2)
			c.start(2)
		}
		c.start(3)

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := c.nodes[2].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("over")})
		cancel()
		if err == nil {
			t.Fatalf("the stale node 2 and the emptied node 3 acknowledged a write at offset %d: "+
				"%d acknowledged writes were lost", ack.FirstOffset, len(want)-int(ack.FirstOffset))
		}
		if got := metricValue(t, registry(t, c.nodes[2]), "parkway_frame_drops_total", "reason", "wrong_data_dir"); got == 0 {
			t.Error("node 2 counted no frame dropped from the emptied node 3")
		}

		c.start(1)
		for _, id := range []transport.NodeID{1, 2} {
			var got []string
			waitFor(t, fmt.Sprintf("node %d to hold %d messages", id, len(want)), func() bool {
				got, err = localLog(c.nodes[id], tp)
				return err == nil && len(got) >= len(want)
			})
			if !slices.Equal(got, want) {
				t.Fatalf("node %d holds %q, want %q", id, got, want)
			}
		}
	})
}

// TestBehaviour27DataDirIdentityRefusedMemberReadmitted: the way back for
// a member refused for an emptied directory. Node 4 of four comes back
// on an empty disk and is refused; it is removed through node 1 (its
// replicas are rebuilt on the others from the surviving copies), started
// again on an empty disk with Join, added with AddNode — its peers forgot
// its old directory at the removal — and Rebalance moves replicas onto
// it: every replica, node 4's included, holds every acknowledged write.
func TestBehaviour27DataDirIdentityRefusedMemberReadmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		peers := []transport.NodeID{1, 2, 3, 4}
		disks := map[transport.NodeID]*vfs.MemFS{}
		nodes := map[transport.NodeID]*parkway.Node{}
		start := func(id transport.NodeID, join bool) {
			t.Helper()
			n, err := parkway.Open(parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second, DataDir: "/data", FS: disks[id],
				Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Join: join, Bus: net.Endpoint(id)}})
			if err != nil {
				t.Fatalf("open node %d: %v", id, err)
			}
			nodes[id] = n
		}
		stop := func(id transport.NodeID) {
			t.Helper()
			if err := nodes[id].Close(); err != nil {
				t.Errorf("close node %d: %v", id, err)
			}
			delete(nodes, id)
		}
		t.Cleanup(func() {
			synctest.Wait()
			for id := range nodes {
				stop(id)
			}
			_ = net.Close()
		})
		for _, id := range peers {
			disks[id] = vfs.NewMem()
			start(id, false)
		}
		ctx := context.Background()
		s := mustStream(t, nodes[1], "s")
		tp := mustTopic(t, nodes[1], s, "t", 4, parkway.WithReplicas(3))
		acked := map[uint32][]string{}
		produce := func(prefix string, n int) {
			t.Helper()
			for i := range n {
				what := fmt.Sprint(prefix, i)
				if _, err := nodes[1].Produce(ctx, tp, parkway.PartitionID(uint32(i%4)), parkway.Message{Payload: []byte(what)}); err != nil {
					t.Fatalf("produce %s: %v", what, err)
				}
				acked[uint32(i%4)] = append(acked[uint32(i%4)], what)
			}
		}
		produce("m", 20)

		stop(4)
		disks[4] = vfs.NewMem()
		start(4, false)
		reg := registry(t, nodes[1])
		waitFor(t, "node 1 to refuse the emptied node 4", func() bool {
			return metricValue(t, reg, "parkway_frame_drops_total", "reason", "wrong_data_dir") > 0
		})
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second) // virtual time
		defer cancel()
		if err := nodes[1].Cluster().RemoveNode(rctx, 4); err != nil {
			t.Fatalf("RemoveNode of the refused node: %v", err)
		}
		produce("r", 8)

		stop(4)
		disks[4] = vfs.NewMem()
		start(4, true)
		if err := nodes[2].Cluster().AddNode(rctx, 4); err != nil {
			t.Fatalf("AddNode: %v", err)
		}
		if err := nodes[1].Cluster().Rebalance(rctx); err != nil {
			t.Fatalf("Rebalance: %v", err)
		}
		produce("a", 8)
		parts, err := parkway.EnginePartitions(ctx, nodes[1], tp)
		if err != nil {
			t.Fatal(err)
		}
		on4 := 0
		for _, p := range parts {
			if slices.Contains(p.Replicas, 4) {
				on4++
			}
			expectReplicas(t, nodes, tp, p, acked[p.Partition])
		}
		if on4 == 0 {
			t.Fatal("Rebalance placed no replica on the readmitted node 4")
		}
	})
}
