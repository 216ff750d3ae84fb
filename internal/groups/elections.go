package groups

import "github.com/parkway-io/parkway/internal/replica"

// Elections in bounded batches, for a host of many groups. Thousands of
// groups may need a leader at once: a creation of many partitions, a
// restart, or a dead node's quiesced groups. Left to themselves, every
// member of every such group ticks, runs its election timer and
// campaigns, and a host that ticks thousands of groups every tick (each
// leader heartbeating its followers while it waits for them to
// materialise) has no time left for the work the elections wait for.
//
// With quiescence on (bounded), Elections instead:
//
//   - starts an election only while fewer than CampaignsInFlight of its
//     elections are under way (until the group it won quiesces); the
//     others wait in order, not ticked. An election that found no leader
//     within CampaignPatienceTimeouts goes back to the end of the queue,
//     unticked, so the groups that are ticked stay few however many wait;
//   - puts the first elections of new groups (First) ahead of the
//     others in the queue: a client that created a partition waits for
//     its leader, while a queue of re-elections (a dead node's groups,
//     thousands after a node liveness false alarm on an overloaded host)
//     would keep it waiting longer than a request's deadline;
//   - holds a group its member does not stand for election in: not ticked
//     until a peer's message gives it a leader, since the member that
//     should campaign will contact it. A group still leaderless after
//     HoldTimeouts stands for election itself, through the same bounded
//     queue, so no group waits for ever on a member that never campaigns.
//
// Without quiescence every group stays awake (its election timer is the
// fallback) and CampaignsPerTick bounds the elections started per tick.
//
// A held or queued group still answers every message it is sent: it
// votes, and it wins an election it started without being ticked.

// CampaignsInFlight bounds the elections a host has under way at once
// (bounded). An election is under way until the group it won quiesces: a
// new leader heartbeats its followers every tick until they all hold its
// log, and those heartbeats, not the votes, are what a host with
// thousands of new groups cannot keep up with.
const CampaignsInFlight = 32

// CampaignsPerTick bounds the elections a host starts per tick when its
// groups are not quiesced.
const CampaignsPerTick = 128

// CampaignPatienceTimeouts is how long an election without a winner
// counts as under way before it yields its place, and SettleTimeouts how
// long one that won does while its followers catch up (in election
// timeouts).
const (
	CampaignPatienceTimeouts = 3
	SettleTimeouts           = 10
)

// HoldTimeouts is how long a held group waits to be contacted before it
// stands for election itself (in election timeouts: 10 s at a 10 ms tick
// and 10 ticks a timeout). It covers a campaigner that is alive but never
// campaigns: short enough that the group is not left without a leader for
// long, long enough that a follower does not stand against a campaigner
// that is merely working through a queue of thousands of elections,
// which would split the votes.
const HoldTimeouts = 100

// Candidacy is one group's place in its host's Elections. The zero value
// is a group neither held nor queued.
type Candidacy struct {
	// held: not ticked while it waits for an election (queued: in the
	// campaign queue) or for a peer to give it a leader; at is the
	// Elections tick its last election started at.
	held, queued bool
	at           int64
	// first: the group never had a leader, and its elections queue
	// ahead of the others (Elections.First) until it finds one.
	first bool
}

// Held reports whether the group waits, unticked, for an election or a
// leader.
func (c *Candidacy) Held() bool { return c.held }

// Queued reports whether the group waits in the campaign queue.
func (c *Candidacy) Queued() bool { return c.queued }

// Reset forgets the candidacy (a rebuilt group's earlier state).
func (c *Candidacy) Reset() { c.held, c.queued, c.first = false, false, false }

// Unhold makes a held group ticked again once g has a leader (a peer's
// message told it, or it won an election it started), so its election
// timer watches the leader, or it heartbeats and quiesces as a leader
// does. A host calls it on every group it finds awake, on every tick: a
// candidacy neither held nor first has nothing to clear, and does not
// read the group's leader (raft's status, about a tenth of a shard's CPU
// while thousands of new groups tick, issue 33).
func (c *Candidacy) Unhold(g *replica.Group) {
	if (c.held || c.first) && g != nil && g.Leader() != 0 {
		c.held, c.first = false, false
	}
}

