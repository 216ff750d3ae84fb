package parkway_test

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// The rows of the bad-input tour of issue 27 (375 calls, each a test
// here): what panicked, answered untyped text, or answered one thing
// through one call and another through its sibling.

// noPanic runs f and fails the test if it panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s panicked: %v", what, r)
		}
	}()
	f()
}

// TestTourConfigUpperBounds: Open panicked on Shards or InboxSize of
// MaxInt (Validate had no upper bounds) and took 8 s and 2.9 GB for
// 100,000 shards. Every field a value of which allocates, overflows or
// can never work is bounded: Validate and Open refuse it with
// ErrInvalidConfig naming the field, at once.
func TestTourConfigUpperBounds(t *testing.T) {
	net := transport.NewNetwork(transport.NetworkOptions{})
	t.Cleanup(func() { _ = net.Close() })
	cluster := func(c parkway.ClusterConfig) *parkway.ClusterConfig {
		c.ID, c.Peers, c.Bus = 1, []transport.NodeID{1}, net.Endpoint(1)
		return &c
	}
	for _, c := range []struct {
		field string
		cfg   parkway.Config
	}{
		{"Shards", parkway.Config{Shards: math.MaxInt}},
		{"Shards", parkway.Config{Shards: 100_000}},
		{"Shards", parkway.Config{Shards: parkway.MaxShards + 1}},
		{"InboxSize", parkway.Config{Shards: 1, InboxSize: math.MaxInt}},
		{"InboxSize", parkway.Config{Shards: 1, InboxSize: parkway.MaxInboxSize + 1}},
		{"InboxBytes", parkway.Config{Shards: 1, InboxBytes: parkway.MaxInboxBytes + 1}},
		{"InboxBytes", parkway.Config{Shards: 1, InboxBytes: -1}},
		{"MaxMessageSize", parkway.Config{Shards: 1, MaxMessageSize: math.MaxInt}},
		{"MaxMessageSize", parkway.Config{Shards: 1, MaxMessageSize: parkway.MaxBatchBytesLimit + 1}},
		{"MaxBatchMessages", parkway.Config{Shards: 1, MaxBatchMessages: math.MaxInt}},
		// MaxPasses × ReconcileInterval overflowed into a negative
		// park age, refused after Validate with untyped text.
		{"MaxPasses", parkway.Config{Shards: 1, Park: shard.ParkLimits{MaxPasses: math.MaxInt}}},
		{"TickInterval", parkway.Config{Shards: 1, Cluster: cluster(parkway.ClusterConfig{TickInterval: math.MaxInt64})}},
		{"LivenessInterval", parkway.Config{Shards: 1, Cluster: cluster(parkway.ClusterConfig{LivenessInterval: math.MaxInt64})}},
	} {
		t.Run(c.field, func(t *testing.T) {
			if err := c.cfg.Validate(); !errors.Is(err, parkway.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("Validate = %v; want ErrInvalidConfig naming %s", err, c.field)
			}
			var n *parkway.Node
			var err error
			noPanic(t, "Open", func() { n, err = parkway.Open(c.cfg) })
			if n != nil {
				_ = n.Close()
			}
			if n != nil || !errors.Is(err, parkway.ErrInvalidConfig) {
				t.Fatalf("Open = %v, %v; want nil, ErrInvalidConfig", n, err)
			}
		})
	}
	// The bounds themselves are valid.
	for _, cfg := range []parkway.Config{
		{Shards: parkway.MaxShards}, {InboxSize: parkway.MaxInboxSize}, {InboxBytes: parkway.MaxInboxBytes},
		{MaxMessageSize: parkway.MaxBatchBytesLimit, MaxBatchBytes: parkway.MaxBatchBytesLimit},
		{MaxBatchMessages: parkway.MaxBatchMessagesLimit},
		{Park: shard.ParkLimits{MaxPasses: shard.MaxParkPasses}, RequestTimeout: time.Hour},
	} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", cfg, err)
		}
	}
}

