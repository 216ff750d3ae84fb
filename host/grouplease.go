package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/internal/backoff"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Group member leases (metadata/lease.go): a heartbeat that changes
// nothing is not a metadata-log entry. The member's node sends it to the
// metadata leader (KindLease), whose store renews the member's lease in
// memory; the leader then confirms it still leads with a read index — one
// per metadata tick for every renewal queued since the last, so a
// thousand members cost at most a read index a tick — waits
// until it applied that index, checks the member is still there (entries
// of an earlier term it applied meanwhile may have expired it) and
// answers (KindLeaseReply). A leader deposed before it confirms answers
// nothing, and its successor grants every member a session from its own
// takeover, which came after any renewal a leader confirmed: so a member
// whose renewal was acknowledged cannot be expired before its lease
// (metadata.LeaseEnd) ends. The leader proposes the expiry of lapsed
// members (metadata.ExpireMembers) from its tick; a single node keeps its
// own leases and expires from a timer.

// MemberLease names a group member whose lease to renew: its topic
// incarnation, group and id.
type MemberLease struct {
	Stream, Topic uint32
	TopicRevision uint64
	Group         string
	Member        uint64
}

// LeaseResult is the answer to a lease renewal: nil Err, and the metadata
// index the leader had applied when it confirmed the renewal (a read of
// this node's metadata after it has applied that index sees the group as
// the leader did).
type LeaseResult struct {
	Index uint64
	Err   error
}

// leaseOp is a renewal for the metadata driver: from the node that asked
// (this node's own included), with its request id.
type leaseOp struct {
	from, id uint64
	lease    MemberLease
}

// leaseWait is a renewal the leader confirmed, waiting for its applied
// index to reach the confirmation's.
type leaseWait struct {
	op    leaseOp
	index uint64
}

// leases is the leader's renewal state, owned by the metadata driver.
type leases struct {
	queue []leaseOp // renewed, waiting for the next read index
	// seq is the read index in flight for batch (0: none), asked at.
	seq   uint64
	batch []leaseOp
	asked time.Time
	ready []leaseWait // confirmed, waiting for the applied index
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

// encodeLeaseRequest is a KindLease payload: request id, stream, topic,
// topic revision, member, then the group name.
func encodeLeaseRequest(id uint64, l MemberLease) []byte {
	b := make([]byte, 0, 36+len(l.Group))
	b = binary.LittleEndian.AppendUint64(b, id)
	b = binary.LittleEndian.AppendUint32(b, l.Stream)
	b = binary.LittleEndian.AppendUint32(b, l.Topic)
	b = binary.LittleEndian.AppendUint64(b, l.TopicRevision)
	b = binary.LittleEndian.AppendUint64(b, l.Member)
	return appendString(b, l.Group)
}

// decodeLeaseRequest decodes a KindLease payload from a peer: the group
// name is bounded as names are, and nothing may follow it.
func decodeLeaseRequest(b []byte) (uint64, MemberLease, error) {
	if len(b) < 32 {
		return 0, MemberLease{}, fmt.Errorf("%w: lease request of %d bytes", errWire, len(b))
	}
	id := binary.LittleEndian.Uint64(b)
	l := MemberLease{
		Stream: binary.LittleEndian.Uint32(b[8:]), Topic: binary.LittleEndian.Uint32(b[12:]),
		TopicRevision: binary.LittleEndian.Uint64(b[16:]), Member: binary.LittleEndian.Uint64(b[24:]),
	}
	g, rest, ok := readString(b[32:])
	if !ok || len(rest) != 0 || len(g) > metadata.MaxNameLength {
		return 0, MemberLease{}, fmt.Errorf("%w: lease request's group name", errWire)
	}
	l.Group = g
	return id, l, nil
}

// encodeLeaseReply is a KindLeaseReply payload: request id, code, then
// the applied index (leaseOK) or the error's text.
func encodeLeaseReply(id uint64, r LeaseResult) []byte {
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, 32), id)
	var code byte
	switch err := r.Err; {
	case err == nil:
		return binary.LittleEndian.AppendUint64(append(b, leaseOK), r.Index)
	case errors.Is(err, shard.ErrRetry), errors.Is(err, metadata.ErrNotLeasing):
		code = leaseRetry
	case errors.Is(err, metadata.ErrUnknownMember):
		code = leaseUnknownMember
	case errors.Is(err, metadata.ErrGroupNotFound):
		code = leaseGroupNotFound
	case errors.Is(err, metadata.ErrTopicNotFound):
		code = leaseTopicNotFound
	case errors.Is(err, metadata.ErrStreamNotFound):
		code = leaseStreamNotFound
	default:
		code = leaseOther
	}
	return appendString(append(b, code), r.Err.Error())
}

