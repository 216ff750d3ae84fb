package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/parkway-io/parkway/internal/clock"
	"github.com/parkway-io/parkway/internal/metrics"
	"github.com/parkway-io/parkway/internal/vfs"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// FaultRates are the probabilities of the injected faults. Zero disables a
// fault.
type FaultRates struct {
	// InboxBurst is the chance, per scheduler step, that 4–10 clients
	// (idle ones, then up to 8 extra) send a request to one partition at
	// once, against shard inboxes of Config.InboxSize frames: sends and
	// forwards are refused with router.ErrFull.
	InboxBurst float64
	// DiskFull is the chance, per scheduler step, that the data disk
	// starts failing writes, file creation and directory creation with
	// ENOSPC for 50 ms – 2 s of virtual time.
	DiskFull float64
	// DiskError is the chance, per scheduler step, of arming a one-shot
	// EIO: one of the next few fsyncs fails, or one of the next few
	// writes is torn (part of it reaches the file, then EIO).
	DiskError float64
	// SlowBuild is the chance, per partition build, that the build takes
	// 5–40 further scheduler steps, during which the reconciler's pass is
	// blocked in Build and everything else goes on.
	SlowBuild float64
	// Crash is the chance, per scheduler step, that the node crashes and
	// is rebuilt from its disk; requests in flight are answered by the
	// crash. Two crashes in three are a power loss (everything not
	// fsynced is lost: MemFS.Crash), one in three a process crash (the
	// page cache survives: whatever was written is still there).
	Crash float64
}

// DefaultFaults are the fault rates of the default seeds: each kind fires
// a few times in a few dozen runs without drowning the workload.
func DefaultFaults() FaultRates {
	return FaultRates{
		InboxBurst: 0.004,
		DiskFull:   0.0015,
		DiskError:  0.002,
		SlowBuild:  0.12,
		Crash:      0.0004,
	}
}

// Config configures one run. Zero fields take defaults, except Faults:
// its zero value injects nothing (DefaultConfig sets DefaultFaults).
type Config struct {
	// Seed determines the whole run.
	Seed uint64
	// Shards is the node's shard count; 0 picks 1–3 from the seed.
	Shards int
	// Steps is the number of scheduler steps before quiescence (default
	// 2,000).
	Steps int
	// Clients is the number of concurrent clients (default 6).
	Clients int
	// InboxSize is each shard's inbox bound. The default is 4 frames —
	// small, so bursts fill it — when Faults.InboxBurst is set, and the
	// production default (shard.DefaultInboxSize) otherwise.
	InboxSize int
	// Faults are the fault probabilities.
	Faults FaultRates
	// Trace, when set, receives every trace event, one per line.
	Trace io.Writer
}

// DefaultConfig is the configuration of the default seeds.
func DefaultConfig(seed uint64) Config {
	return Config{Seed: seed, Faults: DefaultFaults()}
}

const (
	defaultSteps   = 2000
	defaultClients = 6
	smallInboxSize = 4
)

