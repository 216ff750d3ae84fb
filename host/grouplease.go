package host

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/backoff"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Group member leases (metadata/lease.go): a heartbeat that changes
// nothing is not a metadata-log entry. A started node gathers its
// members' renewals and sends those of a LeaseWindow in one message
// (KindLease) to the metadata leader, whose store renews each lease in
// memory; the leader then confirms it still leads with a read index — one
// per metadata tick for every message queued since the last, so a
// thousand members on three nodes cost the leader a few read indexes per
// window, not one per heartbeat — waits until it applied that index,
// checks each member is still there (entries of an earlier term it
// applied meanwhile may have expired it) and answers the message with
// one KindLeaseReply listing the renewals it refused. A leader deposed
// before it confirms answers nothing, and its successor grants every
// member a session from its own takeover, which came after any renewal a
// leader confirmed: so a member whose renewal was acknowledged cannot be
// expired before its lease (metadata.LeaseEnd) ends. The leader proposes
// the expiry of lapsed members (metadata.ExpireMembers) from its tick; a
// single node keeps its own leases and expires from a timer.

// MemberLease names a group member whose lease to renew: its topic
// incarnation, group and id, and its session timeout (which is not sent:
// it only bounds how long the renewal may wait for others, see
// LeaseWindow).
type MemberLease struct {
	Stream, Topic uint32
	TopicRevision uint64
	Group         string
	Member        uint64
	Session       time.Duration
}

// LeaseResult is the metadata leader's answer to one message of lease
// renewals (one or many members of one node): Err fails every renewal of
// it (a retriable error: the leader changed, the message was lost);
// otherwise each renewal is confirmed but those listed in Failed, and
// Index is the metadata index the leader had applied when it confirmed
// them (a read of this node's metadata after it has applied that index
// sees the groups as the leader did). Of gives one renewal's outcome.
type LeaseResult struct {
	Index  uint64
	Err    error
	Failed []LeaseFailure // ascending by Pos
}

// LeaseFailure is a renewal the leader refused: the member at Pos in the
// message is gone, being expired, or its group is (Err says which).
type LeaseFailure struct {
	Pos int
	Err error
}

// Of is the outcome of the renewal at position pos of the message: nil
// when the leader confirmed it.
func (r LeaseResult) Of(pos int) error {
	if r.Err != nil {
		return r.Err
	}
	if i, ok := slices.BinarySearchFunc(r.Failed, pos, func(f LeaseFailure, p int) int { return cmp.Compare(f.Pos, p) }); ok {
		return r.Failed[i].Err
	}
	return nil
}

// maxLeaseBatch bounds the renewals in one message, which a peer's
// message is checked against before anything is allocated for it.
const maxLeaseBatch = 4096

// LeaseWindow is how long a renewal of a member with session timeout
// session may wait to be sent with the node's other renewals: a
// hundredth of the session, at most 100 ms (at least 1 ms). A started
// engine sends its renewals at the multiples of the window on its clock,
// one message for all that are due, and a Consumer heartbeats on the same
// grid, so a node's members renew together and the metadata leader
// confirms each node's renewals of a window with one read index. The
// delay takes nothing from the member's lease, which counts from before
// it was sent.
func LeaseWindow(session time.Duration) time.Duration {
	return min(max(session/100, time.Millisecond), 100*time.Millisecond)
}

// leaseOp is a message of renewals for the metadata driver: from the
// node that sent it (this node's own included), with its request id.
type leaseOp struct {
	from, id uint64
	leases   []MemberLease
	// failed are the renewals the store refused (positions ascending).
	failed []LeaseFailure
}

// leaseWait is a message of renewals the leader confirmed, waiting for
// its applied index to reach the confirmation's.
type leaseWait struct {
	op    leaseOp
	index uint64
}

// leases is the leader's renewal state, owned by the metadata driver.
type leases struct {
	queue []leaseOp // renewed, waiting for the next read index
	// seq names the read index in flight for batch (0: none), asked at;
	// batches is the last seq given.
	seq     uint64
	batches uint64
	batch   []leaseOp
	asked   time.Time
	ready   []leaseWait // confirmed, waiting for the applied index
}

// Lease message error codes.
const (
	leaseOK byte = iota
	leaseRetry
	leaseUnknownMember
	leaseGroupNotFound
	leaseTopicNotFound
	leaseStreamNotFound
	leaseOther
)

