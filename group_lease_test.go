package parkway_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/transport"
)

// A heartbeat that changes nothing is not a metadata-log entry: an idle
// group of thirty members on three nodes, each heartbeating every second
// for four session timeouts, adds nothing to the metadata log (each
// heartbeat was an entry before: 360 of them), and none of them expires.
func TestGroupIdleHeartbeatsAreNotLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := threeNodes(t)
		ctx := ctxFor(t)
		tp := mustTopic(t, nodes[1], mustStream(t, nodes[1], "s"), "t", 12)
		if err := nodes[1].Admin().CreateGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		var ms []*parkway.Member
		for i := range 30 {
			n := nodes[transport.NodeID(1+i%3)]
			m, err := n.JoinGroup(ctx, tp, "g", parkway.MemberConfig{Name: fmt.Sprintf("m%d", i), SessionTimeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		gen := settleMembers(t, ms...)
		time.Sleep(time.Second) // what the last round committed is applied everywhere
		applied, rev := parkway.MetadataApplied(nodes[1]), parkway.CommittedState(nodes[1]).Revision
		for range 12 {
			time.Sleep(time.Second)
			for _, m := range ms {
				a, err := m.Heartbeat(ctx)
				if err != nil {
					t.Fatalf("member %d: %v", m.ID(), err)
				}
				if a.Generation != gen {
					t.Fatalf("member %d at generation %d, the idle group was at %d", m.ID(), a.Generation, gen)
				}
			}
		}
		for id, n := range nodes {
			if got := parkway.MetadataApplied(n); got != applied {
				t.Errorf("node %d: the metadata log grew from %d to %d entries while the group idled", id, applied, got)
			}
			if got := parkway.CommittedState(n).Revision; got != rev {
				t.Errorf("node %d: the metadata revision moved from %d to %d while the group idled", id, rev, got)
			}
		}
		g, err := nodes[2].Admin().Group(ctx, tp, "g")
		if err != nil || len(g.Members) != 30 || g.Generation != gen {
			t.Fatalf("group after idling: %d members, generation %d (want 30, %d), %v", len(g.Members), g.Generation, gen, err)
		}
	})
}

