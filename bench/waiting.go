package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parkway-io/parkway"
)

// The waiting-consumer section: consumers that wait on the server for
// messages instead of polling in a loop. Case W1 measures produce→consume
// latency with one waiting consumer; case W2 the CPU of many consumers
// waiting on an idle partition. Each case runs four readers, in the same
// run and on the same systems as the other sections (parkway: one node,
// file store, FsyncInterval 2m; JetStream: one embedded server, a
// file-storage stream, default sync_interval):
//
//   - parkway Consumer: Node.NewConsumer as a named consumer (no group),
//     ranged over with Messages; it polls with waiting polls and commits
//     after each batch (its default policy).
//   - parkway Poll: a loop of Node.Poll with WaitFor, no commits.
//   - JetStream Consume: a durable pull consumer's Consume (jetstream
//     package) with explicit acks, every message acknowledged.
//   - JetStream Fetch: a durable pull consumer with AckNone, a loop of
//     Fetch with FetchMaxWait.
//
// Every reader waits at most waitMaxWait per request and takes up to
// waitBatch messages per request, so the four ask the server the same
// thing.

// WaitingSizes are the sizes of the waiting-consumer section; a zero count
// leaves its case out.
type WaitingSizes struct {
	// Latency is case W1's floor of messages a round produces, one every
	// latencyInterval; the round goes on until Config.MinRound has passed.
	Latency int
	// Idle is case W2's number of waiting readers.
	Idle int
	// IdleWindow is how long case W2 measures the idle process.
	IdleWindow time.Duration
}

func (s WaitingSizes) validate() error {
	var errs []error
	if s.Latency < 0 || s.Idle < 0 {
		errs = append(errs, fmt.Errorf("waiting: negative count (latency %d, idle %d)", s.Latency, s.Idle))
	}
	if s.Idle > 0 && s.IdleWindow <= 0 {
		errs = append(errs, fmt.Errorf("waiting: idle window %v must be positive", s.IdleWindow))
	}
	return errors.Join(errs...)
}

// waitingSet is the section's name in -run filters and progress lines:
// "waiting/latency", "waiting/idle".
const waitingSet = "waiting"

const (
	// waitMaxWait is every reader's longest wait per request: parkway
	// Consumer's default MaxWait, WaitFor on the Poll loop,
	// FetchMaxWait on Fetch and PullExpiry on Consume. An idle reader is
	// answered empty and asks again this often.
	waitMaxWait = 5 * time.Second
	// waitBatch is the most messages one request returns: parkway
	// Consumer's default MaxMessages, the Poll loop's max, the Fetch
	// batch and Consume's PullMaxMessages.
	waitBatch = 256
	// latencyInterval paces case W1's producer: one message at a time,
	// each produce waiting for its ack, started every latencyInterval
	// (at once when the previous one took longer). A fixed, modest rate
	// leaves the consumer waiting between messages, which is what the
	// case measures.
	latencyInterval = time.Millisecond
	// waitPayload is the payload size of both cases; the first 16 bytes
	// carry a sequence number and the send time.
	waitPayload = 100
	// idleSettle is how long case W2 lets the process settle after every
	// reader is waiting, before its window starts.
	idleSettle = 500 * time.Millisecond
	// drainTimeout bounds waiting for readers to see what was produced.
	drainTimeout = 30 * time.Second
)

// Sequence numbers in payloads: the warm message written at open is all
// zeros (sequence 0); stopSeq tells a reader to stop.
const stopSeq = math.MaxUint64

// stamp makes a payload carrying seq and the send time sent (since the
// case's base time).
func stamp(seq uint64, sent time.Duration) []byte {
	p := make([]byte, waitPayload)
	binary.LittleEndian.PutUint64(p, seq)
	binary.LittleEndian.PutUint64(p[8:], uint64(sent))
	return p
}

// unstamp reads a payload made by stamp.
func unstamp(p []byte) (seq uint64, sent time.Duration, err error) {
	if len(p) < 16 {
		return 0, 0, fmt.Errorf("payload of %d bytes carries no stamp", len(p))
	}
	return binary.LittleEndian.Uint64(p), time.Duration(binary.LittleEndian.Uint64(p[8:])), nil
}

