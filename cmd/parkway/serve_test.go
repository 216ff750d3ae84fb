//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// server is a running `parkway serve` process.
type server struct {
	t     *testing.T
	cmd   *exec.Cmd
	http  string // its HTTP address, from its "serving" log line
	kafka string // its Kafka listener's address, from the same line ("" without one)
	mu    sync.Mutex
	logs  strings.Builder
	done  chan struct{}
}

// startServe starts `parkway serve args…` with env added to the
// environment, JSON logs and an HTTP listener on a free port, and waits
// for its "serving" line.
func startServe(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	args = append([]string{"serve", "--log-format", "json", "--http", "127.0.0.1:0"}, args...)
	s := &server{t: t, cmd: exec.Command(binary(t), args...), done: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), env...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan [2]string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["@message"] == "serving" {
				k, _ := rec["kafka"].(string)
				addr <- [2]string{fmt.Sprint(rec["http"]), k}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
	})
	select {
	case a := <-addr:
		s.http, s.kafka = a[0], a[1]
	case <-s.done:
		s.cmd.Wait()
		t.Fatalf("serve exited before serving (%v):\n%s", s.cmd.ProcessState, s.log())
	case <-time.After(time.Minute):
		t.Fatalf("serve did not start within a minute:\n%s", s.log())
	}
	return s
}

func (s *server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// get fetches path from the server's HTTP listener.
func (s *server) get(path string) (int, string) {
	s.t.Helper()
	resp, err := http.Get("http://" + s.http + path)
	if err != nil {
		s.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReady polls /readyz until it answers 200.
func (s *server) waitReady() {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := s.get("/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("not ready after a minute: %d %s\n%s", code, body, s.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and returns the exit code.
func (s *server) stop() int {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { <-s.done; exited <- s.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		s.t.Fatalf("serve did not exit within a minute of SIGTERM:\n%s", s.log())
	}
	return s.cmd.ProcessState.ExitCode()
}

// TestServe starts a node on a directory a node made, scrapes it, stops
// it with SIGTERM, restarts it on the same directory, and checks that
// nothing was lost and the directory verifies.
func TestServe(t *testing.T) {
	dir := makeDir(t, 100)
	for round := range 2 {
		// The shard count comes from the environment.
		s := startServe(t, []string{"PARKWAY_SHARDS=2"}, "--data-dir", dir)
		s.waitReady()
		if code, body := s.get("/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz: %d %s", code, body)
		}
		code, metrics := s.get("/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		for _, want := range []string{"parkway_", "go_goroutines"} {
			if !strings.Contains(metrics, want) {
				t.Fatalf("/metrics lacks %q:\n%.2000s", want, metrics)
			}
		}
		if !strings.Contains(s.log(), `"shards":2`) {
			t.Fatalf("PARKWAY_SHARDS=2 not applied:\n%s", s.log())
		}
		if code := s.stop(); code != 0 {
			t.Fatalf("round %d: exit %d after SIGTERM:\n%s", round, code, s.log())
		}
		if !strings.Contains(s.log(), `"@message":"stopped"`) {
			t.Fatalf("no clean stop in the log:\n%s", s.log())
		}
	}
	r := runBin(t, "inspect", "--json", dir)
	var in inspection
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != 0 {
		t.Fatalf("inspect after two runs: %v\n%v", err, r)
	}
	for _, p := range in.Partitions {
		if p.Status != "ok" || p.End != 100 {
			t.Fatalf("after two runs: %+v", p)
		}
	}
	if r := runBin(t, "verify", dir); r.code != 0 {
		t.Fatalf("verify after two runs:\n%v", r)
	}
}

// TestServeCluster runs three members over loopback TCP (plaintext),
// waits until each is ready, and stops them with SIGTERM.
func TestServeCluster(t *testing.T) {
	addrs := freeAddrs(t, 3)
	peers := fmt.Sprintf("1=%s,2=%s,3=%s", addrs[0], addrs[1], addrs[2])
	var servers []*server
	for i := range 3 {
		dir := t.TempDir()
		servers = append(servers, startServe(t, []string{"PARKWAY_PEERS=" + peers},
			"--data-dir", dir, "--node-id", fmt.Sprint(i+1), "--listen", addrs[i], "--insecure-plaintext", "--shards", "1"))
	}
	for _, s := range servers {
		s.waitReady()
	}
	for i, s := range servers {
		if code := s.stop(); code != 0 {
			t.Fatalf("member %d: exit %d after SIGTERM:\n%s", i+1, code, s.log())
		}
	}
}

func TestServeUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-id", "1"}, "needs --listen"},
		{[]string{"--node-id", "1", "--listen", "127.0.0.1:1", "--peers", "2=127.0.0.1:2", "--insecure-plaintext"}, "must include this node"},
		{[]string{"--node-id", "1", "--listen", "127.0.0.1:1", "--peers", "1=127.0.0.1:1"}, "needs TLS"},
		{[]string{"--fsync", "sometimes"}, "--fsync"},
		{[]string{"--kafka-brokers", "1=127.0.0.1:9092"}, "need --kafka"},
		{[]string{"--kafka", "127.0.0.1:0", "--kafka-brokers", "1=127.0.0.1:9092"}, "cluster member"},
		{[]string{"--kafka", "127.0.0.1:0", "--node-id", "1", "--listen", "127.0.0.1:1", "--peers", "1=127.0.0.1:1", "--insecure-plaintext"}, "needs --kafka-brokers"},
		{[]string{"--kafka", "127.0.0.1:0", "--node-id", "1", "--listen", "127.0.0.1:1", "--peers", "1=127.0.0.1:1", "--insecure-plaintext", "--kafka-brokers", "2=127.0.0.1:9"}, "must include this node"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--admin"}, "for a cluster member"},
		{[]string{"--node-id", "1", "--listen", "127.0.0.1:1", "--peers", "1=127.0.0.1:1", "--insecure-plaintext", "--join"}, "--join needs --join-via"},
		{[]string{"--node-id", "1", "--listen", "127.0.0.1:1", "--peers", "1=127.0.0.1:1", "--insecure-plaintext", "--join-via", "127.0.0.1:2"}, "for a node started with --join"},
		{[]string{"--node-id", "1", "--listen", "127.0.0.1:1", "--peers", "1=127.0.0.1:1", "--insecure-plaintext", "--join", "--join-via", "nohost"}, "--join-via entry"},
		{[]string{"--node-id", "1", "--listen", "127.0.0.1:1", "--peers", "1=127.0.0.1:1", "--insecure-plaintext", "--admin", "--http", ""}, "--admin needs --http"},
	} {
		r := runBin(t, append([]string{"serve"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("serve %v: want exit 2 and %q\n%v", c.args, c.want, r)
		}
	}
}

// TestServeShutdownDeadline: a shutdown that takes longer than
// --shutdown-timeout ends the process with exit 1 and says so.
func TestServeShutdownDeadline(t *testing.T) {
	dir := makeDir(t, 10)
	s := startServe(t, nil, "--data-dir", dir, "--shutdown-timeout", "1ns")
	s.waitReady()
	if code := s.stop(); code != exitProblems || !strings.Contains(s.log(), "did not close within") {
		t.Fatalf("exit %d after SIGTERM with a 1 ns deadline:\n%s", code, s.log())
	}
}
