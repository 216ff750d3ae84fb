package parkway

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
)

// CommitPolicy says when a Consumer commits the positions it has
// delivered.
type CommitPolicy uint8

const (
	// CommitOnInterval commits handled positions within
	// ConsumerConfig.CommitInterval (1 s by default) of their handling —
	// its timer runs only while some wait, so an idle consumer's never
	// fires — and on Close: at-least-once, with up to an interval's
	// messages to redeliver after a crash. The default, as Kafka's
	// auto-commit: a commit is a durable write (a metadata-log entry for
	// a group, an offset file for a named consumer), too costly to pay
	// per batch on a busy topic.
	CommitOnInterval CommitPolicy = iota
	// CommitAfterBatch commits a partition's position once every message
	// of a polled batch has been handled (the loop body returned for it),
	// in the background: at-least-once, with about one batch to redeliver
	// after a crash, at the price of one durable write per batch.
	CommitAfterBatch
	// CommitManual commits only when the caller calls Consumer.Commit.
	CommitManual
)

// ConsumerConfig configures NewConsumer. The zero value of every field
// but Group and Name means its default.
type ConsumerConfig struct {
	// Group is the consumer group to join (created if it does not exist).
	// Its partitions are shared with the group's other members. Empty
	// means a named consumer: it reads every partition of the topic and
	// stores its offsets under Name (Admin.StoreOffset).
	Group string
	// Name names the consumer: the member's name in a group (optional),
	// the consumer name without one (required). Names follow the one rule
	// of ErrInvalidName.
	Name string
	// SessionTimeout is the group member's session timeout (default
	// DefaultSessionTimeout). Its node renews it at a third of it, with
	// the node's other members.
	SessionTimeout time.Duration
	// Reset is where a partition starts with no committed offset, or one
	// outside [start, end]: ResetEarliest (default), ResetLatest or
	// ResetError.
	Reset OffsetReset
	// Commit is the commit policy (default CommitOnInterval).
	Commit CommitPolicy
	// CommitInterval is CommitOnInterval's period (default 1 s): a
	// handled position is committed at most this long after it was
	// handled.
	CommitInterval time.Duration
	// MaxMessages bounds one poll of a partition (default 256).
	MaxMessages int
	// MaxWait is how long one waiting poll of a partition waits (default
	// and at most MaxPollWait, 30 s). A poll returns as soon as a message
	// is there, and one waiting at a leader that loses its leadership is
	// sent again to the new leader as soon as its node learns of it:
	// MaxWait only bounds how often an idle partition is re-polled, each
	// re-poll a read at the partition's leader (in a cluster, forwarded
	// there, a request and its answer between two nodes; answered empty
	// at its deadline without waking the partition's quiesced raft
	// group), so the default is the longest.
	MaxWait time.Duration
	// MaxPollInterval bounds the time a group member's application may
	// take between asking for one message and asking for the next
	// (default DefaultMaxPollInterval, 5 min, as Kafka's
	// max.poll.interval.ms): the time a loop body runs, or the time
	// between breaking out of Messages and ranging over it again. Past
	// it the Consumer commits what was handled (unless CommitManual) and
	// leaves the group, so its partitions move to members that make
	// progress, where heartbeats alone would keep them with a stuck
	// loop; when the application asks again, it joins again as a new
	// member. Without a group it has no effect.
	MaxPollInterval time.Duration
	// OnAssigned, if set, is called with the partitions a group member
	// starts to hold (ascending), before any of their messages is handed
	// out. OnRevoked, if set, is called with partitions moving to another
	// member, once the application has finished the message of theirs it
	// was handling and before they move: the Consumer then commits their
	// handled positions (unless CommitManual: Commit may be called inside
	// OnRevoked) and releases them, and only then does the other member
	// get them (Kafka's cooperative revocation). Partitions lost with a
	// lapsed session are not revoked: they moved already. Both run on the
	// Consumer's maintenance goroutine (OnRevoked on its own), with a
	// context that ends with the Consumer; they must not call Close.
	OnAssigned func(ctx context.Context, partitions []uint32)
	OnRevoked  func(ctx context.Context, partitions []uint32)
}

// Defaults of ConsumerConfig.
const (
	DefaultCommitInterval      = time.Second
	DefaultConsumerMaxMessages = 256
	DefaultConsumerMaxWait     = MaxPollWait
	DefaultMaxPollInterval     = 5 * time.Minute
)