// leaseItemMin is the least encoding of one renewal: stream, topic, topic
// revision, member and the group name's length.
const leaseItemMin = 4 + 4 + 8 + 8 + 4

// encodeLeaseRequest is a KindLease payload: request id, the number of
// renewals, then each: stream, topic, topic revision, member, group name.
func encodeLeaseRequest(id uint64, ls []MemberLease) []byte {
	n := 12
	for _, l := range ls {
		n += leaseItemMin + len(l.Group)
	}
	b := make([]byte, 0, n)
	b = binary.LittleEndian.AppendUint64(b, id)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ls)))
	for _, l := range ls {
		b = binary.LittleEndian.AppendUint32(b, l.Stream)
		b = binary.LittleEndian.AppendUint32(b, l.Topic)
		b = binary.LittleEndian.AppendUint64(b, l.TopicRevision)
		b = binary.LittleEndian.AppendUint64(b, l.Member)
		b = appendString(b, l.Group)
	}
	return b
}

// decodeLeaseRequest decodes a KindLease payload from a peer: the count
// is bounded (and checked against the payload's length before the
// renewals are allocated), group names are bounded as names are, and
// nothing may follow the last renewal. Consecutive renewals of one group
// share its name's string.
func decodeLeaseRequest(b []byte) (uint64, []MemberLease, error) {
	if len(b) < 12 {
		return 0, nil, fmt.Errorf("%w: lease request of %d bytes", errWire, len(b))
	}
	id, n := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:])
	b = b[12:]
	if n == 0 || n > maxLeaseBatch || uint64(n)*leaseItemMin > uint64(len(b)) {
		return 0, nil, fmt.Errorf("%w: lease request of %d renewals in %d bytes", errWire, n, len(b))
	}
	ls := make([]MemberLease, n)
	group := ""
	for i := range ls {
		if len(b) < leaseItemMin {
			return 0, nil, fmt.Errorf("%w: lease request's renewal %d", errWire, i)
		}
		l := MemberLease{
			Stream: binary.LittleEndian.Uint32(b), Topic: binary.LittleEndian.Uint32(b[4:]),
			TopicRevision: binary.LittleEndian.Uint64(b[8:]), Member: binary.LittleEndian.Uint64(b[16:]),
		}
		g, rest, ok := readName(b[24:], group)
		if !ok || len(g) > metadata.MaxNameLength {
			return 0, nil, fmt.Errorf("%w: lease request's group name", errWire)
		}
		l.Group, group, b = g, g, rest
		ls[i] = l
	}
	if len(b) != 0 {
		return 0, nil, fmt.Errorf("%w: %d bytes after a lease request", errWire, len(b))
	}
	return id, ls, nil
}

// readName is readString that returns prev itself, allocating nothing,
// when the name read equals it.
func readName(b []byte, prev string) (string, []byte, bool) {
	if len(b) < 4 {
		return "", b, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(len(b)-4) < uint64(n) {
		return "", b, false
	}
	if raw := b[4 : 4+n]; string(raw) == prev {
		return prev, b[4+n:], true
	}
	return string(b[4 : 4+n]), b[4+n:], true
}

// leaseCode is the wire code of a renewal's error.
func leaseCode(err error) byte {
	switch {
	case errors.Is(err, shard.ErrRetry), errors.Is(err, metadata.ErrNotLeasing):
		return leaseRetry
	case errors.Is(err, metadata.ErrUnknownMember):
		return leaseUnknownMember
	case errors.Is(err, metadata.ErrGroupNotFound):
		return leaseGroupNotFound
	case errors.Is(err, metadata.ErrTopicNotFound):
		return leaseTopicNotFound
	case errors.Is(err, metadata.ErrStreamNotFound):
		return leaseStreamNotFound
	}
	return leaseOther
}

// leaseError is the error of a wire code and its text (ok false for a
// code no peer sends).
func leaseError(code byte, msg string) (error, bool) {
	var sentinel error
	switch code {
	case leaseRetry:
		sentinel = shard.ErrRetry
	case leaseUnknownMember:
		sentinel = metadata.ErrUnknownMember
	case leaseGroupNotFound:
		sentinel = metadata.ErrGroupNotFound
	case leaseTopicNotFound:
		sentinel = metadata.ErrTopicNotFound
	case leaseStreamNotFound:
		sentinel = metadata.ErrStreamNotFound
	case leaseOther:
		return fmt.Errorf("at the metadata leader: %s", msg), true
	default:
		return nil, false
	}
	return fmt.Errorf("%w (at the metadata leader: %s)", sentinel, msg), true
}

// encodeLeaseReply is a KindLeaseReply payload: request id, then either
// leaseOK, the applied index, the number of refused renewals and each
// (position, code, text), or the code and text of the error that fails
// them all.
func encodeLeaseReply(id uint64, r LeaseResult) []byte {
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, 32), id)
	if r.Err != nil {
		return appendString(append(b, leaseCode(r.Err)), r.Err.Error())
	}
	b = binary.LittleEndian.AppendUint64(append(b, leaseOK), r.Index)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Failed)))
	for _, f := range r.Failed {
		b = binary.LittleEndian.AppendUint32(b, uint32(f.Pos))
		b = appendString(append(b, leaseCode(f.Err)), f.Err.Error())
	}
	return b
}

