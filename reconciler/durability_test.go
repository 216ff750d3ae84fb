package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

// A partition's durability is its topic's configuration over the
// reconciler's defaults, field by field, with FsyncAlways and
// DefaultFsyncInterval where both leave a field zero; the topics of one
// pass each get their own, every partition of a topic the same.
func TestDurabilityIsTopicConfigOverDefaults(t *testing.T) {
	ctx := context.Background()
	meta, err := metadata.NewStore(metadata.Config{Shards: 1, Assign: router.Assign})
	if err != nil {
		t.Fatal(err)
	}
	table := &router.Table{}
	rt, err := router.New[shard.Frame](table, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := shard.New(shard.Config{}, meta, rt)
	if err != nil {
		t.Fatal(err)
	}
	rt.Register(0, s)
	s.Start()
	t.Cleanup(func() { _ = s.Close() })
	rec, err := reconciler.New(reconciler.Config{Shard: s, Meta: meta, Store: partition.NewMemStore(),
		Clock: clock.NewManual(time.Unix(0, 0)), Defaults: metadata.TopicConfig{RetentionBytes: 1 << 20}}, table)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s0", "s1"} {
		if _, err := meta.Apply(metadata.CreateStream{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	plain := shard.Durability{Fsync: metadata.FsyncAlways, Interval: reconciler.DefaultFsyncInterval, RetentionBytes: 1 << 20}
	want := map[metadata.Namespace]shard.Durability{}
	// In namespace order: stream 0 topic 0, stream 1 topic 0 (same topic
	// id, another stream), stream 1 topic 1.
	for _, c := range []struct {
		stream uint32
		name   string
		cfg    metadata.TopicConfig
		want   shard.Durability
	}{
		{0, "plain", metadata.TopicConfig{}, plain},
		{1, "tuned", metadata.TopicConfig{Fsync: metadata.FsyncInterval, FsyncInterval: 5 * time.Second, RetentionAge: time.Hour, RetentionBytes: 10},
			shard.Durability{Fsync: metadata.FsyncInterval, Interval: 5 * time.Second, RetentionAge: time.Hour, RetentionBytes: 10}},
		{1, "plain again", metadata.TopicConfig{}, plain},
	} {
		res, err := meta.Apply(metadata.CreateTopic{Stream: c.stream, Name: c.name, Partitions: 2, Config: c.cfg})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Created {
			want[p.NS] = c.want
		}
	}
	if _, err := rec.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := s.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ns, w := range want {
		if got, ok := st.Durability[ns]; !ok || got != w {
			t.Errorf("%v: durability %+v (owned %v), want %+v", ns, got, ok, w)
		}
	}
}

// Retention is enforced by the pass for a topic that sets only an age
// bound, and for one that sets only a byte bound, then again every
// RetentionInterval (DefaultRetentionInterval when zero) — not on every
// pass.
func TestRetentionRunsForEitherBoundEveryInterval(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  metadata.TopicConfig
	}{
		{"age only", metadata.TopicConfig{RetentionAge: 10 * time.Second}},
		{"bytes only", metadata.TopicConfig{RetentionBytes: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 1, nil)
			h.apply(metadata.CreateStream{Name: "s"})
			ns := h.apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 1, Config: c.cfg}).Created[0].NS
			h.pass(0)
			// Two messages written long ago: each retention pass removes
			// the older (the byte bound keeps the newest).
			old := func() {
				t.Helper()
				ch := make(chan shard.Response, 1)
				f := shard.Frame{Req: &shard.Request{Op: shard.OpProduce, NS: ns,
					Messages: []partition.Message{{Timestamp: 1, Payload: []byte("old")}}}, Reply: ch}
				if err := h.shards[0].TrySend(f); err != nil {
					t.Fatal(err)
				}
				if r := <-ch; r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			old()
			old()
			h.clk.Advance(time.Minute)
			h.topic("other") // the due pass goes on after retention
			if rep := h.pass(0); rep.Retained == 0 || rep.Built != 1 {
				t.Fatalf("first due pass: %+v, want messages retained and the other topic built", rep)
			}
			old()
			old()
			h.clk.Advance(reconciler.DefaultRetentionInterval - time.Second)
			if rep := h.pass(0); rep.Retained != 0 {
				t.Fatalf("pass before the retention interval retained %d", rep.Retained)
			}
			h.clk.Advance(time.Second)
			if rep := h.pass(0); rep.Retained == 0 {
				t.Fatalf("pass at the retention interval retained nothing: %+v", rep)
			}
		})
	}
}

// One pass both tears down a deleted partition and builds a created one:
// a removal — first try, or the retry of one whose delete failed — does
// not end the pass.
func TestPassRemovesAndBuildsTogether(t *testing.T) {
	h := newHarness(t, 1, nil)
	a := h.topic("a")
	failing := h.topic("failing")
	if rep := h.pass(0); rep.Built != 2 {
		t.Fatalf("first pass: %+v", rep)
	}
	h.store.setFail(failing.NS, errDisk)
	h.apply(metadata.DeleteTopic{Stream: 0, Topic: a.NS.Topic()})
	h.apply(metadata.DeleteTopic{Stream: 0, Topic: failing.NS.Topic()})
	h.topic("b")
	if rep := h.pass(0); rep.Removed != 1 || rep.Failed != 1 || rep.Built != 1 {
		t.Fatalf("pass after two deletes (one failing) and a create: %+v; want 1 removed, 1 failed, 1 built", rep)
	}
	h.store.setFail(failing.NS, nil)
	h.topic("c")
	h.clk.Advance(reconciler.DefaultBackoffMin)
	if rep := h.pass(0); rep.Removed != 1 || rep.Built != 1 {
		t.Fatalf("pass retrying the failed delete and building c: %+v; want 1 removed, 1 built", rep)
	}
}
