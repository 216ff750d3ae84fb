package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// SetSizes are the message counts of one durability set (case 6: topics).
// A zero count leaves the case out of the set.
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

// Sizes are the counts of both durability sets. The raw limits run as
// many records as case 3 of the set they are compared with: the file
// append and the channel hand-off Interval.Batch, the file append with
// fsync Always.Batch.
type Sizes struct {
	Interval, Always SetSizes
	// Replicated are the counts of the three-replica section.
	Replicated ReplicatedSizes
}

// DefaultSizes keep a full run of 3 rounds under about 10 minutes on a
// 2-core machine. The fsync-always set writes a twentieth as much (and
// creates 200 topics in case 6, not 1,000), because JetStream fsyncs
// every message there, at the disk's fsync latency (0.3–2 ms on the
// project's machine), and it leaves the consume cases out: reading does
// not depend on the fsync policy, and the prefill alone would dominate.
func DefaultSizes() Sizes {
	return Sizes{
		Interval: SetSizes{
			ProduceWait: 20_000, Pipelined: 200_000, PipelinedAsync: 200_000, Batch: 200_000, Partitions: 200_000, Consume: 200_000,
			Topics: 1_000, Pipelined1K: 100_000, Pipelined64K: 5_000, Consume1K: 100_000, Consume64K: 5_000,
		},
		Always: SetSizes{
			ProduceWait: 2_000, Pipelined: 10_000, PipelinedAsync: 10_000, Batch: 10_000, Partitions: 10_000,
			Topics: 200, Pipelined1K: 5_000, Pipelined64K: 500,
		},
		Replicated: ReplicatedSizes{ProduceWait: 10_000, Pipelined: 50_000, PipelinedAsync: 50_000, Batch: 100_000},
	}
}

// QuickSizes are a smoke run's: every case, a tenth of the messages.
// With one round it takes under a minute on the project's machine.
func QuickSizes() Sizes {
	return Sizes{
		Interval: SetSizes{
			ProduceWait: 2_000, Pipelined: 20_000, PipelinedAsync: 20_000, Batch: 20_000, Partitions: 20_000, Consume: 20_000,
			Topics: 100, Pipelined1K: 10_000, Pipelined64K: 500, Consume1K: 10_000, Consume64K: 500,
		},
		Always: SetSizes{
			ProduceWait: 200, Pipelined: 1_000, PipelinedAsync: 1_000, Batch: 1_000, Partitions: 1_000,
			Topics: 20, Pipelined1K: 500, Pipelined64K: 50,
		},
		Replicated: ReplicatedSizes{ProduceWait: 1_000, Pipelined: 5_000, PipelinedAsync: 5_000, Batch: 10_000},
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
	// Sizes are the message counts (default DefaultSizes).
	Sizes *Sizes
	// Filter, when set, runs only the cases whose "<set>/<key>" it matches
	// (sets: interval, always, limits, replicated; keys as in the report).
	Filter *regexp.Regexp
	// TempDir is where data directories are created (default
	// os.TempDir()); each run gets a fresh one, removed after it.
	TempDir string
	// CPUProfileDir, when set, receives a CPU profile of the parkway side
	// of every case, one file per round: <set>-<key>-r<round>.pprof, and
	// in the replicated section one per parkway system:
	// replicated-<key>-<memory|disk>-r<round>.pprof.
	CPUProfileDir string
	// Progress receives one line per run (default: discarded).
	Progress io.Writer
}

// runTimeout bounds one system's run of one case, so that a stuck run
// fails the comparison instead of hanging it.
const runTimeout = 10 * time.Minute

// Run runs the comparison and returns its report.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if cfg.Rounds == 0 {
		cfg.Rounds = 3
	}
	if cfg.Rounds < 0 {
		return nil, fmt.Errorf("bench: rounds %d < 0", cfg.Rounds)
	}
	sizes := DefaultSizes()
	if cfg.Sizes != nil {
		sizes = *cfg.Sizes
	}
	if err := errors.Join(sizes.Interval.validate("interval"), sizes.Always.validate("always"),
		sizes.Replicated.validate()); err != nil {
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
	root, err := os.MkdirTemp(base, "parkway-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(root); rerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: remove temp dir: %w", rerr))
		}
	}()

	r := &runner{cfg: cfg, root: root}
	rep = &Report{machine: describeMachine(base), rounds: cfg.Rounds}
	start := time.Now()

	// The limits run first, each round in turn, with as many records as
	// case 3 of the set they are compared with.
	for _, l := range limits() {
		count := sizes.Interval.Batch
		if l.always {
			count = sizes.Always.Batch
		}
		if count == 0 || !r.selected("limits/"+l.key) {
			continue
		}
		lr := limitResult{limit: l, count: count}
		for round := 1; round <= cfg.Rounds; round++ {
			s, err := r.runLimit(ctx, l, count)
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
	rep.started, rep.elapsed = start, time.Since(start)
	rep.machine.loadEnd = loadAverage()
	return rep, nil
}

type runner struct {
	cfg  Config
	root string
}

func (r *runner) selected(name string) bool {
	return r.cfg.Filter == nil || r.cfg.Filter.MatchString(name)
}

// runCase runs one case once on one system, on a fresh data directory
// that is removed afterwards.
func (r *runner) runCase(ctx context.Context, sys system, set string, d durability, c caseSpec, round int) (s sample, err error) {
	dir, err := os.MkdirTemp(r.root, sys.name()+"-")
	if err != nil {
		return sample{}, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()

	in, err := sys.open(ctx, dir, d, c.parts, make([]byte, c.payload))
	if err != nil {
		return sample{}, err
	}
	m := &meter{}
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
	return m.s, err
}

// runLimit runs one raw limit once in a fresh directory.
func (r *runner) runLimit(ctx context.Context, l limit, count int) (s sample, err error) {
	dir, err := os.MkdirTemp(r.root, "limit-")
	if err != nil {
		return sample{}, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	m := &meter{}
	err = l.run(ctx, dir, count, m)
	return m.s, errors.Join(err, m.finishProfile())
}

func (r *runner) progress(set, key string, round int, who string, s sample) {
	line := fmt.Sprintf("%-8s %-18s round %d/%d  %-19s %8.3fs  %s msgs/s", set, key, round, r.cfg.Rounds, who,
		s.elapsed.Seconds(), formatRate(rate(s)))
	if len(s.lat) > 0 {
		lat := sortedCopy(s.lat)
		line += fmt.Sprintf("  p50 %s  p99 %s", formatDuration(percentile(lat, 0.50)), formatDuration(percentile(lat, 0.99)))
	}
	fmt.Fprintln(r.cfg.Progress, line)
}
