package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// SetSizes are the floors of one durability set: a throughput round
// produces at least this many messages, and goes on until the round's
// minimum length (Config.MinRound) has passed. A consume case prefills
// this many messages and reads them pass after pass; case 6 creates
// exactly this many topics. A zero count leaves the case out of the set.
type SetSizes struct {
	ProduceWait    int // case 1
	Pipelined      int // case 2
	PipelinedAsync int // case 2a: case 2 through parkway's ProduceAsync
	Batch          int // case 3; a multiple of 100
	Partitions     int // case 4, in total over the 8 goroutines; a multiple of 8
	Consume        int // case 5
	Topics         int // case 6
	Pipelined1K    int // case 7: case 2 with 1 KiB payloads
	Pipelined64K   int // case 7: case 2 with 64 KiB payloads
	Consume1K      int // case 7: case 5 with 1 KiB payloads
	Consume64K     int // case 7: case 5 with 64 KiB payloads
}

// Sizes are the floors of both durability sets. The raw limits take as
// floor the floor of the case they are compared with: the file append and
// the channel hand-off Interval.Batch, the file append with fsync
// Always.Batch, the raw fsync Always.Topics (case 6's count).
type Sizes struct {
	Interval, Always SetSizes
	// Replicated are the floors of the three-replica section.
	Replicated ReplicatedSizes
	// Waiting are the sizes of the waiting-consumer section.
	Waiting WaitingSizes
}

// DefaultMinRound is how long every throughput round runs at least: long
// enough that a scheduler hiccup on a shared machine is a small part of
// it.
const DefaultMinRound = time.Second

// DefaultSizes are small floors, so that the round's minimum length, not
// the count, decides how much each round does: a fast case does not end
// in a few tens of milliseconds, and a slow one (JetStream fsyncing every
// message) does not run for ten seconds. The consume data sets are read
// again pass after pass, so they only bound the disk the round uses.
// Case 6 creates 1,000 topics (200 with fsync on every write; case R6,
// topics of three replicas, 200) on both sides whatever the time.
func DefaultSizes() Sizes {
	return Sizes{
		Interval: SetSizes{
			ProduceWait: 2_000, Pipelined: 20_000, PipelinedAsync: 20_000, Batch: 20_000, Partitions: 8_000, Consume: 200_000,
			Topics: 1_000, Pipelined1K: 10_000, Pipelined64K: 1_000, Consume1K: 100_000, Consume64K: 5_000,
		},
		Always: SetSizes{
			ProduceWait: 200, Pipelined: 1_000, PipelinedAsync: 1_000, Batch: 1_000, Partitions: 200,
			Topics: 200, Pipelined1K: 500, Pipelined64K: 100,
		},
		Replicated: ReplicatedSizes{ProduceWait: 1_000, Pipelined: 5_000, PipelinedAsync: 5_000, Batch: 10_000, Topics: 200},
		Waiting:    WaitingSizes{Latency: 1_000, Idle: 1_000, IdleWindow: 10 * time.Second},
	}
}

// QuickMinRound is a smoke run's minimum round length.
const QuickMinRound = 100 * time.Millisecond

// QuickSizes are a smoke run's: every case, about a tenth of the floors
// (case 6: of the topics). With one round and QuickMinRound it takes about
// a minute on the project's machine.
func QuickSizes() Sizes {
	return Sizes{
		Interval: SetSizes{
			ProduceWait: 200, Pipelined: 2_000, PipelinedAsync: 2_000, Batch: 2_000, Partitions: 800, Consume: 20_000,
			Topics: 100, Pipelined1K: 1_000, Pipelined64K: 100, Consume1K: 10_000, Consume64K: 500,
		},
		Always: SetSizes{
			ProduceWait: 20, Pipelined: 100, PipelinedAsync: 100, Batch: 100, Partitions: 24,
			Topics: 20, Pipelined1K: 50, Pipelined64K: 10,
		},
		Replicated: ReplicatedSizes{ProduceWait: 100, Pipelined: 500, PipelinedAsync: 500, Batch: 1_000, Topics: 20},
		Waiting:    WaitingSizes{Latency: 100, Idle: 100, IdleWindow: time.Second},
	}
}

