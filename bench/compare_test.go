package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
		ProduceWait: 100, Pipelined: 100, PipelinedAsync: 100, Batch: 100, Partitions: 104, Consume: 100,
		Topics: 10, Pipelined1K: 100, Pipelined64K: 20, Consume1K: 100, Consume64K: 20,
	}
	always := set
	always.Consume, always.Consume1K, always.Consume64K = 0, 0, 0
	return Sizes{Interval: set, Always: always,
		Replicated: ReplicatedSizes{ProduceWait: 100, Pipelined: 200, PipelinedAsync: 200, Batch: 200, Topics: 5}}
}

func TestCompareQuickPath(t *testing.T) {
	// Every goroutine the run started — parkway's shards and reconcilers,
	// nats-server's and the nats.go client's, the drivers' — must be gone.
	defer goleak.VerifyNone(t)

	base := t.TempDir()
	profiles := t.TempDir()
	sizes := tinySizes()
	var progress strings.Builder
	// Generous: the run takes about a minute on a busy 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const minRound = 20 * time.Millisecond
	rep, err := Run(ctx, Config{Rounds: 2, Sizes: &sizes, MinRound: minRound, TempDir: base, CPUProfileDir: profiles,
		Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}

	// Every data directory was removed.
	if left, err := os.ReadDir(base); err != nil || len(left) != 0 {
		t.Errorf("temp dir not cleaned: %v, %v", left, err)
	}
	checkSamples(t, rep, base, minRound)

	md := rep.Markdown("go -C bench run ./cmd/compare -quick")
	for _, want := range []string{
		"## Interval fsync", "## Fsync on every write", "## Raw limits", "## Targets",
		"produce-wait", "pipelined", "batch", "partitions", "consume", "convergence",
		"2a pipelined produce, async API, 4,096 outstanding (pipelined-async, 100 B)", "case 2a (pipelined-async) msgs/s",
		"pipelined-1KiB", "pipelined-64KiB", "consume-1KiB", "consume-64KiB",
		"file-append", "file-append-fsync100", "chan-handoff", "raw-fsync", "case 3 allocations per message",
		"case 6 p50 within 1.5× of one raw fsync", "parkway case 6 (always set, at once: CreateTopicAndProduce) / raw-fsync, p50:",
		"parkway case 6 (always set, sequential: CreateTopic, then Produce) / raw-fsync-2, p50:", "convergence-at-once",
		"SyncAlways=true", "FsyncInterval topic policy with interval 2m0s",
		"## Three replicas, quorum acknowledged", "R1 produce and wait", "R2 pipelined", "R2a pipelined produce, async API",
		"R3 batched",
		"parkway ×3 memory to node ", "parkway ×3 disk to node ",
		"parkway's transports dropped", "### Beside the single-node figures of this run",
		"| 1 / R1 produce-wait | p99 latency", "| 2a / R2a pipelined-async | msgs/s", "| 3 / R3 batch | CPU/msg",
		"| parkway ×3 memory TCP | parkway ×3 memory | JetStream R3 memory |",
		"| parkway ×3 disk TCP | parkway ×3 disk | JetStream R3 file |",
		"parkway ×3 memory TCP / JetStream R3 memory | parkway ×3 memory / JetStream R3 memory |",
		"parkway ×3 disk TCP / JetStream R3 file | parkway ×3 disk / JetStream R3 file |",
		"parkway ×3 memory TCP to node ", "parkway ×3 disk TCP to node ",
		"CPU/msg (process user+sys)", "CPU/op (process user+sys)", "Every throughput round ran for at least 20ms",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "NaN") {
		t.Errorf("report has NaN cells:\n%s", md)
	}
	// Two rounds × two systems per case, alternating the order.
	for _, key := range []string{"produce-wait", "pipelined", "pipelined-async"} {
		if n := len(regexp.MustCompile(`(?m)^interval +`+key+` `).FindAllString(progress.String(), -1)); n != 4 {
			t.Errorf("%s ran %d times, want 4:\n%s", key, n, progress.String())
		}
	}
	// Two rounds × six systems per replicated case, rotating the order.
	for _, key := range []string{"produce-wait", "pipelined", "pipelined-async", "batch", "convergence"} {
		if n := len(regexp.MustCompile(`(?m)^replicated +`+key+` `).FindAllString(progress.String(), -1)); n != 12 {
			t.Errorf("replicated %s ran %d times, want 12:\n%s", key, n, progress.String())
		}
	}
	rr := rep.replicated
	if rr == nil || len(rr.cases) != 5 || len(rr.systems) != 6 {
		t.Fatalf("replicated section: %+v", rr)
	}
	for _, c := range rr.cases {
		for i, ss := range c.samples {
			if len(ss) != 2 {
				t.Errorf("replicated %s on %s: %d samples, want 2", c.spec.key, rr.systems[i], len(ss))
			}
		}
		if c.spec.key == "produce-wait" && len(c.samples[0][0].lat) != c.samples[0][0].msgs {
			t.Errorf("replicated produce-wait recorded %d latencies for %d messages", len(c.samples[0][0].lat), c.samples[0][0].msgs)
		}
	}

	// One profile per parkway run (four parkway systems in the replicated
	// section), none for JetStream.
	files, err := filepath.Glob(filepath.Join(profiles, "*.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (len(cases(sizes.Interval)) + len(cases(sizes.Always)) + 4*len(replicatedCases(sizes.Replicated))); len(files) != want {
		t.Errorf("%d profiles, want %d", len(files), want)
	}
	if len(rep.Targets()) == 0 {
		t.Error("no targets evaluated")
	}
}

// checkSamples checks every sample of a run: each throughput round did at
// least its floor and lasted at least minRound, its CPU time was measured,
// and each round of each system had a data directory of its own, under
// base, gone after the run.
func checkSamples(t *testing.T, rep *Report, base string, minRound time.Duration) {
	t.Helper()
	dirs := map[string]string{}
	check := func(what string, floor int, timed bool, s sample) {
		t.Helper()
		if s.msgs < floor || (timed && s.elapsed < minRound) {
			t.Errorf("%s: %d messages in %v, want at least %d in at least %v", what, s.msgs, s.elapsed, floor, minRound)
		}
		if s.cpu <= 0 {
			t.Errorf("%s: CPU time %v not measured", what, s.cpu)
		}
		if filepath.Dir(s.dir) != filepath.Clean(base) {
			t.Errorf("%s: data directory %q is not directly under %q", what, s.dir, base)
		}
		if prev, ok := dirs[s.dir]; ok {
			t.Errorf("%s: data directory %q reused from %s", what, s.dir, prev)
		}
		dirs[s.dir] = what
		if _, err := os.Stat(s.dir); err == nil {
			t.Errorf("%s: data directory %q left behind", what, s.dir)
		}
	}
	for _, l := range rep.limits {
		for i, s := range l.samples {
			check(fmt.Sprintf("limits/%s round %d", l.limit.key, i+1), l.count, true, s)
		}
	}
	for _, set := range rep.sets {
		for _, c := range set.cases {
			for sys, ss := range c.samples {
				for i, s := range ss {
					check(fmt.Sprintf("%s/%s system %d round %d", set.name, c.spec.key, sys, i+1), c.spec.count,
						!isConvergence(c.spec.key), s)
				}
			}
		}
	}
	if rr := rep.replicated; rr != nil {
		for _, c := range rr.cases {
			for sys, ss := range c.samples {
				for i, s := range ss {
					check(fmt.Sprintf("replicated/%s on %s round %d", c.spec.key, rr.systems[sys], i+1), c.spec.count,
						c.spec.key != "convergence", s)
				}
			}
		}
	}
}

func TestFilter(t *testing.T) {
	defer goleak.VerifyNone(t)
	sizes := tinySizes()
	rep, err := Run(context.Background(), Config{Rounds: 1, Sizes: &sizes, MinRound: -1, TempDir: t.TempDir(),
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

// TestBigAppendBesideCase7 runs case 7 alone: its limit, the rate of new
// page cache, runs with it and the report sets both systems' rates
// against it, and the limit's file keeps every record of its round (it
// is removed after it).
func TestBigAppendBesideCase7(t *testing.T) {
	defer goleak.VerifyNone(t)
	sizes := tinySizes()
	dir := t.TempDir()
	rep, err := Run(context.Background(), Config{Rounds: 1, Sizes: &sizes, MinRound: -1, TempDir: dir,
		Filter: mustCompile(t, `^interval/pipelined-64KiB$`)})
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown("x")
	for _, want := range []string{"parkway case 7 (interval set) / " + bigAppendKey, "JetStream case 7 (interval set) / " + bigAppendKey} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	var got *limitResult
	for i := range rep.limits {
		if rep.limits[i].limit.key == bigAppendKey {
			got = &rep.limits[i]
		}
	}
	if got == nil || len(got.samples) != 1 || got.samples[0].bytes != int64(got.samples[0].msgs)*(recordHeader+64<<10) {
		t.Fatalf("limit %s: %+v, want one round of 60 + 64 KiB records", bigAppendKey, got)
	}
	// The round's file kept what it wrote until the round ended.
	d := t.TempDir()
	m := &meter{}
	if err := bigAppend(context.Background(), d, 5, m); err != nil {
		t.Fatal(err)
	}
	if m.s.msgs != 5 || m.s.bytes != 5*(recordHeader+64<<10) {
		t.Errorf("wrote %d records of %d bytes in all, want 5 of %d each", m.s.msgs, m.s.bytes, recordHeader+64<<10)
	}
	if left, _ := os.ReadDir(d); len(left) != 0 {
		t.Errorf("the round's file is left behind: %v", left)
	}
}

// TestReplicatedOnly is what -only replicated runs: the section on its
// own, whose report says the single-node figures are not in this run.
func TestReplicatedOnly(t *testing.T) {
	defer goleak.VerifyNone(t)
	sizes := tinySizes()
	rep, err := Run(context.Background(), Config{Rounds: 1, Sizes: &sizes, MinRound: -1, TempDir: t.TempDir(),
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
		dir := t.TempDir()
		in, err := sys.open(ctx, dir, make([]byte, 100))
		if err != nil {
			t.Fatalf("%s: open: %v", sys.name(), err)
		}
		if pc, ok := sys.(parkwayClusterSystem); ok {
			checkRaftLogs(t, dir, pc.disk)
			checkTransport(t, in.(*parkwayCluster), pc.tcp)
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

// checkTransport checks that a parkway cluster runs over the transport
// its system names: with tcp, three TCP buses that have each sent and
// received raft traffic and no in-memory network; without, the in-memory
// network.
func checkTransport(t *testing.T, c *parkwayCluster, tcp bool) {
	t.Helper()
	if !tcp {
		if c.net == nil || len(c.buses) != 0 {
			t.Errorf("in-memory cluster: network %t, %d TCP buses", c.net != nil, len(c.buses))
		}
		return
	}
	if c.net != nil || len(c.buses) != replicas {
		t.Fatalf("TCP cluster: network %t, %d TCP buses, want none and %d", c.net != nil, len(c.buses), replicas)
	}
	for _, b := range c.buses {
		if st := b.Stats(); st.Sent == 0 || st.Received == 0 {
			t.Errorf("TCP bus of node %d carried nothing: %+v", b.ID(), st)
		}
	}
}

// checkRaftLogs checks that the disk-backed parkway cluster keeps its raft
// state under dir (a metadata raft log and a partition raft log on each of
// the three nodes) and that the in-memory one writes nothing there.
func checkRaftLogs(t *testing.T, dir string, disk bool) {
	t.Helper()
	meta, logs := 0, 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "raft.log" {
			return err
		}
		if filepath.Base(filepath.Dir(path)) == "metadata-raft" {
			meta++
		} else {
			logs++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if disk && (meta != replicas || logs != replicas) {
		t.Errorf("disk cluster: %d metadata raft logs and %d partition raft logs under its dir, want %d of each",
			meta, logs, replicas)
	}
	if !disk && (meta != 0 || logs != 0) {
		t.Errorf("memory cluster wrote raft state to disk: %d metadata, %d partition raft logs", meta, logs)
	}
}

// TestReplicatedRatios checks that the ratio columns pair each parkway
// system with its like-for-like JetStream system.
func TestReplicatedRatios(t *testing.T) {
	second := func(n int) []sample { return []sample{{msgs: n, elapsed: time.Second}} }
	var names []string
	for _, s := range replicatedSystems() {
		names = append(names, s.name())
	}
	rep := &Report{replicated: &replResult{systems: names, cases: []replCaseResult{{
		spec: replicatedCases(ReplicatedSizes{Batch: 100})[0].spec,
		// In replicatedSystems' order: parkway memory 600, memory TCP 300,
		// disk 400, disk TCP 200; JetStream memory 200, file 100.
		samples: [][]sample{second(600), second(300), second(400), second(200), second(200), second(100)},
		entries: [][]string{{"node 1"}, {"node 1"}, {"node 2"}, {"node 2"}, {"js-1"}, {"js-2"}},
		drops:   [][]int64{{3}, {5}, {4}, {6}, {-1}, {-1}},
	}}}}
	var b strings.Builder
	rep.writeReplicated(&b)
	md := b.String()
	// memory: TCP 300 / 200 = 1.5×, in-memory bus 600 / 200 = 3×;
	// disk: TCP 200 / 100 = 2×, in-memory bus 400 / 100 = 4×.
	for _, want := range []string{
		"| 300 / 600 / 200 | msgs/s | 300 (300–300) | 600 (600–600) | 200 (200–200) | 1.50× | 3.00× |",
		"| 200 / 400 / 100 | msgs/s | 200 (200–200) | 400 (400–400) | 100 (100–100) | 2.00× | 4.00× |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("ratios do not pair memory with memory and disk with file, TCP and in-memory bus each:\nwant %s\n%s", want, md)
		}
	}
	if !strings.Contains(md, "3 in the runs of parkway ×3 memory, 5 in the runs of parkway ×3 memory TCP, "+
		"4 in the runs of parkway ×3 disk, 6 in the runs of parkway ×3 disk TCP") {
		t.Errorf("drops not reported per parkway system:\n%s", md)
	}
}

// TestPipelinedAsync checks parkway's ProduceAsync ring: every produce is
// appended exactly once with a window smaller than the total, and a
// produce that fails is reported, not dropped.
func TestPipelinedAsync(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, err := parkwaySystem{}.open(ctx, t.TempDir(), durability{interval: time.Minute}, 1, make([]byte, 10))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := in.close(); err != nil {
			t.Error(err)
		}
	}()
	if n, err := in.pipelinedAsync(ctx, 0, make([]byte, 10), 16, exactly(1000)); err != nil || n != 1000 {
		t.Fatalf("pipelinedAsync = %d, %v; want 1,000 acknowledged", n, err)
	}
	r, err := in.reader(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		n, err := r.read(ctx, consumeBatch)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		got += n
	}
	if got != 1001 {
		t.Errorf("partition holds %d messages, want 1,001 (the warm one and 1,000)", got)
	}
	// Partition 3 does not exist: every produce fails, and the first
	// failure is returned.
	if _, err := in.pipelinedAsync(ctx, 3, make([]byte, 10), 16, exactly(100)); err == nil {
		t.Error("pipelinedAsync to a missing partition returned nil")
	}
}

// TestKeepPrevious checks that writing a report keeps the previous one
// beside it: the file moves to <name>-previous.md (replacing an older
// one), and there is nothing to link when there was no report.
func TestKeepPrevious(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "RESULTS.md")
	if prev, err := KeepPrevious(out); err != nil || prev != "" {
		t.Fatalf("no report yet: KeepPrevious = %q, %v; want \"\", nil", prev, err)
	}
	for _, body := range []string{"first run", "second run"} {
		if err := os.WriteFile(out, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		prev, err := KeepPrevious(out)
		if err != nil || prev != "RESULTS-previous.md" {
			t.Fatalf("KeepPrevious = %q, %v; want RESULTS-previous.md", prev, err)
		}
		got, err := os.ReadFile(filepath.Join(dir, prev))
		if err != nil || string(got) != body {
			t.Errorf("previous report holds %q (%v), want %q", got, err, body)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s still exists after KeepPrevious", out)
		}
	}
	rep := &Report{}
	rep.LinkPrevious("RESULTS-previous.md")
	if md := rep.Markdown("x"); !strings.Contains(md, "[RESULTS-previous.md](RESULTS-previous.md)") {
		t.Errorf("report does not link the previous one:\n%s", md)
	}
}

// TestReplicatedConvergence runs case R6 on its own: every system
// creates its topics (streams) of three replicas and produces to each,
// the after-run check finds every replica holding its message, and the
// report carries the case and its targets. The check must also fail for
// a topic that was never created.
func TestReplicatedConvergence(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sizes := tinySizes()
	sizes.Replicated.Topics = 3
	rep, err := Run(ctx, Config{Rounds: 1, Sizes: &sizes, MinRound: -1, TempDir: t.TempDir(),
		Filter: mustCompile(t, `^replicated/convergence$`)})
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown("x")
	for _, want := range []string{"R6 create a topic of 3 replicas and produce at once", "case R6 p99 ≤ 1/3 of JetStream R3 file's",
		"case R6 CPU per create + produce ≤ 1/2"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	rr := rep.replicated
	if rr == nil || len(rr.cases) != 1 {
		t.Fatalf("replicated cases: %+v", rr)
	}
	for i, ss := range rr.cases[0].samples {
		if len(ss) != 1 || len(ss[0].lat) != 3 {
			t.Errorf("%s: samples %+v, want one round of 3 latencies", rr.systems[i], ss)
		}
	}
	for _, sys := range replicatedSystems() {
		in, err := sys.open(ctx, t.TempDir(), make([]byte, 100))
		if err != nil {
			t.Fatalf("%s: open: %v", sys.name(), err)
		}
		err = in.(creator).createAndProduce(ctx, convergenceTopic(0), make([]byte, 100))
		if err == nil {
			err = in.(topicVerifier).verifyTopics(ctx, 1)
		}
		if err != nil {
			t.Errorf("%s: one topic: %v", sys.name(), err)
		}
		if err := in.(topicVerifier).verifyTopics(ctx, 2); err == nil {
			t.Errorf("%s: verifyTopics passed for a topic never created", sys.name())
		}
		if err := in.close(); err != nil {
			t.Errorf("%s: close: %v", sys.name(), err)
		}
	}
}

// TestRawFsyncBesideConvergence checks which limits a filter runs: the
// raw fsync limit whenever the fsync-always set's case 6 is selected (so
// that case alone is measured against it in the same run) or the limit
// itself is, and not when case 6 of that set creates no topics.
func TestRawFsyncBesideConvergence(t *testing.T) {
	sizes := tinySizes()
	noTopics := sizes
	noTopics.Always.Topics = 0
	for _, tc := range []struct {
		filter string
		sizes  Sizes
		want   []string
	}{
		{`^always/convergence$`, sizes, []string{rawFsyncKey, rawFsync2Key}},
		{`^limits/raw-fsync$`, sizes, []string{rawFsyncKey}},
		{`^interval/convergence$`, sizes, nil},
		{`^interval/batch$|^limits/file-append$`, sizes, []string{"file-append"}},
		{`^always/convergence$`, noTopics, nil},
		{`^interval/pipelined-64KiB$`, sizes, []string{bigAppendKey}},
		{``, sizes, []string{"file-append", "file-append-fsync100", "chan-handoff", bigAppendKey, rawFsyncKey, rawFsync2Key}},
	} {
		r := &runner{}
		if tc.filter != "" {
			r.cfg.Filter = mustCompile(t, tc.filter)
		}
		var got []string
		for _, l := range r.selectedLimits(tc.sizes) {
			got = append(got, l.key)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("filter %q (always topics %d): limits %q, want %q", tc.filter, tc.sizes.Always.Topics, got, tc.want)
		}
	}
}

// TestFsyncTarget checks issue 33's target computed from one run's
// samples: parkway's median case-6 p50 in the fsync-always set over the
// raw fsync limit's median p50, met at 1.5× or below, and stated beside
// the limits table.
func TestFsyncTarget(t *testing.T) {
	// Each sample's p50 is its middle latency; three rounds, median of
	// the three.
	lat := func(ms ...float64) []sample {
		var out []sample
		for _, v := range ms {
			d := time.Duration(v * float64(time.Millisecond))
			out = append(out, sample{msgs: 3, elapsed: time.Second, lat: []time.Duration{d / 2, d, 4 * d}})
		}
		return out
	}
	var fsync limit
	for _, l := range limits() {
		if l.key == rawFsyncKey {
			fsync = l
		}
	}
	conv := cases(SetSizes{Topics: 3})[0]
	for _, tc := range []struct {
		pw      []sample
		met     bool
		measure string
		short   string
	}{
		{lat(3, 6, 2), true, "1.50× (3.00 ms / 2.00 ms)", ""},
		{lat(4, 9, 5), false, "2.50× (5.00 ms / 2.00 ms)", "by a factor of 1.67 (target ≤ 1.5×)"},
	} {
		rep := &Report{
			limits: []limitResult{{limit: fsync, count: 3, samples: lat(2, 1, 7)}},
			sets: []setResult{{name: "always", d: durability{always: true},
				cases: []caseResult{{spec: conv, samples: [2][]sample{tc.pw, lat(9, 9, 9)}}}}},
		}
		var found bool
		for _, tg := range rep.Targets() {
			if tg.Name != "case 6 p50 within 1.5× of one raw fsync" {
				continue
			}
			found = true
			if tg.Set != "always" || tg.Met != tc.met || tg.Measured != tc.measure || tg.Shortfall != tc.short {
				t.Errorf("target %+v, want met %t, measured %q, shortfall %q", tg, tc.met, tc.measure, tc.short)
			}
		}
		if !found {
			t.Errorf("no raw fsync target among %+v", rep.Targets())
		}
		md := rep.Markdown("x")
		if want := "parkway case 6 (always set, sequential, against one fsync) / raw-fsync, p50: " + strings.Split(tc.measure, " (")[1]; !strings.Contains(md, strings.TrimSuffix(want, ")")) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
		if !strings.Contains(md, "| 2.00 ms (1.00 ms–7.00 ms) | 8.00 ms (4.00 ms–28.0 ms) |") {
			t.Errorf("limits table lacks the raw fsync's p50 and p99:\n%s", md)
		}
	}
	// Without the limit in the run, or without case 6 of the always set,
	// there is no target.
	rep := &Report{sets: []setResult{{name: "always", cases: []caseResult{{spec: conv, samples: [2][]sample{lat(1), lat(1)}}}}}}
	for _, tg := range rep.Targets() {
		if strings.Contains(tg.Name, "raw fsync") {
			t.Errorf("raw fsync target without the limit: %+v", tg)
		}
	}
}
