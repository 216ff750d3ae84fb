package groups_test

import (
	"testing"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
)

// Down records liveness's verdicts and says when one changed what it held.
func TestDown(t *testing.T) {
	var d groups.Down
	if !d.Live(2) {
		t.Fatal("the zero Down holds a peer dead")
	}
	if d.Set(2, true) {
		t.Fatal("a live peer reported live changed Down")
	}
	if !d.Set(2, false) || d.Live(2) || !d.Live(3) {
		t.Fatal("a death was not recorded for that peer alone")
	}
	if d.Set(2, false) {
		t.Fatal("a second death changed Down")
	}
	if !d.Set(2, true) || !d.Live(2) {
		t.Fatal("a return was not recorded")
	}
}

// Every node with the same view picks the same campaigner; spread picks
// among the live members in the order given, and the dead are skipped.
func TestCampaigner(t *testing.T) {
	var d groups.Down
	members := []uint64{1, 2, 3}
	for spread, want := range []uint64{1, 2, 3, 1} {
		if got := groups.Campaigner(members, d.Live, uint64(spread)); got != want {
			t.Fatalf("spread %d: campaigner %d, want %d", spread, got, want)
		}
	}
	d.Set(1, false)
	for spread, want := range []uint64{2, 3, 2} {
		if got := groups.Campaigner(members, d.Live, uint64(spread)); got != want {
			t.Fatalf("1 dead, spread %d: campaigner %d, want %d", spread, got, want)
		}
	}
	if got := groups.Campaigner([]uint64{3, 2, 1}, d.Live, 0); got != 3 {
		t.Fatalf("members in another order: campaigner %d, want the first live, 3", got)
	}
	d.Set(2, false)
	d.Set(3, false)
	if got := groups.Campaigner(members, d.Live, 5); got != 0 {
		t.Fatalf("no member alive: campaigner %d, want 0", got)
	}
}

// A death forgets the leader only when the dead peer leads; a return
// wakes only a leader.
func TestPeerLive(t *testing.T) {
	g := leader(t)
	if v, err := groups.PeerLive(g, 2, false); v != groups.PeerUnmoved || err != nil {
		t.Fatalf("peer 2, not the leader, died: %v %v", v, err)
	}
	if g.Leader() != 1 {
		t.Fatalf("leader %d after another peer died", g.Leader())
	}
	if v, err := groups.PeerLive(g, 2, true); v != groups.PeerBack || err != nil {
		t.Fatalf("peer 2 returned to a leader: %v %v", v, err)
	}
	f := follower(t, 7)
	if v, _ := groups.PeerLive(f, 2, true); v != groups.PeerUnmoved {
		t.Fatalf("peer 2 returned to a follower: %v", v)
	}
	if v, err := groups.PeerLive(g, 1, false); v != groups.LeaderLost || err != nil {
		t.Fatalf("the leader's node died: %v %v", v, err)
	}
}

// CampaignerOf goes by the group's voters in ascending order, whatever
// order the host lists its members in, so hosts that list them
// differently agree; a member with no voters goes by the members given.
func TestCampaignerOf(t *testing.T) {
	var d groups.Down
	g, err := replica.New(replica.Config{Group: 1, Node: 1, Peers: []uint64{3, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, members := range [][]uint64{{3, 2, 1}, {2, 3, 1}, nil} {
		if got := groups.CampaignerOf(g, members, d.Live, 0); got != 1 {
			t.Fatalf("members %v: campaigner %d, want 1, the first voter in ascending order", members, got)
		}
	}
	d.Set(1, false)
	if got := groups.CampaignerOf(g, []uint64{3, 2}, d.Live, 0); got != 2 {
		t.Fatalf("voter 1 dead: campaigner %d, want 2", got)
	}
	if got := groups.CampaignerOf(nil, []uint64{3, 2}, d.Live, 0); got != 3 {
		t.Fatalf("no group: campaigner %d, want 3, the first live member given", got)
	}
}