func (s SetSizes) validate(set string) error {
	var errs []error
	if s.Batch%produceBatch != 0 {
		errs = append(errs, fmt.Errorf("%s: Batch %d is not a multiple of %d", set, s.Batch, produceBatch))
	}
	if s.Partitions%concurrent != 0 {
		errs = append(errs, fmt.Errorf("%s: Partitions %d is not a multiple of %d", set, s.Partitions, concurrent))
	}
	for _, v := range []int{s.ProduceWait, s.Pipelined, s.PipelinedAsync, s.Batch, s.Partitions, s.Consume, s.Topics,
		s.Pipelined1K, s.Pipelined64K, s.Consume1K, s.Consume64K} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: negative count %d", set, v))
		}
	}
	return errors.Join(errs...)
}

// Config configures a comparison run.
type Config struct {
	// Rounds is how many times every case runs on each system (default 3).
	Rounds int
	// Sizes are the floors (default DefaultSizes).
	Sizes *Sizes
	// MinRound is how long every throughput round runs at least (0:
	// DefaultMinRound; negative: no minimum, every round does exactly its
	// floor). Case 6 is not extended: it creates its number of topics.
	MinRound time.Duration
	// Filter, when set, runs only the cases whose "<set>/<key>" it matches
	// (sets: interval, always, limits, replicated, waiting; keys as in
	// the report), and the limits beside a case it matches (the raw fsync
	// beside always/convergence).
	Filter *regexp.Regexp
	// Systems, when set, runs the replicated cases only on the systems
	// whose name it matches ("parkway ×3 disk TCP", "JetStream R3
	// file", ...): the report's tables and ratios leave the others out.
	Systems *regexp.Regexp
	// TempDir is where data directories are created (default
	// os.TempDir()): every round of every case gets a fresh one for each
	// system, directly under TempDir, removed after the round.
	TempDir string
	// CPUProfileDir, when set, receives a CPU profile of the parkway side
	// of every case, one file per round: <set>-<key>-r<round>.pprof, and
	// in the replicated section one per parkway system:
	// replicated-<key>-<memory|disk>-r<round>.pprof.
	CPUProfileDir string
	// PrewarmMiB, when positive, has every timed section start by
	// touching and releasing that many MiB of anonymous memory (before
	// the clock; see prewarm): on a virtual machine whose host takes back
	// the memory the guest frees (free page reporting), a round's
	// page-cache writes otherwise land on pages the host must back
	// afresh, at a cost per page that can exceed the systems' own. Both
	// systems get it alike; it is a diagnostic of the machine, off by
	// default.
	PrewarmMiB int
	// Progress receives one line per run (default: discarded).
	Progress io.Writer
	// NodeLog, when set, receives the warnings of the replicated
	// section's parkway nodes (liveness verdicts, failed builds): what a
	// failed round needs to be explained.
	NodeLog io.Writer
	// RunTimeout bounds one system's run of one case (0: 10 minutes). A
	// loaded machine needs more for case R6 over 10,000 topics on disk
	// (about 10 creates a second at load 30).
	RunTimeout time.Duration
}

// runTimeout bounds one system's run of one case, so that a stuck run
// fails the comparison instead of hanging it (Config.RunTimeout).
const runTimeout = 10 * time.Minute

// runTimeout is Config.RunTimeout or its default.
func (r *runner) runTimeout() time.Duration {
	if r.cfg.RunTimeout > 0 {
		return r.cfg.RunTimeout
	}
	return runTimeout
}

