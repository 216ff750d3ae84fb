package host

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/parkway-io/parkway/shard"
)

// Kept leases: a started engine keeps the leases of its own group members
// alive by itself, as Kafka's client heartbeats from one background
// thread, so an application needs no timer, goroutine or call per member
// to stay in its group. The engine renews every kept lease of one session
// timeout together, once per renewal round (a third of the session,
// ending on the LeaseWindow grid): in a cluster one message per round to
// the metadata leader for all of the node's members (a few per round past
// maxLeaseBatch), on a single node a map lookup each. It renews a member
// only while its LeaseHolder says the application still shows it is alive
// (a bound like Kafka's max.poll.interval.ms), so a member whose
// application stopped is expired by the leader a session timeout later.

// LeaseHolder is a member whose lease the engine keeps (KeepLease).
type LeaseHolder interface {
	// Live reports whether the member's application still shows it is
	// alive at now: the engine renews the lease only while it does, and
	// forgets the member at the first round it does not.
	Live(now time.Time) bool
	// Renewed reports a renewal asked at at: err is nil when the metadata
	// leader confirmed it (the member's lease then counts from at), wraps
	// shard.ErrRetry when no leader answered (the next round tries
	// again), and is the member's end otherwise (metadata.ErrUnknownMember,
	// ErrGroupNotFound, ...: the engine forgets it). It is called on the
	// engine's lease goroutine and must not block.
	Renewed(at time.Time, err error)
	// Unkept reports that the engine forgot the member because it was
	// not live at a round; KeepLease keeps it again. It is called on the
	// engine's lease goroutine and must not block.
	Unkept()
}

// keptLease is one member kept alive; pos is its index in its session's
// list (-1 once removed).
type keptLease struct {
	l   MemberLease
	h   LeaseHolder
	pos int
}

// leaseRound is the kept leases of one session timeout and when they are
// renewed next.
type leaseRound struct {
	kept []*keptLease
	next time.Time
}

// leaseKeeper is the kept leases, a state machine without a clock of its
// own: its owner (runLeaseSender, runLeases) asks it what is due at the
// time it reads. Leases are kept in the order they were added, so what
// it sends is the same in every run of a deterministic test.
type leaseKeeper struct {
	mu     sync.Mutex
	rounds map[time.Duration]*leaseRound
	kick   chan struct{} // a round is new: its owner re-reads when the next is due
}

func newLeaseKeeper() *leaseKeeper {
	return &leaseKeeper{rounds: make(map[time.Duration]*leaseRound), kick: make(chan struct{}, 1)}
}

// roundAfter is when a round that runs at now runs next: a third of the
// session later, at the end of the lease window it falls in. A renewal
// confirmed at a round is thus renewed again within a third of the
// session and a window, well inside its lease (four fifths of the
// session, metadata.LeaseEnd), even when one round's message is lost.
func roundAfter(now time.Time, session time.Duration) time.Time {
	w := LeaseWindow(session)
	return now.Add(session / 3).Truncate(w)
}

// add keeps k from now on: it is first renewed at its session's next
// round (a member's join or renewal confirmed its lease just before).
func (k *leaseKeeper) add(kl *keptLease, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.rounds[kl.l.Session]
	if !ok {
		r = &leaseRound{next: roundAfter(now, kl.l.Session)}
		k.rounds[kl.l.Session] = r
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
	kl.pos = len(r.kept)
	r.kept = append(r.kept, kl)
}

// remove forgets kl (no-op if it is forgotten already).
func (k *leaseKeeper) remove(kl *keptLease) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.removeLocked(kl)
}

