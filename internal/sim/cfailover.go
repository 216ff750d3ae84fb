package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// Failover of quiesced groups (invariant 8). A quiesced partition group
// sends nothing, so its followers cannot see its leader die: node
// liveness tells them (one heartbeat per node pair), after which the
// groups the dead node led forget it and one survivor of each campaigns.
// The QuiescedCrash fault crashes a node that leads quiesced groups; in
// one such crash in two every other fault ends at the crash (the weather
// clears, a partition heals, stopped nodes resume, disks work again) and
// none starts until failoverAfter later; nor does any new client
// operation (those under way go on), so that what wakes the dead
// leader's groups is node liveness, not traffic. Meanwhile, each time the clock
// moves, the simulator notes the groups the dead node led that a
// survivor now leads; at failoverAfter, every group not noted must have
// a new leader among the survivors wherever a majority of its replicas
// survive and hold it (a group deleted meanwhile is not judged). Promptness is
// a liveness property: it can only be asked of a healthy network, hence
// the calm (the other crashes, and the calm-free half of these, run
// under every fault as before).

// failoverAfter is how long after the crash the groups are checked: the
// liveness timeout (host's default, 5 heartbeat intervals of 10 ticks:
// 500 ms at the default tick) and as long again for the elections. A
// QuiescedCrash keeps its node down at least this long.
const failoverAfter = time.Second

// failoverCheck is a failover to check: the groups node led when it
// crashed (at crashed), and whether it led the metadata group, whose
// voters were voters.
type failoverCheck struct {
	node        uint64
	crashed, at time.Time
	// deaf: the node did not crash; it went deaf (a one-way partition:
	// it sends, hears nothing), and the others must fail over all the
	// same (deafCalm).
	deaf       bool
	groups     []ledGroup
	metaLeader bool
	voters     []uint64
	// polled is when the groups were last looked at.
	polled time.Time
}

// ledGroup is a partition group a node led: its incarnation, owner shard
// and replicas.
type ledGroup struct {
	key      incKey
	owner    int
	replicas []uint64
	// configs are the voter sets the group may have (moveConfigs): one,
	// its replicas, unless it is moving.
	configs [][]uint64
	// led is set once a survivor was seen leading it.
	led bool
}

// ledGroups lists the committed partition groups n leads that are
// quiesced on n and on every other node holding a replica of them: only
// node liveness can wake those once n dies.
func (c *sim) ledGroups(n *node) []ledGroup {
	var out []ledGroup
	for _, p := range n.meta.Snapshot().Partitions {
		if !c.quiescedOn(n, p) {
			continue
		}
		lead, err := n.shards[p.Owner].Leader(c.ctx, p.NS)
		if err != nil {
			c.fail(0, "leader of %v on n%d: %v", p.NS, n.id, err)
			return nil
		}
		if lead != n.id {
			continue
		}
		// A group mid-move is judged too (behaviour 31): its newcomers
		// join as learners and vote only once whole, so whichever of
		// its possible configurations it is in, a majority of it that
		// survives and holds the partition can elect.
		reps := make([]uint64, 0, len(p.Replicas)+len(p.Leaving))
		quiet := true
		for _, r := range append(c.replicasOf(p), c.leavingOf(p)...) {
			reps = append(reps, r.id)
			if r != n && r.reachable() {
				quiet = quiet && c.quiescedOn(r, p)
			}
		}
		if quiet && c.viol == nil {
			// The voter sets by raft id, as n knows them: a survivor
			// counts for one only with the replica it names (a replica
			// re-seeded since, under a new raft id, waits for a leader
			// to add it, and votes in none of them).
			configs := [][]uint64{append(slices.Clone(p.Replicas), p.Leaving...)}
			if len(p.Leaving) > 0 && len(p.Replicas) > 0 {
				configs = moveConfigs(p)
			}
			out = append(out, ledGroup{key: incKey{p.NS, p.CreatedRevision}, owner: int(p.Owner), replicas: reps, configs: configs})
		}
	}
	return out
}

