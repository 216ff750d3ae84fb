package host

import (
	"context"
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
	for range 20 {
		for _, e := range tr.engines {
			if err := e.TickMetadata(); err != nil {
				t.Fatal(err)
			}
		}
		tr.deliver()
	}
	ctx := context.Background()
	live := tr.engines[0].cl.live
	if !live.alive(2) || !live.alive(3) {
		t.Fatal("peers dead before the stall")
	}

	// The driver wakes after ten timeouts' worth of ticks, with nothing
	// read from its peers meanwhile.
	live.advance(ctx, 10*live.timeout)
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
