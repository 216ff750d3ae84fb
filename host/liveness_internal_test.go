package host

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/parkway-io/parkway/transport"
)

// A node whose own driver was starved of CPU wakes late and counts the
// ticks it slept through at once: every peer then looks silent for longer
// than the timeout, though their heartbeats may sit unread in this
// node's inbox. Liveness must not declare them dead on that one late
// round; a peer silent over as many heartbeat rounds as the timeout has
// intervals is dead.
func TestLivenessStarvedDriverDeclaresNobodyDead(t *testing.T) {
	tr := newManualTrio(t)
	tr.tick(20)
	ctx := context.Background()
	live := tr.engines[0].cl.live
	if !live.alive(2) || !live.alive(3) {
		t.Fatal("peers dead before the stall")
	}

	// The driver wakes after ten timeouts' worth of ticks, with nothing
	// read from its peers meanwhile.
	live.advance(ctx, 10*live.timeout, 1)
	if !live.alive(2) || !live.alive(3) {
		t.Fatalf("one late heartbeat round after %d ticks declared a peer dead (2 alive: %v, 3 alive: %v)",
			10*live.timeout, live.alive(2), live.alive(3))
	}
	// The peers run a heartbeat round, read at once: heard from again.
	for _, e := range tr.engines[1:] {
		for range live.every {
			if err := e.TickMetadata(); err != nil {
				t.Fatal(err)
			}
		}
	}
	tr.deliver()

	// Node 3 falls silent while node 1's driver runs on time: dead
	// once its silence passed the timeout (after miss+1 rounds of
	// every ticks), as before the rounds were counted, and not before.
	for round := int64(1); round <= live.miss+1; round++ {
		for _, e := range tr.engines[:2] {
			for range live.every {
				if err := e.TickMetadata(); err != nil {
					t.Fatal(err)
				}
			}
		}
		tr.deliverExcept(3)
		if want := round <= live.miss; live.alive(3) != want {
			t.Fatalf("after %d rounds without node 3: alive %v, want %v", round, live.alive(3), want)
		}
		if !live.alive(2) {
			t.Fatalf("after %d rounds: node 2, which keeps sending, declared dead", round)
		}
	}
}

// A checker whose driver ran on time while a peer missed a few
// heartbeats, then stalled for longer than the timeout (starved of CPU,
// or the process paused) and resumed, must not declare the peer dead for
// the gap it missed itself: silence is counted on the checker's own
// clock, the ticks its driver planned. A late wake after most of the
// timeout's rounds used to complete them (issue 33: one node's false
// alarm re-elected the groups it led). A peer that stays silent is
// declared dead as before, once its silence on that clock passes the
// timeout.
func TestLivenessStalledCheckerCountsNotItsGap(t *testing.T) {
	tr := newManualTrio(t)
	tr.tick(20)
	ctx := context.Background()
	live := tr.engines[0].cl.live
	h := live.heard.Load().at[3]
	heardAt, heardRound := h.tick.Load(), h.round.Load()
	if !live.alive(3) || live.own.Load()-heardAt > live.every {
		t.Fatalf("node 3 not heard within the last interval before the test (alive %v, own %d, heard %d)",
			live.alive(3), live.own.Load(), heardAt)
	}

	// Node 3 falls silent; nodes 1 and 2 tick on time until node 1's own
	// clock is half an interval short of the timeout.
	tickOnTime := func() {
		t.Helper()
		for _, e := range tr.engines[:2] {
			if err := e.TickMetadata(); err != nil {
				t.Fatal(err)
			}
		}
		tr.deliverExcept(3)
	}
	for live.own.Load()-heardAt < live.timeout-live.every/2 {
		tickOnTime()
	}
	if !live.alive(3) {
		t.Fatal("node 3 declared dead before the timeout")
	}
	if got := live.rounds.Load() - heardRound; got < live.miss-1 {
		t.Fatalf("%d heartbeat rounds since node 3 was heard, want at least %d: the late wake below would not complete them", got, live.miss-1)
	}

	// Node 1's driver planned one tick and woke two timeouts later.
	live.advance(ctx, 2*live.timeout, 1)
	if !live.alive(3) {
		t.Fatalf("a wake %d ticks late declared node 3 dead after %d ticks of silence on the checker's own clock",
			2*live.timeout-1, live.own.Load()-heardAt)
	}
	if !live.alive(2) {
		t.Fatal("node 2, heard every tick, declared dead")
	}

	// Node 3 stays silent while node 1 runs on time: dead once its
	// silence on the own clock passes the timeout, not before.
	for live.own.Load()-heardAt <= live.timeout {
		if !live.alive(3) {
			t.Fatalf("node 3 declared dead after %d ticks of silence on the own clock, timeout %d", live.own.Load()-heardAt, live.timeout)
		}
		tickOnTime()
	}
	if live.alive(3) {
		t.Fatalf("node 3 silent for %d ticks on the own clock (timeout %d): still alive", live.own.Load()-heardAt, live.timeout)
	}
	if !live.alive(2) {
		t.Fatal("node 2, heard every tick, declared dead")
	}
}