// TestTourClusterConfigErrorsAreTyped: a peer list naming a node twice,
// or node 0, was refused by raft's bootstrap with untyped text after
// Validate passed; Validate now refuses both with ErrInvalidConfig.
func TestTourClusterConfigErrorsAreTyped(t *testing.T) {
	for _, c := range []struct {
		name  string
		peers []transport.NodeID
		want  string
	}{
		{"duplicate peer", []transport.NodeID{1, 1, 2}, "twice"},
		{"peer 0", []transport.NodeID{0, 1}, "node 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			net := transport.NewNetwork(transport.NetworkOptions{})
			defer func() { _ = net.Close() }()
			n, err := parkway.Open(parkway.Config{Shards: 1, Cluster: &parkway.ClusterConfig{ID: 1, Peers: c.peers, Bus: net.Endpoint(1)}})
			if n != nil {
				_ = n.Close()
			}
			if !errors.Is(err, parkway.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open with peers %v = %v; want ErrInvalidConfig saying %q", c.peers, err, c.want)
			}
		})
	}
}

// TestTourNodeIDZero: Network.Endpoint(0) panicked and ListenTCP(0) and
// AddPeer(0) answered untyped text. Node id 0 names no node: every one of
// them now answers transport.ErrInvalidNodeID, and a cluster config
// naming it is refused with ErrInvalidConfig.
func TestTourNodeIDZero(t *testing.T) {
	net := transport.NewNetwork(transport.NetworkOptions{})
	t.Cleanup(func() { _ = net.Close() })
	var bus transport.Bus
	noPanic(t, "Endpoint(0)", func() { bus = net.Endpoint(0) })
	if err := bus.Send(transport.Message{To: 1}); !errors.Is(err, transport.ErrInvalidNodeID) {
		t.Errorf("Send from Endpoint(0): %v, want ErrInvalidNodeID", err)
	}
	if _, ok := <-bus.Recv(); ok {
		t.Error("Endpoint(0) received a message")
	}
	if err := bus.Close(); err != nil {
		t.Errorf("Close of Endpoint(0): %v", err)
	}
	n, err := parkway.Open(parkway.Config{Shards: 1, Cluster: &parkway.ClusterConfig{ID: 0, Peers: []transport.NodeID{1}, Bus: bus}})
	if n != nil {
		_ = n.Close()
	}
	if !errors.Is(err, parkway.ErrInvalidConfig) {
		t.Errorf("Open as node 0: %v, want ErrInvalidConfig", err)
	}
	// The endpoints of real nodes are untouched by it.
	a, b := net.Endpoint(1), net.Endpoint(2)
	if err := a.Send(transport.Message{To: 2, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if m := <-b.Recv(); m.From != 1 || string(m.Payload) != "x" {
		t.Errorf("received %+v", m)
	}

	opts := transport.TCPOptions{InsecurePlaintext: true}
	if _, err := transport.ListenTCP(0, "127.0.0.1:0", nil, opts); !errors.Is(err, transport.ErrInvalidNodeID) {
		t.Errorf("ListenTCP(0): %v, want ErrInvalidNodeID", err)
	}
	if _, err := transport.ListenTCP(1, "127.0.0.1:0", map[transport.NodeID]string{0: "127.0.0.1:1"}, opts); !errors.Is(err, transport.ErrInvalidNodeID) {
		t.Errorf("ListenTCP with peer 0: %v, want ErrInvalidNodeID", err)
	}
	tb, err := transport.ListenTCP(1, "127.0.0.1:0", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tb.Close() }()
	if err := tb.AddPeer(0, "127.0.0.1:1"); !errors.Is(err, transport.ErrInvalidNodeID) {
		t.Errorf("AddPeer(0): %v, want ErrInvalidNodeID", err)
	}
	if err := tb.RemovePeer(0); !errors.Is(err, transport.ErrInvalidNodeID) {
		t.Errorf("RemovePeer(0): %v, want ErrInvalidNodeID", err)
	}
}

// TestTourConsumerNilContext: Consumer.Messages(nil) panicked and
// Consumer.Commit(nil) answered nil, where every other call answers
// ErrInvalidArgument.
func TestTourConsumerNilContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 1)
		mustProduce(t, n, tp, parkway.PartitionID(0), "a")
		for _, cfg := range []parkway.ConsumerConfig{{Group: "g"}, {Name: "named"}} {
			c, err := n.NewConsumer(ctx, tp, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var got []error
			noPanic(t, "Messages(nil)", func() {
				//lint:ignore SA1012 the nil context is the bad input under test
				for _, err := range c.Messages(nil) { //nolint:staticcheck
					got = append(got, err)
				}
			})
			if len(got) != 1 || !errors.Is(got[0], parkway.ErrInvalidArgument) {
				t.Errorf("%+v: Messages(nil) yielded %v; want one ErrInvalidArgument", cfg, got)
			}
			//lint:ignore SA1012 the nil context is the bad input under test
			if err := c.Commit(nil); !errors.Is(err, parkway.ErrInvalidArgument) { //nolint:staticcheck
				t.Errorf("%+v: Commit(nil) = %v; want ErrInvalidArgument", cfg, err)
			}
			// The consumer still works.
			for d, err := range c.Messages(ctx) {
				if err != nil || string(d.Payload) != "a" {
					t.Fatalf("%+v: after the nil calls: %q, %v", cfg, d.Payload, err)
				}
				break
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestTourNoTopicOfZeroPartitions: DeletePartitions could remove every
// partition, leaving a topic of 0 partitions that CreateTopic refuses to
// make. It is refused with ErrInvalidPartitionCount and changes nothing.
func TestTourNoTopicOfZeroPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 2)
		mustProduce(t, n, tp, parkway.PartitionID(1), "x")
		if err := n.Admin().DeletePartitions(ctx, tp, 2); !errors.Is(err, parkway.ErrInvalidPartitionCount) {
			t.Fatalf("deleting every partition: %v, want ErrInvalidPartitionCount", err)
		}
		if ps, err := n.Admin().Partitions(ctx, tp); err != nil || len(ps) != 2 {
			t.Fatalf("partitions after the refused delete: %d, %v; want 2", len(ps), err)
		}
		expectLog(t, n, tp, 1, "x")
		if err := n.Admin().DeletePartitions(ctx, tp, 1); err != nil {
			t.Fatalf("deleting all but one: %v", err)
		}
		if err := n.Admin().DeletePartitions(ctx, tp, 1); !errors.Is(err, parkway.ErrInvalidPartitionCount) {
			t.Fatalf("deleting the last partition: %v, want ErrInvalidPartitionCount", err)
		}
	})
}

