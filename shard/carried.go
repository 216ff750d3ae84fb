package shard

import (
	"time"

	"github.com/parkway-io/parkway/metadata"
)

// Carried produces (Request.Carried): a new partition's first messages
// that ride in the metadata log's record of the command creating the
// partition, so that one fsync — the metadata log's — makes the topic and
// its first messages durable, and a topic created and produced to at once
// is acknowledged after one fsync under FsyncAlways instead of two (DESIGN
// behaviour 32).
//
// The shard's part:
//
//   - A carried produce is appended only to an empty partition. Its
//     messages were the partition's first, and what survives of a log
//     (the journal's replay, a rebuild from disk) is a prefix of it, so a
//     partition that holds anything holds them: the produce is answered
//     with offset 0 and nothing is appended (carriedThere). This is what
//     lets a partition built after a restart take the metadata log's
//     carried batch (Config.Carried) without knowing whether its journal
//     kept it.
//   - Under FsyncAlways it is answered once appended, before any fsync of
//     the partition (a provisional partition holds the answer until its
//     incarnation commits, as any other), and a reader sees it at once:
//     it is durable. The partition's fsync of it follows with the shard's
//     next commit group, or carriedSyncDelay later at the latest, after
//     which Request.Carried is called: with nil the metadata log may
//     forget the batch. Not at once: the pump would be in that fsync when
//     the commit's confirmation arrives (for a provisional partition), or
//     beside the next create's metadata fsync.
//   - Until that fsync the shard keeps the request (carried), and the
//     host's metadata log keeps the batch. A partition built for the
//     incarnation — a rebuild after a failed fsync, a start after a
//     crash, a first build when the produce never reached the shard — or
//     a provisional one confirmed without it, takes the batch (the kept
//     request, else Config.Carried) before anything parked for it is
//     served (giveCarriedBack), so no later produce takes their offsets.

// keepCarried keeps a carried produce the shard serves or parks, until an
// fsync of its partition covers it.
func (s *Shard) keepCarried(r *Request) {
	if s.cfg.Replication != nil {
		return // only a node that is not clustered carries
	}
	if old, ok := s.carried[r.NS]; ok && old.Epoch == r.Epoch {
		return
	}
	if s.carried == nil {
		s.carried = make(map[metadata.Namespace]*Request)
	}
	s.carried[r.NS] = r
}

// forgetCarried drops a kept carried produce (commitOwner).
func (s *Shard) forgetCarried(r *Request) {
	if kept, ok := s.carried[r.NS]; ok && kept == r {
		delete(s.carried, r.NS)
	}
}

// giveCarriedBack appends the carried produce of o's incarnation to o
// before anything parked for it is served: the one the shard kept, or the
// one the host's metadata log still holds (Config.Carried). It runs when
// a partition is built (built: InsertOwned, a first build, a rebuild after
// a failed fsync, or a start after a crash, any of which may lack the
// messages) and when a provisional partition is confirmed without its
// carried produce having reached it (its sender could not hand it over).
// An empty partition gets the messages; one that holds anything holds
// them (appendOne answers it so). A built one under FsyncAlways was
// synced when it was inserted, so the log may forget them at once.
func (s *Shard) giveCarriedBack(o *owned, built bool) {
	ns, epoch := o.p.Namespace(), o.p.Epoch()
	r, ok := s.carried[ns]
	if ok && r.Epoch != epoch {
		delete(s.carried, ns)
		ok = false
	}
	if !ok && s.cfg.Carried != nil {
		if r = s.cfg.Carried(ns, epoch); r != nil {
			s.keepCarried(r)
			ok = true
		}
	}
	switch {
	case !ok || o.failed != nil:
	case o.p.NextOffset() == 0:
		s.appendOne(o, Frame{Req: r}) // answered already, or never asked: no reply
	case built && o.dur.always():
		s.forgetCarried(r)
		r.Carried(nil)
	}
}

// carriedThere answers a carried produce whose partition is not empty:
// its messages are there (see above). Under FsyncAlways the metadata log
// may forget them once they are durable in the partition: now if the
// partition has nothing unsynced, else after the group's fsync.
func (cg *commitGroup) carriedThere(o *owned, f Frame) {
	cg.ack(pendingAck{f: f, r: Response{Offset: 0}, o: o})
	switch {
	case !o.dur.always():
		cg.owner.forgetCarried(f.Req) // the ordinary path
	case !o.sync.provisional:
		// Settled after the partition's next fsync: whether what it
		// holds of them is synced yet (a copy given back, written
		// and not synced) is not tracked per record.
		cg.syncCarried(o, f.Req)
	}
}

// carriedSyncDelay is how long the fsync of a partition's carried
// messages waits for a commit group to share. They are durable in the
// metadata log meanwhile, so nothing waits for this fsync but the log's
// forgetting them; syncing each at once would put a second fsync beside
// the next create's metadata fsync (they contend for the device and the
// filesystem's journal), which for a host creating topics one after the
// other costs what carrying saved. A group of other produces takes them
// sooner (joinCarried).
const carriedSyncDelay = 10 * time.Millisecond

// syncCarried schedules the fsync of a carried produce already answered,
// after which its sender is told: with the next commit group, or at the
// latest carriedSyncDelay from the first one waiting.
func (cg *commitGroup) syncCarried(o *owned, r *Request) {
	if len(cg.carriedLater) == 0 {
		cg.carriedAt = cg.clock.Now().Add(carriedSyncDelay)
		cg.armSync(cg.carriedAt)
	}
	cg.carriedLater = append(cg.carriedLater, pendingAck{f: Frame{Req: r}, o: o, carried: true})
}

// joinCarried moves the carried produces waiting for an fsync into the
// commit group about to be flushed, their partitions marked dirty so
// that the group writes and syncs them. One no longer the shard's
// (evicted after a failed fsync, or torn down) is dropped: the shard
// keeps its request for the rebuild (giveCarriedBack), or its
// incarnation is gone.
func (cg *commitGroup) joinCarried() {
	if len(cg.carriedLater) == 0 {
		return
	}
	if len(cg.pending) == 0 {
		cg.groupStart = cg.clock.Now()
	}
	for _, pa := range cg.carriedLater {
		if !cg.owner.owns(pa.o) || pa.o.failed != nil {
			continue
		}
		pa.o.sync.dirty = true
		cg.pending = append(cg.pending, pa)
	}
	clear(cg.carriedLater)
	cg.carriedLater = cg.carriedLater[:0]
}

// flushCarried syncs the carried produces waiting for an fsync now: their
// delay is up, or the shard is stopping.
func (cg *commitGroup) flushCarried() {
	if len(cg.carriedLater) == 0 {
		return
	}
	cg.joinCarried()
	cg.flushGroup()
}

// settleCarried tells a carried produce's sender how the fsync that
// covered it went; once one succeeded the shard forgets it.
func (cg *commitGroup) settleCarried(f Frame, err error) {
	if err == nil {
		cg.owner.forgetCarried(f.Req)
	}
	f.Req.Carried(err)
}