func (c Config) withDefaults() Config {
	if c.Steps == 0 {
		c.Steps = defaultSteps
	}
	if c.Clients == 0 {
		c.Clients = defaultClients
	}
	if c.InboxSize == 0 {
		c.InboxSize = shard.DefaultInboxSize
		if c.Faults.InboxBurst > 0 {
			c.InboxSize = smallInboxSize
		}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Shards < 0 || c.Steps < 0 || c.Clients < 0 || c.InboxSize < 0 {
		errs = append(errs, errors.New("sim: negative Shards, Steps, Clients or InboxSize"))
	}
	f := c.Faults
	for _, p := range []float64{f.InboxBurst, f.DiskFull, f.DiskError, f.SlowBuild, f.Crash} {
		if p < 0 || p > 1 {
			errs = append(errs, fmt.Errorf("sim: fault probability %v outside [0, 1]", p))
		}
	}
	return errors.Join(errs...)
}

// FaultCounts counts the faults that fired, that is, took effect: a
// refusal by a full inbox, a filesystem operation failed with ENOSPC or
// EIO (a torn write counts as EIO), a build that was slowed, a crash.
type FaultCounts struct {
	InboxFull    int
	DiskFull     int
	DiskError    int
	SlowBuild    int
	Crash        int // power losses
	ProcessCrash int
}

// OpCounts counts client operations by kind and by outcome.
type OpCounts struct {
	Metadata     int // metadata commands committed
	Produce      int // single-message produces
	ProduceBatch int // batch produces
	Poll         int
	StoreOffset  int
	GetOffset    int
	Attempts     int // requests sent (every try of every operation)
	Retries      int // tries after a "retry here" answer
	Acked        int // produces acknowledged
	Unknown      int // operations whose outcome is unknown (crash, I/O error)
	Linearized   int // partition incarnations whose history porcupine checked
	Unchecked    int // histories porcupine could not decide within its timeout
}

// Result describes a run.
type Result struct {
	Seed   uint64
	Shards int
	// TraceHash is the FNV-64a hash of the event trace: equal for two runs
	// of one seed (and one Config).
	TraceHash uint64
	// Events is the trace's length.
	Events int64
	// VirtualTime is how far the manual clock moved.
	VirtualTime time.Duration
	Faults      FaultCounts
	Ops         OpCounts
}

// Invariant names, indexed by number.
var invariantNames = [...]string{
	0: "simulator consistency",
	1: "every request answered exactly once",
	2: "no message crosses incarnations",
	3: "acknowledged messages survive, offsets dense",
	4: "quiescence: park buffers empty, no unexplained drops",
	5: "per-partition history linearizable",
}

// Violation is a failed run: the first invariant found violated.
type Violation struct {
	Seed uint64
	// Invariant is 1–5 (see the package documentation); 0 reports the
	// simulator losing track of the engine (a desynchronised inbox mirror,
	// an engine call failing), which is a bug too.
	Invariant int
	Detail    string
	// Event is the trace position at which it was found.
	Event int64
	// Tail holds the last trace events before it.
	Tail []string
}

// ReplayCommand is the command that replays seed under the default
// configuration (add -v -sim.trace to print the run's event trace).
func ReplayCommand(seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim -run TestSimulation -sim.seed=%d", seed)
}

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sim: seed %d: invariant %d (%s) violated at event %d: %s\n",
		v.Seed, v.Invariant, invariantNames[v.Invariant], v.Event, v.Detail)
	fmt.Fprintf(&b, "replay: %s   (add -v -sim.trace for the event trace)\n", ReplayCommand(v.Seed))
	if len(v.Tail) > 0 {
		b.WriteString("last events:\n")
		for _, l := range v.Tail {
			b.WriteString("  ")
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Run runs one simulation. The error is a *Violation when an invariant
// failed; the Result is filled in either case.
func Run(cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{Seed: cfg.Seed}, err
	}
	cfg = cfg.withDefaults()
	s := newSim(cfg)
	s.run()
	res := s.result()
	if s.viol != nil {
		return res, s.viol
	}
	return res, nil
}

// epoch0 is the manual clock's start.
var epoch0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newSim(cfg Config) *sim {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	if cfg.Shards == 0 {
		cfg.Shards = 1 + rng.IntN(3)
	}
	s := &sim{
		cfg:       cfg,
		rng:       rng,
		clk:       clock.NewManual(epoch0),
		mem:       vfs.NewMem(),
		ctx:       context.Background(),
		attempts:  make(map[*shard.Request]*attempt),
		msgs:      make(map[uint64]*msgInfo),
		lastServe: make(map[metadata.Namespace]uint64),
		oracle:    make(map[incKey]*incLog),
		incs:      newTimeline(),
	}
	s.tr = newTrace(cfg.Trace)
	for i := range cfg.Clients {
		s.clients = append(s.clients, &client{id: i})
	}
	return s
}

// run is the whole simulation: open, active phase, quiescence, checks.
func (s *sim) run() {
	s.event("start seed=%d shards=%d clients=%d inbox=%d steps=%d",
		s.cfg.Seed, s.cfg.Shards, s.cfg.Clients, s.cfg.InboxSize, s.cfg.Steps)
	s.n = s.openNode()
	if s.viol != nil {
		return
	}
	for range s.cfg.Steps {
		if s.viol != nil {
			return
		}
		s.tick()
	}
	if s.viol != nil {
		return
	}
	s.quiesce()
	if s.viol != nil {
		return
	}
	s.finalChecks()
	s.event("end")
}

func (s *sim) result() Result {
	return Result{
		Seed:        s.cfg.Seed,
		Shards:      s.cfg.Shards,
		TraceHash:   s.tr.sum(),
		Events:      s.tr.n,
		VirtualTime: s.clk.Now().Sub(epoch0),
		Faults:      s.faults,
		Ops:         s.ops,
	}
}

// fail records the first violation; later ones are ignored.
func (s *sim) fail(inv int, format string, args ...any) {
	if s.viol != nil {
		return
	}
	detail := fmt.Sprintf(format, args...)
	s.event("VIOLATION invariant=%d %s", inv, detail)
	s.viol = &Violation{Seed: s.cfg.Seed, Invariant: inv, Detail: detail, Event: s.tr.n, Tail: s.tr.tail()}
}

// roll reports true with probability p.
func (s *sim) roll(p float64) bool {
	return p > 0 && s.rng.Float64() < p
}

// tick is one scheduler step: time-driven state, fault rolls, then one
// action chosen at random.
func (s *sim) tick() {
	if s.viol != nil {
		return
	}
	s.ticks++
	s.expireDiskFull()
	f := s.cfg.Faults
	if s.depth == 0 && s.roll(f.Crash) {
		s.crash()
		return
	}
	if !s.n.inj.enospc.On() && s.roll(f.DiskFull) {
		s.startDiskFull()
	}
	if s.n.inj.eio == nil && s.roll(f.DiskError) {
		s.armDiskError()
	}
	if s.roll(f.InboxBurst) {
		s.burst()
	}
	switch w := s.rng.IntN(100); {
	case w < 34:
		s.clientAct(s.clients[s.rng.IntN(len(s.clients))])
	case w < 74:
		s.stepShard(s.rng.IntN(len(s.n.shards)))
	case w < 88:
		i := s.rng.IntN(len(s.n.shards))
		if s.n.busy[i] {
			return // its pass is blocked in a slow build
		}
		if s.n.passDue(i, s.clk.Now()) || s.rng.IntN(10) == 0 {
			s.reconcile(i)
		}
	default:
		s.advance(time.Duration(1+s.rng.IntN(100)) * time.Millisecond)
	}
}

// advance moves the virtual clock.
func (s *sim) advance(d time.Duration) {
	s.clk.Advance(d)
	s.event("clock +%v", d)
}

// now is the virtual time since the start, for trace lines.
func (s *sim) now() time.Duration { return s.clk.Now().Sub(epoch0) }

// sim is one run's state. Everything runs on the caller's goroutine.
type sim struct {
	cfg Config
	rng *rand.Rand
	clk *clock.Manual
	tr  *trace
	ctx context.Context

	mem        *vfs.MemFS
	n          *node
	gen        int
	allMetrics []*metrics.Metrics

	clients     []*client
	allOps      []*op
	finalOps    []*op
	allAttempts []*attempt
	attempts    map[*shard.Request]*attempt
	inflight    []*attempt // sent, taken by an inbox, not answered; in send order
	nextOp      uint64
	nextAttempt uint64
	nextMsg     uint64

	// lastServe is, per namespace, the incarnation whose partition last
	// served a client request (the storage tap sets it): an answer that
	// reports a served request was served there.
	lastServe map[metadata.Namespace]uint64
	msgs      map[uint64]*msgInfo
	oracle    map[incKey]*incLog
	incs      *timeline

	faults        FaultCounts
	ops           OpCounts
	bursts        int
	restarts      int // node restarts at quiescence (fenced partitions)
	diskFullUntil time.Time
	ticks         int
	// depth > 0 while a slow build runs nested scheduler steps; building
	// is the stack of shards whose pass is running.
	depth     int
	building  []int
	quiescing bool

	viol *Violation
}
