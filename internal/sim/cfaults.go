package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/parkway-io/parkway/transport"
)

// netState is the cluster's network weather: the fault spells in force,
// when each ends, and the partition.
type netState struct {
	drop, dup, reorder          float64
	delay                       time.Duration
	dropEnd, dupEnd, reorderEnd time.Time
	delayEnd                    time.Time
	partitionEnd                time.Time
	sides                       [2][]uint64 // sides[0] is the minority; nil while healed
	partitioned                 bool
	// oneWay is a one-way partition (nil while none is on): no message
	// from a node of oneWay[0] reaches a node of oneWay[1], while the
	// other direction works. oneWayKind names it for the trace.
	oneWay     *[2][]uint64
	oneWayKind string
	oneWayEnd  time.Time
	// clogs are the links clogged until clogEnd: each holds its messages,
	// in order, and delivers them when the clog ends.
	clogs   [][2]uint64
	clogEnd time.Time
}

// cut reports whether the one-way partition cuts the link from a to b.
func (w *netState) cut(a, b uint64) bool {
	return w.oneWay != nil && slices.Contains(w.oneWay[0], a) && slices.Contains(w.oneWay[1], b)
}

// clogged reports whether the link from a to b is clogged.
func (w *netState) clogged(a, b uint64) bool {
	return slices.Contains(w.clogs, [2]uint64{a, b})
}

func (c *sim) randDuration(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(c.rng.Int64N(int64(hi-lo)+1))
}

// startFaults rolls every fault that is not on, in a fixed order (each
// roll draws from the RNG only when its rate is set).
func (c *sim) startFaults() {
	if c.quiescing || c.calming() {
		return
	}
	if c.cfg.MemberPartitions > 0 && c.storm.settled == 0 {
		// A join storm forms its group first: a thousand members joining
		// at once is the load under test; faults start once it settled.
		return
	}
	f := c.cfg.Faults
	nf := f.Net
	w := &c.netf
	now := c.clk.Now()
	weather := false
	if w.drop == 0 && c.roll(nf.Drop) {
		w.drop = 0.05 + 0.35*c.rng.Float64()
		w.dropEnd = now.Add(c.randDuration(50*time.Millisecond, time.Second))
		c.event("net drop %.2f until %v", w.drop, w.dropEnd.Sub(epoch0))
		weather = true
	}
	if w.dup == 0 && c.roll(nf.Duplicate) {
		w.dup = 0.05 + 0.25*c.rng.Float64()
		w.dupEnd = now.Add(c.randDuration(50*time.Millisecond, time.Second))
		c.event("net duplicate %.2f until %v", w.dup, w.dupEnd.Sub(epoch0))
		weather = true
	}
	if w.reorder == 0 && c.roll(nf.Reorder) {
		w.reorder = 0.1 + 0.4*c.rng.Float64()
		w.reorderEnd = now.Add(c.randDuration(50*time.Millisecond, time.Second))
		c.event("net reorder %.2f until %v", w.reorder, w.reorderEnd.Sub(epoch0))
		weather = true
	}
	if w.delay == 0 && c.roll(nf.Delay) {
		w.delay = c.randDuration(time.Millisecond, 40*time.Millisecond)
		w.delayEnd = now.Add(c.randDuration(50*time.Millisecond, time.Second))
		c.event("net delay %v until %v", w.delay, w.delayEnd.Sub(epoch0))
		weather = true
	}
	if weather {
		c.setWeather()
	}
	cuts := false
	if !w.partitioned && c.roll(nf.Partition) {
		ids := c.memberIDs()
		perm := c.rng.Perm(len(ids))
		k := 1 + c.rng.IntN((len(ids)-1)/2)
		w.sides = [2][]uint64{}
		for j, p := range perm {
			side := 1
			if j < k {
				side = 0
			}
			w.sides[side] = append(w.sides[side], ids[p])
		}
		slices.Sort(w.sides[0])
		slices.Sort(w.sides[1])
		w.partitioned = true
		w.partitionEnd = now.Add(c.randDuration(100*time.Millisecond, 3*time.Second))
		c.faults.Partitions++
		c.event("net partition %v | %v until %v", w.sides[0], w.sides[1], w.partitionEnd.Sub(epoch0))
		cuts = true
	}
	if w.oneWay == nil && c.roll(nf.OneWay) {
		c.startOneWay()
		cuts = true
		if c.calming() {
			return // a deaf leader's failover is to be judged: nothing else starts
		}
	}
	if len(w.clogs) == 0 && c.roll(nf.Clog) {
		c.startClog()
	}
	c.startPeerFaults()
	if c.depth == 0 && c.roll(nf.Stop) && !slices.ContainsFunc(c.nodes, func(n *node) bool { return n.stopped || n.down }) {
		n := c.nodes[c.rng.IntN(len(c.nodes))]
		n.stopped = true
		n.stopUntil = now.Add(c.randDuration(100*time.Millisecond, 3*time.Second))
		c.faults.Stops++
		c.event("n%d STOP until %v", n.id, n.stopUntil.Sub(epoch0))
		cuts = true
	}
	if cuts {
		c.applyCuts()
	}
	c.startClockFaults(&c.faults, func() (*nodeClock, string) {
		n := c.nodes[c.rng.IntN(len(c.nodes))]
		return n.clk, fmt.Sprintf("n%d", n.id)
	})
	if c.depth == 0 && c.roll(f.Crash) && !slices.ContainsFunc(c.nodes, func(n *node) bool { return n.down }) {
		// One node down at a time (and never inside a slow build, whose
		// node's reconciler pass is on the stack).
		c.crash(c.nodes[c.rng.IntN(len(c.nodes))])
	}
	if c.depth == 0 && c.roll(f.QuiescedCrash) && !slices.ContainsFunc(c.nodes, func(n *node) bool { return n.down }) {
		c.crashQuiescedLeader()
	}
	if c.roll(f.Join) {
		c.startJoin()
	}
	if c.roll(f.Remove) {
		c.startRemove()
	}
	if c.roll(f.DiskFull) {
		n := c.nodes[c.rng.IntN(len(c.nodes))]
		if !n.inj.enospc.On() && !n.down {
			n.fillDisk(c.randDuration(50*time.Millisecond, 2*time.Second))
		}
	}
	if c.roll(f.DiskError) {
		c.armDiskError(c.nodes[c.rng.IntN(len(c.nodes))])
	}
	if c.depth == 0 && c.roll(f.Lie) {
		c.lie()
	}
}