// decodeLeaseReply decodes a KindLeaseReply payload from a peer.
func decodeLeaseReply(b []byte) (uint64, LeaseResult, error) {
	if len(b) < 9 {
		return 0, LeaseResult{}, fmt.Errorf("%w: lease reply of %d bytes", errWire, len(b))
	}
	id, code, b := binary.LittleEndian.Uint64(b), b[8], b[9:]
	if code == leaseOK {
		if len(b) != 8 {
			return 0, LeaseResult{}, fmt.Errorf("%w: lease reply's index", errWire)
		}
		return id, LeaseResult{Index: binary.LittleEndian.Uint64(b)}, nil
	}
	msg, rest, ok := readString(b)
	if !ok || len(rest) != 0 {
		return 0, LeaseResult{}, fmt.Errorf("%w: lease reply's error", errWire)
	}
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
		return id, LeaseResult{Err: fmt.Errorf("at the metadata leader: %s", msg)}, nil
	default:
		return 0, LeaseResult{}, fmt.Errorf("%w: lease reply code %d", errWire, code)
	}
	return id, LeaseResult{Err: fmt.Errorf("%w (at the metadata leader: %s)", sentinel, msg)}, nil
}

// RenewLease renews a group member's lease: the heartbeat of a member
// whose state does not change, which is not a metadata-log entry. In a
// cluster it goes to the metadata leader and returns once the leader
// confirmed it (see above) and this node applied what the leader had; it
// retries through leader changes until ctx's deadline (or
// RequestTimeout), then fails with an error wrapping shard.ErrRetry. It
// fails with metadata.ErrUnknownMember when the member is gone or being
// expired, and with the group lookup errors (metadata.ErrGroupNotFound,
// ErrTopicNotFound, ...).
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
	ctx, cancel := e.Deadline(ctx)
	defer cancel()
	bo := backoff.New(e.cfg.RetryBackoffMin, e.cfg.RetryBackoffMax)
	for {
		ch, stop, err := c.sendLease(l)
		var r LeaseResult
		if err != nil {
			r.Err = err
		} else {
			t := e.cfg.Clock.NewTimer(e.ForwardTimeout())
			select {
			case r = <-ch:
			case <-t.C():
				r.Err = fmt.Errorf("%w: no answer from the metadata leader", shard.ErrRetry)
			case <-c.meta.failed:
				r.Err = c.meta.err
			case <-ctx.Done():
				r.Err = fmt.Errorf("%w: member lease: %w", shard.ErrRetry, ctx.Err())
			}
			t.Stop()
			stop()
		}
		if r.Err == nil {
			// Read what the leader had applied: the assignment the
			// member reads next is at least as new as the leader's.
			_ = c.waitApplied(ctx, func() bool { return c.appliedIndex.Load() >= r.Index })
			return nil
		}
		if !errors.Is(r.Err, shard.ErrRetry) || ctx.Err() != nil {
			return r.Err
		}
		if err := e.Sleep(ctx, bo.Next()); err != nil {
			return fmt.Errorf("%w: member lease: %w", shard.ErrRetry, err)
		}
	}
}

// SendLease sends a manual engine's lease renewal to the metadata leader
// once. The channel receives the answer (never, if it is lost: the caller
// gives up after its own bounded wait, calls cancel and sends again).
// RenewLease does exactly that for a started engine.
func (e *Engine) SendLease(l MemberLease) (answer <-chan LeaseResult, cancel func(), err error) {
	if e.cl == nil {
		return nil, nil, errNotClustered
	}
	return e.cl.sendLease(l)
}

