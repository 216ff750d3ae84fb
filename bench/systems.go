package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/parkway-io/parkway"
)

// durability is the fsync setting both systems run a set of cases with.
type durability struct {
	// always fsyncs every write: JetStream's SyncAlways, parkway's
	// FsyncAlways.
	always bool
	// interval is the background fsync period otherwise: JetStream's
	// sync_interval, parkway's FsyncInterval topic policy.
	interval time.Duration
}

// jetStreamDefaultSyncInterval is nats-server's default sync_interval
// (defaultSyncInterval in server/filestore.go). The JetStream side leaves
// the option unset, so it runs with the server's real default, and checks
// that the running server reports this value: if an upgrade changes the
// default, the run fails instead of silently comparing different settings.
const jetStreamDefaultSyncInterval = 2 * time.Minute

func (d durability) String() string {
	if d.always {
		return "fsync on every write (JetStream: server option SyncAlways=true, which flushes and fsyncs the " +
			"message block after every stored message; parkway: FsyncAlways topic policy, which acknowledges " +
			"a produce after an fsync covering it, one fsync shared by the produces queued at the shard: group commit)"
	}
	return fmt.Sprintf("interval fsync every %v (JetStream: its default sync_interval, option left unset; "+
		"parkway: FsyncInterval topic policy with interval %v)", d.interval, d.interval)
}

// system opens fresh instances of one of the compared systems.
type system interface {
	name() string
	// open starts the system on dir with parts partitions (parkway: one
	// topic with parts partitions; JetStream: parts streams of one subject
	// each) and writes warm to each, so that every partition exists and is
	// ready before the case's clock starts. parts may be 0 (case 6 creates
	// its own).
	open(ctx context.Context, dir string, d durability, parts int, warm []byte) (instance, error)
}

// producer is what the produce cases (1–3, and the replicated section's)
// need of an open system. The cases are written once against it, so every
// system runs exactly the same driver code; only what one operation means
// differs, and each method says what it does on each side.
type producer interface {
	// produceOne appends one message to part and waits for its ack.
	produceOne(ctx context.Context, part int, payload []byte) error
	// batchProducer prepares a function that appends n messages with
	// payload to part and waits until all n are acknowledged. Preparing
	// is outside the timed section.
	batchProducer(part int, payload []byte, n int) func(context.Context) error
	// pipelined appends messages to part keeping up to inflight
	// unacknowledged, starting another while more(started) says so, and
	// returns how many were acknowledged once all are.
	pipelined(ctx context.Context, part int, payload []byte, inflight int, more func(int) bool) (int, error)
	// pipelinedAsync is pipelined through the system's asynchronous
	// produce API from one goroutine: a ring of inflight pending acks, the
	// oldest awaited (its error checked) before its slot is reused, the
	// rest at the end.
	pipelinedAsync(ctx context.Context, part int, payload []byte, inflight int, more func(int) bool) (int, error)
	// close stops the system and waits for it to have stopped.
	close() error
}

// instance is one open single-node system: a producer that can also read
// and create topics.
type instance interface {
	producer
	// reader opens a reader of part from its first message.
	reader(ctx context.Context, part int) (reader, error)
	creator
}

// reader reads a partition from its start.
type reader interface {
	// read reads up to max messages and returns how many it read.
	read(ctx context.Context, max int) (int, error)
	close() error
}

// --- parkway ---------------------------------------------------------------

type parkwaySystem struct{}

func (parkwaySystem) name() string { return "parkway" }

type parkwayInstance struct {
	node   *parkway.Node
	stream parkway.Stream
	topic  parkway.Topic
	opt    parkway.TopicOption // the durability policy of every topic created
	// streams hold case 6's topics, topicsPerStream each, created before
	// the clock (prepareTopics); created counts the topics made so far.
	streams []parkway.Stream
	created int
}

// topicPreparer is an instance that sets up, before the clock, what case
// 6 needs to create n topics.
type topicPreparer interface {
	prepareTopics(ctx context.Context, n int) error
}