// Run runs the comparison and returns its report.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if cfg.Rounds == 0 {
		cfg.Rounds = 3
	}
	if cfg.Rounds < 0 {
		return nil, fmt.Errorf("bench: rounds %d < 0", cfg.Rounds)
	}
	switch {
	case cfg.MinRound == 0:
		cfg.MinRound = DefaultMinRound
	case cfg.MinRound < 0:
		cfg.MinRound = 0
	}
	sizes := DefaultSizes()
	if cfg.Sizes != nil {
		sizes = *cfg.Sizes
	}
	if err := errors.Join(sizes.Interval.validate("interval"), sizes.Always.validate("always"),
		sizes.Replicated.validate(), sizes.Waiting.validate()); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.CPUProfileDir != "" {
		if err := os.MkdirAll(cfg.CPUProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: cpu profile dir: %w", err)
		}
	}
	base := cfg.TempDir
	if base == "" {
		base = os.TempDir()
	}

	r := &runner{cfg: cfg, base: base}
	rep = &Report{machine: describeMachine(base), rounds: cfg.Rounds, minRound: cfg.MinRound}
	start := time.Now()

	// The limits run first, each round in turn, with the floor of the
	// case they are compared with.
	for _, l := range r.selectedLimits(sizes) {
		count := l.floor(sizes)
		lr := limitResult{limit: l, count: count}
		for round := 1; round <= cfg.Rounds; round++ {
			s, err := r.runLimit(ctx, l, count, round)
			if err != nil {
				return nil, fmt.Errorf("bench: limit %s, round %d: %w", l.key, round, err)
			}
			r.progress("limits", l.key, round, "raw", s)
			lr.samples = append(lr.samples, s)
		}
		rep.limits = append(rep.limits, lr)
	}

	systems := []system{parkwaySystem{}, jetStreamSystem{}}
	for _, set := range []struct {
		name  string
		d     durability
		sizes SetSizes
	}{
		{"interval", durability{interval: jetStreamDefaultSyncInterval}, sizes.Interval},
		{"always", durability{always: true}, sizes.Always},
	} {
		sr := setResult{name: set.name, d: set.d, sizes: set.sizes}
		for _, c := range cases(set.sizes) {
			if !r.selected(set.name + "/" + c.key) {
				continue
			}
			cr := caseResult{spec: c}
			for round := 1; round <= cfg.Rounds; round++ {
				// Alternate which system goes first, so neither always
				// inherits the other's page cache, dirty pages and heat.
				order := []int{0, 1}
				if round%2 == 0 {
					order = []int{1, 0}
				}
				for _, i := range order {
					s, err := r.runCase(ctx, systems[i], set.name, set.d, c, round)
					if err != nil {
						return nil, fmt.Errorf("bench: %s/%s on %s, round %d: %w", set.name, c.key, systems[i].name(), round, err)
					}
					r.progress(set.name, c.key, round, systems[i].name(), s)
					cr.samples[i] = append(cr.samples[i], s)
				}
			}
			sr.cases = append(sr.cases, cr)
		}
		if len(sr.cases) > 0 {
			rep.sets = append(rep.sets, sr)
		}
	}
	if rep.replicated, err = r.runReplicated(ctx, sizes.Replicated); err != nil {
		return nil, err
	}
	if rep.waiting, err = r.runWaiting(ctx, sizes.Waiting); err != nil {
		return nil, err
	}
	rep.started, rep.elapsed = start, time.Since(start)
	rep.machine.loadEnd = loadAverage()
	return rep, nil
}

type runner struct {
	cfg  Config
	base string // where each round's data directory is created
}

func (r *runner) selected(name string) bool {
	return r.cfg.Filter == nil || r.cfg.Filter.MatchString(name)
}

// selectedLimits are the limits the run measures: those the filter
// selects as "limits/<key>", and those beside a case it selects, so that
// a run of that case alone has its limit from the same run. A limit whose
// floor is 0 is left out, as its case is.
func (r *runner) selectedLimits(sizes Sizes) []limit {
	var out []limit
	for _, l := range limits() {
		if l.floor(sizes) > 0 && (r.selected("limits/"+l.key) || (l.beside != "" && r.selected(l.beside))) {
			out = append(out, l)
		}
	}
	return out
}