// Validate reports every invalid field, joined, each matching
// ErrInvalidArgument, or ErrInvalidName for a name (with
// ErrInvalidConsumer for a consumer's).
func (c ConsumerConfig) Validate() error {
	var errs []error
	// One naming rule for both (ErrInvalidName's): a consumer's name, or
	// a group member's, which JoinGroup checks again.
	if c.Group == "" {
		if err := validConsumer(c.Name); err != nil {
			errs = append(errs, fmt.Errorf("%w (a consumer without a group needs a name)", err))
		}
	} else {
		if err := metadata.ValidateName("group", c.Group); err != nil {
			errs = append(errs, err)
		}
		if c.Name != "" {
			if err := metadata.ValidateName("member", c.Name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.SessionTimeout != 0 && (c.SessionTimeout < MinSessionTimeout || c.SessionTimeout > MaxSessionTimeout) {
		errs = append(errs, fmt.Errorf("%w: session timeout %v outside [%v, %v]", ErrInvalidArgument, c.SessionTimeout, MinSessionTimeout, MaxSessionTimeout))
	}
	if c.Reset > ResetError {
		errs = append(errs, fmt.Errorf("%w: unknown reset policy %d", ErrInvalidArgument, c.Reset))
	}
	if c.Commit > CommitManual {
		errs = append(errs, fmt.Errorf("%w: unknown commit policy %d", ErrInvalidArgument, c.Commit))
	}
	if c.CommitInterval < 0 {
		errs = append(errs, fmt.Errorf("%w: negative commit interval %v", ErrInvalidArgument, c.CommitInterval))
	}
	if c.MaxMessages < 0 {
		errs = append(errs, fmt.Errorf("%w: negative MaxMessages %d", ErrInvalidArgument, c.MaxMessages))
	}
	if c.MaxPollInterval < 0 {
		errs = append(errs, fmt.Errorf("%w: negative MaxPollInterval %v", ErrInvalidArgument, c.MaxPollInterval))
	}
	if c.MaxWait < 0 || c.MaxWait > MaxPollWait {
		errs = append(errs, fmt.Errorf("%w: MaxWait %v outside [0, %v]", ErrInvalidArgument, c.MaxWait, MaxPollWait))
	}
	return errors.Join(errs...)
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = DefaultConsumerMaxMessages
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultConsumerMaxWait
	}
	if c.MaxPollInterval == 0 {
		c.MaxPollInterval = DefaultMaxPollInterval
	}
	return c
}

// Delivery is one message handed out by a Consumer, with its partition.
type Delivery struct {
	Partition uint32
	Message
}

// Consumer reads a topic for a service: as a member of a consumer group
// (the group's partitions shared with its other members, rebalanced as
// members come and go) or as a named consumer of every partition. It
// polls each partition it holds with a waiting poll, so an idle consumer
// costs no CPU; hands messages out through an iterator; commits by its
// policy; follows rebalances and rejoins after a lapsed session by
// itself, while its node keeps its session alive (no timer of its own). Delivery is at least once: after a crash or a
// rebalance, messages handled since the last commit are delivered again
// (to this member or the partition's next holder).
//
// Messages may be ranged over by one goroutine at a time; the other
// methods are safe for concurrent use. Close stops it.
type Consumer struct {
	n   *Node
	t   Topic
	cfg ConsumerConfig

	ctx    context.Context // cancelled by Close: stops every goroutine
	cancel context.CancelFunc
	life   context.Context // NewConsumer's: its end ends the consumer
	wg     sync.WaitGroup

	batches chan fetched  // from the fetchers; never closed
	kick    chan struct{} // asks the heartbeat loop to refresh now
	commitC chan struct{} // asks the maintenance loop to commit now
	// pending tells the maintenance loop that a position was handled
	// while none waited for a commit: CommitOnInterval's timer runs only
	// while some do, so an idle consumer's timer does not fire.
	pending chan struct{}
	// delivered is signalled when the application finishes a message: a
	// revocation waits for it.
	delivered chan struct{}

	mu sync.Mutex
	// d is the consumer's state and decisions (host.ConsumerDriver, which
	// the simulator's group members step too): the fetches and their
	// positions, what a failed poll does next, the handled positions and
	// CommitOnInterval's deadline, the revocation's steps, the
	// generation acknowledged, the application's asks. This owner
	// carries its actions out and feeds it the time: a goroutine per
	// fetch (stop cancels it), the iterator, the maintenance loop and
	// its timers, a revocation, the callbacks.
	d      *host.ConsumerDriver
	stops  map[uint64]context.CancelFunc // the running fetches' by fetcher ID
	member *Member                       // nil for a named consumer
	rest   fetched                       // what a broken-off loop left of its batch
	fatal  error                         // ends iteration

	closeOnce sync.Once
	closeErr  error
}

type fetched struct {
	f   host.Fetcher
	b   Batch
	err error
}

// NewConsumer starts a consumer of topic t: it joins cfg.Group (creating
// it if needed) or, without a group, reads every partition as consumer
// cfg.Name. ctx bounds the consumer's life, not only its start: when it
// ends, the consumer stops polling, commits what was handled (unless
// CommitManual) and leaves its group, as Close does, so a service whose
// context is cancelled gives up its partitions even if it never calls
// Close. Close it when done.
func (n *Node) NewConsumer(ctx context.Context, t Topic, cfg ConsumerConfig) (*Consumer, error) {
	if err := n.begin(ctx); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := n.topicInfo(ctx, t); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	mode := host.CommitOnInterval
	switch cfg.Commit {
	case CommitAfterBatch:
		mode = host.CommitAfterBatch
	case CommitManual:
		mode = host.CommitManual
	}
	c := &Consumer{
		n: n, t: t, cfg: cfg,
		batches:   make(chan fetched),
		kick:      make(chan struct{}, 1),
		commitC:   make(chan struct{}, 1),
		pending:   make(chan struct{}, 1),
		delivered: make(chan struct{}, 1),
		d: host.NewConsumerDriver(host.ConsumerDriverConfig{Group: cfg.Group != "", Commit: mode,
			MaxPollInterval: cfg.MaxPollInterval, SessionTimeout: cfg.SessionTimeout,
			CommitInterval: cfg.CommitInterval, ResetError: cfg.Reset == ResetError,
			RetryMin: n.cfg.RetryBackoffMin, RetryMax: n.cfg.RetryBackoffMax}, n.cfg.Clock.Now()),
		stops: make(map[uint64]context.CancelFunc),
		life:  ctx,
	}
	if cfg.Group != "" {
		m, err := n.joinGroup(ctx, t, cfg.Group, MemberConfig{Name: cfg.Name, SessionTimeout: cfg.SessionTimeout}, true, c.memberLive)
		if err != nil {
			return nil, err
		}
		c.member = m
		c.d.Joined(m.Assignment().Generation)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	a := c.assign()
	if c.member != nil {
		c.follow(c.member, a)
	}
	c.goroutine(c.maintain)
	return c, nil
}

// goroutine starts one of the consumer's goroutines; Close waits for all.
func (c *Consumer) goroutine(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// Member is the consumer's group membership (nil without a group). It
// changes when the consumer rejoins after a lapsed session.
func (c *Consumer) Member() *Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.member
}

// Assignment is what the consumer holds now: a group member's assignment,
// or every partition (generation 0) for a named consumer.
func (c *Consumer) Assignment() Assignment {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.member != nil {
		return c.member.Assignment()
	}
	return Assignment{Partitions: c.d.Partitions()}
}

// stopFetches stops the fetches the driver stopped (c.mu held): their
// goroutines end and their lag is no longer reported.
func (c *Consumer) stopFetches(stopped []host.Fetcher) {
	for _, f := range stopped {
		if stop, ok := c.stops[f.ID]; ok {
			stop()
			delete(c.stops, f.ID)
		}
		c.n.eng.Metrics().DeleteLag(c.t.Stream.Name, c.t.Name, f.Part, c.lagName())
	}
}

// startFetch starts the goroutine of fetch f for member m (c.mu held).
func (c *Consumer) startFetch(m *Member, f host.Fetcher) {
	ctx, cancel := context.WithCancel(c.ctx)
	c.stops[f.ID] = cancel
	c.goroutine(func() { c.fetch(ctx, m, f) })
}

// assign makes the fetches match the current assignment
// (host.ConsumerDriver.Assign): those of partitions no longer held stop
// (their undelivered batches are dropped and their uncommitted positions
// forgotten — the next holder starts from the committed offset — unless
// they are being revoked: then revoke commits them) and one starts for
// each newly held partition, after OnAssigned. It returns the
// assignment it followed.
func (c *Consumer) assign() Assignment {
	var a Assignment
	c.mu.Lock()
	if c.member != nil {
		a = c.member.Assignment()
	} else if info, ok := c.n.meta.Topic(c.t.Stream.ID, c.t.ID); ok && info.CreatedRevision == c.t.Revision {
		for p := range info.Partitions {
			a.Partitions = append(a.Partitions, uint32(p))
		}
	}
	stopped, added := c.d.Assign(a.Partitions, a.Revoking)
	c.stopFetches(stopped)
	c.mu.Unlock()
	if len(added) == 0 {
		return a
	}
	if c.member != nil && c.cfg.OnAssigned != nil {
		c.cfg.OnAssigned(c.ctx, added)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.d.Assigned(added) {
		c.startFetch(c.member, f)
	}
	return a
}

// follow acts on the assignment a refresh found
// (host.ConsumerDriver.Follow): a member with nothing being revoked
// acknowledges its generation; one with partitions being revoked runs a
// revocation, one at a time, which acknowledges when it is done.
func (c *Consumer) follow(m *Member, a Assignment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.member != m {
		return
	}
	if c.d.Follow(a.Generation, a.Revoking) {
		c.goroutine(func() { c.revoke(m) })
	}
}

// revoke gives up the partitions of a.Revoking (behaviour 33) in the
// driver's steps (host.ConsumerDriver.RevokeNext): their fetchers are
// stopped already; it waits until the application is done with the
// message of theirs it is handling (at most MaxPollInterval: past it the
// consumer leaves its group, which releases everything), calls
// OnRevoked, commits their handled positions (unless CommitManual) and
// acknowledges a's generation, which releases them to their next
// holders.
func (c *Consumer) revoke(m *Member) {
	released := false
	defer func() {
		c.mu.Lock()
		c.d.RevokeDone(released)
		c.mu.Unlock()
		if released {
			c.refreshNow()
		}
	}()
	t := c.n.cfg.Clock.NewTimer(c.cfg.MaxPollInterval)
	defer t.Stop()
	waited := false
	for {
		c.mu.Lock()
		st := c.d.RevokeNext(waited)
		c.mu.Unlock()
		switch st.Op {
		case host.RevokeWait:
			select {
			case <-c.delivered:
			case <-t.C():
				waited = true
			case <-c.ctx.Done():
				return
			}
		case host.RevokeCallback:
			if c.ctx.Err() != nil {
				return
			}
			if c.cfg.OnRevoked != nil {
				c.cfg.OnRevoked(c.ctx, st.Parts)
			}
		case host.RevokeCommit:
			if len(st.Offsets) > 0 {
				ctx, cancel := c.n.deadline(c.ctx)
				// What fails to commit is redelivered by the next holder.
				_ = m.commit(ctx, st.Offsets)
				cancel()
			}
		case host.RevokeRelease:
			ctx, cancel := c.n.deadline(c.ctx)
			_, err := m.heartbeat(ctx, st.Gen)
			cancel()
			released = err == nil // if not, the next heartbeat revokes again
			return
		}
	}
}

// lagName is the consumer label of the lag metric.
func (c *Consumer) lagName() string {
	if c.cfg.Group != "" {
		return "group:" + c.cfg.Group
	}
	return c.cfg.Name
}

// deliverable reports whether a message of f may be handed to the
// application now (behaviour 33): the fetch is still current and, in a
// group, the member still holds the partition by the fence of
// Member.Poll (its lease, and this node's committed assignment). The
// iterator asks before every message, not once per batch, so a batch
// read before a rebalance or a loss of contact is not handed out after
// it.
func (c *Consumer) deliverable(f host.Fetcher) bool {
	c.mu.Lock()
	// From here until the loop body returns, a revocation of the
	// partition waits (handled ends it).
	ok := c.d.Deliver(f)
	m := c.member
	c.mu.Unlock()
	if !ok {
		return false
	}
	if m != nil && m.check(f.Part) != nil {
		c.mu.Lock()
		if nf, restart := c.d.Refused(f); restart {
			c.stopFetches([]host.Fetcher{f})
			c.startFetch(m, nf)
		}
		c.mu.Unlock()
		c.signalDelivered()
		return false
	}
	return true
}

// signalDelivered wakes a revocation waiting for a delivery to end.
func (c *Consumer) signalDelivered() {
	select {
	case c.delivered <- struct{}{}:
	default:
	}
}

// refreshNow asks the maintenance loop to heartbeat at once.
func (c *Consumer) refreshNow() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// from is where fetch f polls next (host.ConsumerDriver.From): where
// its last batch ended, or the committed offset (a group's, or the
// named consumer's) by the reset policy.
func (c *Consumer) from(m *Member, f host.Fetcher) Start {
	c.mu.Lock()
	off, ok := c.d.From(f)
	c.mu.Unlock()
	switch {
	case ok:
		return AtOffset(off)
	case m != nil:
		return AtCommitted().OrReset(c.cfg.Reset)
	default:
		return AtConsumer(c.cfg.Name).OrReset(c.cfg.Reset)
	}
}

// fetched records that fetch f's poll answered up to next and its
// batch, if any, was handed to the iterator.
func (c *Consumer) fetched(f host.Fetcher, next uint64) {
	c.mu.Lock()
	c.d.Fetched(f, next)
	c.mu.Unlock()
}

// fetch polls one partition with waiting polls and hands its batches to
// the iterator, until its context ends.
func (c *Consumer) fetch(ctx context.Context, m *Member, f host.Fetcher) {
	part := f.Part
	for ctx.Err() == nil {
		from := c.from(m, f)
		var b Batch
		var err error
		if m != nil {
			b, err = m.Poll(ctx, part, from, c.cfg.MaxMessages, WaitFor(c.cfg.MaxWait))
		} else {
			b, err = c.n.Poll(ctx, c.t, part, from, c.cfg.MaxMessages, WaitFor(c.cfg.MaxWait))
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			c.n.eng.Metrics().SetLag(c.t.Stream.Name, c.t.Name, part, c.lagName(), b.End-b.Next)
			if len(b.Messages) == 0 {
				c.fetched(f, b.Next)
				continue
			}
			select {
			case c.batches <- fetched{f: f, b: b}:
				c.fetched(f, b.Next)
			case <-ctx.Done():
				return
			}
		default:
			// What a failed poll does next is the driver's
			// (host.ConsumerDriver.FetchFailed).
			c.mu.Lock()
			st := c.d.FetchFailed(f, err)
			if st.Op == host.FetchEnd && st.Stopped {
				c.stopFetches([]host.Fetcher{f})
			}
			c.mu.Unlock()
			if errors.Is(err, ErrInvalidArgument) {
				st.Op = host.FetchFatal // the root's own sentinel, which the driver cannot name
			}
			switch st.Op {
			case host.FetchEnd:
				// The group moved on, or the member's lease lapsed: the
				// maintenance loop refreshes the assignment and starts
				// the fetchers it needs, this partition's again if it
				// still holds it.
				c.refreshNow()
				return
			case host.FetchFatal:
				c.fail(err)
				return
			}
			if st.Wait > 0 && c.n.sleep(ctx, st.Wait) != nil {
				return
			}
		}
	}
}

// fatalConsumerError reports errors a consumer cannot recover from by
// itself: the topic or group is gone, the node closed, a policy error.
func fatalConsumerError(err error) bool {
	return host.ConsumerFatal(err) || errors.Is(err, ErrInvalidArgument)
}

// fail records a fatal error for the iterator and wakes it.
func (c *Consumer) fail(err error) {
	c.mu.Lock()
	if c.fatal == nil {
		c.fatal = err
	}
	c.mu.Unlock()
	select {
	case c.batches <- fetched{err: err}:
	case <-c.ctx.Done():
	}
}

// maintain follows a group member's assignment, rejoins after its session
// lapsed (its node's renewal found it gone) and leaves for an application
// that exceeded MaxPollInterval; for a named consumer it follows the
// topic's partition count. It also runs CommitOnInterval. A member's
// session is kept alive by its node with the node's other members
// (memberLive bounds it), so an idle Consumer's loop sleeps: its timer
// fires once per MaxPollInterval, as a safety net.
func (c *Consumer) maintain() {
	every := c.cfg.MaxPollInterval
	var changed, regrouped <-chan struct{}
	if c.Member() == nil {
		// A named consumer follows the topic's partitions: it wakes on
		// partition-shaping metadata commits only, so an idle one costs
		// nothing. The timer is a slow safety net.
		wake, cancel := c.n.meta.Subscribe()
		defer cancel()
		changed, every = wake, time.Minute
	} else {
		// A member follows its group's generations as this node applies
		// them, not only at its heartbeats: a partition revoked from it
		// is released, and one released to it read, within a metadata
		// round trip of the rebalance.
		wake, cancel := c.n.meta.SubscribeGroups()
		defer cancel()
		regrouped = wake
		c.regroup() // what was applied before the subscription
	}
	hb := c.n.cfg.Clock.NewTimer(c.nextHeartbeat(every))
	defer hb.Stop()
	// CommitOnInterval's timer runs while handled positions wait for
	// their commit (commitC set), until the deadline the driver keeps
	// (host.ConsumerDriver.NextCommit), so each is committed within
	// CommitInterval of being handled and an idle consumer's timer never
	// fires; pending arms it.
	var commit clock.Timer
	var commitC <-chan time.Time
	var pending <-chan struct{}
	if c.cfg.Commit == CommitOnInterval {
		commit = c.n.cfg.Clock.NewTimer(c.cfg.CommitInterval)
		defer commit.Stop()
		commitC, pending = c.armCommit(commit), c.pending
	}
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.life.Done():
			c.end(c.life.Err())
			return
		case <-commitC:
			c.mu.Lock()
			offsets, due := c.d.IntervalCommit(c.n.cfg.Clock.Now())
			c.mu.Unlock()
			if due {
				_ = c.commit(c.ctx, offsets) // failures leave the positions for the next round
			}
			commitC = c.armCommit(commit) // nil until pending, if none wait
			continue
		case <-pending:
			commitC = c.armCommit(commit)
			continue
		case <-c.commitC:
			_ = c.Commit(c.ctx) // failures leave the positions for the next batch
			continue
		case <-regrouped:
			c.regroup()
			continue
		case <-hb.C():
		case <-c.kick:
		case <-changed:
		case <-c.lostMember():
		}
		if c.stalled() {
			c.leaveIdle()
		}
		if !c.isIdle() {
			c.heartbeat()
		}
		hb.Reset(c.nextHeartbeat(every))
	}
}

// stalled reports whether a group member's application has not asked
// for a message for longer than MaxPollInterval.
func (c *Consumer) stalled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.member != nil && c.d.Stalled(c.n.cfg.Clock.Now())
}

func (c *Consumer) isIdle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.d.Idle()
}

