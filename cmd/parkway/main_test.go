//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir) // never returns: the parent kills it
	}
	if dir := os.Getenv(deferChildEnv); dir != "" {
		deferChild(dir) // never returns: the parent kills it
	}
	if dir := os.Getenv(rollChildEnv); dir != "" {
		rollChild(dir) // never returns: the parent kills it
	}
	// franz-go's LeaveGroup starts a goroutine that waits for the
	// rebalance gate of BlockRebalanceOnPoll (the nemesis test's group
	// consumers) and can outlive a closed client, parked on the gate's
	// condition variable: it is kgo's own, holds nothing of ours, and was
	// seen under -race after Close returned (CloseAllowingRebalance did
	// not avoid it). Every other goroutine must be gone.
	goleak.VerifyTestMain(cleanup{m},
		goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kgo.(*Client).LeaveGroupContext.func1"))
}

// cleanup removes the binary's directory once the tests have run.
type cleanup struct{ m *testing.M }

func (c cleanup) Run() int {
	code := c.m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	return code
}

// The tests run the command as a user does: the binary is built once per
// test process and run on directories a real node made.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "parkway-cli-test")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "parkway")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runBin runs the binary with args and returns what it did.
func runBin(t *testing.T, args ...string) result {
	t.Helper()
	return runBinAs(t, nil, args...)
}

// runBinAs is runBin as the user cred names (nil: this process's).
func runBinAs(t *testing.T, cred *syscall.Credential, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	if strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "goroutine ") {
		t.Fatalf("parkway %v panicked:\n%v", args, r)
	}
	return r
}

// makeDir makes a data directory with a real node: stream "shop", topic
// "orders" of 2 partitions, n messages per partition (keys, headers,
// text and binary payloads), a named consumer's offset on partition 0,
// and a consumer group's committed offset; then closes the node.
func makeDir(t *testing.T, n int, opts ...func(*testing.T, *parkway.Config)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	cfg := parkway.Config{DataDir: dir, Shards: 2, SegmentSize: parkway.MinSegmentSize}
	for _, o := range opts {
		o(t, &cfg)
	}
	node, err := parkway.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := node.Admin().CreateStream(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := node.Admin().CreateTopic(ctx, st, "orders", 2, parkway.WithRetention(time.Hour, 0))
	if err != nil {
		t.Fatal(err)
	}
	for part := range uint32(2) {
		batch := make([]parkway.Message, n)
		for i := range batch {
			m := parkway.Message{Key: []byte(fmt.Sprintf("key-%d", i)), Payload: []byte(fmt.Sprintf("order %d of partition %d", i, part))}
			if i%3 == 1 {
				m.Headers = []parkway.Header{{Key: "h", Value: []byte("v")}}
			}
			if i%5 == 4 {
				m.Payload = []byte{0xff, 0xfe, 0x00, byte(i)}
			}
			batch[i] = m
		}
		for len(batch) > 0 {
			k := min(len(batch), 100)
			if _, err := node.Produce(ctx, tp, parkway.PartitionID(part), batch[:k]...); err != nil {
				t.Fatal(err)
			}
			batch = batch[k:]
		}
	}
	if err := node.Admin().StoreOffset(ctx, tp, 0, "billing", 5); err != nil {
		t.Fatal(err)
	}
	if err := node.Admin().CreateGroup(ctx, tp, "audit"); err != nil {
		t.Fatal(err)
	}
	m, err := node.JoinGroup(ctx, tp, "audit", parkway.MemberConfig{Name: "worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(ctx, map[uint32]uint64{0: 3}); err != nil {
		t.Fatal(err)
	}
	if err := node.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checksum hashes every file's name, mode, size and content under dir,
// and every directory's entries.
func checksum(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %d %v\n", path, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// segments returns the partition's segment files, oldest first.
func segments(t *testing.T, dir string, part int) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "streams", "*", "topics", "*", "partitions", fmt.Sprint(part), "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if filepath.Base(f) != "raft.log" {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("no segments for partition %d under %s", part, dir)
	}
	return out
}

// flip flips every bit of the byte at off in path.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// inCluster makes the node of makeDir a one-node cluster's member, so its
// directory holds the metadata group's raft log and a raft log per
// partition.
func inCluster(t *testing.T, cfg *parkway.Config) {
	net := transport.NewNetwork(transport.NetworkOptions{})
	t.Cleanup(func() { net.Close() })
	cfg.Cluster = &parkway.ClusterConfig{ID: 1, Peers: []transport.NodeID{1}, Bus: net.Endpoint(1)}
}

// copyDir copies dir into a fresh temporary directory.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(out, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	return out
}

// metadataLog is a single node's metadata log file.
func metadataLog(t *testing.T, dir string) string {
	t.Helper()
	w, err := filepath.Glob(filepath.Join(dir, "metadata", "wal-*"))
	if err != nil || len(w) != 1 {
		t.Fatalf("metadata logs: %v, %v", w, err)
	}
	return w[0]
}

// zero writes zeros over path's bytes [from, to): a write that never
// reached the disk.
func zero(t *testing.T, path string, from, to int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, to-from), from); err != nil {
		t.Fatal(err)
	}
}
