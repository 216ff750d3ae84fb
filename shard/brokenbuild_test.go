//go:build parkway_brokenbuild

package shard

import (
	"slices"
	"testing"

	"github.com/parkway-io/parkway/internal/testhooks"
)

// The ServeStaleParked hook breaks behaviour 4 exactly as the simulator's
// self-test expects: a frame stamped with a dead incarnation is served into
// its replacement instead of being rejected.
func TestServeStaleParkedHookServesDeadIncarnation(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, _ := h.topic("t")
	dead := produce(ns, "dead") // stamped with the first incarnation
	s.handle(dead.f)
	epoch := h.recreate(ns, "t")
	testhooks.ServeStaleParked.Store(true)
	t.Cleanup(func() { testhooks.ServeStaleParked.Store(false) })
	p := h.build(ns, epoch)
	h.insert(s, p)
	if r := dead.answered(t); r.Err != nil {
		t.Fatalf("hooked re-dispatch rejected the stale frame: %v", r.Err)
	}
	if got := payloads(t, p); !slices.Equal(got, []string{"dead"}) {
		t.Fatalf("partition holds %q, want the dead incarnation's frame (the bug)", got)
	}
}