// ElectionHost is what Elections needs of the host of the groups G.
type ElectionHost[G comparable] interface {
	// Candidate is g's candidacy and raft group, and whether g is still
	// the host's group of its name (not removed, failed or replaced).
	Candidate(g G) (c *Candidacy, grp *replica.Group, live bool)
	// Awake reports whether g is ticked (not quiesced).
	Awake(g G) bool
	// Campaigned reports an election started in g (err nil: it has work
	// to process) or the failure of its group to start one.
	Campaigned(g G, err error)
	// ElectionPending is called when an election was queued or a group
	// held: the host must keep ticking (Pending) though no group is awake.
	ElectionPending()
}

// Elections schedules the elections of a host's groups (see above). It
// is not safe for concurrent use: the host drives it on its goroutine.
type Elections[G comparable] struct {
	host ElectionHost[G]
	// bounded: quiescence is on; timeout an election timeout in ticks.
	bounded bool
	timeout int64

	// campaign holds the groups this node stands for election in, waiting
	// for their turn, and first those of them that never had a leader,
	// which take their turn before campaign's (First); inflight the
	// elections started and not yet won; held the groups waiting,
	// unticked, for a peer to give them a leader; ticks counts the ticks.
	campaign []G
	first    []G
	inflight []G
	held     []heldGroup[G]
	ticks    int64
}

// heldGroup is a held group and the tick it was held at.
type heldGroup[G comparable] struct {
	g     G
	since int64
}

// NewElections returns the elections of host, whose groups time an
// election out after electionTicks ticks; bounded is quiescence (see
// above).
func NewElections[G comparable](host ElectionHost[G], bounded bool, electionTicks int64) Elections[G] {
	return Elections[G]{host: host, bounded: bounded, timeout: electionTicks}
}

// Room reports whether a new group this node should lead may campaign at
// once (nothing queued, room in flight).
func (e *Elections[G]) Room() bool {
	return !e.bounded || (len(e.campaign) == 0 && len(e.first) == 0 && len(e.inflight) < CampaignsInFlight)
}

// InFlight is the number of elections under way.
func (e *Elections[G]) InFlight() int { return len(e.inflight) }

// Queue queues an election in g; it waits unticked.
func (e *Elections[G]) Queue(g G) {
	c, _, _ := e.host.Candidate(g)
	c.held = true
	if c.queued {
		return
	}
	c.queued = true
	if c.first {
		e.first = append(e.first, g)
	} else {
		e.campaign = append(e.campaign, g)
	}
	e.host.ElectionPending()
}

// First marks g a new group's, which never had a leader: its elections
// queue ahead of every other (Queue) until it has one. The host calls it
// before it starts or queues the group's first election.
func (e *Elections[G]) First(g G) {
	c, _, _ := e.host.Candidate(g)
	c.first = true
}

// next takes the next queued election, a new group's first (First) before
// any other; ok is false when none is queued.
func (e *Elections[G]) next() (g G, ok bool) {
	var none G
	q := &e.first
	if len(*q) == 0 {
		q = &e.campaign
	}
	if len(*q) == 0 {
		return none, false
	}
	g = (*q)[0]
	(*q)[0] = none
	*q = (*q)[1:]
	if len(*q) == 0 {
		*q = nil
	}
	return g, true
}

// Hold stops ticking g until a peer's message gives it a leader (or
// HoldTimeouts pass).
func (e *Elections[G]) Hold(g G) {
	c, _, _ := e.host.Candidate(g)
	if c.held {
		return // held already, or queued for an election
	}
	c.held = true
	e.held = append(e.held, heldGroup[G]{g: g, since: e.ticks})
	e.host.ElectionPending()
}

// Started records an election the host started in g itself.
func (e *Elections[G]) Started(g G) {
	c, _, _ := e.host.Candidate(g)
	c.held = false
	c.at = e.ticks
	e.inflight = append(e.inflight, g)
}

