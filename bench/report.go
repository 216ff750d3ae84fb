package bench

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Report is the outcome of a comparison run.
type Report struct {
	machine  machine
	rounds   int
	minRound time.Duration // every throughput round's minimum length (0: none)
	// previous is the file holding the previous run's report, linked from
	// this one ("" when there is none), and prevText its markdown.
	previous, prevText string
	limits             []limitResult
	sets               []setResult
	// replicated is the three-replica section (nil when it did not run).
	replicated *replResult
	started    time.Time
	elapsed    time.Duration
	// waiting is the waiting-consumer section (nil when it did not run).
	waiting *waitResult
}

type limitResult struct {
	limit   limit
	count   int
	samples []sample
}

type setResult struct {
	name  string
	d     durability
	sizes SetSizes
	cases []caseResult
}

type caseResult struct {
	spec    caseSpec
	samples [2][]sample // [0] parkway, [1] JetStream, one per round
}

// machine describes where the run happened.
type machine struct {
	cpus, procs         int
	model               string
	goVersion, platform string
	kernel              string
	tempDir             string
	loadStart, loadEnd  string // /proc/loadavg's 1/5/15-minute load averages
	natsServer, natsGoV string
}

func describeMachine(tempDir string) machine {
	m := machine{
		cpus: runtime.NumCPU(), procs: runtime.GOMAXPROCS(0),
		model: "unknown", goVersion: runtime.Version(), platform: runtime.GOOS + "/" + runtime.GOARCH,
		kernel: "unknown", tempDir: tempDir, natsServer: server.VERSION, natsGoV: nats.Version,
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.model = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	m.loadStart = loadAverage()
	return m
}

// loadAverage returns the 1, 5 and 15-minute load averages. The report
// states them at the start and the end of the run: on a shared machine,
// other processes' load is the first suspect for an outlier.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// --- statistics ------------------------------------------------------------

func rate(s sample) float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.msgs) / s.elapsed.Seconds()
}

func sortedCopy(d []time.Duration) []time.Duration {
	c := slices.Clone(d)
	slices.Sort(c)
	return c
}

// percentile is the nearest-rank percentile of sorted latencies.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// value is a metric of one sample.
func value(k metric, s sample) float64 {
	switch k {
	case msgsPerSec:
		return rate(s)
	case mbPerSec:
		if s.elapsed <= 0 {
			return 0
		}
		return float64(s.bytes) / 1e6 / s.elapsed.Seconds()
	case p50, p99, p999:
		p := 0.50
		switch k {
		case p99:
			p = 0.99
		case p999:
			p = 0.999
		}
		return float64(percentile(sortedCopy(s.lat), p))
	case allocsPerMsg:
		if s.msgs == 0 {
			return 0
		}
		return float64(s.mallocs) / float64(s.msgs)
	case cpuPerMsg:
		if s.cpu < 0 || s.msgs == 0 {
			return math.NaN() // not measured on this platform
		}
		return float64(s.cpu) / float64(s.msgs)
	}
	return math.NaN()
}

// summary is the median and range of a metric over the rounds.
type summary struct{ median, lo, hi float64 }

func summarize(k metric, samples []sample) summary {
	if len(samples) == 0 {
		return summary{math.NaN(), math.NaN(), math.NaN()}
	}
	v := make([]float64, len(samples))
	for i, s := range samples {
		v[i] = value(k, s)
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return summary{med, v[0], v[len(v)-1]}
}

// --- formatting ------------------------------------------------------------

// sig3 prints v with three significant digits, or two below 0.1, so a
// small ratio such as 0.0012 does not print as 0.00.
func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a > 0 && a < 0.1:
		return strconv.FormatFloat(v, 'g', 2, 64)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func formatRate(v float64) string {
	switch {
	case v >= 1e6:
		return sig3(v/1e6) + "M"
	case v >= 1e3:
		return sig3(v/1e3) + "k"
	}
	return sig3(v)
}

func formatDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return sig3(d.Seconds()) + " s"
	case d >= time.Millisecond:
		return sig3(float64(d)/1e6) + " ms"
	}
	return sig3(float64(d)/1e3) + " µs"
}

