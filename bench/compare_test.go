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
	return Sizes{Interval: set, Always: always}
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

	// One profile per parkway run, none for JetStream.
	files, err := filepath.Glob(filepath.Join(profiles, "*.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (len(cases(sizes.Interval)) + len(cases(sizes.Always))); len(files) != want {
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
	if strings.Contains(md, "produce-wait") || strings.Contains(md, "Fsync on every write") {
		t.Errorf("filter ran unselected cases:\n%s", md)
	}
	if !strings.Contains(md, "parkway case 3 (interval set) / file-append") {
		t.Errorf("report lacks the case 3 / file-append ratio:\n%s", md)
	}
}

func TestSizesValidate(t *testing.T) {
	bad := tinySizes()
	bad.Interval.Batch = 150
	bad.Always.Partitions = 7
	if _, err := Run(context.Background(), Config{Sizes: &bad, TempDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "Batch 150") || !strings.Contains(err.Error(), "Partitions 7") {
		t.Fatalf("got %v, want both size errors", err)
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