// Stand makes this node stand for election in g now, if g still has no
// leader, or queues the election while there is no room (Room; only
// with quiescence is there ever none). The metadata member, one group
// scheduled without the bound, stands at once.
func (e *Elections[G]) Stand(g G) {
	if !e.Room() {
		e.Queue(g)
		return
	}
	_, grp, live := e.host.Candidate(g)
	if !live || grp.Leader() != 0 {
		return
	}
	if err := grp.Campaign(); err != nil {
		e.host.Campaigned(g, err)
		return
	}
	if e.bounded {
		e.Started(g)
	}
	e.host.Campaigned(g, nil)
}

// AfterDeath is the part of node liveness's report of a death for a
// group whose leader (or, for a group that never had one, whose
// preferred leader) died: this node queues an election if it is the
// group's campaigner (mine), and holds the group otherwise. Without
// quiescence the group stays awake, and its election timer is the
// fallback.
func (e *Elections[G]) AfterDeath(g G, mine bool) {
	switch {
	case !e.bounded:
		if mine {
			e.campaign = append(e.campaign, g)
		}
	case mine:
		e.Queue(g)
	default:
		e.Hold(g)
	}
}

// Pending reports whether the host must keep ticking for the elections
// queued or held, even with no group awake.
func (e *Elections[G]) Pending() bool {
	return len(e.campaign) > 0 || len(e.first) > 0 || len(e.held) > 0 || len(e.inflight) > 0
}

// Tick runs on every tick of the host: it retires the elections that
// found a leader (or ran out of patience), releases the held groups that
// waited too long, and starts queued elections while there is room.
func (e *Elections[G]) Tick() {
	e.ticks++
	if !e.bounded {
		e.tickAwake()
		return
	}
	patience := CampaignPatienceTimeouts * e.timeout
	kept := e.inflight[:0]
	for _, g := range e.inflight {
		c, grp, live := e.host.Candidate(g)
		if !live {
			continue // gone
		}
		age := e.ticks - c.at
		if grp.Leader() != 0 {
			c.first = false
		}
		switch lead := grp.Leader(); {
		case lead != 0 && !grp.IsLeader():
			// Another member won: its leader brings the group up.
		case lead == 0 && age >= patience:
			e.Queue(g) // its followers may not be there yet
		case lead != 0 && (!e.host.Awake(g) || age >= SettleTimeouts*e.timeout):
			// Won and quiesced; or won long ago, and a follower is
			// still missing: it leaves its place to the next one.
		default:
			kept = append(kept, g)
		}
	}
	clear(e.inflight[len(kept):])
	e.inflight = kept

	hold := HoldTimeouts * e.timeout
	var zero heldGroup[G]
	for len(e.held) > 0 {
		h := e.held[0]
		c, grp, live := e.host.Candidate(h.g)
		c.Unhold(grp)
		if c.held && live && e.ticks-h.since < hold {
			break // the oldest hold has not expired yet
		}
		e.held[0] = zero
		e.held = e.held[1:]
		if c.held && live && !c.queued {
			c.held = false
			e.Queue(h.g) // nobody contacted it: stand itself
		}
	}
	if len(e.held) == 0 {
		e.held = nil
	}

	for len(e.inflight) < CampaignsInFlight {
		g, ok := e.next()
		if !ok {
			break
		}
		c, grp, live := e.host.Candidate(g)
		c.queued = false
		if !live || grp.Leader() != 0 {
			c.Unhold(grp)
			continue // gone, or another member won meanwhile
		}
		if err := grp.Campaign(); err != nil {
			e.host.Campaigned(g, err)
			continue
		}
		e.Started(g)
		e.host.Campaigned(g, nil)
	}
}

// tickAwake starts the next few queued elections of a host whose groups
// are all ticked (no quiescence): the groups wait awake, and
// CampaignsPerTick bounds the elections started per tick. A group that
// found a leader meanwhile (another member won), or is gone, is skipped.
func (e *Elections[G]) tickAwake() {
	for n := 0; n < CampaignsPerTick; {
		g, ok := e.next()
		if !ok {
			break
		}
		_, grp, live := e.host.Candidate(g)
		if !live || grp.Leader() != 0 {
			continue
		}
		n++
		if err := grp.Campaign(); err != nil {
			e.host.Campaigned(g, err)
			continue
		}
		e.host.Campaigned(g, nil)
	}
}