func formatMetric(k metric, v float64) string {
	switch k {
	case msgsPerSec:
		return formatRate(v)
	case mbPerSec, allocsPerMsg:
		return sig3(v)
	case p50, p99, p999, cpuPerMsg:
		return formatDuration(time.Duration(v))
	}
	return fmt.Sprint(v)
}

func formatSummary(k metric, s summary) string {
	if math.IsNaN(s.median) {
		return "–"
	}
	return fmt.Sprintf("%s (%s–%s)", formatMetric(k, s.median), formatMetric(k, s.lo), formatMetric(k, s.hi))
}

func formatRatio(r float64) string { return sig3(r) + "×" }

// formatRatioOf is a / b as a ratio, or "–" when b is not a positive
// number (not measured, or nothing to divide by).
func formatRatioOf(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b <= 0 {
		return "–"
	}
	return formatRatio(a / b)
}

// metricLabel is a metric's row label, saying which way is better when
// lower is.
func metricLabel(k metric) string {
	if k.higherIsBetter() {
		return k.label()
	}
	return k.label() + " (lower is better)"
}

// medianMsgs is the median number of messages of the samples.
func medianMsgs(samples []sample) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	v := make([]float64, len(samples))
	for i, s := range samples {
		v[i] = float64(s.msgs)
	}
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