// sendLease sends one renewal to the leader this node knows (itself
// included) and registers its answer's channel.
func (c *clusterNode) sendLease(l MemberLease) (<-chan LeaseResult, func(), error) {
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
		if c.e.cfg.Manual {
			c.meta.serveLease(leaseOp{from: self, id: id, lease: l})
		} else {
			select {
			case c.meta.leaseIn <- leaseOp{from: self, id: id, lease: l}:
			default:
				stop()
				return nil, nil, fmt.Errorf("%w: the metadata driver is busy", shard.ErrRetry)
			}
		}
		return ch, stop, nil
	}
	if err := c.send(lead, KindLease, 0, encodeLeaseRequest(id, l)); err != nil {
		stop()
		return nil, nil, fmt.Errorf("%w: %w", shard.ErrRetry, err)
	}
	return ch, stop, nil
}

// leaseAnswered hands a renewal's answer to its waiter, if it still waits.
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
	id, l, err := decodeLeaseRequest(payload)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	op := leaseOp{from: from, id: id, lease: l}
	if c.e.cfg.Manual {
		c.meta.serveLease(op)
		return nil
	}
	select {
	case c.meta.leaseIn <- op:
	default:
		// The driver is behind: the member asks again.
		c.meta.answerLease(op, LeaseResult{Err: fmt.Errorf("%w: the metadata driver is busy", shard.ErrRetry)})
	}
	return nil
}

// serveLease renews a member's lease at the leader and queues the renewal
// for the next read index (metadata driver).
func (m *metaGroup) serveLease(op leaseOp) {
	if err := m.unavailable(); err != nil {
		m.answerLease(op, LeaseResult{Err: fmt.Errorf("%w: %w", shard.ErrRetry, err)})
		return
	}
	if m.lead.Load() != uint64(m.c.cfg.ID) {
		m.answerLease(op, LeaseResult{Err: fmt.Errorf("%w: node %d does not lead the metadata group", shard.ErrRetry, m.c.cfg.ID)})
		return
	}
	l := op.lease
	if err := m.store.RenewLease(l.Stream, l.Topic, l.TopicRevision, l.Group, l.Member, m.c.e.cfg.Clock.Now().UnixNano()); err != nil {
		m.answerLease(op, LeaseResult{Err: err})
		return
	}
	// The read index is asked at the next tick, one for every renewal
	// queued by then: a heartbeat waits at most a tick more, and a
	// thousand members cost the leader a hundred heartbeat rounds a
	// second at most, not one each.
	m.lease.queue = append(m.lease.queue, op)
	m.wake()
}

// askLeaseIndex asks one read index for every queued renewal.
func (m *metaGroup) askLeaseIndex() {
	m.wake()
	m.readSeq++
	m.lease.seq, m.lease.asked = m.readSeq, m.c.e.cfg.Clock.Now()
	m.lease.batch = append(m.lease.batch, m.lease.queue...)
	m.lease.queue = m.lease.queue[:0]
	// A failed group is reported by the next process.
	_ = m.barriers.Ask(m.g, m.readSeq, metaRead{lease: m.readSeq})
}

// leaseConfirmed takes the read index confirming the batch in flight.
func (m *metaGroup) leaseConfirmed(index uint64) {
	for _, op := range m.lease.batch {
		m.lease.ready = append(m.lease.ready, leaseWait{op: op, index: index})
	}
	m.lease.seq, m.lease.batch = 0, m.lease.batch[:0]
}

// answerLeases answers the confirmed renewals whose index is applied:
// the member must still hold its lease (the entries applied since may
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
		l := w.op.lease
		err := m.store.HoldsLease(l.Stream, l.Topic, l.TopicRevision, l.Group, l.Member)
		m.answerLease(w.op, LeaseResult{Index: w.index, Err: err})
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

// runLeases expires the lapsed members of a single node's groups: it
// sleeps until the earliest lease is due, or a group changes (a join may
// bring an earlier one).
func (e *Engine) runLeases(ctx context.Context) {
	wake, cancel := e.meta.SubscribeGroups()
	defer cancel()
	clk := e.cfg.Clock
	for {
		now := clk.Now()
		for _, cmd := range e.meta.DueExpiries(now.UnixNano(), time.Second) {
			_, _ = e.ApplyMetadata(ctx, cmd) // a failure comes due again
		}
		var timer <-chan time.Time
		stop := func() bool { return false }
		if at, ok := e.meta.NextLeaseDue(); ok {
			t := clk.NewTimer(time.Duration(at-clk.Now().UnixNano()) + time.Millisecond)
			timer, stop = t.C(), t.Stop
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-wake:
		case <-timer:
		}
		stop()
	}
}