// waitSide is one reader kind of the section, on one of the systems.
type waitSide struct {
	key    string // in progress lines and profile names
	name   string // the report's column
	system system
	// start starts one reader called name on in's partition 0 (stream
	// 0), from its first message. The reader hands every payload to
	// h.seen and stops when it returns false; h.empty counts requests
	// answered with nothing (nil when the reader cannot observe them).
	// It is nil for a side that starts no reader (an idle baseline).
	start func(ctx context.Context, in instance, name string, h readerHooks, fail func(error)) (*waitReader, error)
	// countsEmpty says whether the reader reports empty answers.
	countsEmpty bool
}

type readerHooks struct {
	seen  func(payload []byte) bool
	empty func()
}

func (s waitSide) parkway() bool { return s.system.name() == (parkwaySystem{}).name() }

var (
	sideConsumer = waitSide{key: "consumer", name: "parkway Consumer, commit after each batch", system: parkwaySystem{},
		start: parkwayConsumer(parkway.CommitAfterBatch)}
	sideConsumerInterval = waitSide{key: "consumer-interval", name: "parkway Consumer, commit every 1 s (the default)", system: parkwaySystem{},
		start: parkwayConsumer(parkway.CommitOnInterval)}
	sidePoll     = waitSide{key: "poll", name: "parkway Poll+WaitFor", system: parkwaySystem{}, start: startParkwayPoll, countsEmpty: true}
	sideConsume  = waitSide{key: "consume", name: "JetStream Consume", system: jetStreamSystem{}, start: startJetStreamConsume}
	sideFetch    = waitSide{key: "fetch", name: "JetStream Fetch+MaxWait", system: jetStreamSystem{}, start: startJetStreamFetch, countsEmpty: true}
	sideNodeIdle = waitSide{key: "parkway-none", name: "parkway, no reader", system: parkwaySystem{}}
	sideJSIdle   = waitSide{key: "jetstream-none", name: "JetStream, no reader", system: jetStreamSystem{}}
)

// waitCase is one case of the section.
type waitCase struct {
	id, key, title string
	sides          []waitSide
	// pairs are the like-for-like ratios: parkway side, JetStream side.
	pairs [][2]int
}

func waitingCases(sz WaitingSizes) []waitCase {
	var out []waitCase
	if sz.Latency > 0 {
		out = append(out, waitCase{id: "W1", key: "latency",
			title: fmt.Sprintf("produce→consume latency, one waiting consumer, one message every %v", latencyInterval),
			sides: []waitSide{sideConsumer, sideConsumerInterval, sidePoll, sideConsume, sideFetch},
			pairs: [][2]int{{0, 3}, {1, 3}, {2, 4}}})
	}
	if sz.Idle > 0 {
		out = append(out, waitCase{id: "W2", key: "idle",
			title: fmt.Sprintf("%s readers waiting on one idle partition (stream)", formatCount(sz.Idle)),
			sides: []waitSide{sideNodeIdle, sideConsumer, sidePoll, sideJSIdle, sideConsume, sideFetch},
			pairs: [][2]int{{1, 4}, {2, 5}}})
	}
	return out
}

// --- readers ---------------------------------------------------------------

// waitReader is one running reader: a goroutine that reads until its
// hooks say stop, its context ends or it fails.
type waitReader struct {
	cancel  context.CancelFunc
	done    chan struct{}
	err     error        // why the loop ended; read after done
	cleanup func() error // releases what the reader holds, after the loop
	// settle, when set, waits until the reader has recorded its progress
	// on the server (a commit, an ack) for the first message it saw, so
	// that work does not spill into a measurement.
	settle func(context.Context) error
	// state, when set, describes the reader as its server sees it, for a
	// reader that missed a message.
	state func(context.Context) string
}

// goReader runs loop in a goroutine; fail is told of an error that ends it
// while its context is live.
func goReader(ctx context.Context, loop func(context.Context) error, cleanup func() error, fail func(error)) *waitReader {
	ctx, cancel := context.WithCancel(ctx)
	r := &waitReader{cancel: cancel, done: make(chan struct{}), cleanup: cleanup}
	go func() {
		defer close(r.done)
		r.err = loop(ctx)
		if r.err != nil && ctx.Err() == nil {
			fail(r.err)
		}
	}()
	return r
}

// stop ends the reader, waits for its goroutine and releases it. An error
// caused by stopping it is not one.
func (r *waitReader) stop() error {
	r.cancel()
	<-r.done
	err := r.err
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if r.cleanup != nil {
		err = errors.Join(err, r.cleanup())
	}
	return err
}

