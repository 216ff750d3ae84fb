package sim

import (
	"errors"
	"slices"
	"time"

	"github.com/parkway-io/parkway/transport"
)

// Node crash and restart (cluster mode). A crashed node is down for a
// while — cut off, doing nothing, its clients' requests answered by the
// crash — and then restarts on its disk: two crashes in three are a power
// loss (MemFS.Crash: only what was synced survives), one a process crash
// (the page cache survives). The restarted node is built as parkway.Open
// builds one on an existing data directory: the metadata from its raft
// log, each partition's raft group from the raft log beside its segments,
// re-applying what its partition log lost.

// crashQuiescedLeader crashes a node that leads quiesced partition groups,
// if one does, for longer than the liveness timeout.
func (c *sim) crashQuiescedLeader() {
	leaders := c.quiescedLeaders()
	if len(leaders) == 0 {
		return
	}
	n := leaders[c.rng.IntN(len(leaders))]
	c.faults.QuiescedCrash++
	c.event("n%d leads quiesced groups", n.id)
	// No calm while another node is paused: resumed by the calm, its
	// liveness, which does not judge peers dead for the time its own
	// driver stood still, is slow to see the crash, and the failover it
	// may be chosen to lead can take longer than the calm's second.
	calm := c.rng.IntN(2) == 0 && !slices.ContainsFunc(c.nodes, func(m *node) bool { return m.stopped })
	var groups []ledGroup
	var voters []uint64
	if calm {
		groups, voters = c.ledGroups(n), n.eng.MetadataStatus().Voters
	}
	metaLeader := n.eng.MetadataStatus().Leader == n.id
	c.crashFor(n, failoverAfter, 3*time.Second)
	if calm && c.viol == nil {
		c.calm(n, groups, voters, metaLeader)
	}
}

// quiescedLeaders are the running nodes that lead quiesced partition
// groups.
func (c *sim) quiescedLeaders() []*node {
	var leaders []*node
	for _, n := range c.nodes {
		if !n.reachable() {
			continue
		}
		for _, s := range n.shards {
			if _, leading, err := s.QuiescedGroups(c.ctx); err == nil && leading > 0 {
				leaders = append(leaders, n)
				break
			}
		}
	}
	return leaders
}

// crashFor takes n down for a time in [lo, hi]: a power loss two times
// in three, else a process crash.
func (c *sim) crashFor(n *node, lo, hi time.Duration) {
	c.crashHow(n, c.powerLoss(), lo, hi)
}

// crashHow takes n down for a time in [lo, hi], by a power loss if power
// is set, else by a process crash.
func (c *sim) crashHow(n *node, power bool, lo, hi time.Duration) {
	kind := c.countCrash(power)
	down := c.randDuration(lo, hi)
	c.event("n%d CRASH (%s) gen=%d down for %v", n.id, kind, n.gen, down)
	n.inj.dead = true
	n.down, n.restartAt = true, c.clk.Now().Add(down)
	c.abandon(n)
	_ = n.ep.Close() // what is on its way to the node is lost
	// Proposals in flight through n are lost with it: their clients time
	// out and propose again elsewhere.
	clear(n.waits)
	n.waits = n.waits[:0]
	c.oldMetrics = append(c.oldMetrics, n.m)
	c.noteForwardRefusals(n)
	var l *lies
	if c.isLiar(n) {
		l = c.lies
	}
	n.crashDisk(power, l)
}

// restart brings n back on its disk, with a fresh endpoint.
func (c *sim) restart(n *node) {
	if c.roll(c.cfg.Faults.WrongDisk) {
		c.startOnWrongDisk(n)
		if c.viol != nil {
			return
		}
	}
	c.event("n%d RESTART gen=%d", n.id, n.gen+1)
	nn := c.openNode(n.id, c.net.Endpoint(transport.NodeID(n.id)), n.mem, n)
	c.nodes[slices.Index(c.nodes, n)] = nn
	c.applyCuts()
}

// startOnWrongDisk starts n on a copy of another member's data
// directory (its durable state), which must be refused with
// host.ErrWrongDataDir: a node that took it would vote and acknowledge
// with another member's log.
func (c *sim) startOnWrongDisk(n *node) {
	var others []*node
	for _, m := range c.nodes {
		if m.id != n.id && m.mem != nil {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return
	}
	other := others[c.rng.IntN(len(others))]
	c.event("n%d starts on a copy of n%d's data directory", n.id, other.id)
	c.wrongDisk = true
	probe := c.openNode(n.id, c.net.Endpoint(transport.NodeID(n.id)), other.mem.Crash(), n)
	c.wrongDisk = false
	if probe.eng != nil {
		_ = probe.eng.Close()
		c.fail(8, "n%d started on a copy of n%d's data directory: not refused", n.id, other.id)
		return
	}
	_ = probe.ep.Close()
	c.faults.WrongDisks++
}

// cur is the running incarnation of the node n was: n itself unless it
// crashed and restarted since, or was removed (then it stays down).
func (c *sim) cur(n *node) *node {
	if m := c.node(n.id); m != nil {
		return m
	}
	return n
}

// reachable reports whether a client can talk to n: it is neither down
// nor stopped.
func (n *node) reachable() bool { return !n.down && !n.stopped }

var errUnreachable = errors.New("sim: node down or stopped")