// TestTourJoinGroupCreatesLikeNewConsumer: JoinGroup on a new group
// failed with ErrGroupNotFound where NewConsumer created it. Both create
// it, and both refuse the same bad group and member names.
func TestTourJoinGroupCreatesLikeNewConsumer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 2)
		m, err := n.JoinGroup(ctx, tp, "by-join", parkway.MemberConfig{})
		if err != nil {
			t.Fatalf("JoinGroup of a new group: %v", err)
		}
		if a := m.Assignment(); len(a.Partitions) != 2 {
			t.Errorf("the only member holds %v, want both partitions", a.Partitions)
		}
		c, err := n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Group: "by-consumer"})
		if err != nil {
			t.Fatalf("NewConsumer of a new group: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for _, g := range []string{"by-join", "by-consumer"} {
			if _, err := n.Admin().Group(ctx, tp, g); err != nil {
				t.Errorf("group %q: %v", g, err)
			}
		}
		for _, bad := range []struct{ group, member string }{{"", ""}, {"a\x00b", ""}, {"ok", "a\nb"}, {"ok", strings.Repeat("m", 256)}} {
			_, jerr := n.JoinGroup(ctx, tp, bad.group, parkway.MemberConfig{Name: bad.member})
			c, cerr := n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Group: bad.group, Name: bad.member})
			if c != nil {
				_ = c.Close()
			}
			if bad.group == "" {
				// An empty group means a named consumer for NewConsumer:
				// its name is then required.
				if !errors.Is(jerr, parkway.ErrInvalidName) || !errors.Is(cerr, parkway.ErrInvalidName) {
					t.Errorf("group %q: JoinGroup %v, NewConsumer %v; want ErrInvalidName from both", bad.group, jerr, cerr)
				}
				continue
			}
			if !errors.Is(jerr, parkway.ErrInvalidName) || !errors.Is(cerr, parkway.ErrInvalidName) {
				t.Errorf("group %q member %.12q: JoinGroup %v, NewConsumer %v; want ErrInvalidName from both", bad.group, bad.member, jerr, cerr)
			}
		}
		if _, err := n.Admin().Group(ctx, tp, "ok"); !errors.Is(err, parkway.ErrGroupNotFound) {
			t.Errorf("a refused join created its group: %v", err)
		}
	})
}