// quiescedOn reports whether n holds p's incarnation with its group
// quiesced.
func (c *sim) quiescedOn(n *node, p metadata.PartitionInfo) bool {
	if int(p.Owner) >= len(n.shards) {
		return false
	}
	st, err := n.shards[p.Owner].Inspect(c.ctx)
	if err != nil {
		c.fail(0, "inspect n%d shard %d: %v", n.id, p.Owner, err)
		return false
	}
	return st.Owned[p.NS] == p.CreatedRevision && slices.Contains(st.Quiesced, p.NS)
}

// calming reports whether a calm is on: no fault starts, and clients
// start no new operation.
func (c *sim) calming() bool { return c.clk.Now().Before(c.calmUntil) }

// calmFaultsOff ends every fault for a calm but the crash of down (nil:
// none) and reports the messages it released: the network's and peers'
// spells, every other node's stop and disk faults, and the liar's lies
// of the running disk. Those are armed before the calm and fire on a
// later write or read: one that fired in the calm failed a survivor's
// replica, and a group of three with its leader gone and a second
// replica failed (rebuilt only after the build backoff) has no majority
// to elect with (cluster seed 1265 with a proposal restarting the
// quiescence count: the campaigner's first write of its new term, to
// its raft log's sync mark, was misdirected). New faults, lies included,
// do not start while the calm lasts (startFaults).
func (c *sim) calmFaultsOff(down *node) int {
	c.netf = netState{}
	c.peerFaultsOff()
	c.setWeather()
	released := c.net.Flush() + c.net.UnclogAll()
	for _, m := range c.nodes {
		m.clk.settle()
		if m == down {
			continue
		}
		m.stopped = false
		m.inj.enospc.Set(false)
		m.inj.eio = nil
	}
	if c.lies != nil {
		c.lies.stopRunning()
	}
	c.applyCuts()
	return released
}

// calm ends every fault but n's crash and holds new ones, and new client
// operations, off until the failover is checked.
func (c *sim) calm(n *node, groups []ledGroup, voters []uint64, metaLeader bool) {
	now := c.clk.Now()
	c.faults.CalmCrashes++
	released := c.calmFaultsOff(n)
	c.calmUntil = now.Add(failoverAfter)
	c.failover = &failoverCheck{node: n.id, crashed: now, at: c.calmUntil, groups: groups,
		metaLeader: metaLeader, voters: voters}
	c.event("calm until %v: n%d led %d groups, metadata leader %v; released=%d",
		c.calmUntil.Sub(epoch0), n.id, len(groups), c.failover.metaLeader, released)
}

// A leader gone deaf (a one-way partition: it keeps sending, hears
// nothing) is judged like a crashed one. quietForDeaf starts a calm: every
// fault ends and none starts, nor does any new client operation, so that
// groups quiesce; deafen then makes deaf, for failoverAfter, the first
// node found leading quiesced groups the others can take over (three
// replicas or more), and checks their failover at the end. The deaf node
// keeps sending heartbeats and votes: only node liveness judged both ways
// tells the others it is gone. Without such a node within failoverAfter
// the calm ends unjudged.

// deafWait is the quiet before a deaf spell: until when a node leading
// quiesced groups is looked for.
type deafWait struct{ until time.Time }

// quietForDeaf starts the quiet before a judged deaf spell, unless
// another calm, a failover check, a stopped or a down node is in the
// way; it reports whether it did.
func (c *sim) quietForDeaf() bool {
	if c.depth > 0 || c.failover != nil || c.deafWait != nil || c.calming() ||
		slices.ContainsFunc(c.nodes, func(m *node) bool { return m.stopped || m.down }) {
		return false
	}
	now := c.clk.Now()
	released := c.calmFaultsOff(nil)
	c.deafWait = &deafWait{until: now.Add(failoverAfter)}
	c.calmUntil = c.deafWait.until
	c.event("calm until %v: a node leading quiesced groups is to go deaf; released=%d", c.calmUntil.Sub(epoch0), released)
	return true
}