// decodeLeaseReply decodes a KindLeaseReply payload from a peer: the
// refused renewals' count is checked against the payload's length, their
// positions must ascend and their codes be errors.
func decodeLeaseReply(b []byte) (uint64, LeaseResult, error) {
	if len(b) < 9 {
		return 0, LeaseResult{}, fmt.Errorf("%w: lease reply of %d bytes", errWire, len(b))
	}
	id, code, b := binary.LittleEndian.Uint64(b), b[8], b[9:]
	if code != leaseOK {
		msg, rest, ok := readString(b)
		if !ok || len(rest) != 0 {
			return 0, LeaseResult{}, fmt.Errorf("%w: lease reply's error", errWire)
		}
		err, ok := leaseError(code, msg)
		if !ok {
			return 0, LeaseResult{}, fmt.Errorf("%w: lease reply code %d", errWire, code)
		}
		return id, LeaseResult{Err: err}, nil
	}
	if len(b) < 12 {
		return 0, LeaseResult{}, fmt.Errorf("%w: lease reply's index", errWire)
	}
	r := LeaseResult{Index: binary.LittleEndian.Uint64(b)}
	n := binary.LittleEndian.Uint32(b[8:])
	b = b[12:]
	const failMin = 4 + 1 + 4
	if n > maxLeaseBatch || uint64(n)*failMin > uint64(len(b)) {
		return 0, LeaseResult{}, fmt.Errorf("%w: lease reply of %d refusals in %d bytes", errWire, n, len(b))
	}
	if n > 0 {
		r.Failed = make([]LeaseFailure, 0, n)
	}
	for i := range n {
		if len(b) < failMin {
			return 0, LeaseResult{}, fmt.Errorf("%w: lease reply's refusal %d", errWire, i)
		}
		pos, code := binary.LittleEndian.Uint32(b), b[4]
		msg, rest, ok := readString(b[5:])
		if !ok || code == leaseOK || pos >= maxLeaseBatch || (i > 0 && int(pos) <= r.Failed[i-1].Pos) {
			return 0, LeaseResult{}, fmt.Errorf("%w: lease reply's refusal %d", errWire, i)
		}
		err, ok := leaseError(code, msg)
		if !ok {
			return 0, LeaseResult{}, fmt.Errorf("%w: lease reply code %d", errWire, code)
		}
		r.Failed = append(r.Failed, LeaseFailure{Pos: int(pos), Err: err})
		b = rest
	}
	if len(b) != 0 {
		return 0, LeaseResult{}, fmt.Errorf("%w: %d bytes after a lease reply", errWire, len(b))
	}
	return id, r, nil
}

