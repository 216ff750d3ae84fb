package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"
)

// Node liveness: partition groups with nothing to do are quiesced (see
// the shard package) and send no heartbeats of their own, so failure
// detection for them is per node, not per group. Each node sends every
// peer one small KindLiveness message per LivenessInterval; a peer from
// which nothing at all arrived for LivenessTimeout is declared dead, and
// the shards are told (shard.SetPeerLive), and so is the metadata group
// (metaGroup.peerLive), which quiesces too: the groups it led elect new
// leaders among the survivors. Any message from a peer counts as a sign
// of life, so a busy pair of nodes needs no heartbeat to stay alive. A
// started engine sends the heartbeats from a goroutine of their own
// (runBeater), so a node is not silenced by its metadata driver running
// late; a manual engine's TickMetadata sends them, as a simulator steps
// everything else.
//
// Liveness counts the metadata group's ticks, which the engine's clock
// paces (a manual engine's driver calls TickMetadata): no wall clock is
// read, and a simulator steps it like everything else.
//
// Liveness is judged both ways. A node that can send but not hear (a
// one-way partition) keeps sending — heartbeats, votes, appends — so its
// peers, hearing it, would hold it alive for ever while it hears none of
// them: the groups it led, quiesced on its followers, would never elect
// anyone else, and nothing it is sent would reach it. So every heartbeat
// carries the peers its sender does not hear (silent, as below), and a
// peer whose last heartbeat names this node is dead to it as well, until
// a heartbeat no longer does. Only silence is reported, never a death
// learned from a report: two nodes each reporting the other would
// otherwise hold each other dead for ever.
//
// Silence is measured twice, and a peer is dead only when both say so:
// in ticks this node's driver ran on time (the timeout) and in heartbeat
// rounds it actually ran (the timeout's number of intervals). A driver
// starved of CPU, or a process paused (a GC pause, a stopped VM), wakes
// late and counts the ticks it slept through at once; every peer then
// looks silent for that long, though their messages may sit in this
// node's inbox, unread for the same reason. So silence is counted on the
// checker's own clock (own): the ticks its driver scheduled, not the
// ones it overslept — a late wake counts as the wake it planned, and the
// gap it missed counts for no peer's silence. Counting rounds as well
// makes the timeout stretch with the local driver's lag: a peer is
// declared dead only after this node had that many chances, on time, to
// hear from it. A checker late on every wake still advances its own
// clock by what it planned each time, so a peer that is really gone is
// declared dead, later by the checker's lag.

// Defaults of Cluster's liveness settings, in raft ticks.
const (
	defaultLivenessTicks = 10 // one heartbeat per node pair per 10 ticks (100 ms)
	defaultLivenessMiss  = 5  // dead after 5 intervals without a message
)

// liveness tracks when each peer was last heard from, in ticks.
type liveness struct {
	c       *clusterNode
	every   int64 // ticks between heartbeats to each peer
	timeout int64 // ticks without a message after which a peer is dead
	// now counts every tick (it paces the heartbeat rounds); own only
	// those the driver planned (advance's due): the clock silence is
	// measured on, which a late wake does not advance by its lateness.
	now, own atomic.Int64
	// heard maps each peer to the tick of own it was last heard at. The map is
	// copied on write (the driver adds the nodes that join) and read
	// without a lock; its values are written by the transport's receiver
	// and read by the driver.
	heard atomic.Pointer[peerClocks]
	// rounds counts the heartbeat rounds the driver ran (one per advance
	// that crossed an interval, however many it crossed); miss is how
	// many must pass without a message before a peer is dead.
	rounds atomic.Int64
	miss   int64
	// dead is the driver's view: peers declared dead (driver-owned);
	// silent those of them it does not hear, the ones its heartbeats
	// report.
	dead   map[uint64]bool
	silent map[uint64]bool
	// me is this node's id, as peers' reports name it.
	me uint64

	// A started engine's heartbeats go out from their own goroutine
	// (runBeater), not from the metadata driver: beater is set once it
	// runs. beat is the heartbeat payload the driver last built, with
	// its report of silent peers. driver counts the driver's passes
	// through its wait (odd while it waits), so the beater can tell a
	// driver that is working from one stuck in one step (see runBeater).
	beater bool
	beat   atomic.Pointer[[]byte]
	driver atomic.Int64
}

