package kafka

import (
	"context"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// Metadata answers each partition's in-sync replicas from memory: the
// set its raft leader last reported (Cluster.InSyncReplicas, a leader
// read forwarded to the leader). Asking every leader while a Metadata
// request waits cost one read per partition per request — a client of
// 1,000 partitions refreshing its metadata made 1,000 of them — so the
// reads are made by one goroutine per Server (runISR), at most once per
// partition per isrRefreshAge however many requests ask, and only for the
// partitions Metadata answers.
//
// A set is answered only while it is the current leader's: taken in the
// raft term the Metadata answer names as the leader epoch (a term has one
// leader, so a new leader invalidates it), for the placement it answers
// (a placement change invalidates it), and no older than isrMaxAge (a
// leader the refresher cannot reach stops being believed). Even then it
// is intersected with the placement, so it never names a node that holds
// no replica. Otherwise Metadata answers the placement — as Kafka
// announces a new partition's replicas in sync — and asks the refresher
// to read the set at once. An entry no Metadata answer used for
// isrForget is dropped, so the table holds the partitions clients ask
// about, not every partition ever asked.
const (
	// isrRefreshAge is the age past which a set a Metadata answer used
	// is read again (the answer uses it meanwhile).
	isrRefreshAge = time.Second
	// isrMaxAge is the age past which a set is no longer answered.
	isrMaxAge = 10 * time.Second
	// isrForget drops an entry no Metadata answer used for this long.
	isrForget = time.Minute
	// isrTick is the refresher's period: due reads not signalled (a
	// failed read's retry) wait at most this long, and forgotten entries
	// are dropped.
	isrTick = 250 * time.Millisecond
	// isrReads bounds the reads in flight at once, over all leaders.
	isrReads = 8
)

// isrWait bounds one read of a partition leader's in-sync replicas: a
// leader that does not answer by then (dead, cut off, deposed) leaves
// the entry as it was, to be retried.
const isrWait = 2 * time.Second

// isrKey names one incarnation of a partition of one topic incarnation.
type isrKey struct {
	t       parkway.Topic
	part    uint32
	created uint64 // the partition's CreatedRevision
}

// isrEntry is what the table knows of one partition.
type isrEntry struct {
	// placement is the replica set the last lookup answered; a
	// different one discards the set read for this one.
	placement []int32
	// leader is the leader the last lookup named: the refresher groups
	// its reads by it.
	leader int32

	isr    []int32   // the leader's in-sync set, nil until read
	term   uint64    // the raft term isr was taken in
	readAt time.Time // when isr was stored (zero: never)

	usedAt   time.Time // the last lookup
	failedAt time.Time // when the last read failed (zero: it did not)
	wanted   bool      // a lookup asked for a read not yet started
	inFlight bool      // a read is under way
}

// isrTable is the in-sync sets Metadata answers. It is a state machine
// without a clock or goroutines: lookup (Metadata), due and store (the
// refresher) take the time from their callers.
type isrTable struct {
	mu      sync.Mutex
	entries map[isrKey]*isrEntry
}

func newISRTable() *isrTable { return &isrTable{entries: map[isrKey]*isrEntry{}} }

// lookup answers partition k's in-sync replicas for a Metadata
// answer naming leader lead in epoch with replicas placement: the set
// read in that term for that placement, no older than isrMaxAge,
// intersected with placement — or ok false, and then placement answers
// it. It reports whether a read should be started at once (wake): the
// partition has no set worth answering and none is being read.
func (tb *isrTable) lookup(k isrKey, lead, epoch int32, placement []int32, now time.Time) (isr []int32, ok, wake bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	e := tb.entries[k]
	if e == nil {
		e = &isrEntry{}
		tb.entries[k] = e
	}
	e.usedAt, e.leader = now, lead
	if !slices.Equal(e.placement, placement) {
		e.placement = slices.Clone(placement)
		e.isr, e.readAt = nil, time.Time{}
	}
	fresh := e.isr != nil && now.Sub(e.readAt) <= isrMaxAge
	if fresh && epoch >= 0 && termEpoch(e.term) == epoch {
		isr = make([]int32, 0, len(e.isr))
		for _, id := range e.isr {
			if slices.Contains(placement, id) {
				isr = append(isr, id)
			}
		}
		ok = slices.Contains(isr, lead)
	}
	if !ok {
		isr = nil
	}
	if (!ok || now.Sub(e.readAt) >= isrRefreshAge) && !e.inFlight && !e.wanted {
		e.wanted = true
		wake = !ok // a usable set serves until the next tick reads it
	}
	return isr, ok, wake
}

// isrRead is one read the refresher makes.
type isrRead struct {
	key    isrKey
	leader int32
}

// due takes at most limit reads to make now, marking them in flight:
// the entries a lookup asked for, except those whose last read failed
// within isrTick (a leader that failed to answer is not asked again at
// once). The reads are taken leader by leader in turn, so that those in
// flight at once spread over the leaders rather than queue at one; the
// rest stay asked for. It drops the entries no lookup used for
// isrForget.
func (tb *isrTable) due(now time.Time, limit int) []isrRead {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	byLeader := map[int32][]isrRead{}
	for k, e := range tb.entries {
		if !e.inFlight && now.Sub(e.usedAt) > isrForget {
			delete(tb.entries, k)
			continue
		}
		if !e.wanted || e.inFlight || !e.failedAt.IsZero() && now.Sub(e.failedAt) < isrTick {
			continue
		}
		byLeader[e.leader] = append(byLeader[e.leader], isrRead{k, e.leader})
	}
	leaders := slices.Sorted(maps.Keys(byLeader))
	var out []isrRead
	for i := 0; len(out) < limit; i++ {
		added := false
		for _, l := range leaders {
			if reads := byLeader[l]; i < len(reads) && len(out) < limit {
				out = append(out, reads[i])
				added = true
			}
		}
		if !added {
			break
		}
	}
	for _, r := range out {
		e := tb.entries[r.key]
		e.wanted, e.inFlight = false, true
	}
	return out
}

// store records a read's answer: the in-sync set isr taken in term, or
// ok false when the read failed (the entry keeps what it had, until
// isrMaxAge, and is read again once a lookup asks).
func (tb *isrTable) store(k isrKey, isr []int32, term uint64, ok bool, now time.Time) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	e := tb.entries[k]
	if e == nil {
		return
	}
	e.inFlight = false
	if ok {
		e.isr, e.term, e.readAt, e.failedAt = isr, term, now, time.Time{}
	} else {
		e.failedAt = now
	}
}