// parkwayConsumer starts a named Consumer (no group) of the topic, with
// MaxWait waitMaxWait, MaxMessages waitBatch and the commit policy
// (CommitAfterBatch, or CommitOnInterval — the default — with the default
// interval, 1 s), ranged over with Messages.
func parkwayConsumer(policy parkway.CommitPolicy) func(context.Context, instance, string, readerHooks, func(error)) (*waitReader, error) {
	return func(ctx context.Context, in instance, name string, h readerHooks, fail func(error)) (*waitReader, error) {
		return startParkwayConsumer(ctx, in, name, policy, h, fail)
	}
}

func startParkwayConsumer(ctx context.Context, in instance, name string, policy parkway.CommitPolicy, h readerHooks, fail func(error)) (*waitReader, error) {
	p := in.(*parkwayInstance)
	c, err := p.node.NewConsumer(ctx, p.topic, parkway.ConsumerConfig{Name: name, MaxWait: waitMaxWait, MaxMessages: waitBatch,
		Commit: policy})
	if err != nil {
		return nil, fmt.Errorf("parkway: new consumer %s: %w", name, err)
	}
	loop := func(ctx context.Context) error {
		for d, err := range c.Messages(ctx) {
			if err != nil {
				return err
			}
			if !h.seen(d.Payload) {
				return nil
			}
		}
		return nil
	}
	r := goReader(ctx, loop, c.Close, fail)
	r.settle = func(ctx context.Context) error {
		// The commit after the warm message's batch stores offset 1.
		return waitFor(ctx, "consumer "+name+"'s first commit", func() (bool, error) {
			off, ok, err := p.node.Admin().ConsumerOffset(ctx, p.topic, 0, name)
			return ok && off >= 1, err
		})
	}
	return r, nil
}

// startParkwayPoll: Poll(AtOffset(next), waitBatch, WaitFor(waitMaxWait))
// in a loop from offset 0; it stores no offset.
func startParkwayPoll(ctx context.Context, in instance, _ string, h readerHooks, fail func(error)) (*waitReader, error) {
	p := in.(*parkwayInstance)
	loop := func(ctx context.Context) error {
		var next uint64
		for {
			b, err := p.node.Poll(ctx, p.topic, 0, parkway.AtOffset(next), waitBatch, parkway.WaitFor(waitMaxWait))
			if err != nil {
				return err
			}
			if len(b.Messages) == 0 && h.empty != nil {
				h.empty()
			}
			for _, m := range b.Messages {
				if !h.seen(m.Payload) {
					return nil
				}
			}
			next = b.Next
		}
	}
	return goReader(ctx, loop, nil, fail), nil
}

// startJetStreamConsume: a durable pull consumer (AckExplicit, from the
// first message) and its Consume with PullExpiry(waitMaxWait) and
// PullMaxMessages(waitBatch); the handler acknowledges every message with
// Ack, the counterpart of the Consumer's commit after each batch.
func startJetStreamConsume(ctx context.Context, in instance, name string, h readerHooks, fail func(error)) (*waitReader, error) {
	j := in.(*jetStreamInstance)
	cons, err := j.newConsumer(ctx, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	finished := make(chan struct{})
	var once sync.Once
	var (
		mu      sync.Mutex
		errSeen error
	)
	handler := func(m jetstream.Msg) {
		select {
		case <-finished:
			return
		default:
		}
		more := h.seen(m.Data())
		if err := m.Ack(); err != nil {
			mu.Lock()
			errSeen = errors.Join(errSeen, fmt.Errorf("ack: %w", err))
			mu.Unlock()
			once.Do(func() { close(finished) })
			return
		}
		if !more {
			once.Do(func() { close(finished) })
		}
	}
	onErr := func(_ jetstream.ConsumeContext, err error) {
		mu.Lock()
		errSeen = errors.Join(errSeen, err)
		mu.Unlock()
		once.Do(func() { close(finished) })
	}
	cc, err := cons.Consume(handler, jetstream.PullExpiry(waitMaxWait), jetstream.PullMaxMessages(waitBatch),
		jetstream.ConsumeErrHandler(onErr))
	if err != nil {
		return nil, fmt.Errorf("nats: consume %s: %w", name, err)
	}
	loop := func(ctx context.Context) error {
		select {
		case <-finished:
		case <-ctx.Done():
		}
		cc.Stop()
		<-cc.Closed()
		mu.Lock()
		defer mu.Unlock()
		if errSeen != nil {
			return errSeen
		}
		return ctx.Err()
	}
	r := goReader(ctx, loop, nil, fail)
	r.settle = func(ctx context.Context) error {
		// The server has processed the ack of the warm message.
		return waitFor(ctx, "consumer "+name+"'s first ack", func() (bool, error) {
			info, err := cons.Info(ctx)
			if err != nil {
				return false, err
			}
			return info.NumAckPending == 0 && info.AckFloor.Stream >= 1, nil
		})
	}
	r.state = func(ctx context.Context) string { return consumerState(ctx, cons) }
	return r, nil
}

// consumerState describes a JetStream consumer as the server sees it.
func consumerState(ctx context.Context, cons jetstream.Consumer) string {
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Sprintf("consumer info: %v", err)
	}
	return fmt.Sprintf("the server has delivered up to stream sequence %d, %d unacknowledged, %d pull requests waiting",
		info.Delivered.Stream, info.NumAckPending, info.NumWaiting)
}