// driverStallTimeouts is how long, in liveness timeouts, a started
// engine's beater keeps sending while the metadata driver is stuck in
// one step (it neither waits nor loops): 2 s at the defaults. Shorter and a driver slowed by its own work — a metadata
// snapshot of 10,000 topics, a slow fsync, a CPU shared by many
// goroutines — silenced the node (issue 33); without a bound a node
// whose driver is wedged for good (a write that never returns) would be
// alive for ever, and the groups it leads, quiesced, never elect
// another leader.
const driverStallTimeouts = 4

func newLiveness(c *clusterNode) *liveness {
	tick := c.cfg.TickInterval
	every := max(int64(c.cfg.LivenessInterval/tick), 1)
	timeout := max(int64(c.cfg.LivenessTimeout/tick), every+1)
	l := &liveness{c: c, every: every, timeout: timeout, miss: timeout / every, dead: make(map[uint64]bool),
		silent: make(map[uint64]bool), me: uint64(c.cfg.ID)}
	heard := &peerClocks{at: make(map[uint64]*heardAt)}
	for _, p := range c.peers {
		if p != uint64(c.cfg.ID) {
			heard.add(p, 0, 0)
		}
	}
	l.heard.Store(heard)
	return l
}

// peerClocks is when each peer was last heard from, and the peers in
// ascending order (so ticks report them in an order a simulator's seed
// decides).
type peerClocks struct {
	ids []uint64
	at  map[uint64]*heardAt
}

// heardAt is when a peer was last heard from: the tick, and the
// heartbeat round; whether the driver holds it dead (a copy of
// liveness.dead that any goroutine may read); and whether its last
// heartbeat, at tick reported, said that it does not hear this node
// (deaf).
type heardAt struct {
	tick, round, reported atomic.Int64
	dead, deaf            atomic.Bool
}

func (p *peerClocks) add(id uint64, now, round int64) {
	h := new(heardAt)
	h.tick.Store(now)
	h.round.Store(round)
	p.at[id] = h
	p.ids = append(p.ids, id)
	slices.Sort(p.ids)
}

// join starts tracking the nodes the metadata added since the last tick
// (they count as heard from now), and stops tracking those it removed.
func (l *liveness) join() {
	m := l.c.e.meta
	if m == nil {
		return
	}
	heard := l.heard.Load()
	nodes := m.Nodes()
	var grown *peerClocks
	for _, p := range nodes {
		if _, ok := heard.at[p]; ok || p == uint64(l.c.cfg.ID) {
			continue
		}
		if grown == nil {
			grown = &peerClocks{ids: slices.Clone(heard.ids), at: maps.Clone(heard.at)}
		}
		grown.add(p, l.own.Load(), l.rounds.Load())
	}
	if len(nodes) > 0 {
		for _, p := range heard.ids {
			if slices.Contains(nodes, p) {
				continue
			}
			if grown == nil {
				grown = &peerClocks{ids: slices.Clone(heard.ids), at: maps.Clone(heard.at)}
			}
			grown.ids = slices.DeleteFunc(grown.ids, func(id uint64) bool { return id == p })
			delete(grown.at, p)
			delete(l.dead, p)
			delete(l.silent, p)
		}
	}
	if grown != nil {
		l.heard.Store(grown)
	}
}

// heardRecently reports whether peer was heard from within the timeout
// and does not report that it does not hear this node (safe from any
// goroutine: it reads only atomics).
func (l *liveness) heardRecently(peer uint64) bool {
	h := l.heard.Load().at[peer]
	own := l.own.Load()
	return h == nil || (own-h.tick.Load() <= l.timeout && !l.deafTo(h, own))
}

// heardReport records a peer's heartbeat: the peers it does not hear,
// ids of 8 bytes each (none from a node that predates the report). A
// payload that is not a whole number of ids is malformed; it changes
// nothing.
func (l *liveness) heardReport(peer uint64, payload []byte) error {
	deaf, err := reportsSilent(payload, l.me)
	if err != nil {
		return err
	}
	if h := l.heard.Load().at[peer]; h != nil {
		h.deaf.Store(deaf)
		h.reported.Store(l.own.Load())
	}
	return nil
}

