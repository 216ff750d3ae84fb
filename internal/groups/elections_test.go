package groups_test

import (
	"testing"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
)

// electionHost is a groups.ElectionHost over numbered groups; it records
// the elections started and how often it was asked to keep ticking.
type electionHost struct {
	groups     map[int]*candidate
	campaigned []int
	failed     []int
	pending    int
}

type candidate struct {
	c     groups.Candidacy
	g     *replica.Group
	live  bool
	awake bool
}

func (h *electionHost) Candidate(i int) (*groups.Candidacy, *replica.Group, bool) {
	x := h.groups[i]
	return &x.c, x.g, x.live
}
func (h *electionHost) Awake(i int) bool { return h.groups[i].awake }
func (h *electionHost) Campaigned(i int, err error) {
	if err != nil {
		h.failed = append(h.failed, i)
		return
	}
	h.campaigned = append(h.campaigned, i)
}
func (h *electionHost) ElectionPending() { h.pending++ }

// follower is node 1's member of a three-voter group without a leader:
// a campaign it starts waits for votes that never come here.
func follower(t *testing.T, id uint64) *replica.Group {
	t.Helper()
	g, err := replica.New(replica.Config{Group: id, Node: 1, Peers: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func newElectionHost(t *testing.T, n int) *electionHost {
	h := &electionHost{groups: map[int]*candidate{}}
	for i := range n {
		h.groups[i] = &candidate{g: follower(t, uint64(i+1)), live: true, awake: true}
	}
	return h
}

const timeout = 10 // election ticks

// With quiescence, queued elections start CampaignsInFlight at a time,
// in queue order; one without a winner after CampaignPatienceTimeouts
// goes back to the end of the queue and frees its place.
func TestElectionsBounded(t *testing.T) {
	const n = groups.CampaignsInFlight + 8
	h := newElectionHost(t, n)
	e := groups.NewElections[int](h, true, timeout)
	for i := range n {
		e.Queue(i)
		if c := &h.groups[i].c; !c.Held() || !c.Queued() {
			t.Fatalf("group %d: held %v, queued %v after Queue", i, c.Held(), c.Queued())
		}
	}
	if h.pending != n || !e.Pending() || e.Room() {
		t.Fatalf("after queueing: pending calls %d, Pending %v, Room %v", h.pending, e.Pending(), e.Room())
	}
	e.Tick()
	if len(h.campaigned) != groups.CampaignsInFlight || e.InFlight() != groups.CampaignsInFlight {
		t.Fatalf("one tick started %d elections (%d in flight), want %d", len(h.campaigned), e.InFlight(), groups.CampaignsInFlight)
	}
	for i, id := range h.campaigned {
		if id != i {
			t.Fatalf("election %d started in group %d: not queue order", i, id)
		}
		if c := &h.groups[id].c; c.Held() || c.Queued() {
			t.Fatalf("group %d started its election but is held %v, queued %v", id, c.Held(), c.Queued())
		}
	}
	if c := &h.groups[n-1].c; !c.Queued() {
		t.Fatal("a group past the bound left the queue")
	}
	// No votes arrive: after the patience the elections under way yield
	// to the ones still queued.
	for range groups.CampaignPatienceTimeouts*timeout - 1 {
		e.Tick()
	}
	if len(h.campaigned) != groups.CampaignsInFlight {
		t.Fatalf("%d elections started before the patience ran out", len(h.campaigned))
	}
	e.Tick()
	got := h.campaigned[groups.CampaignsInFlight:]
	if len(got) != groups.CampaignsInFlight {
		t.Fatalf("after the patience %d elections started, want %d", len(got), groups.CampaignsInFlight)
	}
	for i := range 8 { // the 8 queued behind first, then the ones that yielded
		if got[i] != groups.CampaignsInFlight+i || got[8+i] != i {
			t.Fatalf("after the patience elections started in %v: not the queued ones first, then the yielded ones in order", got)
		}
	}
	if len(h.failed) != 0 {
		t.Fatalf("groups failed: %v", h.failed)
	}
}

// A held group that learns of a leader is let go; one nobody contacts
// stands for election itself once HoldTimeouts have passed.
func TestElectionsHoldExpires(t *testing.T) {
	h := newElectionHost(t, 1)
	h.groups[1] = &candidate{g: leader(t), live: true, awake: true}
	e := groups.NewElections[int](h, true, timeout)
	e.Hold(1)
	e.Hold(0)
	e.Hold(1) // held already: not held twice
	if !h.groups[0].c.Held() || h.groups[0].c.Queued() || h.pending != 2 {
		t.Fatalf("after Hold: held %v, queued %v, pending calls %d", h.groups[0].c.Held(), h.groups[0].c.Queued(), h.pending)
	}
	e.Tick()
	if h.groups[1].c.Held() {
		t.Fatal("a held group with a leader is still held")
	}
	for range groups.HoldTimeouts*timeout - 2 {
		e.Tick()
	}
	if len(h.campaigned) != 0 || !h.groups[0].c.Held() {
		t.Fatalf("a hold that has not expired campaigned (%v)", h.campaigned)
	}
	e.Tick()
	if len(h.campaigned) != 1 || h.campaigned[0] != 0 {
		t.Fatalf("an expired hold started %v, want group 0", h.campaigned)
	}
}

// Without quiescence the groups stay awake: an election after a death
// is queued only by the campaigner, at most CampaignsPerTick start per
// tick, and a group that is gone or found a leader meanwhile is skipped.
func TestElectionsAwake(t *testing.T) {
	const n = groups.CampaignsPerTick + 2
	h := newElectionHost(t, n)
	e := groups.NewElections[int](h, false, timeout)
	if !e.Room() {
		t.Fatal("no room without quiescence")
	}
	h.groups[0].live = false
	h.groups[1].g = leader(t)
	for i := range n {
		e.AfterDeath(i, true)
	}
	e.AfterDeath(n, false) // not the campaigner: nothing queued for it
	e.Tick()
	if len(h.campaigned) != groups.CampaignsPerTick || h.campaigned[0] != 2 {
		t.Fatalf("one tick started %d elections from group %v, want %d from group 2", len(h.campaigned), h.campaigned[:1], groups.CampaignsPerTick)
	}
	if h.groups[2].c.Held() || h.pending != 0 {
		t.Fatal("an awake host's elections hold groups")
	}
	e.Tick()
	if len(h.campaigned) != n-2 || e.Pending() {
		t.Fatalf("%d elections started in all, Pending %v; want %d, false", len(h.campaigned), e.Pending(), n-2)
	}
}

// Stand starts an election at once while there is room, and not in a
// group that is gone or has a leader; without room (quiescence, and
// CampaignsInFlight elections under way) it queues it, held.
func TestElectionsStand(t *testing.T) {
	h := newElectionHost(t, 3)
	e := groups.NewElections[int](h, false, timeout)
	h.groups[1].live = false
	h.groups[2].g = leader(t)
	for i := range 3 {
		e.Stand(i)
	}
	if len(h.campaigned) != 1 || h.campaigned[0] != 0 || e.Pending() {
		t.Fatalf("started %v, Pending %v; want [0] at once, nothing pending", h.campaigned, e.Pending())
	}

	const n = groups.CampaignsInFlight + 1
	h = newElectionHost(t, n)
	e = groups.NewElections[int](h, true, timeout)
	for i := range n {
		e.Stand(i)
	}
	if len(h.campaigned) != n-1 || e.InFlight() != n-1 {
		t.Fatalf("started %d, in flight %d; want %d at once", len(h.campaigned), e.InFlight(), n-1)
	}
	if last := h.groups[n-1].c; !last.Queued() || !last.Held() || h.pending == 0 {
		t.Fatalf("the election past the bound: queued %v held %v pending %d, want queued and held", last.Queued(), last.Held(), h.pending)
	}
}

// A new group's first election (First) goes ahead of every election
// queued before it: after a node liveness false alarm an overloaded host
// has a thousand re-elections queued, and a partition created then would
// wait for all of them, longer than its creator's request deadline
// (issue 33, case R6 at 10,000 topics). One that yields without a winner
// (its followers not built yet) goes back ahead of them too.
func TestElectionsFirstGoesAhead(t *testing.T) {
	const queued = 3 * groups.CampaignsInFlight
	fresh := queued
	h := newElectionHost(t, queued+1)
	e := groups.NewElections[int](h, true, timeout)
	for i := range queued {
		e.Queue(i)
	}
	e.Tick() // the first CampaignsInFlight under way, the rest queued
	e.First(fresh)
	if e.Room() {
		t.Fatal("room for an election with the bound reached")
	}
	e.Queue(fresh)
	patience := groups.CampaignPatienceTimeouts * timeout
	for range patience {
		e.Tick()
	}
	// The elections under way yielded (no votes arrive): the new group's
	// takes the first place freed, ahead of the 2×CampaignsInFlight
	// queued before it.
	got := h.campaigned[groups.CampaignsInFlight:]
	if len(got) != groups.CampaignsInFlight || got[0] != fresh {
		t.Fatalf("after the patience elections started in %v: want the new group %d first", got, fresh)
	}
	for range patience {
		e.Tick()
	}
	got = h.campaigned[2*groups.CampaignsInFlight:]
	if len(got) == 0 || got[0] != fresh {
		t.Fatalf("after the new group's election yielded, elections started in %v: want it first again", got)
	}
	if len(h.failed) != 0 {
		t.Fatalf("groups failed: %v", h.failed)
	}
}

// BenchmarkUnholdAwake is what a tick costs a host per awake group with
// no candidacy to clear (Unhold is called on every group it ticks).
func BenchmarkUnholdAwake(b *testing.B) {
	g, err := replica.New(replica.Config{Group: 1, Node: 1, Peers: []uint64{1, 2, 3}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	var c groups.Candidacy
	for b.Loop() {
		c.Unhold(g)
	}
}