// topicsPerStream is how many of case 6's topics go into one stream: a
// stream holds at most 4,096 (12-bit topic ids).
const topicsPerStream = 4000

// prepareTopics creates the streams that case 6's n topics need beyond
// the first, so no stream is created while the clock runs.
func (p *parkwayInstance) prepareTopics(ctx context.Context, n int) error {
	p.streams = []parkway.Stream{p.stream}
	for i := 1; i*topicsPerStream < n; i++ {
		s, err := p.node.Admin().CreateStream(ctx, fmt.Sprintf("bench-%d", i))
		if err != nil {
			return fmt.Errorf("parkway: create stream: %w", err)
		}
		p.streams = append(p.streams, s)
	}
	return nil
}

func (parkwaySystem) open(ctx context.Context, dir string, d durability, parts int, warm []byte) (instance, error) {
	// Two shards, as the issue prescribes: the project's reference machine
	// has two cores.
	node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 2, PrebuildPartitions: true})
	if err != nil {
		return nil, fmt.Errorf("parkway: open: %w", err)
	}
	p := &parkwayInstance{node: node, opt: parkway.WithFsync(parkway.FsyncInterval, d.interval)}
	if d.always {
		p.opt = parkway.WithFsync(parkway.FsyncAlways, 0)
	}
	if err := p.setUp(ctx, parts, warm); err != nil {
		return nil, errors.Join(err, p.close())
	}
	return p, nil
}

func (p *parkwayInstance) setUp(ctx context.Context, parts int, warm []byte) error {
	var err error
	if p.stream, err = p.node.Admin().CreateStream(ctx, "bench"); err != nil {
		return fmt.Errorf("parkway: create stream: %w", err)
	}
	if parts == 0 {
		return nil
	}
	if p.topic, err = p.node.Admin().CreateTopic(ctx, p.stream, "bench", parts, p.opt); err != nil {
		return fmt.Errorf("parkway: create topic: %w", err)
	}
	// Partitions materialise asynchronously after CreateTopic; the first
	// produce to each waits that out, so the cases measure steady state
	// (case 6 measures materialisation on its own).
	for part := range parts {
		if err := p.produceOne(ctx, part, warm); err != nil {
			return fmt.Errorf("parkway: warm partition %d: %w", part, err)
		}
	}
	return nil
}

func (p *parkwayInstance) produceOne(ctx context.Context, part int, payload []byte) error {
	_, err := p.node.Produce(ctx, p.topic, parkway.PartitionID(uint32(part)), parkway.Message{Payload: payload})
	return err
}

// batchProducer: one Produce call carrying n messages.
func (p *parkwayInstance) batchProducer(part int, payload []byte, n int) func(context.Context) error {
	msgs := make([]parkway.Message, n)
	for i := range msgs {
		msgs[i].Payload = payload
	}
	to := parkway.PartitionID(uint32(part))
	return func(ctx context.Context) error {
		_, err := p.node.Produce(ctx, p.topic, to, msgs...)
		return err
	}
}

// pipelined: Produce is synchronous, so inflight outstanding calls need
// inflight goroutines (see pipelineCalls).
func (p *parkwayInstance) pipelined(ctx context.Context, part int, payload []byte, inflight int, more func(int) bool) (int, error) {
	return pipelineCalls(ctx, inflight, more, func(ctx context.Context) error {
		return p.produceOne(ctx, part, payload)
	})
}

// pipelinedAsync: ProduceAsync of one message at a time from this
// goroutine, with a ring of inflight PendingAcks; before reusing a slot
// the oldest is awaited and its error checked, so at most inflight
// produces are unacknowledged, and every one is awaited (a ProduceAsync
// that failed at once reports its error from Wait). The same pattern as
// JetStream's pipelined.
func (p *parkwayInstance) pipelinedAsync(ctx context.Context, part int, payload []byte, inflight int, more func(int) bool) (int, error) {
	if inflight <= 0 {
		return 0, nil
	}
	ring := make([]*parkway.PendingAck, inflight)
	to := parkway.PartitionID(uint32(part))
	msg := parkway.Message{Payload: payload}
	var first error
	wait := func(pa *parkway.PendingAck) {
		if _, err := pa.Wait(ctx); err != nil && first == nil {
			first = fmt.Errorf("produce async ack: %w", err)
		}
	}
	n := 0
	for ; more(n); n++ {
		slot := n % len(ring)
		if pa := ring[slot]; pa != nil {
			if wait(pa); first != nil {
				break
			}
		}
		ring[slot] = p.node.ProduceAsync(ctx, p.topic, to, msg)
	}
	// Every started produce is awaited, also after an error, so none is
	// left in flight when this returns.
	for _, pa := range ring {
		if pa != nil {
			wait(pa)
		}
	}
	return n, first
}