// deafTo reports whether peer's latest heartbeat said it does not hear
// this node, and is recent: two heartbeat intervals old at most at own
// tick own (the checker's own clock). A report goes stale when its sender stops sending (it crashed): the peer
// is then alive to this node until its silence passes the timeout, and
// that death is a transition of its own — a peer held dead by report
// while its groups' leadership still reached this node (it could not
// hear this node, but was heard), then dead by silence with no
// transition, left the groups it led unaware of its crash.
func (l *liveness) deafTo(h *heardAt, own int64) bool {
	return h.deaf.Load() && own-h.reported.Load() <= 2*l.every
}

// reportsSilent reports whether a heartbeat's payload names id among the
// peers its sender does not hear. It reads the payload in place.
func reportsSilent(payload []byte, id uint64) (bool, error) {
	if len(payload)%8 != 0 {
		return false, fmt.Errorf("%w: liveness report of %d bytes", ErrMalformed, len(payload))
	}
	for b := payload; len(b) > 0; b = b[8:] {
		if binary.LittleEndian.Uint64(b) == id {
			return true, nil
		}
	}
	return false, nil
}

// heardFrom records a sign of life from peer (any message it sent).
func (l *liveness) heardFrom(peer uint64) {
	if h := l.heard.Load().at[peer]; h != nil {
		h.tick.Store(l.own.Load())
		h.round.Store(l.rounds.Load())
	}
}

// judgedLive reports whether the driver last judged peer alive (this
// node, and a node not tracked yet, are). Safe from any goroutine.
func (l *liveness) judgedLive(peer uint64) bool {
	h := l.heard.Load().at[peer]
	return h == nil || !h.dead.Load()
}

// alive reports whether peer is not held dead (this node always is
// alive). Driver-owned, like dead.
func (l *liveness) alive(peer uint64) bool { return !l.dead[peer] }

// driverWaits and driverWorks bracket the metadata driver's wait for its
// next event (runMetadata), for the beater.
func (l *liveness) driverWaits() { l.driver.Add(1) }
func (l *liveness) driverWorks() { l.driver.Add(1) }

// runBeater sends a started engine's heartbeats, one to each peer at each
// multiple of LivenessInterval on the engine's clock (untilGrid: the
// instants the quiesced driver wakes at too), with the report the driver
// last built. Why a goroutine of its own: a node is judged by what its
// peers hear from it, and when it has no raft traffic for them (its
// groups quiesced, or waiting on a metadata command) that is its
// heartbeats alone. Sent by the metadata driver, they waited for
// whatever the driver did — applying commands, compacting the metadata
// log, an fsync — and for the CPU that work needed: a node alive and
// serving was declared dead because one goroutine ran late, and a third
// of all groups re-elected (issue 33, case R6 at 10,000 topics). This
// goroutine does nothing else, so it runs as soon as its timer fires.
// It still vouches for the driver only within bounds: while the driver
// is stuck in one step for more than driverStallTimeouts liveness
// timeouts the beats stop, and the peers declare the node dead as they
// would a silent one. Silence is still judged by the driver (advance),
// as is what the heartbeats report.
func (l *liveness) runBeater(ctx context.Context) {
	clk, every := l.c.e.cfg.Clock, time.Duration(l.every)*l.c.cfg.TickInterval
	bound := driverStallTimeouts * l.timeout / l.every
	t := clk.NewTimer(untilGrid(clk.Now(), every))
	defer t.Stop()
	last, stuck := l.driver.Load(), int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		t.Reset(untilGrid(clk.Now(), every))
		switch d := l.driver.Load(); {
		case d%2 == 1 || d != last: // waiting, or it moved since
			stuck, last = 0, d
		default:
			stuck++
		}
		if stuck > bound {
			continue
		}
		beat := l.c.beat
		if b := l.beat.Load(); b != nil {
			beat = *b
		}
		for _, p := range l.heard.Load().ids {
			_ = l.c.send(p, KindLiveness, 0, beat)
		}
	}
}

// hello sends every peer a heartbeat at once: an engine's first message
// to each, ahead of its raft traffic, so a peer learns the incarnation of
// its data directory (identity.go) before it can count a vote from it.
func (l *liveness) hello() {
	for _, p := range l.heard.Load().ids {
		_ = l.c.send(p, KindLiveness, 0, l.c.beat)
	}
}