// TestTourOneNamingRule: consumer names followed a rule of their own
// ([A-Za-z0-9._-]) while stream, topic, group and member names followed
// another (any UTF-8 without control characters). One rule holds for
// all now: each name below is accepted, or refused with ErrInvalidName,
// by every call that takes a name.
func TestTourOneNamingRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		ctx := ctxFor(t)
		base := mustStream(t, n, "base")
		tp := mustTopic(t, n, base, "t", 1)
		mustProduce(t, n, tp, parkway.PartitionID(0), "m")
		for _, c := range []struct {
			name string
			ok   bool
		}{
			{"plain", true}, {"a b", true}, {"a/b", true}, {"../x", true}, {".", true}, {"..", true},
			{"é", true}, {"名前", true}, {"~x", true}, {"%41", true}, {strings.Repeat("n", 255), true},
			{"", false}, {"a\x00b", false}, {"a\nb", false}, {"a\x7fb", false}, {"a\xffb", false},
			{strings.Repeat("n", 256), false},
		} {
			calls := map[string]error{}
			var err error
			_, calls["CreateStream"] = n.Admin().CreateStream(ctx, c.name)
			_, calls["CreateTopic"] = n.Admin().CreateTopic(ctx, base, c.name, 1)
			calls["CreateGroup"] = n.Admin().CreateGroup(ctx, tp, c.name)
			var m *parkway.Member
			m, calls["JoinGroup member"] = n.JoinGroup(ctx, tp, "members", parkway.MemberConfig{Name: c.name})
			if m != nil {
				err = m.Leave(ctx)
				if err != nil {
					t.Fatal(err)
				}
			}
			calls["StoreOffset"] = n.Admin().StoreOffset(ctx, tp, 0, c.name, 1)
			_, _, calls["ConsumerOffset"] = n.Admin().ConsumerOffset(ctx, tp, 0, c.name)
			_, calls["Poll AtConsumer"] = n.Poll(ctx, tp, 0, parkway.AtConsumer(c.name), 1)
			var cons *parkway.Consumer
			cons, calls["NewConsumer named"] = n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Name: c.name, Commit: parkway.CommitManual})
			if cons != nil {
				_ = cons.Close()
			}
			for call, err := range calls {
				if call == "JoinGroup member" && c.name == "" {
					// A member's name is optional: "" means none.
					if err != nil {
						t.Errorf("JoinGroup without a member name: %v", err)
					}
					continue
				}
				switch {
				case c.ok && err != nil:
					t.Errorf("%s(%.16q): %v, want it accepted", call, c.name, err)
				case !c.ok && !errors.Is(err, parkway.ErrInvalidName):
					t.Errorf("%s(%.16q): %v, want ErrInvalidName", call, c.name, err)
				}
			}
			if c.ok {
				if off, ok, err := n.Admin().ConsumerOffset(ctx, tp, 0, c.name); err != nil || !ok || off != 1 {
					t.Errorf("consumer %.16q reads back %d, %v, %v; want 1", c.name, off, ok, err)
				}
			}
		}
	})
}

// TestConsumerNamesAreNotPaths: a consumer name that looks like a path
// ("../x", "a/b", "..") stores its offset inside the partition's
// offsets directory, under an escaped file name, and reads back after a
// restart: the one naming rule is safe on disk.
func TestConsumerNamesAreNotPaths(t *testing.T) {
	dir := t.TempDir()
	names := []string{"../x", "a/b", "..", ".", "../../../../escape", "ok"}
	synctest.Test(t, func(t *testing.T) {
		n, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 1)
		mustProduce(t, n, tp, parkway.PartitionID(0), "a", "b", "c")
		for i, name := range names {
			if err := n.Admin().StoreOffset(ctx, tp, 0, name, uint64(i%3+1)); err != nil {
				t.Fatalf("StoreOffset(%q): %v", name, err)
			}
		}
		synctest.Wait()
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	})
	// Every file under the data directory is below it, and the offsets
	// files are in one offsets/consumers directory.
	var offsetFiles []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Base(filepath.Dir(path)) == "consumers" {
			offsetFiles = append(offsetFiles, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(offsetFiles) != len(names) {
		t.Fatalf("offset files %v, want %d", offsetFiles, len(names))
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Fatal("a consumer name escaped the data directory")
	}
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{DataDir: dir, Shards: 1})
		ctx := ctxFor(t)
		s, err := n.Stream(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		tp, err := n.Topic(ctx, s, "t")
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range names {
			if off, ok, err := n.Admin().ConsumerOffset(ctx, tp, 0, name); err != nil || !ok || off != uint64(i%3+1) {
				t.Errorf("after reopen, consumer %q at %d (%v, %v), want %d", name, off, ok, err, i%3+1)
			}
		}
	})
}
