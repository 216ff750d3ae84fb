package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

const waitingHowItRuns = `Consumers that wait on the server for messages instead of polling in a
loop. Both systems run as in the single-node sets (parkway: one node, file
store, ` + "`FsyncInterval`" + ` 2m topic policy, one topic of one partition;
JetStream: one embedded server, one file-storage stream with 1 replica,
default sync_interval), a fresh data directory per round and side, each
round rotating which side runs first. Four readers, each asking for at
most 256 messages and waiting at most 5 s per request:

| reader | what it does |
| --- | --- |
| parkway Consumer | ` + "`node.NewConsumer(ctx, topic, parkway.ConsumerConfig{Name: name, MaxWait: 5*time.Second, MaxMessages: 256})`" + `, a named consumer (no group) ranged over with ` + "`Messages(ctx)`" + `; it polls with waiting polls and commits after each batch (its default policy: a ` + "`StoreOffset`" + ` per batch) |
| parkway Poll+WaitFor | ` + "`node.Poll(ctx, topic, 0, parkway.AtOffset(next), 256, parkway.WaitFor(5*time.Second))`" + ` in a loop; stores no offset |
| JetStream Consume | a durable pull consumer (jetstream package, ` + "`AckExplicitPolicy`" + `, ` + "`DeliverAllPolicy`" + `), ` + "`cons.Consume(handler, jetstream.PullExpiry(5*time.Second), jetstream.PullMaxMessages(256))`" + `, every message acknowledged with ` + "`msg.Ack()`" + ` (the counterpart of the Consumer's commit); its idle heartbeat is the default, half the expiry |
| JetStream Fetch+MaxWait | a durable pull consumer (` + "`AckNonePolicy`" + `, ` + "`DeliverAllPolicy`" + `, like the Poll loop, which commits nothing), ` + "`cons.Fetch(256, jetstream.FetchMaxWait(5*time.Second))`" + ` in a loop, each batch's messages read as they arrive (no heartbeat: the client sets none below a 10 s wait) |

**W1, latency.** One reader reads the partition from its start; once it
has seen the warm message and recorded it (so its next request is
waiting), the clock
starts and one producer produces one 100-byte message at a time, waiting
for each ack (parkway ` + "`Produce`" + `, JetStream ` + "`js.Publish`" + `), one
every 1 ms (at once if the previous produce took longer): a modest fixed
rate, so the reader is waiting when each message lands. Each payload
carries the time taken just before its produce call; the latency of a
message is from then until the reader's loop sees it (the Consumer's
` + "`range`" + ` body, the Poll or Fetch loop, the Consume handler). The round
produces at least its floor and goes on until the round's minimum length
has passed; the clock stops when the reader has seen every message, each
exactly once. CPU/msg is the whole process's CPU over that (producer,
server and reader) per message.

**W2, idle.** N readers of the one partition (parkway: N Consumers, or N
Poll loops, all on partition 0 of the one topic; JetStream: N durable pull
consumers of the one stream, each with its own Consume or Fetch loop).
Once every reader has seen the warm message, so each is waiting on the
server, and has recorded it (the Consumer's commit is stored, the
Consume ack is processed: each checked on the server), the process
settles for 0.5 s and returns the memory it freed to the OS (earlier
rounds' and sides' garbage, which the runtime's background scavenger would
otherwise return during the window), then the process's CPU time
(getrusage, user+system) is measured over the idle window with nothing
produced; the figure is that CPU time over the window, as a percentage of
one core. The rows without a reader open the same system and measure it
idle, so the readers' own cost is the difference. The Poll and Fetch
loops count requests answered empty in the window: with a 5 s wait, about
N × window / 5 s, which shows every reader kept waiting and asking again
(the Consumer and Consume do the same inside the library, uncounted).
After the window (not timed), one message is produced and the time until
every reader has it is given (wake-all); set-up is the time to start the N
readers until each has read and recorded the warm message.
`

func (r *Report) writeWaiting(b *strings.Builder) {
	wr := r.waiting
	if wr == nil {
		return
	}
	b.WriteString("## Waiting consumers: latency and idle cost\n\n")
	b.WriteString(waitingHowItRuns)
	b.WriteString("\n")
	for _, c := range wr.cases {
		switch c.spec.key {
		case "latency":
			writeWaitLatency(b, c)
		case "idle":
			writeWaitIdle(b, c, wr.sizes.IdleWindow)
		}
	}
}