// startJetStreamFetch: a durable pull consumer (AckNone, from the first
// message, like the Poll loop, which commits nothing) and a loop of
// Fetch(waitBatch, FetchMaxWait(waitMaxWait)), reading each batch's
// messages as they arrive. A Fetch cannot be cancelled; the loop checks
// its context between fetches.
func startJetStreamFetch(ctx context.Context, in instance, name string, h readerHooks, fail func(error)) (*waitReader, error) {
	j := in.(*jetStreamInstance)
	cons, err := j.newConsumer(ctx, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	loop := func(ctx context.Context) error {
		for ctx.Err() == nil {
			b, err := cons.Fetch(waitBatch, jetstream.FetchMaxWait(waitMaxWait))
			if err != nil {
				return fmt.Errorf("fetch: %w", err)
			}
			n := 0
			for m := range b.Messages() {
				n++
				if !h.seen(m.Data()) {
					return nil
				}
			}
			if err := b.Error(); err != nil {
				return fmt.Errorf("fetch: %w", err)
			}
			if n == 0 && h.empty != nil {
				h.empty()
			}
		}
		return ctx.Err()
	}
	r := goReader(ctx, loop, nil, fail)
	r.state = func(ctx context.Context) string { return consumerState(ctx, cons) }
	return r, nil
}

// newConsumer creates a durable pull consumer of the instance's first
// stream through the jetstream package (nats.go's newer JetStream API,
// over the instance's connection; jetstream.New only wraps it).
func (j *jetStreamInstance) newConsumer(ctx context.Context, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	js, err := jetstream.New(j.nc)
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, j.streams[0], cfg)
	if err != nil {
		return nil, fmt.Errorf("nats: create consumer %s: %w", cfg.Durable, err)
	}
	return cons, nil
}

// failures collects the first error of any reader.
type failures struct {
	once sync.Once
	err  error
	ch   chan struct{} // closed at the first error
}

func newFailures() *failures { return &failures{ch: make(chan struct{})} }

func (f *failures) fail(err error) {
	f.once.Do(func() {
		f.err = err
		close(f.ch)
	})
}