// RenewLease renews a group member's lease: the heartbeat of a member
// whose state does not change, which is not a metadata-log entry. In a
// cluster the renewal joins this node's next message of renewals to the
// metadata leader (see LeaseWindow), and RenewLease returns once the
// leader confirmed it (see above) and this node applied what the leader
// had. The node's sender retries the message through leader changes for
// RequestTimeout; ctx bounds the wait of this caller. It fails with an
// error wrapping shard.ErrRetry when no leader confirmed in time, with
// metadata.ErrUnknownMember when the member is gone or being expired,
// and with the group lookup errors (metadata.ErrGroupNotFound,
// ErrTopicNotFound, ...). No goroutine, timer or context per call.
func (e *Engine) RenewLease(ctx context.Context, l MemberLease) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.cl == nil {
		// A single node leads its own metadata.
		return e.meta.RenewLease(l.Stream, l.Topic, l.TopicRevision, l.Group, l.Member, e.cfg.Clock.Now().UnixNano())
	}
	if e.cfg.Manual {
		return ErrManual
	}
	c := e.cl
	b, pos, err := c.out.add(l, e.cfg.Clock.Now())
	if err != nil {
		return err
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return fmt.Errorf("%w: member lease: %w", shard.ErrRetry, ctx.Err())
	}
	if err := b.answer.Of(pos); err != nil {
		return err
	}
	// Read what the leader had applied: the assignment the member reads
	// next is at least as new as the leader's. The answer's index is the
	// leader's raft applied index, compared with this member's: the last
	// command's index (appliedIndex) stays below it for as long as no
	// command follows an entry without one, and a renewal after an
	// election waited out its whole context so.
	_ = c.waitApplied(ctx, func() bool { return c.raftApplied.Load() >= b.answer.Index })
	return nil
}

// leaseBatch is renewals of this node's members sent in one message.
type leaseBatch struct {
	leases []MemberLease
	// at is when it is sent: the earliest multiple of a renewal's
	// LeaseWindow after the renewal was asked; created when the first was.
	at, created time.Time
	answer      LeaseResult   // set before done is closed
	done        chan struct{} // closed once answered
}

// leaseOutbox holds the renewals of a started cluster engine's members
// until its sender (runLeaseSender) sends them.
type leaseOutbox struct {
	mu      sync.Mutex
	pending []*leaseBatch // the first is sent next; the others are full
	closed  bool
	kick    chan struct{} // the first batch is new or due sooner
}

func newLeaseOutbox() *leaseOutbox { return &leaseOutbox{kick: make(chan struct{}, 1)} }

// add puts a renewal asked at now into the batch to send next (a new one
// if that is full) and returns the batch and its position there.
func (o *leaseOutbox) add(l MemberLease, now time.Time) (*leaseBatch, int, error) {
	w := LeaseWindow(l.Session)
	at := now.Truncate(w).Add(w)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, 0, ErrClosed
	}
	var b *leaseBatch
	if n := len(o.pending); n > 0 && len(o.pending[n-1].leases) < maxLeaseBatch {
		b = o.pending[n-1]
	} else {
		b = &leaseBatch{at: at, created: now, done: make(chan struct{})}
		o.pending = append(o.pending, b)
		o.signal()
	}
	if at.Before(b.at) {
		b.at = at
		o.signal()
	}
	b.leases = append(b.leases, l)
	if len(b.leases) == maxLeaseBatch {
		b.at = now // full: send it now
		o.signal()
	}
	return b, len(b.leases) - 1, nil
}

func (o *leaseOutbox) signal() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// next returns the batch to send next, or when the first is due (zero
// when there is none).
func (o *leaseOutbox) next(now time.Time) (*leaseBatch, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.pending) == 0 {
		return nil, time.Time{}
	}
	b := o.pending[0]
	if now.Before(b.at) {
		return nil, b.at
	}
	o.pending[0] = nil
	o.pending = o.pending[1:]
	return b, time.Time{}
}

// close fails the renewals not sent yet, and refuses more.
func (o *leaseOutbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for _, b := range o.pending {
		b.answer = LeaseResult{Err: ErrClosed}
		close(b.done)
	}
	o.pending = nil
}

// runLeaseSender sends a started cluster engine's renewals: the kept
// leases' rounds (leasekeeper.go) and each batch of asked ones when it is
// due, in one message to the metadata leader, again after a
// retriable failure (a lost message, a leader change) until RequestTimeout
// after its first renewal was asked. It sleeps while there is none.
func (c *clusterNode) runLeaseSender(ctx context.Context) {
	o, clk := c.out, c.e.cfg.Clock
	defer o.close()
	t := clk.NewTimer(time.Hour)
	defer t.Stop()
	for {
		kept := c.renewKept(ctx, clk.Now())
		b, at := o.next(clk.Now())
		if b != nil {
			c.sendLeaseBatch(ctx, b)
			close(b.done)
			continue
		}
		if at.IsZero() || (!kept.IsZero() && kept.Before(at)) {
			at = kept
		}
		var fire <-chan time.Time
		if !at.IsZero() {
			t.Reset(at.Sub(clk.Now()))
			fire = t.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-o.kick:
		case <-c.e.keep.kick:
		case <-fire:
		}
		t.Stop()
	}
}

