package sim

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
)

// Invariant 11 compares how far members applied the metadata log, so
// its measure (metaIndex) must count every entry applied, commands or
// not. Three founders add node 4 while it is cut off (the change carries
// the AddNode command), then elect a new leader among themselves, whose
// empty entry, without a command, is the index of their next snapshot
// (one per entry applied). Node 4, reachable again, joins by that
// snapshot and is promoted (a change without a command): the founders'
// last command stays the AddNode, the joiner's last state is the later
// snapshot. A read barrier on a founder, started once everything
// settled, must be judged to have seen everything applied anywhere.
// Measured by the last command's or snapshot's index (MetadataApplied),
// the founder stays behind the joiner for good, and the check failed so
// on cluster seeds 20529 and 21097 with nothing wrong.
func TestBarrierIndexCountsEntriesWithoutCommand(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	net := transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true})
	t.Cleanup(func() { _ = net.Close() })
	engines := map[uint64]*host.Engine{}
	for id := uint64(1); id <= 4; id++ {
		peers, join := []transport.NodeID{1, 2, 3}, false
		if id == 4 {
			peers, join = []transport.NodeID{1, 2, 3, 4}, true
		}
		e, err := host.New(host.Config{Shards: 1, Manual: true, Clock: clk, DataDir: "/data", FS: vfs.NewMem(), MetadataSnapshotEvery: 1,
			Cluster: &host.Cluster{ID: transport.NodeID(id), Peers: peers, Join: join, Bus: net.Endpoint(transport.NodeID(id))}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines[id] = e
	}
	// round: every engine handles its metadata member, takes what was
	// delivered to it and ticks once; the clock moves one raft tick.
	round := func() {
		t.Helper()
		for id := uint64(1); id <= 4; id++ {
			e := engines[id]
			if err := e.HandleMetadata(); err != nil {
				t.Fatal(err)
			}
			ep := net.Endpoint(transport.NodeID(id))
			for len(ep.Recv()) > 0 {
				if err := e.Deliver(<-ep.Recv()); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.TickMetadata(); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(10 * time.Millisecond)
	}
	// cut cuts (linked: restores) both directions between a and others.
	cut := func(a uint64, linked bool, others ...uint64) {
		for _, b := range others {
			if linked {
				net.Connect(transport.NodeID(a), transport.NodeID(b))
				net.Connect(transport.NodeID(b), transport.NodeID(a))
			} else {
				net.Disconnect(transport.NodeID(a), transport.NodeID(b))
				net.Disconnect(transport.NodeID(b), transport.NodeID(a))
			}
		}
	}
	// leader runs rounds until one of among leads by its own account.
	leader := func(among ...uint64) uint64 {
		t.Helper()
		for range 200 {
			round()
			for _, id := range among {
				if engines[id].MetadataStatus().Leader == id {
					return id
				}
			}
		}
		t.Fatalf("nodes %v elected no metadata leader", among)
		return 0
	}
	lead := leader(1, 2, 3)
	cut(4, false, 1, 2, 3)
	if err := engines[lead].ProposeAddNode(engines[lead].NewMetadataKey(), 4); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		round()
	}
	var rest []uint64
	for id := uint64(1); id <= 3; id++ {
		if id != lead {
			rest = append(rest, id)
		}
	}
	cut(lead, false, rest...)
	next := leader(rest...)
	cut(lead, true, rest...)
	cut(4, true, 1, 2, 3)
	joiner := engines[4]
	for range 300 {
		round()
		if len(joiner.MetadataStatus().Voters) == 4 {
			break
		}
	}
	for range 50 { // every founder applies the promotion too
		round()
	}
	if st := joiner.MetadataStatus(); len(st.Voters) != 4 || st.SnapshotIndex == 0 {
		t.Fatalf("node 4 holds voters %v and snapshot index %d: not promoted after a snapshot", st.Voters, st.SnapshotIndex)
	}

	founder := engines[next]
	// The case the measure must get right: the founder's last command
	// is older than the joiner's snapshot.
	if f, j := founder.MetadataApplied(), joiner.MetadataApplied(); f >= j {
		t.Fatalf("the founder's last command or snapshot is at %d, the joiner's at %d: the case is not reached (%+v %+v)", f, j, founder.MetadataStatus(), joiner.MetadataStatus())
	}
	var want uint64
	for _, e := range engines {
		want = max(want, metaIndex(e))
	}
	b, err := founder.StartReadBarrier(clk.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		err, done := b.Step()
		if done {
			if err != nil {
				t.Fatalf("the read barrier failed: %v", err)
			}
			if got := metaIndex(founder); got < want {
				t.Fatalf("a read barrier on a founder returned with index %d by invariant 11's measure, but %d was applied on a node when it started (the joiner's snapshot index %d, the founder's raft applied index %d)",
					got, want, joiner.MetadataStatus().SnapshotIndex, founder.MetadataStatus().Applied)
			}
			return
		}
		round()
	}
	t.Fatal("the read barrier on a founder never returned")
}