func (k *leaseKeeper) removeLocked(kl *keptLease) {
	r, ok := k.rounds[kl.l.Session]
	if kl.pos < 0 || !ok || kl.pos >= len(r.kept) || r.kept[kl.pos] != kl {
		return
	}
	// Keep the order of the rest: a round's message lists its members as
	// they joined.
	copy(r.kept[kl.pos:], r.kept[kl.pos+1:])
	r.kept[len(r.kept)-1] = nil
	r.kept = r.kept[:len(r.kept)-1]
	for i := kl.pos; i < len(r.kept); i++ {
		r.kept[i].pos = i
	}
	kl.pos = -1
	if len(r.kept) == 0 {
		delete(k.rounds, kl.l.Session)
	}
}

// due returns the kept leases to renew at now — every live one of each
// session whose round has come — forgetting (and telling) those whose
// holder is no longer live, and when the next round is due (zero: none
// is kept).
func (k *leaseKeeper) due(now time.Time) ([]*keptLease, time.Time) {
	k.mu.Lock()
	var renew, dead []*keptLease
	var next time.Time
	// Sessions in order, so a run is reproducible.
	for _, s := range slices.Sorted(maps.Keys(k.rounds)) {
		r := k.rounds[s]
		if !now.Before(r.next) {
			for _, kl := range r.kept {
				if kl.h.Live(now) {
					renew = append(renew, kl)
				} else {
					dead = append(dead, kl)
				}
			}
			r.next = roundAfter(now, s)
		}
		if next.IsZero() || r.next.Before(next) {
			next = r.next
		}
	}
	for _, kl := range dead {
		k.removeLocked(kl)
	}
	if len(k.rounds) == 0 {
		next = time.Time{}
	}
	k.mu.Unlock()
	for _, kl := range dead {
		kl.h.Unkept()
	}
	return renew, next
}

// renewed hands a round's outcomes to their holders and forgets the
// members that are gone.
func (k *leaseKeeper) renewed(kept []*keptLease, at time.Time, errOf func(int) error) {
	for i, kl := range kept {
		err := errOf(i)
		if err != nil && !errors.Is(err, shard.ErrRetry) {
			k.remove(kl)
		}
		kl.h.Renewed(at, err)
	}
}

// KeepLease keeps a group member's lease alive from now on, while h is
// live: the engine renews it with its other kept members once per round
// (see above) until stop is called, h stops being live, or a renewal is
// refused for good (h.Renewed reports it). stop is idempotent. A manual
// engine keeps nothing (ErrManual): its driver renews by itself.
func (e *Engine) KeepLease(l MemberLease, h LeaseHolder) (stop func(), err error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if e.cfg.Manual {
		return nil, ErrManual
	}
	kl := &keptLease{l: l, h: h}
	e.keep.add(kl, e.cfg.Clock.Now())
	return func() { e.keep.remove(kl) }, nil
}

// renewKept renews a cluster node's kept leases that are due at now, in
// messages of at most maxLeaseBatch, each sent (and retried) as an asked
// renewal's batch is, and returns when the next round is due.
func (c *clusterNode) renewKept(ctx context.Context, now time.Time) time.Time {
	kept, next := c.e.keep.due(now)
	for len(kept) > 0 {
		part := kept[:min(len(kept), maxLeaseBatch)]
		kept = kept[len(part):]
		b := &leaseBatch{at: now, created: now, leases: make([]MemberLease, len(part))}
		for i, kl := range part {
			b.leases[i] = kl.l
		}
		c.sendLeaseBatch(ctx, b)
		c.e.keep.renewed(part, now, b.answer.Of)
	}
	return next
}

// renewKeptLocal renews a single node's kept leases that are due at now
// in its own store, and returns when the next round is due.
func (e *Engine) renewKeptLocal(now time.Time) time.Time {
	kept, next := e.keep.due(now)
	errs := make([]error, len(kept))
	for i, kl := range kept {
		l := kl.l
		errs[i] = e.meta.RenewLease(l.Stream, l.Topic, l.TopicRevision, l.Group, l.Member, now.UnixNano())
	}
	e.keep.renewed(kept, now, func(i int) error { return errs[i] })
	return next
}