// pipelineCalls keeps inflight calls of a synchronous produce outstanding
// while more says so: inflight goroutines each loop "take the next
// message index from a shared counter, ask more whether to start it, call
// produce, wait for its ack", so up to inflight calls are outstanding at
// any time, the same bound JetStream's PublishAsyncMaxPending sets. It
// returns how many produces were acknowledged. The first error cancels
// the others; every goroutine has returned when this does.
func pipelineCalls(ctx context.Context, inflight int, more func(int) bool, produce func(context.Context) error) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next, done atomic.Int64
		wg         sync.WaitGroup
	)
	for range inflight {
		wg.Go(func() {
			n := 0
			for more(int(next.Add(1) - 1)) {
				if err := produce(ctx); err != nil {
					cancel(err)
					break
				}
				n++
			}
			done.Add(int64(n))
		})
	}
	wg.Wait()
	// nil unless a produce failed (its error) or the caller's context
	// ended (its cause): cancel(nil) has not run yet.
	return int(done.Load()), context.Cause(ctx)
}

type parkwayReader struct {
	p    *parkwayInstance
	part uint32
	next uint64
}

func (p *parkwayInstance) reader(_ context.Context, part int) (reader, error) {
	return &parkwayReader{p: p, part: uint32(part)}, nil
}

// read: one Poll of up to max messages from the reader's offset.
func (r *parkwayReader) read(ctx context.Context, max int) (int, error) {
	b, err := r.p.node.Poll(ctx, r.p.topic, r.part, parkway.AtOffset(r.next), max)
	if err != nil {
		return 0, err
	}
	r.next = b.Next
	return len(b.Messages), nil
}

func (r *parkwayReader) close() error { return nil }

// createAndProduce: CreateTopic with one partition, then Produce to it at
// once; the produce parks at its shard until the partition lands.
func (p *parkwayInstance) createAndProduce(ctx context.Context, name string, payload []byte) error {
	s := p.stream
	if i := p.created / topicsPerStream; i < len(p.streams) {
		s = p.streams[i]
	}
	p.created++
	start := time.Now()
	topic, err := p.node.Admin().CreateTopic(ctx, s, name, 1, p.opt)
	if err != nil {
		return fmt.Errorf("create topic %s (after %v): %w", name, time.Since(start).Round(time.Millisecond), err)
	}
	if _, err := p.node.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
		return fmt.Errorf("produce to new topic %s (%v after the create began): %w", name, time.Since(start).Round(time.Millisecond), err)
	}
	return nil
}

// createProduceAtOnce: CreateTopicAndProduce, one partition, the produce
// issued with the create (written while the command is made durable).
func (p *parkwayInstance) createProduceAtOnce(ctx context.Context, name string, payload []byte) error {
	s := p.stream
	if i := p.created / topicsPerStream; i < len(p.streams) {
		s = p.streams[i]
	}
	p.created++
	if _, _, err := p.node.CreateTopicAndProduce(ctx, s, name, 1, 0, []parkway.Message{{Payload: payload}}, p.opt); err != nil {
		return fmt.Errorf("create topic %s and produce: %w", name, err)
	}
	return nil
}

func (p *parkwayInstance) close() error { return p.node.Close() }

// --- embedded NATS JetStream ---------------------------------------------

type jetStreamSystem struct{}

func (jetStreamSystem) name() string { return "JetStream" }