// Leases live at the metadata leader, in memory; when it dies, the new
// leader grants every member a whole session from its takeover: members
// that heartbeat on through the election are never expired, and a member
// that stopped heartbeating just before the leader died expires one
// session timeout after the takeover (not earlier, not much later).
func TestGroupLeasesOutliveTheMetadataLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := threeNodes(t)
		ctx := ctxFor(t)
		const timeout = 3 * time.Second
		tp := mustTopic(t, nodes[2], mustStream(t, nodes[2], "s"), "t", 6)
		if err := nodes[2].Admin().CreateGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		// The members live on the two nodes that do not lead the
		// metadata (x and y); the leader is the one cut off.
		lead, others := metadataLeaderOf(t, ctx, nodes[2])
		x, y := others[0], others[1]
		// The members live by their own heartbeats (a MaxPollInterval of
		// a millisecond: their nodes keep nothing for them), so dead's
		// silence is its end.
		join := func(n *parkway.Node, name string) *parkway.Member {
			m, err := n.JoinGroup(ctx, tp, "g", parkway.MemberConfig{Name: name, SessionTimeout: timeout, MaxPollInterval: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		a, b, dead := join(nodes[x], "a"), join(nodes[y], "b"), join(nodes[y], "dead")
		settleMembers(t, a, b, dead)
		// Long enough that the members' join and commit times are well
		// past: only the leader's in-memory leases keep them.
		for range 2 * int(timeout/time.Second) {
			time.Sleep(time.Second)
			settleMembers(t, a, b, dead)
		}
		// dead stops; the leader is cut off at once.
		net.Partition([]transport.NodeID{lead}, []transport.NodeID{x, y})
		cut := time.Now()
		// a and b heartbeat every second through the election (a
		// heartbeat may wait out the election and retry).
		beats, stop := make(chan error, 2), make(chan struct{})
		stopped := false
		stopBeats := func() error {
			if stopped {
				return nil
			}
			stopped = true
			close(stop)
			var first error
			for range 2 {
				if err := <-beats; err != nil && first == nil {
					first = err
				}
			}
			return first
		}
		defer stopBeats() // a failed check ends the test with the heartbeats stopped
		for _, m := range []*parkway.Member{a, b} {
			go func() {
				for {
					select {
					case <-stop:
						beats <- nil
						return
					case <-time.After(time.Second):
					}
					if _, err := m.Heartbeat(ctx); err != nil {
						beats <- fmt.Errorf("member %d: %w", m.ID(), err)
						return
					}
				}
			}()
		}
		var took time.Time
		waitFor(t, "a new metadata leader", func() bool {
			st, err := nodes[x].Cluster().State(ctx)
			if err == nil && st.MetadataLeader != 0 && st.MetadataLeader != lead {
				took = time.Now()
				return true
			}
			return false
		})
		t.Logf("new leader %v after the cut", took.Sub(cut))
		members := func() map[string]bool {
			g, err := nodes[x].Admin().Group(ctx, tp, "g")
			if err != nil {
				return nil
			}
			out := map[string]bool{}
			for _, m := range g.Members {
				out[m.Name] = true
			}
			return out
		}
		var gone time.Time
		for deadline := took.Add(timeout + 2*time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			ms := members()
			if ms == nil {
				continue // a read barrier may fail during the election
			}
			if !ms["a"] || !ms["b"] {
				t.Fatalf("a live member expired %v after the takeover: %v", time.Since(took), ms)
			}
			if !ms["dead"] {
				gone = time.Now()
				break
			}
		}
		switch {
		case gone.IsZero():
			t.Fatalf("the dead member is still in the group %v after the takeover", time.Since(took))
		case gone.Sub(took) < timeout-200*time.Millisecond:
			t.Fatalf("the dead member expired %v after the takeover, before a whole session of %v", gone.Sub(took), timeout)
		}
		t.Logf("dead member expired %v after the takeover", gone.Sub(took))
		if err := stopBeats(); err != nil {
			t.Fatal(err)
		}
		// a and b are still members, and hold everything between them.
		a2, err := a.Heartbeat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b2, err := b.Heartbeat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(a2.Partitions) + len(a2.Revoking) + len(b2.Partitions) + len(b2.Revoking); n != 6 {
			t.Fatalf("a and b hold %d of 6 partitions: %+v, %+v", n, a2, b2)
		}
	})
}

// CommitOnInterval's timer runs only while handled positions wait for a
// commit, so an idle Consumer's does not fire; a position handled after
// a long idle spell is still committed within CommitInterval, and again
// after the next idle spell (the timer is armed anew each time).
func TestConsumerCommitsOnIntervalAfterIdling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 1)
		c, err := n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Group: "g", SessionTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		delivered := make(chan uint64)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for d, err := range c.Messages(ctx) {
				if err != nil {
					return
				}
				delivered <- d.Offset
			}
		}()
		for i := range 2 {
			time.Sleep(10 * time.Second) // idle: no commit waits
			mustProduce(t, n, tp, parkway.PartitionID(0), fmt.Sprintf("m%d", i))
			if off := <-delivered; off != uint64(i) {
				t.Fatalf("delivered offset %d, want %d", off, i)
			}
			time.Sleep(parkway.DefaultCommitInterval + 100*time.Millisecond)
			g, err := n.Admin().Group(ctx, tp, "g")
			if err != nil {
				t.Fatal(err)
			}
			if p := g.Partitions[0]; !p.Committed || p.Offset != uint64(i+1) {
				t.Fatalf("after idling and handling offset %d: committed %+v, want %d within the commit interval", i, p, i+1)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
	})
}

// leaseCountingBus counts the lease renewal messages its node sends.
type leaseCountingBus struct {
	transport.Bus
	leases *atomic.Int64
}

func (b leaseCountingBus) Send(m transport.Message) error {
	if m.Kind == host.KindLease {
		b.leases.Add(1)
	}
	return b.Bus.Send(m)
}

