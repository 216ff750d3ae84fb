package bench

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// tinySizes are QuickSizes cut to about 100 messages per case, so the test
// runs every case of both sets, both systems and every limit, through the
// same code path as -quick, in seconds.
func tinySizes() Sizes {
	set := SetSizes{
		ProduceWait: 100, Pipelined: 100, Batch: 100, Partitions: 104, Consume: 100,
		Topics: 10, Pipelined1K: 100, Pipelined64K: 20, Consume1K: 100, Consume64K: 20,
	}
	always := set
	always.Consume, always.Consume1K, always.Consume64K = 0, 0, 0
	return Sizes{Interval: set, Always: always,
		Replicated: ReplicatedSizes{ProduceWait: 100, Pipelined: 200, Batch: 200}}
}

func TestCompareQuickPath(t *testing.T) {
	// Every goroutine the run started — parkway's shards and reconcilers,
	// nats-server's and the nats.go client's, the drivers' — must be gone.
	defer goleak.VerifyNone(t)

	base := t.TempDir()
	profiles := t.TempDir()
	sizes := tinySizes()
	var progress strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Rounds: 2, Sizes: &sizes, TempDir: base, CPUProfileDir: profiles, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}

	// Every data directory was removed.
	if left, err := os.ReadDir(base); err != nil || len(left) != 0 {
		t.Errorf("temp dir not cleaned: %v, %v", left, err)
	}

	md := rep.Markdown("go -C bench run ./cmd/compare -quick")
	for _, want := range []string{
		"## Interval fsync", "## Fsync on every write", "## Raw limits", "## Targets",
		"produce-wait", "pipelined", "batch", "partitions", "consume", "convergence",
		"pipelined-1KiB", "pipelined-64KiB", "consume-1KiB", "consume-64KiB",
		"file-append", "file-append-fsync100", "chan-handoff", "case 3 allocations per message",
		"SyncAlways=true", "FsyncInterval topic policy with interval 2m0s",
		"## Three replicas, quorum acknowledged", "R1 produce and wait", "R2 pipelined", "R3 batched",
		"parkway / JetStream R3 memory", "parkway / JetStream R3 file", "parkway ×3 to node ",
		"in-memory network dropped", "### Beside the single-node figures of this run",
		"| 1 / R1 produce-wait | p99 latency",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "NaN") {
		t.Errorf("report has NaN cells:\n%s", md)
	}
	// Two rounds × two systems per case, alternating the order.
	if n := strings.Count(progress.String(), "interval produce-wait"); n != 4 {
		t.Errorf("produce-wait ran %d times, want 4:\n%s", n, progress.String())
	}
	// Two rounds × three systems per replicated case, rotating the order.
	for _, key := range []string{"produce-wait", "pipelined", "batch"} {
		if n := strings.Count(progress.String(), "replicated "+key+" "); n != 6 {
			t.Errorf("replicated %s ran %d times, want 6:\n%s", key, n, progress.String())
		}
	}
	rr := rep.replicated
	if rr == nil || len(rr.cases) != 3 {
		t.Fatalf("replicated section: %+v", rr)
	}
	for _, c := range rr.cases {
		for i, ss := range c.samples {
			if len(ss) != 2 {
				t.Errorf("replicated %s on %s: %d samples, want 2", c.spec.key, rr.systems[i], len(ss))
			}
			for _, s := range ss {
				if s.msgs != c.spec.count || s.elapsed <= 0 {
					t.Errorf("replicated %s on %s: sample %+v", c.spec.key, rr.systems[i], s)
				}
			}
		}
		if c.spec.key == "produce-wait" && len(c.samples[0][0].lat) != c.spec.count {
			t.Errorf("replicated produce-wait recorded %d latencies, want %d", len(c.samples[0][0].lat), c.spec.count)
		}
	}

	// One profile per parkway run, none for JetStream.
	files, err := filepath.Glob(filepath.Join(profiles, "*.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (len(cases(sizes.Interval)) + len(cases(sizes.Always)) + len(replicatedCases(sizes.Replicated))); len(files) != want {
		t.Errorf("%d profiles, want %d", len(files), want)
	}
	if len(rep.Targets()) == 0 {
		t.Error("no targets evaluated")
	}
}