// sendLeaseBatch sends b's renewals until the leader answers them or the
// failure is not retriable, or RequestTimeout has passed since the first
// was asked, and sets b's answer.
func (c *clusterNode) sendLeaseBatch(ctx context.Context, b *leaseBatch) {
	e := c.e
	deadline := b.created.Add(e.cfg.RequestTimeout)
	bo := backoff.New(e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax)
	for {
		b.answer = c.sendLeasesOnce(ctx, b.leases)
		if r := b.answer; r.Err == nil || !errors.Is(r.Err, shard.ErrRetry) || ctx.Err() != nil ||
			!e.cfg.Clock.Now().Before(deadline) {
			return
		}
		if err := clock.Sleep(ctx, e.cfg.Clock, bo.Next()); err != nil {
			b.answer.Err = ErrClosed
			return
		}
	}
}

// sendLeasesOnce sends renewals to the metadata leader once and waits
// (at most the forward timeout) for its answer.
func (c *clusterNode) sendLeasesOnce(ctx context.Context, ls []MemberLease) LeaseResult {
	ch, stop, err := c.sendLease(ls)
	if err != nil {
		return LeaseResult{Err: err}
	}
	defer stop()
	t := c.e.cfg.Clock.NewTimer(c.e.ForwardTimeout())
	defer t.Stop()
	select {
	case r := <-ch:
		return r
	case <-t.C():
		return LeaseResult{Err: fmt.Errorf("%w: no answer from the metadata leader", shard.ErrRetry)}
	case <-c.meta.failed:
		return LeaseResult{Err: c.meta.err}
	case <-ctx.Done():
		return LeaseResult{Err: ErrClosed}
	}
}

// SendLease sends a manual engine's lease renewals to the metadata leader
// in one message, once. The channel receives the answer (never, if it is
// lost: the caller gives up after its own bounded wait, calls cancel and
// sends again). A started engine's sender does exactly that for
// RenewLease.
func (e *Engine) SendLease(ls ...MemberLease) (answer <-chan LeaseResult, cancel func(), err error) {
	if e.cl == nil {
		return nil, nil, errNotClustered
	}
	if len(ls) == 0 || len(ls) > maxLeaseBatch {
		return nil, nil, fmt.Errorf("%w: %d renewals in one message, want 1 to %d", metadata.ErrInvalidGroupRequest, len(ls), maxLeaseBatch)
	}
	return e.cl.sendLease(ls)
}

// sendLease sends renewals to the leader this node knows (itself
// included) and registers their answer's channel.
func (c *clusterNode) sendLease(ls []MemberLease) (<-chan LeaseResult, func(), error) {
	lead := c.meta.lead.Load()
	if lead == 0 {
		return nil, nil, fmt.Errorf("%w: no metadata leader known", shard.ErrRetry)
	}
	id := c.reqID.Add(1)
	ch := make(chan LeaseResult, 1)
	c.mu.Lock()
	if c.leaseWaits == nil {
		c.leaseWaits = make(map[uint64]chan LeaseResult)
	}
	c.leaseWaits[id] = ch
	c.mu.Unlock()
	stop := func() {
		c.mu.Lock()
		delete(c.leaseWaits, id)
		c.mu.Unlock()
	}
	self := uint64(c.cfg.ID)
	if lead == self {
		op := leaseOp{from: self, id: id, leases: ls}
		if c.e.cfg.Manual {
			c.meta.serveLease(op)
		} else {
			select {
			case c.meta.leaseIn <- op:
			default:
				stop()
				return nil, nil, fmt.Errorf("%w: the metadata driver is busy", shard.ErrRetry)
			}
		}
		return ch, stop, nil
	}
	if err := c.send(lead, KindLease, 0, encodeLeaseRequest(id, ls)); err != nil {
		stop()
		return nil, nil, fmt.Errorf("%w: %w", shard.ErrRetry, err)
	}
	return ch, stop, nil
}