// leaveIdle gives up the group for an application that stopped asking
// for messages: the fetchers stop (so no more messages are handed out
// under this membership), the handled positions are committed and the
// member leaves, so its partitions move at once. The application's next
// ask joins again (asked).
func (c *Consumer) leaveIdle() {
	c.mu.Lock()
	m := c.member
	c.stopFetches(c.d.Leave(true))
	c.mu.Unlock()
	ctx, cancel := c.n.deadline(c.ctx)
	defer cancel()
	if c.d.CommitsOnLeave() {
		_ = c.Commit(ctx) // what fails is redelivered to the next holder
	}
	_ = m.Leave(ctx) // a member that cannot leave is expired instead
}

// asked records that the application asks for a message (waiting says
// whether the iterator now waits for one). An idle member's next ask
// joins the group again: the maintenance loop's heartbeat finds the old
// member gone and rejoins.
func (c *Consumer) asked(waiting bool) {
	c.mu.Lock()
	rejoin := c.d.Asked(waiting, c.n.cfg.Clock.Now())
	c.mu.Unlock()
	if rejoin {
		c.refreshNow()
	}
}

// end ends the consumer when NewConsumer's context ends: it stops the
// fetchers and the iterator (which yields err once), commits what was
// handled (unless CommitManual) and leaves the group, as Close does.
func (c *Consumer) end(err error) {
	c.mu.Lock()
	if c.fatal == nil {
		c.fatal = err
	}
	c.stopFetches(c.d.Leave(false))
	c.mu.Unlock()
	c.cancel()
	ctx, cancel := c.n.deadline(context.Background())
	defer cancel()
	if c.d.CommitsOnLeave() {
		_ = c.Commit(ctx)
	}
	if m := c.Member(); m != nil {
		_ = m.Leave(ctx)
	}
}