// startOneWay starts a one-way partition for 100 ms – 3 s: a node that
// can send but not hear (one time in three), a node that is heard but
// cannot send (one in six), or two sides of which one reaches the other
// and not the reverse.
func (c *sim) startOneWay() {
	w := &c.netf
	ids := c.memberIDs()
	var from, to []uint64
	switch k := c.rng.IntN(6); {
	case k < 2:
		// One deaf spell in two is judged: a quiet second first, then a
		// node leading quiesced groups goes deaf (deafCalm).
		if c.rng.IntN(2) == 0 && c.quietForDeaf() {
			return
		}
		x := ids[c.rng.IntN(len(ids))]
		w.oneWayKind = fmt.Sprintf("n%d deaf", x)
		from, to = slices.DeleteFunc(slices.Clone(ids), func(id uint64) bool { return id == x }), []uint64{x}
	case k < 3:
		x := ids[c.rng.IntN(len(ids))]
		w.oneWayKind = fmt.Sprintf("n%d mute", x)
		from, to = []uint64{x}, slices.DeleteFunc(slices.Clone(ids), func(id uint64) bool { return id == x })
	default:
		perm := c.rng.Perm(len(ids))
		cut := 1 + c.rng.IntN(len(ids)-1)
		for j, p := range perm {
			if j < cut {
				from = append(from, ids[p])
			} else {
				to = append(to, ids[p])
			}
		}
		slices.Sort(from)
		slices.Sort(to)
		w.oneWayKind = fmt.Sprintf("%v ↛ %v", from, to)
	}
	w.oneWay = &[2][]uint64{from, to}
	w.oneWayEnd = c.clk.Now().Add(c.randDuration(100*time.Millisecond, 3*time.Second))
	c.faults.OneWays++
	c.event("net one-way %s until %v", w.oneWayKind, w.oneWayEnd.Sub(epoch0))
}

// startClog clogs, for 20 ms – 1 s, one direction of one link, or every
// link into or out of one node: their messages are held, in order, and
// delivered when the clog ends.
func (c *sim) startClog() {
	w := &c.netf
	ids := c.memberIDs()
	x := ids[c.rng.IntN(len(ids))]
	var what string
	switch k := c.rng.IntN(3); k {
	case 0:
		y := ids[c.rng.IntN(len(ids))]
		if y == x {
			return
		}
		w.clogs = append(w.clogs, [2]uint64{x, y})
		what = fmt.Sprintf("n%d → n%d", x, y)
	default:
		for _, y := range ids {
			if y == x {
				continue
			}
			if k == 1 {
				w.clogs = append(w.clogs, [2]uint64{x, y})
			} else {
				w.clogs = append(w.clogs, [2]uint64{y, x})
			}
		}
		what = fmt.Sprintf("out of n%d", x)
		if k == 2 {
			what = fmt.Sprintf("into n%d", x)
		}
	}
	for _, l := range w.clogs {
		c.net.Clog(transport.NodeID(l[0]), transport.NodeID(l[1]))
	}
	w.clogEnd = c.clk.Now().Add(c.randDuration(20*time.Millisecond, time.Second))
	c.faults.Clogs++
	c.event("net clog %s until %v", what, w.clogEnd.Sub(epoch0))
	c.noteLinks()
}