// deliverExcept is deliver for every node but silent, which neither
// receives nor (so) answers anything.
func (tr *manualTrio) deliverExcept(silent uint64) {
	for moved := true; moved; {
		moved = false
		for _, e := range tr.engines {
			if e.NodeID() == silent {
				continue
			}
			ep := tr.net.Endpoint(transport.NodeID(e.NodeID()))
			for len(ep.Recv()) > 0 {
				if err := e.Deliver(<-ep.Recv()); err != nil {
					tr.t.Fatal(err)
				}
				moved = true
			}
		}
	}
}

// A node that can send but not hear (a one-way partition) keeps sending
// heartbeats its peers hear: they must hold it dead all the same, once its
// heartbeats report that it hears none of them, and alive again once it
// hears them; it holds them dead by silence. A node that hears it and
// that it hears stays alive to both.
func TestLivenessDeafPeerIsDead(t *testing.T) {
	tr := newManualTrio(t)
	rounds := func(k int64) {
		for range k {
			for _, e := range tr.engines {
				for range tr.engines[0].cl.live.every {
					if err := e.TickMetadata(); err != nil {
						t.Fatal(err)
					}
				}
			}
			tr.deliver()
		}
	}
	live := func(of, peer uint64) bool { return tr.engines[of-1].cl.live.alive(peer) }
	rounds(2)
	miss := tr.engines[0].cl.live.miss
	// Node 1 goes deaf: nodes 2 and 3 still hear it.
	tr.net.DisconnectGroups([]transport.NodeID{2, 3}, []transport.NodeID{1})
	rounds(miss + 3)
	if live(1, 2) || live(1, 3) {
		t.Fatal("deaf node 1 holds peers it does not hear alive")
	}
	if live(2, 1) || live(3, 1) {
		t.Fatalf("nodes 2 and 3 hold deaf node 1 alive (2: %v, 3: %v): it reports that it hears neither", live(2, 1), live(3, 1))
	}
	if !live(2, 3) || !live(3, 2) {
		t.Fatal("nodes 2 and 3, linked both ways, hold each other dead")
	}
	tr.net.Heal()
	rounds(3)
	for a := uint64(1); a <= 3; a++ {
		for b := uint64(1); b <= 3; b++ {
			if a != b && !live(a, b) {
				t.Fatalf("healed: node %d holds node %d dead", a, b)
			}
		}
	}
}

// A peer held dead because its reports said it did not hear this node,
// though this node heard it, then crashing as the link healed, sends no
// report again: its last one goes stale, so it is alive to this node
// until its silence passes the timeout, and its death by silence is a
// transition of its own, which the groups it led act on. Held dead by
// the stale report instead, it never died again and those groups never
// failed over (cluster simulator seed 1).
func TestLivenessStaleReportThenSilence(t *testing.T) {
	tr := newManualTrio(t)
	live := tr.engines[0].cl.live
	round := func(nodes []*Engine, silent uint64) {
		for _, e := range nodes {
			for range live.every {
				if err := e.TickMetadata(); err != nil {
					t.Fatal(err)
				}
			}
		}
		tr.deliverExcept(silent)
	}
	for range 2 {
		round(tr.engines, 0)
	}
	// Node 1 is mute: it hears nodes 2 and 3, which do not hear it.
	tr.net.DisconnectGroups([]transport.NodeID{1}, []transport.NodeID{2, 3})
	for range live.miss + 3 {
		round(tr.engines, 0)
	}
	if live.alive(3) {
		t.Fatal("node 3 reports that it does not hear node 1, which holds it alive")
	}
	// The link heals as node 3 crashes: it neither sends nor hears.
	tr.net.Heal()
	wasAlive := false
	for range live.miss + 4 {
		round(tr.engines[:2], 3)
		wasAlive = wasAlive || live.alive(3)
	}
	if !wasAlive {
		t.Fatal("node 1 held node 3 dead by its last report throughout: its crash made no transition")
	}
	if live.alive(3) {
		t.Fatal("node 3, silent past the timeout, is alive to node 1")
	}
}

// FuzzLivenessReport: a heartbeat's payload, the peers its sender does not
// hear, is hostile input read in place: a whole number of ids or
// ErrMalformed, never a panic, and an id is reported exactly when the
// payload holds it.
func FuzzLivenessReport(f *testing.F) {
	f.Add([]byte(nil), uint64(1))
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 2), 3), uint64(3))
	f.Add([]byte{1, 2, 3}, uint64(1))
	f.Fuzz(func(t *testing.T, payload []byte, id uint64) {
		got, err := reportsSilent(payload, id)
		if len(payload)%8 != 0 {
			if !errors.Is(err, ErrMalformed) || got {
				t.Fatalf("a report of %d bytes: %v, %v", len(payload), got, err)
			}
			return
		}
		want := false
		for i := 0; i < len(payload); i += 8 {
			want = want || binary.LittleEndian.Uint64(payload[i:]) == id
		}
		if err != nil || got != want {
			t.Fatalf("report %x names %d: got %v (%v), want %v", payload, id, got, err, want)
		}
	})
}