func TestFilter(t *testing.T) {
	defer goleak.VerifyNone(t)
	sizes := tinySizes()
	rep, err := Run(context.Background(), Config{Rounds: 1, Sizes: &sizes, TempDir: t.TempDir(),
		Filter: mustCompile(t, `^interval/batch$|^limits/file-append$`)})
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown("x")
	if strings.Contains(md, "produce-wait") || strings.Contains(md, "Fsync on every write") || strings.Contains(md, "Three replicas") {
		t.Errorf("filter ran unselected cases:\n%s", md)
	}
	if !strings.Contains(md, "parkway case 3 (interval set) / file-append") {
		t.Errorf("report lacks the case 3 / file-append ratio:\n%s", md)
	}
}

// TestReplicatedOnly is what -only replicated runs: the section on its
// own, whose report says the single-node figures are not in this run.
func TestReplicatedOnly(t *testing.T) {
	defer goleak.VerifyNone(t)
	sizes := tinySizes()
	rep, err := Run(context.Background(), Config{Rounds: 1, Sizes: &sizes, TempDir: t.TempDir(),
		Filter: mustCompile(t, `^replicated/produce-wait$`)})
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown("x")
	if strings.Contains(md, "## Interval fsync") || strings.Contains(md, "(pipelined, 100 B)") || strings.Contains(md, "## Raw limits") {
		t.Errorf("filter ran unselected cases:\n%s", md)
	}
	for _, want := range []string{"R1 produce and wait", "did not run in this run"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestSizesValidate(t *testing.T) {
	bad := tinySizes()
	bad.Interval.Batch = 150
	bad.Always.Partitions = 7
	bad.Replicated.Batch = 250
	if _, err := Run(context.Background(), Config{Sizes: &bad, TempDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "Batch 150") || !strings.Contains(err.Error(), "Partitions 7") ||
		!strings.Contains(err.Error(), "replicated: Batch 250") {
		t.Fatalf("got %v, want the three size errors", err)
	}
}

func TestPercentile(t *testing.T) {
	lat := make([]time.Duration, 100)
	for i := range lat {
		lat[i] = time.Duration(100-i) * time.Microsecond
	}
	s := sortedCopy(lat)
	if p := percentile(s, 0.50); p != 50*time.Microsecond {
		t.Errorf("p50 = %v", p)
	}
	if p := percentile(s, 0.99); p != 99*time.Microsecond {
		t.Errorf("p99 = %v", p)
	}
	if got := summarize(msgsPerSec, []sample{{msgs: 10, elapsed: time.Second}, {msgs: 30, elapsed: time.Second}}); got.median != 20 || got.lo != 10 || got.hi != 30 {
		t.Errorf("summary %+v", got)
	}
}

func mustCompile(t *testing.T, expr string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(expr)
	if err != nil {
		t.Fatal(err)
	}
	return re
}

// TestReplicatedVerify checks that the after-run check of every replicated
// system passes on what was acknowledged and fails on a mismatch: each
// system is opened (one warm message, acknowledged), then verified against
// 1 message (holds) and against 0 (one more than acknowledged).
func TestReplicatedVerify(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sys := range replicatedSystems() {
		in, err := sys.open(ctx, t.TempDir(), make([]byte, 100))
		if err != nil {
			t.Fatalf("%s: open: %v", sys.name(), err)
		}
		if err := in.verify(ctx, 1); err != nil {
			t.Errorf("%s: verify 1: %v", sys.name(), err)
		}
		if err := in.verify(ctx, 0); err == nil || !strings.Contains(err.Error(), "holds 1 messages, 0 were acknowledged") {
			t.Errorf("%s: verify 0 = %v, want a count mismatch", sys.name(), err)
		}
		if in.entry() == "" {
			t.Errorf("%s: no entry node", sys.name())
		}
		if err := in.close(); err != nil {
			t.Errorf("%s: close: %v", sys.name(), err)
		}
	}
}