// deafen makes deaf the first node found leading quiesced groups, while
// the quiet before a deaf spell lasts, and sets up the failover check.
func (c *sim) deafen() {
	d := c.deafWait
	if d == nil || c.depth > 0 || c.viol != nil {
		return
	}
	now := c.clk.Now()
	if !now.Before(d.until) {
		c.deafWait = nil
		c.event("no node led quiesced groups: the deaf spell is not judged")
		return
	}
	for _, x := range c.nodes {
		if !x.reachable() || !x.joined {
			continue
		}
		var groups []ledGroup
		for _, g := range c.ledGroups(x) {
			if len(g.replicas) >= 3 {
				groups = append(groups, g)
			}
		}
		if len(groups) == 0 {
			continue
		}
		c.deafWait = nil
		w := &c.netf
		others := slices.DeleteFunc(c.memberIDs(), func(id uint64) bool { return id == x.id })
		w.oneWay, w.oneWayKind = &[2][]uint64{others, {x.id}}, fmt.Sprintf("n%d deaf", x.id)
		w.oneWayEnd = now.Add(failoverAfter)
		c.applyCuts()
		c.faults.OneWays++
		c.faults.DeafCalms++
		c.calmUntil = w.oneWayEnd
		c.failover = &failoverCheck{node: x.id, crashed: now, at: c.calmUntil, deaf: true, groups: groups}
		c.event("net one-way %s until %v: it led %d quiesced groups", w.oneWayKind, w.oneWayEnd.Sub(epoch0), len(groups))
		return
	}
}

// pollFailover notes the groups of the failover in progress that a
// survivor leads now, once per clock value; at the failover's deadline
// it checks them (checkFailover).
func (c *sim) pollFailover() {
	f := c.failover
	if f == nil || c.depth > 0 {
		return
	}
	now := c.clk.Now()
	if !now.Before(f.at) {
		c.checkFailover(true)
		return
	}
	if f.polled.Equal(now) {
		return
	}
	f.polled = now
	c.checkFailover(false)
}

// checkFailover looks at every group the dead node led and has not been
// seen led since: one a survivor leads now is noted (and counted); at the
// deadline (final), one that none does is a violation wherever a majority
// of its replicas survived holding the same incarnation. The metadata
// group too, when the dead node led it.
func (c *sim) checkFailover(final bool) {
	f := c.failover
	if final {
		c.failover = nil
	}
	dead := c.node(f.node)
	if !dead.down && !f.deaf {
		c.fail(0, "n%d restarted before its failover was checked", f.node)
		return
	}
	what := "crashed"
	if f.deaf {
		what = "went deaf"
	}
	for i := range f.groups {
		g := &f.groups[i]
		if g.led {
			continue
		}
		var holders []*node
		var holderIDs []uint64 // their replicas' raft ids
		for _, id := range g.replicas {
			s := c.node(id)
			if s == nil || s.down || id == f.node {
				continue
			}
			info, ok := s.meta.Partition(g.key.ns)
			if !ok || info.CreatedRevision != g.key.epoch {
				continue // deleted, or unknown there: not this incarnation's survivor
			}
			st, err := s.shards[g.owner].Inspect(c.ctx)
			if err != nil {
				c.fail(0, "inspect n%d shard %d: %v", s.id, g.owner, err)
				return
			}
			if st.Owned[g.key.ns] == g.key.epoch {
				holders = append(holders, s)
				id, _ := info.ReplicaOf(s.id)
				holderIDs = append(holderIDs, id)
			}
		}
		if !g.electable(holderIDs) {
			if final {
				c.event("failover of %v not checked: of replicas %v, %d hold it, as %v (voter sets %v)", g.key, g.replicas, len(holders), holderIDs, g.configs)
			}
			continue
		}
		var seen []string
		led := false
		for _, s := range holders {
			lead, err := s.shards[g.owner].Leader(c.ctx, g.key.ns)
			if err != nil {
				c.fail(0, "leader of %v on n%d: %v", g.key.ns, s.id, err)
				return
			}
			seen = append(seen, fmt.Sprintf("n%d sees n%d", s.id, lead))
			led = led || lead == s.id
		}
		switch {
		case led:
			g.led = true
			c.faults.Failovers++
			c.event("failover of %v after %v: %s", g.key, c.clk.Now().Sub(f.crashed), strings.Join(seen, ", "))
		case final:
			c.fail(8, "%v (replicas %v): n%d led it and %s %v ago, and no survivor leads it (%s)",
				g.key, g.replicas, f.node, what, failoverAfter, strings.Join(seen, ", "))
			return
		}
	}
	if !f.metaLeader {
		return
	}
	// The metadata group, with its voters as the dead node knew them: a
	// majority of them must survive with their members running (a member
	// down after its raft log refused a write is reopened only after a
	// backoff: if one was down in the meantime, the failover is not
	// judged).
	voters := f.voters
	survivors, led := 0, false
	var seen []string
	for _, id := range voters {
		s := c.node(id)
		if s == nil || s.down || id == f.node {
			continue
		}
		if !s.metaTickErr.Before(f.crashed) {
			c.event("metadata failover not checked: n%d's member was down at %v", s.id, s.metaTickErr.Sub(epoch0))
			f.metaLeader = false
			return
		}
		survivors++
		st := s.eng.MetadataStatus()
		seen = append(seen, fmt.Sprintf("n%d sees n%d", s.id, st.Leader))
		led = led || st.Leader == s.id
	}
	if survivors < len(voters)/2+1 || !slices.Contains(voters, f.node) {
		return
	}
	switch {
	case led:
		f.metaLeader = false
		c.faults.Failovers++
		c.event("metadata failover after %v: %s", c.clk.Now().Sub(f.crashed), strings.Join(seen, ", "))
	case final:
		c.fail(8, "the metadata group (voters %v): n%d led it and %s %v ago, and no survivor leads it (%s)",
			voters, f.node, what, failoverAfter, strings.Join(seen, ", "))
	}
}