// termEpoch is a raft term as a Kafka leader epoch (leaderOf).
func termEpoch(term uint64) int32 { return int32(min(term, math.MaxInt32)) }

// runISR, until ctx ends, makes the in-sync replica reads the table asks
// for: at once when a lookup found nothing to answer (wake), and every
// isrTick for the rest. At most isrReads are in flight, each on a
// goroutine of its own; a slot that frees is filled at once, so a leader
// slow to answer (dead, cut off: up to isrWait) holds up one slot, not
// the reads of other partitions. It returns once its reads have ended.
func (s *Server) runISR(ctx context.Context, wake <-chan struct{}) {
	tick := time.NewTicker(isrTick)
	defer tick.Stop()
	free := isrReads
	done := make(chan struct{}, isrReads)
	for {
		select {
		case <-ctx.Done():
			for ; free < isrReads; free++ {
				<-done // the reads end with ctx
			}
			return
		case <-tick.C:
		case <-wake:
		case <-done:
			free++
		}
		for _, r := range s.isr.due(time.Now(), free) {
			free--
			go func() {
				isr, term, ok := s.readISR(ctx, r.key)
				s.isr.store(r.key, isr, term, ok, time.Now())
				done <- struct{}{}
			}()
		}
	}
}

// readISR asks partition k's raft leader for its in-sync replicas
// (within isrWait), counted in the metrics by outcome.
func (s *Server) readISR(ctx context.Context, k isrKey) ([]int32, uint64, bool) {
	ctx, cancel := context.WithTimeout(ctx, isrWait)
	defer cancel()
	ids, term, err := s.node.Cluster().InSyncReplicas(ctx, k.t, k.part)
	if err != nil || len(ids) == 0 {
		s.metrics.isrReads.WithLabelValues("error").Inc()
		return nil, 0, false
	}
	s.metrics.isrReads.WithLabelValues("ok").Inc()
	return nodeIDs(ids), term, true
}

// nodeIDs converts node ids to broker ids.
func nodeIDs(ids []transport.NodeID) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
