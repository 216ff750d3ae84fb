// Command compare runs parkway and an embedded NATS JetStream server side
// by side, case by case, with the raw limits of the machine, and prints a
// markdown table of medians, ranges and ratios. From the repository root:
//
//	go -C bench run ./cmd/compare                 # full run, 3 rounds of at least 1 s (about 17 min on 2 cores)
//	go -C bench run ./cmd/compare -quick          # smoke run: 1 round of at least 100 ms (about 1 min)
//	go -C bench run ./cmd/compare -out RESULTS.md # also write the report (relative to bench/)
//
// With -out, an existing report file is first moved to
// <name>-previous.md beside it; the new report links to it and ends with
// a section setting the previous run's medians beside its own, so the
// previous run's figures stay next to the new ones.
//
// -only replicated runs only the three-replica section (parkway's three
// nodes against a three-server JetStream cluster), -only waiting only the
// waiting-consumer section (produce→consume latency with a waiting
// consumer, and the CPU of 1,000 idle waiting consumers), -only single
// everything else. -run selects cases by "<set>/<key>" (sets: interval,
// always, limits, replicated, waiting) and -cpuprofile writes a CPU
// profile of the parkway side of every selected case, for example:
//
//	go -C bench run ./cmd/compare -only replicated        # about 3 min on 2 cores
//	go -C bench run ./cmd/compare -only waiting           # about 7 min on 2 cores
//	go -C bench run ./cmd/compare -run 'interval/batch$' -cpuprofile /tmp/prof
//	go -C bench run ./cmd/compare -run '^interval/convergence$' -topics 10000 # case 6 over 10,000 topics
//	go -C bench run ./cmd/compare -run '^always/convergence$'               # case 6 under fsync always, beside one raw fsync
//	go -C bench run ./cmd/compare -run '^replicated/convergence$'           # case R6: topics of three replicas
//	go tool pprof -top /tmp/prof/interval-batch-r*.pprof
//
// -prewarm N touches and releases N MiB of anonymous memory before every
// timed section, for both systems: on a virtual machine whose host takes
// back the memory the guest frees (free page reporting), a round's
// page-cache writes otherwise land on pages the host must back afresh,
// which can cost more than either system's own work (RESULTS.md, "Issue
// 33, case 7: what bounds 64 KiB pipelined"). Compare a run with it and
// one without to tell the machine from the systems:
//
//	go -C bench run ./cmd/compare -run '^interval/pipelined-64KiB$' -prewarm 1536
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/parkway-io/parkway/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	rounds := fs.Int("rounds", 3, "rounds per case and system (-quick defaults it to 1)")
	quick := fs.Bool("quick", false, "smoke run: a tenth of the floors, rounds of at least 100ms, 1 round unless -rounds or -min is given")
	minRound := fs.Duration("min", bench.DefaultMinRound, "minimum length of every throughput round (negative: none, exactly the floor counts)")
	out := fs.String("out", "", "also write the report to this file")
	filter := fs.String("run", "", "only cases whose \"<set>/<key>\" matches this regexp (sets: interval, always, limits, replicated, waiting)")
	systems := fs.String("systems", "", "only the replicated systems whose name matches this regexp (e.g. 'disk TCP|R3 file')")
	only := fs.String("only", "", "only one section: \"replicated\" (three replicas), \"waiting\" (waiting consumers) or \"single\" (everything else)")
	cpuprofile := fs.String("cpuprofile", "", "directory for CPU profiles of the parkway side, one per case and round")
	tmp := fs.String("tmpdir", "", "where data directories are created (default: the system temp dir)")
	runTimeout := fs.Duration("runtimeout", 0, "bound on one system's run of one case (0: 10m)")
	nodeLog := fs.Bool("nodelog", false, "write the replicated section's parkway node warnings to stderr")
	prewarmMiB := fs.Int("prewarm", 0, "MiB of anonymous memory touched and released before every timed section (a diagnostic: on a VM whose host takes freed memory back, page-cache writes otherwise land on pages the host backs afresh)")
	topics := fs.Int("topics", 0, "case 6 (convergence): topics each round creates, in both sets and in case R6 (0: the default sizes; e.g. 10000 for the flatness check)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *minRound == 0 {
		*minRound = -1 // Config reads 0 as the default; -min 0 means none
	}
	cfg := bench.Config{Rounds: *rounds, MinRound: *minRound, TempDir: *tmp, CPUProfileDir: *cpuprofile, PrewarmMiB: *prewarmMiB, Progress: os.Stderr}
	if *nodeLog {
		cfg.NodeLog = os.Stderr
	}
	cfg.RunTimeout = *runTimeout
	if *quick {
		sizes := bench.QuickSizes()
		cfg.Sizes = &sizes
		if !set["rounds"] {
			cfg.Rounds = 1
		}
		if !set["min"] {
			cfg.MinRound = bench.QuickMinRound
		}
	}
	if *topics < 0 {
		return fmt.Errorf("-topics %d < 0", *topics)
	}
	if *topics > 0 {
		sizes := bench.DefaultSizes()
		if cfg.Sizes != nil {
			sizes = *cfg.Sizes
		}
		sizes.Interval.Topics, sizes.Always.Topics, sizes.Replicated.Topics = *topics, *topics, *topics
		cfg.Sizes = &sizes
	}
	switch *only {
	case "":
	case "replicated", "waiting", "single":
		if *filter != "" {
			return fmt.Errorf("-only and -run select cases both; use one")
		}
		*filter = "^" + *only + "/"
		if *only == "single" {
			*filter = `^(interval|always|limits)/`
		}
	default:
		return fmt.Errorf("-only %q: want replicated, waiting or single", *only)
	}
	if *systems != "" {
		re, err := regexp.Compile(*systems)
		if err != nil {
			return fmt.Errorf("-systems: %w", err)
		}
		cfg.Systems = re
	}
	if *filter != "" {
		re, err := regexp.Compile(*filter)
		if err != nil {
			return fmt.Errorf("-run: %w", err)
		}
		cfg.Filter = re
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	// The command as a user types it from the repository root; the
	// binary's own path (a go run temp file) would tell a reader nothing.
	command := strings.Join(append([]string{"go -C bench run ./cmd/compare"}, quoteArgs(os.Args[1:])...), " ")
	if *out == "" {
		fmt.Print(rep.Markdown(command))
		return nil
	}
	prev, err := bench.KeepPrevious(*out)
	if err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	if prev != "" {
		text, err := os.ReadFile(filepath.Join(filepath.Dir(*out), prev))
		if err != nil {
			return fmt.Errorf("-out: previous report: %w", err)
		}
		rep.BesidePrevious(prev, string(text))
	}
	md := rep.Markdown(command)
	fmt.Print(md)
	if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	return nil
}

// quoteArgs single-quotes arguments a shell would split or expand.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"$*?[]()|&;<>\\`") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return out
}