// roundDir creates the fresh data directory of one round of one case on
// one system, directly under the configured temp dir (not inside a
// directory shared with other rounds), and returns it with the function
// that removes it.
func (r *runner) roundDir(set, key, who string, round int) (string, func() error, error) {
	name := strings.NewReplacer(" ", "-", "×", "x", "/", "-").Replace(fmt.Sprintf("parkway-bench-%s-%s-r%d-%s-", set, key, round, who))
	dir, err := os.MkdirTemp(r.base, name)
	if err != nil {
		return "", nil, fmt.Errorf("round directory: %w", err)
	}
	return dir, func() error {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove round directory: %w", err)
		}
		return nil
	}, nil
}

// runCase runs one case once on one system, on a fresh data directory
// that is removed afterwards.
func (r *runner) runCase(ctx context.Context, sys system, set string, d durability, c caseSpec, round int) (s sample, err error) {
	dir, remove, err := r.roundDir(set, c.key, sys.name(), round)
	if err != nil {
		return sample{}, err
	}
	defer func() { err = errors.Join(err, remove()) }()
	ctx, cancel := context.WithTimeout(ctx, r.runTimeout())
	defer cancel()

	in, err := sys.open(ctx, dir, d, c.parts, make([]byte, c.payload))
	if err != nil {
		return sample{}, err
	}
	m := &meter{minRound: r.cfg.MinRound, prewarmMiB: r.cfg.PrewarmMiB}
	if r.cfg.CPUProfileDir != "" && sys.name() == (parkwaySystem{}).name() {
		m.profile = filepath.Join(r.cfg.CPUProfileDir, fmt.Sprintf("%s-%s-r%d.pprof", set, c.key, round))
	}
	err = c.run(ctx, in, c, m)
	// On an error path the profile may still be running; stop it before
	// closing, so it never covers the shutdown.
	err = errors.Join(err, m.finishProfile(), in.close())
	if err == nil && (!m.started || m.s.msgs == 0) {
		err = errors.New("the case measured nothing")
	}
	m.s.dir = dir
	return m.s, err
}

// runLimit runs one raw limit once in a fresh directory.
func (r *runner) runLimit(ctx context.Context, l limit, count, round int) (s sample, err error) {
	dir, remove, err := r.roundDir("limits", l.key, "raw", round)
	if err != nil {
		return sample{}, err
	}
	defer func() { err = errors.Join(err, remove()) }()
	ctx, cancel := context.WithTimeout(ctx, r.runTimeout())
	defer cancel()
	m := &meter{minRound: r.cfg.MinRound, prewarmMiB: r.cfg.PrewarmMiB}
	err = l.run(ctx, dir, count, m)
	m.s.dir = dir
	return m.s, errors.Join(err, m.finishProfile())
}

func (r *runner) progress(set, key string, round int, who string, s sample) {
	line := fmt.Sprintf("%-10s %-16s round %d/%d  %-24s %7.3fs %9s msgs %8s msgs/s", set, key, round, r.cfg.Rounds, who,
		s.elapsed.Seconds(), formatRate(float64(s.msgs)), formatRate(rate(s)))
	if s.cpu >= 0 && s.msgs > 0 && s.elapsed > 0 {
		line += fmt.Sprintf("  cpu %s/msg (%.2f cores)", formatDuration(s.cpu/time.Duration(s.msgs)),
			s.cpu.Seconds()/s.elapsed.Seconds())
	}
	if len(s.lat) > 0 {
		lat := sortedCopy(s.lat)
		line += fmt.Sprintf("  p50 %s  p99 %s  p99.9 %s", formatDuration(percentile(lat, 0.50)),
			formatDuration(percentile(lat, 0.99)), formatDuration(percentile(lat, 0.999)))
	}
	line += fmt.Sprintf("  [before: %d goroutines, heap %.0f MB]", s.goroutines, float64(s.heap)/1e6)
	fmt.Fprintln(r.cfg.Progress, line)
}