// noteClogged counts, for every produce in flight, each clogged link
// whose receiver runs as up: what a clog held was sent while its sender
// ran and is delivered when the clog ends, whether or not the sender
// still runs (a node crashed or paused since: its acknowledgements, held
// by the clog, still reach the leader and commit, as raft allows — cluster
// seed 1376). A receiver that is down gets nothing. Only at the clog's
// end: an acknowledgement that came back while the link was clogged (a
// transport that sends it over the reverse path, BreakReplyPath) is
// still caught.
func (c *sim) noteClogged() {
	for _, l := range c.netf.clogs {
		if to := c.node(l[1]); to == nil || !to.reachable() {
			continue
		}
		for _, cl := range c.clients {
			if o := cl.op; o != nil && (o.kind == kindProduce || o.kind == kindBatch) {
				o.reach[l[0]] |= 1<<l[1] | 1<<l[0]
			}
		}
	}
}

// unclog ends the clogs, delivering what they held.
func (c *sim) unclog() {
	c.noteClogged()
	released := c.net.UnclogAll()
	c.netf.clogs = nil
	c.event("net unclog released=%d", released)
	c.noteLinks()
}

// expireFaults ends the faults whose time is up.
func (c *sim) expireFaults() {
	w := &c.netf
	now := c.clk.Now()
	weather, flush := false, false
	if w.drop > 0 && !now.Before(w.dropEnd) {
		w.drop, weather = 0, true
		c.event("net drop ends")
	}
	if w.dup > 0 && !now.Before(w.dupEnd) {
		w.dup, weather = 0, true
		c.event("net duplicate ends")
	}
	if w.reorder > 0 && !now.Before(w.reorderEnd) {
		w.reorder, weather, flush = 0, true, true
		c.event("net reorder ends")
	}
	if w.delay > 0 && !now.Before(w.delayEnd) {
		w.delay, weather = 0, true
		c.event("net delay ends")
	}
	if weather {
		c.setWeather()
	}
	if flush {
		c.event("net flush released=%d", c.net.Flush())
	}
	c.pollFailover()
	c.deafen()
	cuts := false
	if w.partitioned && !now.Before(w.partitionEnd) {
		w.partitioned, w.sides, cuts = false, [2][]uint64{}, true
		c.event("net heal")
	}
	if w.oneWay != nil && !now.Before(w.oneWayEnd) {
		w.oneWay, cuts = nil, true
		c.event("net one-way %s heals", w.oneWayKind)
	}
	if len(w.clogs) > 0 && !now.Before(w.clogEnd) {
		c.unclog()
	}
	c.expirePeerFaults()
	for _, n := range c.nodes {
		c.expireClockFaults(n.clk, fmt.Sprintf("n%d", n.id))
		if n.down && !now.Before(n.restartAt) && c.depth == 0 {
			c.restart(n)
			continue
		}
		if n.stopped && !now.Before(n.stopUntil) {
			n.stopped, cuts = false, true
			c.event("n%d RESUME", n.id)
		}
		n.expireDiskFull()
	}
	if cuts {
		c.applyCuts()
	}
}

// setWeather hands the spells in force to the network, with a fresh seed
// for its fault PCG from the run's RNG.
func (c *sim) setWeather() {
	w := &c.netf
	c.net.SetFaults(transport.Faults{DropRate: w.drop, DuplicateRate: w.dup, ReorderRate: w.reorder,
		Delay: w.delay, Seed: c.rng.Uint64()})
}

// applyCuts sets the network's links to the partition and the stopped
// nodes: a stopped node is cut off from every other. Links only appear
// here (a heal, a resume, a restart), so this is where the produces in
// flight learn of them (op.reach).
func (c *sim) applyCuts() {
	defer c.noteLinks()
	c.net.Heal()
	w := &c.netf
	if w.partitioned {
		// The minority against every other node: one that joined after
		// the partition began is on the majority's side, as links (and
		// so the acknowledgement check) count it.
		for _, a := range w.sides[0] {
			for _, b := range c.nodes {
				if !slices.Contains(w.sides[0], b.id) {
					c.net.Disconnect(transport.NodeID(a), transport.NodeID(b.id))
					c.net.Disconnect(transport.NodeID(b.id), transport.NodeID(a))
				}
			}
		}
	}
	if o := w.oneWay; o != nil {
		// Nodes that joined after it began are on neither side.
		for _, a := range o[0] {
			for _, b := range o[1] {
				c.net.Disconnect(transport.NodeID(a), transport.NodeID(b))
			}
		}
	}
	for _, n := range c.nodes {
		if !n.stopped {
			continue
		}
		for _, p := range c.peers {
			if p != n.id {
				c.net.Disconnect(transport.NodeID(n.id), transport.NodeID(p))
				c.net.Disconnect(transport.NodeID(p), transport.NodeID(n.id))
			}
		}
	}
}
