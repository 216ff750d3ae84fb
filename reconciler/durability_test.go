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