func formatCount(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func formatPayload(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// --- the report ------------------------------------------------------------

// howItRuns documents, next to every table, what each side of each case
// does, so a reader never has to open the code to interpret a number.
const howItRuns = `Each system runs every round of every case on a fresh data directory of its
own (a new temporary directory per round and system, removed after the
round): parkway is
` + "`parkway.Open(parkway.Config{DataDir: tmp, Shards: 2})`" + ` with one stream and one
topic (the case's partitions); JetStream is an embedded nats-server
(` + "`server.NewServer(&server.Options{JetStream: true, StoreDir: tmp, DontListen: true, StreamMaxBufferedSize: 512 << 20})`" + `,
started, ready; the ingest queue is raised from its default 128 MiB so that
4,096 publishes of 64 KiB in flight fit, which the server otherwise refuses
with "too many requests") reached by nats.go over ` + "`nats.InProcessServer(srv)`" + `, one
file-storage stream with 1 replica per partition. One warm message per
partition/stream is written before the clock starts (so parkway's
asynchronous partition materialisation is not in cases 1–5 and 7; case 6
measures it). A Go GC runs before each timed section. allocs/msg counts
every heap allocation in the process (both sides of the hand-off; for
JetStream, client and server) during the timed section, divided by the
messages. CPU/msg is the process's user+system CPU time over the timed
section (getrusage), divided by the messages: on a busy machine msgs/s
falls while CPU/msg stays put, so a loaded run shows as such.

A throughput round does at least its floor of messages (the sizes below)
and goes on until the round's minimum length has passed; the work under
way then is finished and counted, and the figures are per message over
whatever the round did, so the two systems may do different numbers of
messages (the messages column gives the median per round of each). Case 5
and its case-7 variants fill the partition with their data set (not timed),
read it once from offset 0 (not timed: it warms both systems' caches
alike and sizes the round), then, timed, read it again from offset 0 pass
after pass, each pass through a reader opened before the clock, until the
round's length has passed. Case 6 creates exactly its number of topics on
both sides, however long that takes.

| case | parkway | JetStream |
| --- | --- | --- |
| 1 produce and wait | ` + "`Produce`" + ` of one message, sequential | ` + "`js.Publish`" + `, sequential |
| 2 pipelined, 4,096 outstanding | 4,096 goroutines, each looping "take the next index from a shared counter, ` + "`Produce`" + ` one message, wait" (` + "`Produce`" + ` is synchronous; this keeps exactly min(4,096, remaining) calls in flight) | ` + "`js.PublishAsync`" + ` with ` + "`PublishAsyncMaxPending(4096)`" + `; a ring of 4,096 ack futures, the oldest awaited (and its error checked) before its slot is reused, the rest at the end |
| 2a pipelined, async API, 4,096 outstanding | one goroutine, ` + "`ProduceAsync`" + ` of one message at a time with a ring of 4,096 ` + "`PendingAck`" + `s, the oldest awaited with ` + "`Wait`" + ` (and its error checked) before its slot is reused, the rest at the end: the same pattern as JetStream's | the same as case 2 (PublishAsync is its only pipelining API), run again so the row's ratio compares runs interleaved in time |
| 3 batched, 100 per call | ` + "`Produce`" + ` with 100 messages, sequential | no batch publish exists: 100 ` + "`PublishAsync`" + ` calls, then wait on all 100 futures, sequential |
| 4 8 partitions, 8 goroutines | topic of 8 partitions; goroutine g produces one message per call to partition g | 8 streams (one subject each); goroutine g ` + "`js.Publish`" + `es to stream g |
| 5 consume, 1,000 per call | prefill (not timed), then per pass ` + "`Poll(AtOffset(next), 1000)`" + ` from offset 0 | prefill (not timed), per pass a new durable pull consumer (` + "`DeliverAll`, `AckNone`" + `, pending limits lifted; all created before the clock), then ` + "`Fetch(1000)`" + ` |
| 6 convergence | ` + "`CreateTopic`" + ` (1 partition) then ` + "`Produce`" + ` one message at once; latency to the ack, over N topics in one stream | ` + "`js.AddStream`" + ` then ` + "`js.Publish`" + ` at once; latency to the ack, over N streams |
| 7 payload sizes | cases 2 and 5 with 1 KiB and 64 KiB payloads | same |
`

// LinkPrevious makes the report link to the file that holds the previous
// run's report (a path relative to where the report is written).
func (r *Report) LinkPrevious(path string) { r.previous = path }

// BesidePrevious makes the report link to the previous run's report,
// kept in the file path, and end with that report's figures beside its
// own (markdown is the previous report's text).
func (r *Report) BesidePrevious(path, markdown string) {
	r.previous, r.prevText = path, markdown
}

// Markdown renders the report; command is the command line to state.
func (r *Report) Markdown(command string) string {
	var b strings.Builder
	m := r.machine
	fmt.Fprintf(&b, "# parkway vs embedded NATS JetStream, side by side\n\n")
	if r.previous != "" {
		fmt.Fprintf(&b, "The previous run's report is kept in [%s](%s), to compare with this one.\n\n",
			r.previous, r.previous)
	}
	fmt.Fprintf(&b, "Run on %s. Command, from the repository root:\n\n```sh\n%s\n```\n\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), command)
	fmt.Fprintf(&b, "Machine: %d CPUs (runtime.NumCPU; GOMAXPROCS %d), %s, %s, Linux kernel %s, %s. "+
		"nats-server %s embedded with nats.go %s. Data directories under %s. Total run time %v; "+
		"load average (1/5/15 min) %s at the start, %s at the end.\n\n",
		m.cpus, m.procs, m.model, m.platform, m.kernel, m.goVersion, m.natsServer, m.natsGoV, m.tempDir,
		r.elapsed.Round(time.Second), m.loadStart, m.loadEnd)
	fmt.Fprintf(&b, "Every case ran %d round(s) per system, alternating which system ran first. "+
		"A cell is the median over the rounds with the range (min–max) in parentheses; "+
		"the ratio is parkway's median / JetStream's median. Payloads are 100 bytes unless stated. "+
		"Absolute numbers on a shared machine are noisy: compare ratios within one run, and CPU/msg "+
		"across runs.\n\n", r.rounds)
	r.writeRoundLengths(&b)
	if len(r.sets) > 0 {
		b.WriteString(howItRuns)
		b.WriteString("\n")
	}

	for _, s := range r.sets {
		r.writeSet(&b, s)
	}
	r.writeReplicated(&b)
	r.writeWaiting(&b)
	r.writeLimits(&b)
	r.writeTargets(&b)
	if r.prevText != "" {
		b.WriteString(besidePrevious(r.previous, r.prevText, b.String()))
	}
	return b.String()
}

// writeRoundLengths states the rounds' minimum length and the shortest and
// longest timed throughput round of the run, with the cases they were.
func (r *Report) writeRoundLengths(b *strings.Builder) {
	type round struct {
		what    string
		elapsed time.Duration
	}
	var lo, hi round
	see := func(what string, ss []sample) {
		for _, s := range ss {
			if lo.what == "" || s.elapsed < lo.elapsed {
				lo = round{what, s.elapsed}
			}
			if s.elapsed > hi.elapsed {
				hi = round{what, s.elapsed}
			}
		}
	}
	for _, l := range r.limits {
		see("limits/"+l.limit.key, l.samples)
	}
	for _, s := range r.sets {
		for _, c := range s.cases {
			if isConvergence(c.spec.key) {
				continue // a fixed number of topics, not a timed round
			}
			see(s.name+"/"+c.spec.key+" on parkway", c.samples[0])
			see(s.name+"/"+c.spec.key+" on JetStream", c.samples[1])
		}
	}
	if rr := r.replicated; rr != nil {
		for _, c := range rr.cases {
			if c.spec.key == "convergence" {
				continue // R6: a fixed number of topics, not a timed round
			}
			for i, ss := range c.samples {
				see(replicatedSet+"/"+c.spec.key+" on "+rr.systems[i], ss)
			}
		}
	}
	if lo.what == "" {
		return
	}
	if r.minRound > 0 {
		fmt.Fprintf(b, "Every throughput round ran for at least %v (and at least its floor of messages). ", r.minRound)
	} else {
		b.WriteString("Rounds had no minimum length: each did exactly its floor of messages. ")
	}
	fmt.Fprintf(b, "The shortest timed round lasted %s (%s), the longest %s (%s).\n\n",
		formatDuration(lo.elapsed), lo.what, formatDuration(hi.elapsed), hi.what)
}

func (r *Report) writeSet(b *strings.Builder, s setResult) {
	title := "Interval fsync"
	if s.d.always {
		title = "Fsync on every write"
	}
	fmt.Fprintf(b, "## %s\n\nDurability, the same on both sides: %s.\n\n", title, s.d)
	if s.d.always && s.sizes.Consume == 0 && s.sizes.Consume1K == 0 && s.sizes.Consume64K == 0 {
		b.WriteString("Case 5 and its case-7 variants are not repeated here: reads do not depend on the fsync " +
			"policy, and prefilling under per-message fsync would dominate the run. Case 6 creates fewer topics " +
			"than in the interval set, for the same reason.\n\n")
	}
	b.WriteString("| case | floor | messages per round (parkway / JetStream) | metric | parkway | JetStream | parkway / JetStream |\n")
	b.WriteString("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n")
	for _, c := range s.cases {
		floor := formatCount(c.spec.count)
		done := formatRate(medianMsgs(c.samples[0])) + " / " + formatRate(medianMsgs(c.samples[1]))
		switch c.spec.key {
		case "convergence", convergenceAtOnceKey:
			floor, done = formatCount(c.spec.count)+" topics", "–"
		case "consume", "consume-1KiB", "consume-64KiB":
			floor += " (data set)"
		}
		for i, k := range c.spec.metrics {
			name, fl, dn := "", "", ""
			if i == 0 {
				name = fmt.Sprintf("%s %s (%s, %s)", c.spec.id, c.spec.title, c.spec.key, formatPayload(c.spec.payload))
				fl, dn = floor, done
			}
			pw, js := summarize(k, c.samples[0]), summarize(k, c.samples[1])
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", name, fl, dn, metricLabel(k),
				formatSummary(k, pw), formatSummary(k, js), formatRatioOf(pw.median, js.median))
		}
	}
	b.WriteString("\n")
}

func (r *Report) writeLimits(b *strings.Builder) {
	if len(r.limits) == 0 {
		return
	}
	b.WriteString("## Raw limits, same machine, same run\n\n")
	b.WriteString("| limit | floor | ops per round | ops/s | CPU/op (process user+sys) | MB/s (record bytes) | p50 latency per op | p99 latency per op |\n" +
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, l := range r.limits {
		mb, lat50, lat99 := "–", "–", "–"
		if l.limit.unit == "record" {
			mb = formatSummary(mbPerSec, summarize(mbPerSec, l.samples))
		}
		if l.limit.latency {
			lat50, lat99 = formatSummary(p50, summarize(p50, l.samples)), formatSummary(p99, summarize(p99, l.samples))
		}
		fmt.Fprintf(b, "| `%s`: %s | %s %ss | %s | %s | %s | %s | %s | %s |\n", l.limit.key, l.limit.title, formatCount(l.count),
			l.limit.unit, formatRate(medianMsgs(l.samples)), formatSummary(msgsPerSec, summarize(msgsPerSec, l.samples)),
			formatSummary(cpuPerMsg, summarize(cpuPerMsg, l.samples)), mb, lat50, lat99)
	}
	b.WriteString("\n")
	for _, pair := range []struct{ key, limit, what string }{
		{"convergence", rawFsync2Key, "sequential: CreateTopic, then Produce"},
		{convergenceAtOnceKey, rawFsyncKey, "at once: CreateTopicAndProduce"},
		{"convergence", rawFsyncKey, "sequential, against one fsync"},
	} {
		if pw, lim, ok := r.convergenceVsFsync(pair.key, pair.limit); ok {
			fmt.Fprintf(b, "parkway case 6 (always set, %s) / %s, p50: %s / %s = **%s**.\n\n",
				pair.what, pair.limit, formatDuration(pw), formatDuration(lim), formatRatio(float64(pw)/float64(lim)))
		}
	}
	for _, pair := range []struct{ set, limit string }{{"interval", "file-append"}, {"always", "file-append-fsync100"}} {
		if pw, lim, ok := r.caseVsLimit(pair.set, "batch", 0, pair.limit); ok {
			fmt.Fprintf(b, "parkway case 3 (%s set) / %s, msgs/s: %s / %s = **%.0f%%**.\n\n",
				pair.set, pair.limit, formatRate(pw), formatRate(lim), 100*pw/lim)
		}
	}
	// Case 7 against the machine's rate of new page cache, for both
	// systems: each writes about one limit record per message (a 64 KiB
	// payload and a head of tens of bytes).
	for sys, name := range []string{"parkway", "JetStream"} {
		if got, lim, ok := r.caseVsLimit("interval", "pipelined-64KiB", sys, bigAppendKey); ok {
			fmt.Fprintf(b, "%s case 7 (interval set) / %s, msgs/s: %s / %s = **%.0f%%**.\n\n",
				name, bigAppendKey, formatRate(got), formatRate(lim), 100*got/lim)
		}
	}
}

// caseVsLimit returns the median msgs/s of system sys (0 parkway, 1
// JetStream) in case key of set, and the limit's median msgs/s.
func (r *Report) caseVsLimit(set, key string, sys int, limitKey string) (got, lim float64, ok bool) {
	c, ok1 := r.find(set, key)
	var l *limitResult
	for i := range r.limits {
		if r.limits[i].limit.key == limitKey {
			l = &r.limits[i]
		}
	}
	if !ok1 || l == nil || len(c.samples[sys]) == 0 {
		return 0, 0, false
	}
	got = summarize(msgsPerSec, c.samples[sys]).median
	lim = summarize(msgsPerSec, l.samples).median
	return got, lim, lim > 0
}

// convergenceVsFsync returns parkway's median p50 of case 6 in shape key
// in the fsync-always set and limit limitKey's median p50, both of this
// run.
func (r *Report) convergenceVsFsync(key, limitKey string) (pw, lim time.Duration, ok bool) {
	c, ok := r.find("always", key)
	if !ok {
		return 0, 0, false
	}
	for _, l := range r.limits {
		if l.limit.key == limitKey {
			pw = time.Duration(summarize(p50, c.samples[0]).median)
			lim = time.Duration(summarize(p50, l.samples).median)
			return pw, lim, lim > 0
		}
	}
	return 0, 0, false
}

// fsyncTarget is issue 33's: under fsync on every write, parkway's case-6
// p50 within 1.5× of one raw fsync's p50 measured in the same run. It is
// the at-once shape's (the create and the produce issued together) when
// the run has it: with a sequential client, CreateTopic acknowledged
// durable before the produce is sent, two fsyncs in series are the limit
// whatever parkway does.
func (r *Report) fsyncTarget() (Target, bool) {
	pw, lim, ok := r.convergenceVsFsync(convergenceAtOnceKey, rawFsyncKey)
	if !ok {
		pw, lim, ok = r.convergenceVsFsync("convergence", rawFsyncKey)
	}
	if !ok {
		return Target{}, false
	}
	const most = 1.5
	f := float64(pw) / float64(lim)
	t := Target{Name: "case 6 p50 within 1.5× of one raw fsync", Set: "always",
		Measured: fmt.Sprintf("%s (%s / %s)", formatRatio(f), formatDuration(pw), formatDuration(lim)), Met: f <= most}
	if !t.Met {
		t.Shortfall = fmt.Sprintf("by a factor of %s (target ≤ 1.5×)", sig3(f/most))
	}
	return t, true
}

func (r *Report) find(set, key string) (caseResult, bool) {
	for _, s := range r.sets {
		if s.name != set {
			continue
		}
		for _, c := range s.cases {
			if c.spec.key == key {
				return c, true
			}
		}
	}
	return caseResult{}, false
}

// Target is one of the targets, evaluated on this run.
type Target struct {
	Name, Set, Measured string
	Met                 bool
	Shortfall           string // how far off, when missed
}

// ratioTargets are the throughput targets, parkway's msgs/s over
// JetStream's, per set and case: issue 17's (case 1 ≥ 10×, case 2 and 2a
// ≥ 5×, 64 KiB pipelined ≥ 2×, case 4 under fsync on every write ≥ 5×)
// and the earlier ones it leaves standing (≥ 10× elsewhere).
var ratioTargets = map[string][]struct {
	key string
	min float64
}{
	"interval": {{"produce-wait", 10}, {"pipelined", 5}, {"pipelined-async", 5}, {"partitions", 10}, {"consume", 10}, {"pipelined-64KiB", 2}},
	"always":   {{"produce-wait", 10}, {"pipelined", 10}, {"pipelined-async", 10}, {"partitions", 5}},
}

// Targets evaluates the targets: the throughput ratios of
// ratioTargets; case 3 ≥ 50% of the buffered file-append limit; case 6
// p99 < 1 ms and ≥ 3× JetStream (its p99 at most a third of JetStream's),
// and under fsync on every write its p50 within 1.5× of the raw fsync
// limit's; ≤ 1 allocation per message in case 3.
func (r *Report) Targets() []Target {
	var out []Target
	for _, s := range r.sets {
		for _, rt := range ratioTargets[s.name] {
			c, ok := r.find(s.name, rt.key)
			if !ok {
				continue
			}
			pw, js := summarize(msgsPerSec, c.samples[0]).median, summarize(msgsPerSec, c.samples[1]).median
			ratio := pw / js
			goal := fmt.Sprintf("%g×", rt.min)
			t := Target{Name: fmt.Sprintf("case %s (%s) msgs/s ≥ %s JetStream", c.spec.id, rt.key, goal), Set: s.name,
				Measured: formatRatio(ratio), Met: ratio >= rt.min}
			if !t.Met {
				t.Shortfall = fmt.Sprintf("by a factor of %s (target ≥ %s)", sig3(rt.min/ratio), goal)
			}
			out = append(out, t)
		}
		if s.name == "interval" {
			if pw, lim, ok := r.caseVsLimit("interval", "batch", 0, "file-append"); ok {
				share := pw / lim
				t := Target{Name: "case 3 msgs/s ≥ 50% of the buffered file append", Set: s.name,
					Measured: fmt.Sprintf("%.0f%%", 100*share), Met: share >= 0.5}
				if !t.Met {
					t.Shortfall = fmt.Sprintf("by a factor of %s (target ≥ 50%%)", sig3(0.5/share))
				}
				out = append(out, t)
			}
		}
		if c, ok := r.find(s.name, "convergence"); ok {
			p := time.Duration(summarize(p99, c.samples[0]).median)
			t := Target{Name: "case 6 p99 < 1 ms", Set: s.name, Measured: formatDuration(p), Met: p < time.Millisecond}
			if !t.Met {
				t.Shortfall = fmt.Sprintf("by a factor of %s (target < 1 ms)", sig3(float64(p)/float64(time.Millisecond)))
			}
			out = append(out, t)
			js := time.Duration(summarize(p99, c.samples[1]).median)
			if js > 0 {
				f := float64(js) / float64(p) // how many times lower parkway's p99 is
				t := Target{Name: "case 6 p99 ≥ 3× lower than JetStream's", Set: s.name,
					Measured: formatRatio(f), Met: f >= 3}
				if !t.Met {
					t.Shortfall = fmt.Sprintf("by a factor of %s (target ≥ 3×)", sig3(3/f))
				}
				out = append(out, t)
			}
		}
		if s.name == "always" {
			if t, ok := r.fsyncTarget(); ok {
				out = append(out, t)
			}
		}
		if c, ok := r.find(s.name, "batch"); ok {
			a := summarize(allocsPerMsg, c.samples[0]).median
			t := Target{Name: "case 3 allocations per message ≤ 1", Set: s.name, Measured: sig3(a), Met: a <= 1}
			if !t.Met {
				t.Shortfall = fmt.Sprintf("by a factor of %s (target ≤ 1)", sig3(a))
			}
			out = append(out, t)
		}
	}
	return append(out, r.replicatedTargets()...)
}

// replicatedTargets are issue 33's for case R6 on parkway ×3 disk over TCP
// against JetStream R3 file (both on disk, both over loopback TCP): p50
// and p99 at most a third of JetStream's, CPU per create + produce at most
// half of it.
func (r *Report) replicatedTargets() []Target {
	rr := r.replicated
	if rr == nil {
		return nil
	}
	pw, js := rr.index(parkwayClusterSystem{disk: true, tcp: true}.name()), rr.index(jetStreamClusterSystem{nats.FileStorage}.name())
	var c *replCaseResult
	for i := range rr.cases {
		if rr.cases[i].spec.key == "convergence" {
			c = &rr.cases[i]
		}
	}
	if c == nil || pw < 0 || js < 0 {
		return nil
	}
	var out []Target
	for _, k := range []struct {
		m    metric
		what string
		max  float64
	}{{p50, "p50", 1.0 / 3}, {p99, "p99", 1.0 / 3}, {cpuPerMsg, "CPU per create + produce", 0.5}} {
		a, b := summarize(k.m, c.samples[pw]).median, summarize(k.m, c.samples[js]).median
		if b <= 0 {
			continue
		}
		ratio := a / b
		goal := "1/3"
		if k.max == 0.5 {
			goal = "1/2"
		}
		t := Target{Name: fmt.Sprintf("case R6 %s ≤ %s of JetStream R3 file's (×3 disk TCP)", k.what, goal), Set: "replicated",
			Measured: formatRatioOf(a, b), Met: ratio <= k.max}
		if !t.Met {
			t.Shortfall = fmt.Sprintf("by a factor of %s (target ≤ %s)", sig3(ratio/k.max), goal)
		}
		out = append(out, t)
	}
	return out
}

func (r *Report) writeTargets(b *strings.Builder) {
	ts := r.Targets()
	if len(ts) == 0 {
		return
	}
	b.WriteString("## Targets (reported, not asserted)\n\n| target | set | parkway | result |\n| --- | --- | ---: | --- |\n")
	for _, t := range ts {
		res := "met"
		if !t.Met {
			res = "**missed**: " + t.Shortfall
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", t.Name, t.Set, t.Measured, res)
	}
	b.WriteString("\n")
}