// waitUntil waits until ready is closed, a reader fails, ctx ends or
// timeout passes.
func waitUntil(ctx context.Context, what string, ready <-chan struct{}, f *failures, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-f.ch:
		return fmt.Errorf("waiting for %s: a reader failed: %w", what, f.err)
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	case <-t.C:
		return fmt.Errorf("waiting for %s: not after %v", what, timeout)
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// --- running the section ---------------------------------------------------

// waitSample is what one round of a waiting case measured on one side.
type waitSample struct {
	sample
	// Case W2: requests answered empty during the window (-1: not
	// observable for the side), the time from one produce to every reader
	// having it, and the time to start every reader and see it waiting.
	empties     int64
	wake, setUp time.Duration
	// missed is how many readers did not see the wake message within
	// drainTimeout (wake is then unset), and missedState how the first
	// of them looked to its server.
	missed      int
	missedState string
}

type waitCaseResult struct {
	spec    waitCase
	samples [][]waitSample // per side, one per round
}

type waitResult struct {
	sizes WaitingSizes
	cases []waitCaseResult
}

// runWaiting runs the section. Each round rotates which side goes first.
func (r *runner) runWaiting(ctx context.Context, sizes WaitingSizes) (*waitResult, error) {
	res := &waitResult{sizes: sizes}
	for _, c := range waitingCases(sizes) {
		if !r.selected(waitingSet + "/" + c.key) {
			continue
		}
		cr := waitCaseResult{spec: c, samples: make([][]waitSample, len(c.sides))}
		for round := 1; round <= r.cfg.Rounds; round++ {
			for k := range c.sides {
				i := (k + round - 1) % len(c.sides)
				side := c.sides[i]
				s, err := r.runWaitCase(ctx, c, side, sizes, round)
				if err != nil {
					return nil, fmt.Errorf("bench: %s/%s on %s, round %d: %w", waitingSet, c.key, side.name, round, err)
				}
				r.progressWait(c, side, round, s)
				cr.samples[i] = append(cr.samples[i], s)
			}
		}
		res.cases = append(res.cases, cr)
	}
	if len(res.cases) == 0 {
		return nil, nil
	}
	return res, nil
}

// runWaitCase runs one round of a waiting case on one side, on a fresh
// data directory that is removed afterwards.
func (r *runner) runWaitCase(ctx context.Context, c waitCase, side waitSide, sizes WaitingSizes, round int) (s waitSample, err error) {
	dir, remove, err := r.roundDir(waitingSet, c.key, side.key, round)
	if err != nil {
		return waitSample{}, err
	}
	defer func() { err = errors.Join(err, remove()) }()
	ctx, cancel := context.WithTimeout(ctx, r.runTimeout())
	defer cancel()

	in, err := side.system.open(ctx, dir, durability{interval: jetStreamDefaultSyncInterval}, 1, make([]byte, waitPayload))
	if err != nil {
		return waitSample{}, err
	}
	m := &meter{minRound: r.cfg.MinRound}
	if r.cfg.CPUProfileDir != "" && side.parkway() {
		m.profile = filepath.Join(r.cfg.CPUProfileDir, fmt.Sprintf("%s-%s-%s-r%d.pprof", waitingSet, c.key, side.key, round))
	}
	switch c.key {
	case "latency":
		err = runLatency(ctx, in, side, sizes.Latency, m)
	case "idle":
		s, err = runIdle(ctx, in, side, sizes.Idle, sizes.IdleWindow, m)
	default:
		err = fmt.Errorf("unknown case %q", c.key)
	}
	err = errors.Join(err, m.finishProfile(), in.close())
	if err == nil && !m.started {
		err = errors.New("the case measured nothing")
	}
	s.sample = m.s
	s.sample.dir = dir
	return s, err
}

func (r *runner) progressWait(c waitCase, side waitSide, round int, s waitSample) {
	if c.key == "latency" {
		r.progress(waitingSet, c.key, round, side.name, s.sample)
		return
	}
	line := fmt.Sprintf("%-10s %-16s round %d/%d  %-24s %7.3fs idle, %s readers", waitingSet, c.key, round, r.cfg.Rounds,
		side.name, s.elapsed.Seconds(), formatCount(s.msgs))
	if s.cpu >= 0 && s.elapsed > 0 {
		line += fmt.Sprintf("  cpu %.2f%% of a core", 100*s.cpu.Seconds()/s.elapsed.Seconds())
	}
	if s.msgs > 0 {
		line += fmt.Sprintf("  set-up %s  wake-all %s", formatDuration(s.setUp), formatDuration(s.wake))
	}
	if s.missed > 0 {
		line += fmt.Sprintf("  %d readers missed the wake message (first: %s)", s.missed, s.missedState)
	}
	if s.empties >= 0 {
		line += fmt.Sprintf("  empty answers %d", s.empties)
	}
	fmt.Fprintln(r.cfg.Progress, line)
}

// guard against a reader that never returns: every started reader is
// stopped, whatever happened.
func stopAll(readers []*waitReader) error {
	var errs []error
	for _, rd := range readers {
		rd.cancel()
	}
	for _, rd := range readers {
		errs = append(errs, rd.stop())
	}
	return errors.Join(errs...)
}

// counter counts up to n and closes its channel when it gets there.
type counter struct {
	n    int64
	got  atomic.Int64
	once sync.Once
	ch   chan struct{}
}

func newCounter(n int) *counter {
	c := &counter{n: int64(n), ch: make(chan struct{})}
	if n == 0 {
		close(c.ch)
	}
	return c
}

func (c *counter) add() {
	if c.got.Add(1) == c.n {
		c.once.Do(func() { close(c.ch) })
	}
}
