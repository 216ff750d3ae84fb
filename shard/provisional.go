package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
)

// A provisional partition is one whose metadata command is logged but not
// yet durable: the reconciler built it for an announced command
// (metadata.Store.Announce) and handed it over with InsertProvisional, so
// that a produce issued together with the create — the barrier's own case,
// a host that creates a topic and produces to it at once — writes its
// first record while the command is being made durable, and the two
// fsyncs (the metadata log's and the journal's) overlap instead of running
// one after the other (DESIGN behaviour 32).
//
// Nothing of a provisional partition is shown to anyone before its
// incarnation commits: a produce is appended and made durable as any
// other, but its answer is held (the commit group's held map) until the
// committed metadata has the partition at the partition's epoch; every
// other request parks until then. So an acknowledged produce is never one
// whose topic may still fail to commit. A held answer whose request's
// deadline passes first is answered then, ErrOutcomeUnknown (expireHeld:
// the record is durable and served if the topic commits). If the command does not commit as announced, the
// reconciler tears the partition down (Tombstone) and the held answers
// say the write was not made (errIncarnation: retriable, and nothing of
// it is ever served — its journal record names an incarnation the
// metadata never committed, which the replay at the next start rebuilds
// and the orphan sweep removes).

// InsertProvisional hands the shard a partition built for an announced
// command that has not committed yet (see above). The partition becomes
// owned at p.Epoch() as with InsertOwned, but held provisional: produces
// to it are appended and their answers held, other requests park. The
// reconciler confirms it with InsertOwned of the same partition once the
// commit lands, or tears it down with Tombstone. A shard that replicates
// its partitions refuses it with ErrProvisional, as does one that holds
// the namespace already; p is closed then.
func (s *Shard) InsertProvisional(ctx context.Context, p partition.Partition, d Durability) error {
	return s.do(ctx, opInsertProvisional(p, d))
}

// ErrProvisional reports a provisional insert the shard refused: it
// replicates its partitions (a cluster's partition must not serve before
// its group exists), or it already holds the namespace.
var ErrProvisional = errors.New("parkway: provisional partition refused")

func opInsertProvisional(p partition.Partition, d Durability) control {
	return newControl(func(s *Shard) error {
		ns := p.Namespace()
		_, have := s.owned[ns]
		_, tomb := s.tombstoned[ns]
		if s.cfg.Replication != nil || have || tomb {
			_ = p.Close()
			return fmt.Errorf("%w: %v", ErrProvisional, ns)
		}
		o := &owned{p: p, dur: d}
		o.sync.provisional = true
		if j := s.cfg.Journal; j != nil && (d.always() || d.Fsync == metadata.FsyncInterval) {
			o.sync.staged = j.Attach(p) && !d.always()
		}
		s.owned[ns] = o
		s.table.Set(ns, router.Row{Owner: s.id, Epoch: p.Epoch()})
		s.redispatch(ns, o)
		return nil
	}, func() { _ = p.Close() })
}

// confirm makes a provisional partition an ordinary one: its incarnation
// is committed. The held answers go first, then the frames parked behind
// them, in arrival order.
func (s *Shard) confirm(o *owned, d Durability) {
	o.sync.provisional = false
	o.dur = d
	s.m.Materialised.Inc()
	held := s.commit.held[o]
	delete(s.commit.held, o)
	for _, pa := range held {
		s.polls.touch(o)
		s.answer(pa.f, pa.r)
	}
	if r, ok := s.carried[o.p.Namespace()]; ok && o.dur.always() && r.Epoch == o.p.Epoch() && o.p.NextOffset() > 0 {
		// Its carried produce, answered just now, is synced now that
		// the commit is out (carried.go).
		s.commit.syncCarried(o, r)
	} else {
		s.giveCarriedBack(o, false) // one that never reached it
	}
	s.redispatch(o.p.Namespace(), o)
}

// confirmed reports whether o's incarnation is committed, and confirms a
// provisional o whose is: a frame served after the commit and before the
// reconciler's InsertOwned need not wait for it.
func (s *Shard) confirmed(o *owned) (bool, error) {
	committed, err := s.committedHere(o)
	if committed && o.sync.provisional {
		s.confirm(o, o.dur)
	}
	return committed, err
}

// committedHere is confirmed without the confirmation: whether o's
// incarnation is committed, errIncarnation when it can never be. The
// append flush uses it, because a confirmation redispatches the frames
// parked behind the partition, and a parked read served there flushes
// the same partition's queued appends from inside the flush (it zeroed
// the frames the outer flush was still appending: a nil dereference in
// the pump). The held acks of appends flushed after the commit go out at
// the next confirmation (the frame served next, Confirm, or InsertOwned).
func (s *Shard) committedHere(o *owned) (bool, error) {
	rev, ok := s.meta.CreatedRevision(o.p.Namespace())
	switch {
	case ok && rev == o.p.Epoch():
		return true, nil
	case !ok && o.sync.provisional:
		return false, nil // not committed yet: served provisionally
	}
	return false, errIncarnation
}

// answerHeld answers the held produces of a provisional partition that
// will not be confirmed here with err.
func (s *Shard) answerHeld(o *owned, err error) {
	for _, pa := range s.commit.held[o] {
		s.deny(pa.f, metrics.DenyIncarnation, err)
	}
	delete(s.commit.held, o)
}

// parkProvisional parks a request other than a produce to a provisional
// partition until the partition is confirmed (or torn down, when the
// reconciler's RemoveOwned answers it).
func (s *Shard) parkProvisional(o *owned, f Frame) {
	s.parkFrame(f, o.p.Epoch(), s.pass)
}

// Confirm confirms ns's provisional partition if its incarnation is
// committed, at once, without waiting for the reconciler's pass (which
// hands the same partition over with InsertOwned later, a no-op then):
// the caller that made the command durable calls it so that the held
// answers go out one hand-off after the commit, not two. It does nothing
// when ns is not provisional here or not committed at its epoch.
func (s *Shard) Confirm(ctx context.Context, ns metadata.Namespace) error {
	return s.do(ctx, newControl(func(s *Shard) error {
		if o, ok := s.owned[ns]; ok && o.sync.provisional {
			_, _ = s.confirmed(o)
		}
		return nil
	}, nil))
}