// zombieHeartbeats is BreakZombieLiveness: before n's metadata tick, a
// liveness heartbeat from every node that is down arrives at n.
func (c *sim) zombieHeartbeats(n *node) {
	for _, d := range c.nodes {
		if d.down && d != n {
			_ = n.eng.Deliver(transport.Message{From: transport.NodeID(d.id), To: transport.NodeID(n.id), Kind: host.KindLiveness})
		}
	}
}

// leavingOf are the nodes of p's leaving replicas.
func (c *sim) leavingOf(p metadata.PartitionInfo) []*node {
	out := make([]*node, 0, len(p.Leaving))
	for _, id := range p.Leaving {
		if n := c.node(id); n != nil {
			out = append(out, n)
		}
	}
	return out
}

// moveConfigs are the voter sets p's group, placed and moving, may be
// in: the replicas that did not join by a move,
// with any of the newcomers (each a voter once promoted) and the leaving
// replicas — all of them until every newcomer is a voter, any of them
// after (the leaving are removed one at a time only then).
func moveConfigs(p metadata.PartitionInfo) [][]uint64 {
	var core, fresh []uint64
	for _, r := range p.Replicas {
		if p.Joins(r) {
			fresh = append(fresh, r)
		} else {
			core = append(core, r)
		}
	}
	var out [][]uint64
	for a := 0; a < 1<<len(fresh); a++ {
		for b := 0; b < 1<<len(p.Leaving); b++ {
			allFresh, allLeaving := a == 1<<len(fresh)-1, b == 1<<len(p.Leaving)-1
			if !allLeaving && !allFresh {
				continue // a replica leaves only once every newcomer votes
			}
			cfg := slices.Clone(core)
			for i, r := range fresh {
				if a&(1<<i) != 0 {
					cfg = append(cfg, r)
				}
			}
			for i, r := range p.Leaving {
				if b&(1<<i) != 0 {
					cfg = append(cfg, r)
				}
			}
			if len(cfg) > 0 {
				out = append(out, cfg)
			}
		}
	}
	return out
}

// electable reports whether, in every configuration g may be in, a
// majority of the voters are among holders (alive and holding the
// partition): then a survivor must come to lead it.
func (g *ledGroup) electable(holders []uint64) bool {
	for _, cfg := range g.configs {
		n := 0
		for _, h := range holders {
			if slices.Contains(cfg, h) {
				n++
			}
		}
		if n < len(cfg)/2+1 {
			return false
		}
	}
	return true
}