// A node's members renew their leases together: thirty members of a
// node that does not lead the metadata heartbeat at once, and the node
// sends the metadata leader one message of renewals for them (one per
// heartbeat before), all of them confirmed.
func TestGroupHeartbeatsOfANodeTravelTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		t.Cleanup(func() { _ = net.Close() })
		peers := []transport.NodeID{1, 2, 3}
		nodes := map[transport.NodeID]*parkway.Node{}
		sent := map[transport.NodeID]*atomic.Int64{}
		for _, id := range peers {
			sent[id] = new(atomic.Int64)
			nodes[id] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
				Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: leaseCountingBus{Bus: net.Endpoint(id), leases: sent[id]}}})
		}
		ctx := ctxFor(t)
		tp := mustTopic(t, nodes[1], mustStream(t, nodes[1], "s"), "t", 6)
		st, err := nodes[1].Cluster().State(ctx)
		if err != nil || st.MetadataLeader == 0 {
			t.Fatalf("metadata leader %v (%v)", st.MetadataLeader, err)
		}
		home := nodes[1+st.MetadataLeader%3] // another node
		var ms []*parkway.Member
		for i := range 30 {
			m, err := home.JoinGroup(ctx, tp, "g", parkway.MemberConfig{Name: fmt.Sprintf("m%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		settleMembers(t, ms...)
		synctest.Wait()
		var before int64
		for _, c := range sent {
			before += c.Load()
		}
		errs := make(chan error, len(ms))
		for _, m := range ms {
			go func() {
				_, err := m.Heartbeat(ctx)
				errs <- err
			}()
		}
		for range ms {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		var after int64
		for _, c := range sent {
			after += c.Load()
		}
		if got := after - before; got != 1 {
			t.Fatalf("thirty heartbeats at once sent %d lease messages, want 1", got)
		}
	})
}

// A heartbeat after a metadata election is answered at once. Its renewal
// is confirmed by the leader's read index and then waits for this node to
// apply what the leader had applied; after an election that is the new
// leader's empty entry, which carries no command. The wait compared it
// with the index of the last command applied here, which stays below it
// until the next command commits: on an idle cluster each renewal waited
// out its caller's whole context (20 s here; forever without a deadline).
func TestGroupHeartbeatAfterMetadataElectionIsNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := threeNodes(t)
		ctx := ctxFor(t)
		tp := mustTopic(t, nodes[1], mustStream(t, nodes[1], "s"), "t", 3)
		if err := nodes[1].Admin().CreateGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		lead, others := metadataLeaderOf(t, ctx, nodes[1])
		m, err := nodes[others[0]].JoinGroup(ctx, tp, "g", parkway.MemberConfig{Name: "a", SessionTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		settleMembers(t, m)
		// The leader is cut off; the others elect one of them, and the
		// cluster is whole again with no command after the election.
		net.Partition([]transport.NodeID{lead}, others)
		waitFor(t, "a new metadata leader", func() bool {
			st, err := nodes[others[0]].Cluster().State(ctx)
			return err == nil && st.MetadataLeader != 0 && st.MetadataLeader != lead
		})
		net.Heal()
		applied := parkway.MetadataApplied(nodes[others[0]])
		time.Sleep(2 * time.Second)
		for id, n := range nodes {
			if got := parkway.MetadataApplied(n); got != applied {
				t.Fatalf("node %d applied metadata command %d after the election, want %d: the case needs none", id, got, applied)
			}
		}
		hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := m.Heartbeat(hctx); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("a heartbeat after the metadata election took %v", took)
		}
	})
}

// metadataLeaderOf asks n which node leads the metadata group, and
// returns it with the other two of a three-node cluster.
func metadataLeaderOf(t *testing.T, ctx context.Context, n *parkway.Node) (lead transport.NodeID, others []transport.NodeID) {
	t.Helper()
	st, err := n.Cluster().State(ctx)
	if err != nil || st.MetadataLeader == 0 {
		t.Fatalf("metadata leader %v (%v)", st.MetadataLeader, err)
	}
	for _, id := range []transport.NodeID{1, 2, 3} {
		if id != st.MetadataLeader {
			others = append(others, id)
		}
	}
	return st.MetadataLeader, others
}