// tick advances liveness by one raft tick, on time (a manual engine's
// driver ticks when it means to).
func (l *liveness) tick(ctx context.Context) { l.advance(ctx, 1, 1) }

// untilBeat is how many ticks are left until the next heartbeat round.
func (l *liveness) untilBeat() int64 { return l.every - l.now.Load()%l.every }

// advance advances liveness by k raft ticks at once (a started engine's
// driver sleeps through the ticks of a quiesced metadata member, up to
// the next heartbeat round), of which the driver planned due (it slept
// for due ticks and woke k-due late; due >= 1): heartbeats go out when
// the ticks cross an interval, and a peer whose silence on the own clock
// (the planned ticks only) crossed the timeout, over at least as many
// heartbeat rounds as the timeout has intervals, is declared dead (one
// heard from again, alive) to every shard and the metadata group. Signs
// of life that arrive while the driver sleeps are stamped with the last
// tick counted, so silence is measured to within one interval. Nodes the
// metadata added are tracked from the first heartbeat round after.
func (l *liveness) advance(ctx context.Context, k, due int64) {
	now := l.now.Add(k)
	own := l.own.Add(min(k, max(due, 1)))
	beat := now/l.every != (now-k)/l.every
	rounds := l.rounds.Load()
	if beat {
		l.join()
		rounds = l.rounds.Add(1)
	}
	heard := l.heard.Load()
	var report []byte
	for _, p := range heard.ids {
		h := heard.at[p]
		silent := own-h.tick.Load() > l.timeout && rounds-h.round.Load() >= l.miss
		if silent {
			l.silent[p] = true
			report = binary.LittleEndian.AppendUint64(report, p)
		} else {
			delete(l.silent, p)
		}
	}
	var payload []byte
	if beat {
		payload = l.c.heartbeat(report)
		if l.beater {
			l.beat.Store(&payload)
		}
	}
	for _, p := range heard.ids {
		h := heard.at[p]
		if beat && !l.beater {
			_ = l.c.send(p, KindLiveness, 0, payload)
		}
		dead := l.silent[p] || l.deafTo(h, own)
		if dead == l.dead[p] {
			continue
		}
		l.dead[p] = dead
		h.dead.Store(dead)
		switch {
		case dead && l.silent[p]:
			l.c.e.cfg.Logger.Warn("peer declared dead: no message within the liveness timeout", "peer", p,
				"timeout", time.Duration(l.timeout)*l.c.cfg.TickInterval)
		case dead:
			l.c.e.cfg.Logger.Warn("peer declared dead: it reports that it does not hear this node", "peer", p)
		default:
			l.c.e.cfg.Logger.Info("peer alive again", "peer", p)
		}
		l.c.meta.peerLive(p, !dead)
		if dead {
			l.c.peerDead(p)
		}
		for _, s := range l.c.e.shards {
			if err := s.SetPeerLive(ctx, p, !dead); err != nil {
				// The shard is closing (or ctx ended): nothing to wake.
				l.c.e.cfg.Logger.Debug("reporting peer liveness to a shard", "peer", p, "error", err)
			}
		}
	}
}

// untilGrid is how long from now until the clock next reads a whole
// multiple of every (since the zero time, as time.Time.Truncate counts),
// every itself when it reads one now.
//
// Why a grid: an idle node's only wakes are its heartbeat rounds and its
// quiesced metadata driver's (once per round, sleepTicks), two timers
// of one period on two goroutines. Each wake of an idle process costs a
// context switch, and on a virtual machine a switch can cost in
// proportion to the memory the process maps (bench/RESULTS.md, "300,000
// partitions against what the machine charges for memory": 230–440 µs
// a switch at 5 GB resident on the reference VM). Timers due at the same instant are run by one wake of the
// runtime, so both are armed for the same instants: the multiples of
// the heartbeat interval, which are also the same instants on every
// node whose clock agrees (in one process, three nodes' six timers).
// Halves an idle cluster's context switches (RESULTS.md). The grid sets
// only when a timer fires, never how many ticks a fire counts.
func untilGrid(now time.Time, every time.Duration) time.Duration {
	return every - now.Sub(now.Truncate(every))
}