func writeWaitLatency(b *strings.Builder, c waitCaseResult) {
	fmt.Fprintf(b, "### %s %s\n\n| metric |", c.spec.id, c.spec.title)
	for _, s := range c.spec.sides {
		fmt.Fprintf(b, " %s |", s.name)
	}
	for _, p := range c.spec.pairs {
		fmt.Fprintf(b, " %s / %s |", c.spec.sides[p[0]].name, c.spec.sides[p[1]].name)
	}
	b.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(c.spec.sides)+len(c.spec.pairs)) + "\n")
	b.WriteString("| messages per round |")
	for i := range c.spec.sides {
		fmt.Fprintf(b, " %s |", formatRate(medianMsgs(plain(c.samples[i]))))
	}
	b.WriteString(strings.Repeat(" |", len(c.spec.pairs)) + "\n")
	for _, k := range []metric{p50, p99, cpuPerMsg, allocsPerMsg} {
		fmt.Fprintf(b, "| %s |", metricLabel(k))
		sums := make([]summary, len(c.spec.sides))
		for i := range c.spec.sides {
			sums[i] = summarize(k, plain(c.samples[i]))
			fmt.Fprintf(b, " %s |", formatSummary(k, sums[i]))
		}
		for _, p := range c.spec.pairs {
			fmt.Fprintf(b, " %s |", formatRatioOf(sums[p[0]].median, sums[p[1]].median))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func writeWaitIdle(b *strings.Builder, c waitCaseResult, window time.Duration) {
	fmt.Fprintf(b, "### %s %s, %v idle window\n\n", c.spec.id, c.spec.title, window)
	b.WriteString("| side | readers | CPU, % of one core (lower is better) | above the idle system | " +
		"requests answered empty in the window | set-up | wake-all (one produce → every reader) |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	cpu := make([]summary, len(c.spec.sides))
	for i := range c.spec.sides {
		cpu[i] = summarizeF(c.samples[i], cpuPercent)
	}
	// The idle system of each side: the side of the same system without
	// a reader.
	baseline := func(i int) (summary, bool) {
		for j, s := range c.spec.sides {
			if s.start == nil && s.system.name() == c.spec.sides[i].system.name() {
				return cpu[j], true
			}
		}
		return summary{}, false
	}
	var missed []string
	for i, s := range c.spec.sides {
		readers := formatCount(int(medianMsgs(plain(c.samples[i]))))
		above, empties, setUp, wake := "–", "–", "–", "–"
		if s.start != nil {
			if bl, ok := baseline(i); ok && !math.IsNaN(cpu[i].median) && !math.IsNaN(bl.median) {
				above = fmt.Sprintf("%s%%", sig3(cpu[i].median-bl.median))
			}
			setUp = formatDurSummary(summarizeF(c.samples[i], func(s waitSample) float64 { return float64(s.setUp) }))
			var woke []waitSample
			for r, ws := range c.samples[i] {
				if ws.missed == 0 {
					woke = append(woke, ws)
					continue
				}
				missed = append(missed, fmt.Sprintf("%s, round %d: %s of %s readers had not seen the message after %v (%s)",
					s.name, r+1, formatCount(ws.missed), formatCount(ws.msgs), drainTimeout, ws.missedState))
			}
			wake = formatDurSummary(summarizeF(woke, func(s waitSample) float64 { return float64(s.wake) }))
			if len(woke) < len(c.samples[i]) {
				wake += fmt.Sprintf(", over %d of %d rounds: see below", len(woke), len(c.samples[i]))
			}
		}
		if s.countsEmpty {
			e := summarizeF(c.samples[i], func(s waitSample) float64 { return float64(s.empties) })
			empties = fmt.Sprintf("%.0f (%.0f–%.0f)", e.median, e.lo, e.hi)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", s.name, readers, formatPercentSummary(cpu[i]),
			above, empties, setUp, wake)
	}
	b.WriteString("\n")
	if len(missed) > 0 {
		fmt.Fprintf(b, "Wake-all misses (the run goes on; the wake-all median is over the other rounds): %s.\n\n",
			strings.Join(missed, "; "))
	}
	var ratios []string
	for _, p := range c.spec.pairs {
		ratios = append(ratios, fmt.Sprintf("%s / %s %s", c.spec.sides[p[0]].name, c.spec.sides[p[1]].name,
			formatRatioOf(cpu[p[0]].median, cpu[p[1]].median)))
	}
	if len(ratios) > 0 {
		fmt.Fprintf(b, "CPU ratios of the medians (whole process): %s.\n\n", strings.Join(ratios, "; "))
	}
}

// plain returns the harness samples of waiting samples.
func plain(ws []waitSample) []sample {
	out := make([]sample, len(ws))
	for i, w := range ws {
		out[i] = w.sample
	}
	return out
}

// cpuPercent is a round's process CPU over its window, in percent of one
// core (NaN when CPU is not measured).
func cpuPercent(s waitSample) float64 {
	if s.cpu < 0 || s.elapsed <= 0 {
		return math.NaN()
	}
	return 100 * s.cpu.Seconds() / s.elapsed.Seconds()
}

// summarizeF is the median and range of f over the samples.
func summarizeF(ws []waitSample, f func(waitSample) float64) summary {
	if len(ws) == 0 {
		return summary{math.NaN(), math.NaN(), math.NaN()}
	}
	v := make([]float64, len(ws))
	for i, w := range ws {
		v[i] = f(w)
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return summary{med, v[0], v[len(v)-1]}
}

func formatPercentSummary(s summary) string {
	if math.IsNaN(s.median) {
		return "–"
	}
	return fmt.Sprintf("%s%% (%s–%s)", sig3(s.median), sig3(s.lo), sig3(s.hi))
}

func formatDurSummary(s summary) string {
	if math.IsNaN(s.median) {
		return "–"
	}
	return fmt.Sprintf("%s (%s–%s)", formatDuration(time.Duration(s.median)), formatDuration(time.Duration(s.lo)),
		formatDuration(time.Duration(s.hi)))
}