// leaseAnswered hands an answer to its waiter, if it still waits.
func (c *clusterNode) leaseAnswered(id uint64, r LeaseResult) {
	c.mu.Lock()
	ch, ok := c.leaseWaits[id]
	delete(c.leaseWaits, id)
	c.mu.Unlock()
	if ok {
		ch <- r
	}
}

// deliverLease takes a peer's KindLease or KindLeaseReply message.
func (c *clusterNode) deliverLease(from uint64, kind uint8, payload []byte) error {
	if kind == KindLeaseReply {
		id, r, err := decodeLeaseReply(payload)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		c.leaseAnswered(id, r)
		return nil
	}
	id, ls, err := decodeLeaseRequest(payload)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	op := leaseOp{from: from, id: id, leases: ls}
	if c.e.cfg.Manual {
		c.meta.serveLease(op)
		return nil
	}
	select {
	case c.meta.leaseIn <- op:
	default:
		// The driver is behind: the node asks again.
		c.meta.answerLease(op, LeaseResult{Err: fmt.Errorf("%w: the metadata driver is busy", shard.ErrRetry)})
	}
	return nil
}

// serveLease renews the members' leases of a message at the leader and
// queues the message for the next read index (metadata driver). A
// renewal the store refuses is answered with the others.
func (m *metaGroup) serveLease(op leaseOp) {
	if err := m.unavailable(); err != nil {
		m.answerLease(op, LeaseResult{Err: fmt.Errorf("%w: %w", shard.ErrRetry, err)})
		return
	}
	if m.lead.Load() != uint64(m.c.cfg.ID) {
		m.answerLease(op, LeaseResult{Err: fmt.Errorf("%w: node %d does not lead the metadata group", shard.ErrRetry, m.c.cfg.ID)})
		return
	}
	now := m.c.e.cfg.Clock.Now().UnixNano()
	for i, l := range op.leases {
		if err := m.store.RenewLease(l.Stream, l.Topic, l.TopicRevision, l.Group, l.Member, now); err != nil {
			if errors.Is(err, metadata.ErrNotLeasing) {
				m.answerLease(op, LeaseResult{Err: err})
				return
			}
			op.failed = append(op.failed, LeaseFailure{Pos: i, Err: err})
		}
	}
	// The read index is asked at the next tick, one for every message
	// queued by then: a renewal waits at most a tick more, and a
	// thousand members cost the leader a hundred heartbeat rounds a
	// second at most, not one each (their nodes send them together, see
	// LeaseWindow, so far fewer).
	m.lease.queue = append(m.lease.queue, op)
	m.wake()
}

// askLeaseIndex asks one read index for every queued renewal.
func (m *metaGroup) askLeaseIndex() {
	m.wake()
	m.lease.batches++
	m.lease.seq, m.lease.asked = m.lease.batches, m.c.e.cfg.Clock.Now()
	m.lease.batch = append(m.lease.batch, m.lease.queue...)
	m.lease.queue = m.lease.queue[:0]
	// A failed group is reported by the next process.
	_ = m.barriers.Ask(m.g, metaRead{lease: m.lease.seq})
}

// leaseConfirmed takes the read index confirming the batch in flight.
func (m *metaGroup) leaseConfirmed(index uint64) {
	for _, op := range m.lease.batch {
		m.lease.ready = append(m.lease.ready, leaseWait{op: op, index: index})
	}
	m.lease.seq, m.lease.batch = 0, m.lease.batch[:0]
}

// answerLeases answers the confirmed messages whose index is applied:
// each member must still hold its lease (the entries applied since may
// have expired it).
func (m *metaGroup) answerLeases() {
	if len(m.lease.ready) == 0 {
		return
	}
	applied := m.g.Applied()
	keep := m.lease.ready[:0]
	for _, w := range m.lease.ready {
		if applied < w.index {
			keep = append(keep, w)
			continue
		}
		r := LeaseResult{Index: w.index}
		failed := w.op.failed
		for i, l := range w.op.leases {
			if len(failed) > 0 && failed[0].Pos == i {
				r.Failed = append(r.Failed, failed[0])
				failed = failed[1:]
				continue
			}
			if err := m.store.HoldsLease(l.Stream, l.Topic, l.TopicRevision, l.Group, l.Member); err != nil {
				r.Failed = append(r.Failed, LeaseFailure{Pos: i, Err: err})
			}
		}
		m.answerLease(w.op, r)
	}
	clear(m.lease.ready[len(keep):])
	m.lease.ready = keep
}

