package groups_test

import (
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
)

// sink is a Handler for a lone voter: nothing to send, nothing applied.
type sink struct{}

func (sink) Send(*raftpb.Message)               {}
func (sink) Apply(uint64, uint64, []byte) error { return nil }
func (sink) LeaderChanged(uint64)               {}
func (sink) ApplySnapshot(uint64, []byte) error { return nil }

func handle(t *testing.T, g *replica.Group) {
	t.Helper()
	for g.HasReady() {
		if err := g.Handle(sink{}); err != nil {
			t.Fatal(err)
		}
	}
}

// leader is a lone voter that leads its group.
func leader(t *testing.T) *replica.Group {
	t.Helper()
	g, err := replica.New(replica.Config{Group: 1, Node: 1, Peers: []uint64{1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	if err := g.Campaign(); err != nil {
		t.Fatal(err)
	}
	handle(t, g)
	if !g.IsLeader() {
		t.Fatal("a lone voter that campaigned does not lead")
	}
	return g
}

// A read is asked, confirmed, then served once its index is applied, in
// confirmation order; a read still asked is not served.
func TestReadsConfirmThenServe(t *testing.T) {
	g := leader(t)
	var r groups.Reads[string]
	for _, item := range []string{"a", "b"} {
		if err := r.Ask(g, item); err != nil {
			t.Fatal(err)
		}
	}
	if r.Asked() != 2 || r.Waiting() != 0 {
		t.Fatalf("asked %d waiting %d, want 2 and 0", r.Asked(), r.Waiting())
	}
	handle(t, g) // a lone voter confirms at once
	r.Confirm(g)
	if r.Asked() != 0 || r.Waiting() != 2 {
		t.Fatalf("after Confirm: asked %d waiting %d, want 0 and 2", r.Asked(), r.Waiting())
	}
	var served []string
	r.Serve(0, func(s string) { served = append(served, s) })
	if len(served) != 0 {
		t.Fatalf("served %q before their index applied", served)
	}
	r.Serve(g.Applied(), func(s string) { served = append(served, s) })
	if !slices.Equal(served, []string{"a", "b"}) || r.Waiting() != 0 {
		t.Fatalf("served %q (waiting %d), want [a b] and none left", served, r.Waiting())
	}
}

// After the voters change, Reask asks every read still asked again, and
// the new confirmations serve them; a confirmation for a read already
// gone is ignored.
func TestReadsReaskAfterVotersChanged(t *testing.T) {
	g := leader(t)
	var r groups.Reads[string]
	if err := r.Ask(g, "x"); err != nil {
		t.Fatal(err)
	}
	handle(t, g)
	_ = g.TakeReadStates() // the confirmation is lost
	r.VotersChanged()
	if !r.ReaskDue() {
		t.Fatal("ReaskDue false after VotersChanged")
	}
	asked, err := r.Reask(g)
	if err != nil || !asked || r.ReaskDue() {
		t.Fatalf("Reask = %v, %v (due %v), want true, nil, false", asked, err, r.ReaskDue())
	}
	handle(t, g)
	r.Confirm(g)
	var served []string
	r.Serve(g.Applied(), func(s string) { served = append(served, s) })
	if !slices.Equal(served, []string{"x"}) {
		t.Fatalf("served %q, want [x]", served)
	}
	asked, err = r.Reask(g)
	if err != nil || asked {
		t.Fatalf("Reask with no read asked = %v, %v, want false, nil", asked, err)
	}
}

// A member that does not lead asks nothing again; DropAsked drops only
// the reads not confirmed, Drop every one.
func TestReadsDrop(t *testing.T) {
	g := leader(t)
	var r groups.Reads[string]
	for i, item := range []string{"confirmed", "asked"} {
		if err := r.Ask(g, item); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			handle(t, g)
			r.Confirm(g)
		}
	}
	var dropped []string
	r.DropAsked(func(s string) { dropped = append(dropped, s) })
	if !slices.Equal(dropped, []string{"asked"}) || r.Waiting() != 1 {
		t.Fatalf("DropAsked dropped %q (waiting %d), want [asked] and 1", dropped, r.Waiting())
	}
	// Asked again of a member that then no longer leads: Reask asks
	// nothing (LeaderChanged drops such reads).
	if err := r.Ask(g, "asked"); err != nil {
		t.Fatal(err)
	}
	follower, err := replica.New(replica.Config{Group: 2, Node: 1, Peers: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	r.VotersChanged()
	if asked, err := r.Reask(follower); asked || err != nil {
		t.Fatalf("Reask on a follower = %v, %v, want false, nil", asked, err)
	}
	r.Drop(func(s string) { dropped = append(dropped, s) })
	if !slices.Equal(dropped, []string{"asked", "asked", "confirmed"}) || r.Waiting() != 0 || r.Asked() != 0 {
		t.Fatalf("Drop dropped %q, want [asked asked confirmed] and nothing left", dropped)
	}
}
