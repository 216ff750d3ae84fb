package bench

import (
	"strings"
	"testing"
	"time"
)

// TestBesidePrevious reads the figures of a report in the older layout
// (a messages column, no CPU row) and sets them beside a newer report's:
// every section, case and metric both have, column by column, and nothing
// else.
func TestBesidePrevious(t *testing.T) {
	prev := `# parkway vs embedded NATS JetStream, side by side

Run on 2026-12-02 18:41 UTC. Command:

Machine: 2 CPUs, load average (1/5/15 min) 2.51 2.50 2.37 at the start, 3.78 3.26 2.73 at the end.

## Interval fsync

| case | messages | metric | parkway | JetStream | parkway / JetStream |
| --- | ---: | --- | ---: | ---: | ---: |
| 1 produce and wait, one message per call (produce-wait, 100 B) | 20,000 | msgs/s | 156k (84.6k–157k) | 35.6k (35.0k–40.4k) | 4.38× |
|  |  | p50 latency (lower is better) | 4.17 µs (4.12 µs–4.18 µs) | 15.4 µs (15.4 µs–15.7 µs) | 0.27× |
| 3 batched produce, 100 messages per call (batch, 100 B) | 200,000 | msgs/s | 3.02M (2.87M–3.12M) | 86.4k (80.9k–98.0k) | 35.0× |

## Fsync on every write

| case | messages | metric | parkway | JetStream | parkway / JetStream |
| --- | ---: | --- | ---: | ---: | ---: |
| 1 produce and wait, one message per call (produce-wait, 100 B) | 2,000 | msgs/s | 1.23k (1.14k–1.36k) | 1.16k (1.11k–1.37k) | 1.06× |
`
	cur := `# parkway vs embedded NATS JetStream, side by side

## Interval fsync

| case | floor | messages per round (parkway / JetStream) | metric | parkway | JetStream | parkway / JetStream |
| --- | ---: | ---: | --- | ---: | ---: | ---: |
| 1 produce and wait, one message per call (produce-wait, 100 B) | 2,000 | 80.1k / 9.74k | msgs/s | 79.7k (71.0k–88.4k) | 9.73k (8.84k–10.6k) | 8.19× |
|  |  |  | CPU/msg (process user+sys) (lower is better) | 10.4 µs (10.1 µs–10.7 µs) | 63.5 µs (61.2 µs–65.9 µs) | 0.16× |
|  |  |  | p50 latency (lower is better) | 5.66 µs (5.56 µs–5.76 µs) | 33.8 µs (31.7 µs–35.8 µs) | 0.17× |
| 2 pipelined produce, 4,096 outstanding (pipelined, 100 B) | 20,000 | 21.5k / 20.0k | msgs/s | 19.3k (16.5k–22.0k) | 14.8k (12.8k–16.8k) | 1.30× |

## Fsync on every write

| case | floor | messages per round (parkway / JetStream) | metric | parkway | JetStream | parkway / JetStream |
| --- | ---: | ---: | --- | ---: | ---: | ---: |
| 1 produce and wait, one message per call (produce-wait, 100 B) | 200 | 1.1k / 1.0k | msgs/s | 1.20k (1.10k–1.30k) | 1.00k (0.9k–1.1k) | 1.20× |
`
	got := besidePrevious("RESULTS-previous.md", prev, cur)
	for _, want := range []string{
		"## Beside the previous run",
		"[RESULTS-previous.md](RESULTS-previous.md), ran on 2026-12-02 18:41 UTC (load average 2.51 2.50 2.37 at its start, 3.78 3.26 2.73 at its end)",
		"| Interval fsync | produce-wait, 100 B | msgs/s | parkway: 156k → **79.7k**; JetStream: 35.6k → **9.73k**; parkway / JetStream: 4.38× → **8.19×** |",
		"| Interval fsync | produce-wait, 100 B | p50 latency (lower is better) | parkway: 4.17 µs → **5.66 µs**; JetStream: 15.4 µs → **33.8 µs**; parkway / JetStream: 0.27× → **0.17×** |",
		"| Fsync on every write | produce-wait, 100 B | msgs/s | parkway: 1.23k → **1.20k**; JetStream: 1.16k → **1.00k**; parkway / JetStream: 1.06× → **1.20×** |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	table := got[strings.Index(got, "\n| "):]
	for _, not := range []string{"CPU/msg", "pipelined", "batch", "20,000", "floor"} {
		if strings.Contains(table, not) {
			t.Errorf("%q is in only one report but shows:\n%s", not, got)
		}
	}
	if got := strings.Count(table, "\n| "); got != 5 { // header, separator and 3 figures
		t.Errorf("%d table lines, want 5", got)
	}
	if s := besidePrevious("p.md", "# nothing\n", cur); s != "" {
		t.Errorf("no shared figures: %q, want no section", s)
	}
}

// TestTargets evaluates issue 17's targets on made-up samples: each
// throughput case against its own threshold, and case 6's p99 both
// absolutely and against JetStream's.
func TestTargets(t *testing.T) {
	rate := func(n int) []sample { return []sample{{msgs: n, elapsed: time.Second}} }
	p99of := func(d time.Duration) []sample {
		return []sample{{msgs: 1, elapsed: time.Second, lat: []time.Duration{d}}}
	}
	tc := func(key string, pw, js []sample) caseResult {
		return caseResult{spec: caseSpec{id: "x", key: key}, samples: [2][]sample{pw, js}}
	}
	rep := &Report{sets: []setResult{
		{name: "interval", cases: []caseResult{
			tc("produce-wait", rate(99), rate(10)),                                // 9.9×: missed (10×)
			tc("pipelined", rate(50), rate(10)),                                   // 5×: met (5×)
			tc("pipelined-64KiB", rate(19), rate(10)),                             // 1.9×: missed (2×)
			tc("convergence", p99of(time.Millisecond/2), p99of(time.Millisecond)), // < 1 ms, but 2× only
		}},
		{name: "always", cases: []caseResult{
			tc("partitions", rate(50), rate(10)), // 5×: met (5×)
		}},
	}}
	got := map[string]Target{}
	for _, tg := range rep.Targets() {
		got[tg.Set+" "+tg.Name] = tg
	}
	for name, met := range map[string]bool{
		"interval case x (produce-wait) msgs/s ≥ 10× JetStream":   false,
		"interval case x (pipelined) msgs/s ≥ 5× JetStream":       true,
		"interval case x (pipelined-64KiB) msgs/s ≥ 2× JetStream": false,
		"interval case 6 p99 < 1 ms":                              true,
		"interval case 6 p99 ≥ 3× lower than JetStream's":         false,
		"always case x (partitions) msgs/s ≥ 5× JetStream":        true,
	} {
		tg, ok := got[name]
		if !ok {
			t.Errorf("no target %q among %v", name, got)
			continue
		}
		if tg.Met != met {
			t.Errorf("%s: met %v (measured %s), want %v", name, tg.Met, tg.Measured, met)
		}
	}
	if len(got) != 6 {
		t.Errorf("%d targets, want 6: %v", len(got), got)
	}
}