// leaseTick asks the read index for the renewals queued since the last
// one (or again for a batch whose answer is overdue: a lost heartbeat
// round), and proposes the expiry of members whose lease lapsed. The
// leader's metadata tick calls it, awake or quiesced.
func (m *metaGroup) leaseTick() {
	if m.unavailable() != nil || m.lead.Load() != uint64(m.c.cfg.ID) {
		return
	}
	now := m.c.e.cfg.Clock.Now()
	if (m.lease.seq == 0 && len(m.lease.queue) > 0) || (m.lease.seq != 0 && now.Sub(m.lease.asked) > m.c.e.ForwardTimeout()) {
		m.askLeaseIndex()
	}
	for _, cmd := range m.store.DueExpiries(now.UnixNano(), m.c.e.ForwardTimeout()) {
		data, err := encodeMetaCommand(m.c.e.NewMetadataKey(), cmd)
		if err != nil {
			continue
		}
		// Nobody waits for the answer: a lost proposal comes due again.
		_ = m.propose(data, make(chan MetadataResult, 1))
	}
}

// leaseDueTicks is how many ticks from now the earliest lease lapses (at
// least 1), if this node keeps leases: a quiesced leader's driver wakes
// for it.
func (m *metaGroup) leaseDueTicks() (int64, bool) {
	at, ok := m.store.NextLeaseDue()
	if !ok {
		return 0, false
	}
	d := time.Duration(at-m.c.e.cfg.Clock.Now().UnixNano()) + time.Millisecond
	return max(int64(d/m.c.cfg.TickInterval)+1, 1), true
}

// leaderLeases starts or stops the store's leases when leadership moves,
// and fails the renewals in flight: a new leader answers them again.
func (m *metaGroup) leaderLeases(lead uint64) {
	if lead == uint64(m.c.cfg.ID) {
		m.store.StartLeases(m.c.e.cfg.Clock.Now().UnixNano())
	} else {
		m.store.StopLeases()
	}
	err := LeaseResult{Err: fmt.Errorf("%w: metadata leader changed", shard.ErrRetry)}
	for _, op := range m.lease.queue {
		m.answerLease(op, err)
	}
	for _, op := range m.lease.batch {
		m.answerLease(op, err)
	}
	for _, w := range m.lease.ready {
		m.answerLease(w.op, err)
	}
	m.lease = leases{}
}

// answerLease answers a renewal: on this node, or to the peer that sent
// it.
func (m *metaGroup) answerLease(op leaseOp, r LeaseResult) {
	if op.from == uint64(m.c.cfg.ID) {
		m.c.leaseAnswered(op.id, r)
		return
	}
	_ = m.c.send(op.from, KindLeaseReply, 0, encodeLeaseReply(op.id, r))
}

// runLeases expires the lapsed members of a single node's groups and
// renews its kept leases' rounds: it sleeps until the earliest lease or
// round is due, or a group changes (a join may bring an earlier one).
func (e *Engine) runLeases(ctx context.Context) {
	wake, cancel := e.meta.SubscribeGroups()
	defer cancel()
	clk := e.cfg.Clock
	for {
		now := clk.Now()
		for _, cmd := range e.meta.DueExpiries(now.UnixNano(), time.Second) {
			_, _ = e.ApplyMetadata(ctx, cmd) // a failure comes due again
		}
		kept := e.renewKeptLocal(clk.Now())
		var timer <-chan time.Time
		stop := func() bool { return false }
		at, ok := e.meta.NextLeaseDue()
		d := time.Duration(at-clk.Now().UnixNano()) + time.Millisecond
		if k := kept.Sub(clk.Now()); !kept.IsZero() && (!ok || k < d) {
			d, ok = max(k, 0), true
		}
		if ok {
			t := clk.NewTimer(d)
			timer, stop = t.C(), t.Stop
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-wake:
		case <-e.keep.kick:
		case <-timer:
		}
		stop()
	}
}
