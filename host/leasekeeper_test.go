package host

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// testHolder is a LeaseHolder that records what the keeper told it.
type testHolder struct {
	live           bool
	renewed, retry int
	gone, unkept   bool
}

func (h *testHolder) Live(time.Time) bool { return h.live }
func (h *testHolder) Unkept()             { h.unkept = true }
func (h *testHolder) Renewed(_ time.Time, err error) {
	switch {
	case err == nil:
		h.renewed++
	case errors.Is(err, shard.ErrRetry):
		h.retry++
	default:
		h.gone = true
	}
}

// A node's kept leases of one session timeout are renewed together, in
// one round per third of the session on the lease window's grid: a
// thousand members that joined over three seconds cost nine rounds in
// thirty seconds (not a thousand timers), each round lists every live
// member in the order they were added, a member that is not live is
// forgotten and told, one the leader refused for good is forgotten, one
// that met a retriable failure is kept.
func TestLeaseKeeperRenewsARoundTogether(t *testing.T) {
	k := newLeaseKeeper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const session = 10 * time.Second
	hs := make([]*testHolder, 1000)
	kls := make([]*keptLease, 1000)
	for i := range hs {
		hs[i] = &testHolder{live: true}
		kls[i] = &keptLease{l: MemberLease{Group: "g", Member: uint64(i), Session: session}, h: hs[i]}
		k.add(kls[i], t0.Add(time.Duration(i)*3*time.Millisecond))
	}
	if kept, next := k.due(t0.Add(3 * time.Second)); len(kept) != 0 || !next.Equal(t0.Add(3300*time.Millisecond)) {
		t.Fatalf("before the first round: %d due, next %v", len(kept), next.Sub(t0))
	}
	rounds := 0
	now := t0.Add(3 * time.Second)
	for {
		kept, next := k.due(now)
		if len(kept) > 0 {
			rounds++
			if len(kept) != 1000 {
				t.Fatalf("round %d renews %d of 1000", rounds, len(kept))
			}
			for i, kl := range kept {
				if kl.l.Member != uint64(i) {
					t.Fatalf("round %d lists member %d at %d", rounds, kl.l.Member, i)
				}
			}
			k.renewed(kept, now, func(int) error { return nil })
		}
		if next.Sub(t0) > 30*time.Second {
			break
		}
		if !next.After(now) {
			t.Fatalf("next round %v is not after now %v", next.Sub(t0), now.Sub(t0))
		}
		now = next
	}
	if rounds != 9 {
		t.Fatalf("%d rounds in thirty seconds, want 9 (every 3.3 s)", rounds)
	}
	for i, h := range hs {
		if h.renewed != 9 {
			t.Fatalf("member %d renewed %d times, want 9", i, h.renewed)
		}
	}

	// Not live: forgotten at the next round and told. Refused for good:
	// forgotten. Retriable: kept.
	hs[1].live = false
	now = now.Add(session)
	kept, _ := k.due(now)
	if len(kept) != 999 || !hs[1].unkept {
		t.Fatalf("a member not live: %d due, unkept %v", len(kept), hs[1].unkept)
	}
	k.renewed(kept, now, func(i int) error {
		switch kept[i].l.Member {
		case 2:
			return fmt.Errorf("%w: gone", metadata.ErrUnknownMember)
		case 3:
			return shard.ErrRetry
		}
		return nil
	})
	if !hs[2].gone || hs[3].retry != 1 {
		t.Fatalf("after a refusal and a retriable failure: gone %v, retries %d", hs[2].gone, hs[3].retry)
	}
	k.remove(kls[4])
	k.remove(kls[4]) // idempotent
	now = now.Add(session)
	kept, _ = k.due(now)
	if len(kept) != 997 {
		t.Fatalf("%d due after forgetting three, want 997", len(kept))
	}
	for _, kl := range kept {
		if m := kl.l.Member; m >= 1 && m <= 4 && m != 3 {
			t.Fatalf("member %d is still kept", m)
		}
	}

	// Nothing kept: no round due.
	for _, kl := range kls {
		k.remove(kl)
	}
	if kept, next := k.due(now.Add(session)); len(kept) != 0 || !next.IsZero() {
		t.Fatalf("nothing kept: %d due, next %v", len(kept), next)
	}
}