// regroup follows a new generation of some group that this node applied:
// the member's assignment is read again from the node's committed state
// (no proposal) and followed — revoked partitions released, new ones
// fetched.
func (c *Consumer) regroup() {
	m := c.Member()
	if m == nil || c.isIdle() {
		return
	}
	c.mu.Lock()
	gen := c.member.Assignment().Generation
	c.mu.Unlock()
	if err := m.refresh(); err != nil {
		return // gone from the group: the next heartbeat joins again
	}
	if m.Assignment().Generation == gen {
		return // another group's generation
	}
	c.follow(m, c.assign())
}

// nextHeartbeat is the wait before the next heartbeat: every, or less
// if the application's processing bound passes sooner, or a third of the
// session timeout while the member is lost (its node found it gone and
// the rejoin failed: it is tried again then).
func (c *Consumer) nextHeartbeat(every time.Duration) time.Duration {
	m := c.Member()
	lost := false
	if m != nil {
		select {
		case <-m.lost:
			lost = true
		default:
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.d.NextHeartbeat(c.n.cfg.Clock.Now(), every, lost)
}

// lostMember is closed once the node's renewal of the current member
// found it gone: the maintenance loop rejoins. Nil once it is closed (the
// rejoin failed: nextHeartbeat paces the retries) or without a group.
func (c *Consumer) lostMember() <-chan struct{} {
	m := c.Member()
	if m == nil {
		return nil
	}
	select {
	case <-m.lost:
		return nil
	default:
		return m.lost
	}
}

// memberLive is the liveness bound of a Consumer's member (see
// host.LeaseHolder): its node keeps the member's session alive while the
// application asks for messages, or handles one for no longer than
// MaxPollInterval, and not once the Consumer left for exceeding it. The
// maintenance loop leaves at that bound; this one holds if it cannot.
func (c *Consumer) memberLive(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.d.Live(now)
}

// heartbeat refreshes membership and assignment once.
func (c *Consumer) heartbeat() {
	m := c.Member()
	if m == nil {
		if _, err := c.n.topicAlive(c.t); err != nil {
			c.fail(err) // the topic is gone: end the iteration
			return
		}
		c.assign()
		return
	}
	c.mu.Lock()
	ack := c.d.AckGen()
	c.mu.Unlock()
	_, err := m.heartbeat(c.ctx, ack)
	switch {
	case err == nil:
	case errors.Is(err, ErrUnknownMember):
		// Our session lapsed (a long pause, a partition from the
		// metadata leader): join again as a new member.
		nm, err := c.n.joinGroup(c.ctx, c.t, c.cfg.Group, MemberConfig{Name: c.cfg.Name, SessionTimeout: c.cfg.SessionTimeout}, false, c.memberLive)
		if err != nil {
			if fatalConsumerError(err) {
				c.fail(err)
			}
			return
		}
		c.mu.Lock()
		c.member, m = nm, nm
		c.stopFetches(c.d.Joined(nm.Assignment().Generation)) // they fetch for the old member
		c.mu.Unlock()
	case fatalConsumerError(err):
		c.fail(err)
		return
	default:
		return // retriable: the next heartbeat tries again
	}
	c.follow(m, c.assign())
}

// Messages returns an iterator over the consumer's messages, in offset
// order within each partition. It waits for messages (without using CPU)
// until ctx ends, the consumer is closed, NewConsumer's context ends or a
// fatal error (the topic or group deleted) — which it yields once, with
// an empty Delivery, before it stops (ctx's own end too; a nil ctx is
// ErrInvalidArgument). Breaking out of
// the loop is allowed; a later call continues where it stopped — within
// MaxPollInterval: after it a group member has left its group, and the
// later call joins again. The position of a message counts as handled
// once the loop body returns for it (or breaks after it).
//
// A group member's message is handed out only while the member holds its
// partition (behaviour 33): before each message the iterator checks that
// this node's committed assignment still gives the partition to the
// member and that the member's lease holds (a renewal confirmed within
// four fifths of the session timeout); a batch read before a rebalance,
// or a waiting poll answered after the member lost contact with its
// group for that long, is dropped, never delivered.
func (c *Consumer) Messages(ctx context.Context) iter.Seq2[Delivery, error] {
	return func(yield func(Delivery, error) bool) {
		if ctx == nil {
			yield(Delivery{}, fmt.Errorf("%w: nil context", ErrInvalidArgument))
			return
		}
		for {
			// The rest of a batch a previous loop broke out of comes
			// first: its fetcher has moved past it.
			c.mu.Lock()
			f := c.rest
			c.rest = fetched{}
			c.mu.Unlock()
			if len(f.b.Messages) == 0 {
				c.asked(true)
				select {
				case f = <-c.batches:
					c.gotBatch()
				case <-ctx.Done():
					c.asked(false)
					yield(Delivery{}, ctx.Err())
					return
				case <-c.ctx.Done():
					c.asked(false)
					c.mu.Lock()
					err := c.fatal
					c.mu.Unlock()
					if err != nil {
						yield(Delivery{}, err)
					}
					return
				}
			}
			if f.err != nil {
				yield(Delivery{}, f.err)
				return
			}
			for i, msg := range f.b.Messages {
				if !c.deliverable(f.f) {
					// Revoked mid-batch, or the member's lease lapsed:
					// the rest is the next holder's.
					c.refreshNow()
					break
				}
				more := yield(Delivery{Partition: f.f.Part, Message: msg}, nil)
				c.asked(false)
				c.handled(f.f, msg.Offset+1)
				if !more {
					if i+1 < len(f.b.Messages) {
						f.b.Messages = f.b.Messages[i+1:]
						c.mu.Lock()
						c.rest = f
						c.mu.Unlock()
					}
					c.afterBatch()
					return
				}
			}
			c.afterBatch()
		}
	}
}

// gotBatch records that the iterator stopped waiting: it hands the
// application a batch, whose handling MaxPollInterval bounds.
func (c *Consumer) gotBatch() {
	c.mu.Lock()
	c.d.GotBatch()
	c.mu.Unlock()
}

// handled records that fetch f's messages before next were handled
// (host.ConsumerDriver.Handled), and starts CommitOnInterval's timer
// for a first position waiting.
func (c *Consumer) handled(f host.Fetcher, next uint64) {
	c.mu.Lock()
	arm := c.d.Handled(f, next, c.n.cfg.Clock.Now())
	c.mu.Unlock()
	c.signalDelivered()
	if arm {
		select {
		case c.pending <- struct{}{}:
		default:
		}
	}
}

// armCommit sets CommitOnInterval's timer to the driver's deadline
// (host.ConsumerDriver.NextCommit) and returns its channel, or nil
// while no handled position waits.
func (c *Consumer) armCommit(t clock.Timer) <-chan time.Time {
	c.mu.Lock()
	wait, ok := c.d.NextCommit(c.n.cfg.Clock.Now())
	c.mu.Unlock()
	if !ok {
		return nil
	}
	t.Reset(wait)
	return t.C()
}

// afterBatch asks for a commit under CommitAfterBatch. The maintenance
// loop commits, so the iterator hands out the next batch without waiting
// for the commit's round trip (a metadata-log write for a group, an
// offset write for a named consumer); commits coalesce while one is in
// flight.
func (c *Consumer) afterBatch() {
	c.mu.Lock()
	now := c.d.BatchDone()
	c.mu.Unlock()
	if now {
		select {
		case c.commitC <- struct{}{}:
		default:
		}
	}
}

// Commit commits the positions handled so far. A group member's commit
// of a partition that moved to another member is dropped (the group
// rebalanced; the partition's next holder redelivers from the committed
// offset) and Commit returns nil for it; other failures are returned and
// the positions kept for the next commit.
func (c *Consumer) Commit(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	c.mu.Lock()
	offsets := c.d.ToCommit()
	c.mu.Unlock()
	return c.commit(ctx, offsets)
}

// commit commits offsets, handled positions the driver named
// (ToCommit, or its interval commit): Commit's work.
func (c *Consumer) commit(ctx context.Context, offsets map[uint32]uint64) error {
	if len(offsets) == 0 {
		return nil
	}
	m := c.Member()
	if m == nil {
		var errs []error
		for _, p := range slices.Sorted(maps.Keys(offsets)) {
			if err := c.n.Admin().StoreOffset(ctx, c.t, p, c.cfg.Name, offsets[p]); err != nil {
				errs = append(errs, err)
				delete(offsets, p) // kept for the next commit
			}
		}
		c.forget(offsets)
		return errors.Join(errs...)
	}
	err := m.commit(ctx, offsets)
	if !rebalanced(err) {
		if err == nil {
			c.forget(offsets)
		}
		return err
	}
	// The group rebalanced: refresh, drop the positions of partitions
	// that moved (their next holder redelivers from the committed
	// offset), and commit the ones still held.
	var held []uint32
	c.mu.Lock()
	ack := c.d.AckGen()
	c.mu.Unlock()
	if a, herr := m.heartbeat(ctx, ack); herr == nil {
		held = slices.Concat(a.Partitions, a.Revoking)
	} else {
		c.refreshNow()
	}
	c.mu.Lock()
	offsets = c.d.Rebalanced(offsets, held)
	c.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	err = m.commit(ctx, offsets)
	if err == nil || rebalanced(err) {
		c.forget(offsets) // committed, or moved again meanwhile
		return nil
	}
	return err
}

// rebalanced reports a group commit refused because the group moved on.
func rebalanced(err error) bool {
	return errors.Is(err, ErrNotAssigned) || errors.Is(err, ErrStaleGeneration) || errors.Is(err, ErrOffsetRegression)
}

// forget drops the positions in committed that did not move since they
// were read: they are committed (or given up).
func (c *Consumer) forget(committed map[uint32]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.d.Committed(committed)
}

// Close stops the consumer: it stops polling, commits the handled
// positions (unless the policy is CommitManual) and leaves the group, so
// its partitions move to the other members at once. It is idempotent and
// waits for the consumer's goroutines.
func (c *Consumer) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.mu.Lock()
		c.stopFetches(c.d.Leave(false)) // nothing more is handed out
		c.mu.Unlock()
		c.wg.Wait()
		ctx, cancel := c.n.deadline(context.Background())
		defer cancel()
		var errs []error
		c.mu.Lock()
		ended := c.fatal != nil
		c.mu.Unlock()
		if c.d.CommitsOnLeave() {
			// A consumer whose life ended has committed and left (end).
			// A message that passed the delivery fence just before can
			// still be marked handled after that commit; the member that
			// could commit it is gone (ErrUnknownMember), so it is not
			// committed and is delivered again to the partition's next
			// owner — at least once, as after any leave — and Close does
			// not report it as a failure.
			if err := c.Commit(ctx); err != nil && !(ended && errors.Is(err, ErrUnknownMember)) {
				errs = append(errs, err)
			}
		}
		if m := c.Member(); m != nil {
			if err := m.Leave(ctx); err != nil && !errors.Is(err, ErrUnknownMember) {
				errs = append(errs, err)
			}
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}