type jetStreamInstance struct {
	srv      *server.Server
	nc       *nats.Conn
	js       nats.JetStreamContext
	streams  []string
	subjects []string
	readers  int // durable consumers created so far, to name the next
}

// maxPending is the bound on unacknowledged async publishes, and the
// pipelining depth of case 2 on both sides.
const maxPending = 4096

// jetStreamIngestBytes is the single-node server's per-stream ingest
// queue (StreamMaxBufferedSize): twice maxPending publishes of the largest
// payload the cases send (64 KiB).
const jetStreamIngestBytes = 2 * maxPending * (64 << 10)

func (jetStreamSystem) open(ctx context.Context, dir string, d durability, parts int, warm []byte) (instance, error) {
	srv, err := server.NewServer(&server.Options{
		ServerName: "bench",
		JetStream:  true,
		StoreDir:   dir,
		// In-process only: the client connects through
		// nats.InProcessServer, so no socket and no port conflicts.
		DontListen: true,
		NoLog:      true,
		NoSigs:     true,
		SyncAlways: d.always,
		// A stream's ingest queue holds 128 MiB by default, less than
		// maxPending publishes of case 7's 64 KiB payloads (256 MiB):
		// the server refused the excess as "too many requests". Room
		// for the whole window, so the case measures storing them.
		StreamMaxBufferedSize: jetStreamIngestBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("nats-server: new: %w", err)
	}
	srv.Start()
	j := &jetStreamInstance{srv: srv}
	if err := j.setUp(ctx, d, parts, warm); err != nil {
		return nil, errors.Join(err, j.close())
	}
	return j, nil
}

func (j *jetStreamInstance) setUp(ctx context.Context, d durability, parts int, warm []byte) error {
	if !j.srv.ReadyForConnections(10 * time.Second) {
		return errors.New("nats-server: not ready for connections after 10s")
	}
	jsc := j.srv.JetStreamConfig()
	if jsc == nil {
		return errors.New("nats-server: JetStream is not enabled")
	}
	if jsc.SyncAlways != d.always || (!d.always && jsc.SyncInterval != d.interval) {
		return fmt.Errorf("nats-server: runs with sync_always=%v sync_interval=%v, the set needs %v",
			jsc.SyncAlways, jsc.SyncInterval, d)
	}
	var err error
	if j.nc, err = nats.Connect("", nats.InProcessServer(j.srv), nats.Name("bench")); err != nil {
		return fmt.Errorf("nats: connect in-process: %w", err)
	}
	if j.js, err = j.nc.JetStream(nats.PublishAsyncMaxPending(maxPending)); err != nil {
		return fmt.Errorf("nats: jetstream context: %w", err)
	}
	for i := range parts {
		name := fmt.Sprintf("bench-%d", i)
		if err := j.addStream(ctx, name); err != nil {
			return err
		}
		j.streams = append(j.streams, name)
		j.subjects = append(j.subjects, name)
		if err := j.produceOne(ctx, i, warm); err != nil {
			return fmt.Errorf("nats: warm stream %s: %w", name, err)
		}
	}
	return nil
}

// addStream adds a file-storage stream with one replica whose only
// subject is its name.
func (j *jetStreamInstance) addStream(ctx context.Context, name string) error {
	_, err := j.js.AddStream(&nats.StreamConfig{
		Name:     name,
		Subjects: []string{name},
		Storage:  nats.FileStorage,
		Replicas: 1,
	}, nats.Context(ctx))
	if err != nil {
		return fmt.Errorf("nats: add stream %s: %w", name, err)
	}
	return nil
}

// produceOne: js.Publish, which waits for the stream's ack. It takes no
// context option on purpose: an option would add a header map to every
// message; the client's default 5 s ack timeout bounds the call.
func (j *jetStreamInstance) produceOne(_ context.Context, part int, payload []byte) error {
	_, err := j.js.Publish(j.subjects[part], payload)
	return err
}

// batchProducer: JetStream has no batch publish, so one "batch" is n
// PublishAsync calls followed by waiting on all n ack futures.
func (j *jetStreamInstance) batchProducer(part int, payload []byte, n int) func(context.Context) error {
	futures := make([]nats.PubAckFuture, n)
	subj := j.subjects[part]
	return func(ctx context.Context) error {
		for i := range futures {
			f, err := j.js.PublishAsync(subj, payload)
			if err != nil {
				return fmt.Errorf("publish async: %w", err)
			}
			futures[i] = f
		}
		for _, f := range futures {
			if err := awaitAck(ctx, f); err != nil {
				return err
			}
		}
		return nil
	}
}

// pipelined: PublishAsync with a ring of inflight ack futures; before
// reusing a slot the oldest future is awaited (and its error checked), so
// at most inflight publishes are unacknowledged — the same bound
// PublishAsyncMaxPending sets on the context, which therefore never
// stalls. The ring also keeps the driver's memory flat instead of holding
// one future per message.
func (j *jetStreamInstance) pipelined(ctx context.Context, part int, payload []byte, inflight int, more func(int) bool) (int, error) {
	ring := make([]nats.PubAckFuture, inflight)
	subj := j.subjects[part]
	n := 0
	for ; more(n); n++ {
		slot := n % len(ring)
		if f := ring[slot]; f != nil {
			if err := awaitAck(ctx, f); err != nil {
				return n, err
			}
		}
		f, err := j.js.PublishAsync(subj, payload)
		if err != nil {
			return n, fmt.Errorf("publish async: %w", err)
		}
		ring[slot] = f
	}
	for _, f := range ring {
		if f == nil {
			continue
		}
		if err := awaitAck(ctx, f); err != nil {
			return n, err
		}
	}
	return n, nil
}

// pipelinedAsync: PublishAsync is JetStream's only pipelining API, so this
// is pipelined itself (run again, so that the async row's ratio compares
// runs interleaved in time).
func (j *jetStreamInstance) pipelinedAsync(ctx context.Context, part int, payload []byte, inflight int, more func(int) bool) (int, error) {
	return j.pipelined(ctx, part, payload, inflight, more)
}

func awaitAck(ctx context.Context, f nats.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return fmt.Errorf("async publish ack: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

type jetStreamReader struct {
	sub *nats.Subscription
}

// reader: a new durable pull consumer from the first message with AckNone,
// the counterpart of parkway's Poll, which acknowledges nothing either.
func (j *jetStreamInstance) reader(_ context.Context, part int) (reader, error) {
	j.readers++
	sub, err := j.js.PullSubscribe(j.subjects[part], fmt.Sprintf("reader-%d", j.readers),
		nats.BindStream(j.streams[part]), nats.DeliverAll(), nats.AckNone())
	if err != nil {
		return nil, fmt.Errorf("nats: pull subscribe: %w", err)
	}
	// A Fetch of 1,000 64 KiB messages is 64 MiB, the client's default
	// pending-bytes limit; without lifting it the client would drop
	// messages as a slow consumer.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, errors.Join(fmt.Errorf("nats: pending limits: %w", err), sub.Unsubscribe())
	}
	return &jetStreamReader{sub: sub}, nil
}

// read: one Fetch of up to max messages.
func (r *jetStreamReader) read(ctx context.Context, max int) (int, error) {
	msgs, err := r.sub.Fetch(max, nats.Context(ctx))
	return len(msgs), err
}

func (r *jetStreamReader) close() error { return r.sub.Unsubscribe() }

// createAndProduce: AddStream, then Publish to it at once.
func (j *jetStreamInstance) createAndProduce(ctx context.Context, name string, payload []byte) error {
	if err := j.addStream(ctx, name); err != nil {
		return err
	}
	if _, err := j.js.Publish(name, payload); err != nil {
		return fmt.Errorf("nats: publish to new stream %s: %w", name, err)
	}
	return nil
}

// close closes the client connection, then shuts the server down and
// waits until its goroutines have finished.
func (j *jetStreamInstance) close() error {
	if j.nc != nil {
		j.nc.Close()
	}
	j.srv.Shutdown()
	j.srv.WaitForShutdown()
	return nil
}
